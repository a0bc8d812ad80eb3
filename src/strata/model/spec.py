"""Spec files → a validated :class:`Scenario`, with located errors.

A scenario is one YAML file holding ``cluster`` and ``jobs``, or several files
whose top-level keys are merged (``cluster`` in exactly one; ``jobs`` lists
concatenated; ``name``/``description`` from the first that has them). Every
problem is reported with its file, line, path inside the document, what was
expected and what was found; the CLI turns :class:`SpecError` into exit code 2.

Reading is bounded before anything is built: at most :data:`MAX_BYTES` of UTF-8
text (binary and other encodings are refused with the offending line), at most
:data:`MAX_DEPTH` levels of nesting and :data:`MAX_NODES` values once aliases
are expanded (a "billion laughs" file stops at the alias that crosses it), and
no mapping key twice. Scalars follow YAML 1.2's booleans: only ``true``/``false``
are booleans, so ``{on: key}`` (a join) and ``yes``/``no`` stay strings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path as FsPath
from typing import Any, ClassVar

import yaml
from pydantic import ValidationError
from yaml import events as ev

from strata.model.cluster import Cluster
from strata.model.job import Job
from strata.model.scenario import Path, Problem, Scenario

TOP_LEVEL = ("name", "description", "cluster", "jobs")
MAX_BYTES = 4 * 2**20  # a generated 104-job scenario is 0.19 MB
MAX_DEPTH = 64  # a scenario nests about 8 deep
MAX_NODES = 1_000_000  # values after alias expansion (the 104-job scenario has ~23,000)


@dataclass(frozen=True)
class Located:
    file: str
    line: int | None
    path: Path
    expected: str
    found: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        # a Python file has no document paths: its line says where
        inside = format_path(self.path) or ("" if self.file.endswith(".py") else "<document>")
        at = f"{where}: {inside}" if inside else where
        return f"{at}: expected {self.expected}; found {self.found}"


class SpecError(Exception):
    """One or more located problems in spec files."""

    def __init__(self, problems: list[Located]):
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


def format_path(path: Path) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


class _Lines:
    """Line numbers of every path in a YAML document, from the composed node tree."""

    def __init__(self, node: yaml.Node | None):
        self.node = node

    def line(self, path: Path) -> int | None:
        node, best = self.node, None
        for part in path:
            if node is None:
                break
            best = node.start_mark.line + 1
            node = self._child(node, part)
        return node.start_mark.line + 1 if node is not None else best

    @staticmethod
    def _child(node: yaml.Node, part: str | int) -> yaml.Node | None:
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                if k.value == part:
                    return v
        if isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            return node.value[part]
        return None


@dataclass
class _Doc:
    file: str
    data: Any
    lines: _Lines

    def locate(self, path: Path, expected: str, found: str) -> Located:
        return Located(self.file, self.lines.line(path), path, expected, found)


_BOOL = "tag:yaml.org,2002:bool"
_BaseLoader: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_BaseLoader):  # type: ignore[misc, valid-type]
    """Safe loading with YAML 1.2 booleans (duplicated keys are caught by :func:`_check_shape`)."""

    yaml_implicit_resolvers: ClassVar[dict] = {
        first: [(tag, rx) for tag, rx in resolvers if tag != _BOOL]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }


_Loader.add_implicit_resolver(_BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))


class _Bad(Exception):
    def __init__(self, line: int | None, expected: str, found: str, path: Path = ()):
        self.line, self.expected, self.found, self.path = line, expected, found, path


def _text(name: str, file: str | FsPath) -> str:
    """At most MAX_BYTES of UTF-8 text, or a located error."""
    try:
        with open(file, "rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except OSError as e:
        raise SpecError([Located(name, None, (), "a readable spec file", e.strerror or str(e))]) from None
    if len(raw) > MAX_BYTES:
        raise SpecError([Located(name, None, (), f"a spec file of at most {MAX_BYTES:,} bytes", "a larger file")])
    nul = raw.find(b"\0")
    if nul >= 0:
        line = raw.count(b"\n", 0, nul) + 1
        raise SpecError([Located(name, line, (), "a YAML text file", f"binary data (a NUL byte at offset {nul})")])
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        column = e.start - (raw.rfind(b"\n", 0, e.start) + 1) + 1
        found = f"byte 0x{raw[e.start]:02X} at column {column} (not UTF-8; save the file as UTF-8)"
        raise SpecError([Located(name, line, (), "UTF-8 text", found)]) from None


class _Frame:
    """One open collection in the event stream: where it is and what it holds so far."""

    __slots__ = ("anchor", "at", "is_map", "key", "key_next", "n", "seen")

    def __init__(self, anchor: str | None, is_map: bool, at: Path):
        self.anchor, self.is_map, self.at = anchor, is_map, at
        self.n, self.key_next, self.key = 1, True, -1
        self.seen: dict[str, int] = {}


def _check_shape(text: str) -> None:
    """Nesting depth, size after alias expansion and duplicated keys, from the event stream
    (no recursion, nothing expanded)."""
    total = 0
    stack: list[_Frame] = []
    sizes: dict[str, int] = {}
    for e in yaml.parse(text, Loader=_BaseLoader):
        if not isinstance(e, ev.NodeEvent | ev.CollectionEndEvent):
            continue
        line = e.start_mark.line + 1
        top = stack[-1] if stack else None
        as_key = top is not None and top.is_map and top.key_next and not isinstance(e, ev.CollectionEndEvent)
        if top is not None and not as_key and not isinstance(e, ev.CollectionEndEvent) and not top.is_map:
            top.key += 1  # the sequence's next item
        at: Path = (*top.at, top.key) if top is not None and not as_key else (top.at if top is not None else ())
        if as_key and isinstance(e, ev.ScalarEvent) and e.value != "<<":
            if e.value in top.seen:
                again = f"{e.value!r} again (first on line {top.seen[e.value]})"
                raise _Bad(line, "each key once in a mapping", again, (*top.at, e.value))
            top.seen[e.value] = line
        if isinstance(e, ev.CollectionStartEvent):
            if len(stack) >= MAX_DEPTH:
                raise _Bad(line, f"at most {MAX_DEPTH} levels of nesting", f"more than {MAX_DEPTH}", at)
            stack.append(_Frame(e.anchor, isinstance(e, ev.MappingStartEvent), at))
            total += 1
            n = None
        elif isinstance(e, ev.CollectionEndEvent):
            done = stack.pop()
            if done.anchor is not None:
                sizes[done.anchor] = done.n
            n, at, top = done.n, done.at, stack[-1] if stack else None
            as_key = False
        elif isinstance(e, ev.ScalarEvent):
            n, total = 1, total + 1
            if e.anchor is not None:
                sizes[e.anchor] = 1
        else:
            n = sizes.get(e.anchor, 1)
            total += n
        if n is not None and top is not None:
            top.n += n
            if top.is_map:
                if as_key:
                    top.key_next, top.key = False, e.value if isinstance(e, ev.ScalarEvent) else "?"
                else:
                    top.key_next = True
        if total > MAX_NODES:
            what = f"alias *{e.anchor}" if isinstance(e, ev.AliasEvent) else "value"
            raise _Bad(line, f"at most {MAX_NODES:,} values with aliases expanded", f"more at this {what}", at)


def _read(file: str | FsPath) -> _Doc:
    name = str(file)
    text = _text(name, file)
    try:
        _check_shape(text)
        loader = _Loader(text)
        try:
            node = loader.get_single_node()
            data = loader.construct_document(node) if node is not None else None
        finally:
            loader.dispose()
    except _Bad as e:
        raise SpecError([Located(name, e.line, e.path, e.expected, e.found)]) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise SpecError(
            [Located(name, mark.line + 1 if mark else None, (), "valid YAML", str(getattr(e, "problem", e)))]
        ) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise SpecError([Located(name, 1, (), "a mapping with keys " + ", ".join(TOP_LEVEL), type(data).__name__)])
    return _Doc(name, data, _Lines(node))


def _found(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _from_pydantic(doc: _Doc, prefix: Path, err: ValidationError) -> list[Located]:
    out = []
    for e in err.errors():
        path = _existing(doc.data, (*prefix, *e["loc"]))
        loc = path[len(prefix) :]
        kind = e["type"]
        if kind == "extra_forbidden":
            expected, found = "one of the known fields (see `strata schema`)", f"unknown field {loc[-1]!r}"
        elif kind == "missing":
            expected, found = "this required field", "nothing"
        else:
            expected = e["msg"].removeprefix("Value error, ").removeprefix("Input should be ")
            found = _found(e.get("input"))
        out.append(doc.locate(path, expected, found))
    return out


def _existing(data: Any, path: Path) -> Path:
    """``path`` without the union tags pydantic inserts (``resource.table.points`` → ``resource.points``)."""
    keep: list[str | int] = []
    for part in path:
        if isinstance(data, dict) and part not in data and part in (data.get("kind"), data.get("process")):
            continue
        keep.append(part)
        if isinstance(data, dict):
            data = data.get(part)
        elif isinstance(data, list) and isinstance(part, int) and part < len(data):
            data = data[part]
        else:
            data = None
    return tuple(keep)


def load_scenario(*files: str | FsPath) -> Scenario:
    """Read, merge and validate spec files; raise :class:`SpecError` with every problem found."""
    if not files:
        raise SpecError([Located("<command line>", None, (), "at least one spec file", "none")])
    docs = [_read(f) for f in files]
    problems: list[Located] = []
    cluster: Cluster | None = None
    cluster_doc: _Doc | None = None
    jobs: list[Job] = []
    job_origin: list[tuple[_Doc, int]] = []
    meta: dict[str, str] = {}
    for doc in docs:
        for key in doc.data:
            if key not in TOP_LEVEL:
                problems.append(doc.locate((key,), "one of " + ", ".join(TOP_LEVEL), f"unknown field {key!r}"))
        for key in ("name", "description"):
            if key in doc.data and key not in meta:
                if isinstance(doc.data[key], str):
                    meta[key] = doc.data[key]
                else:
                    problems.append(doc.locate((key,), "a string", _found(doc.data[key])))
        if "cluster" in doc.data:
            if cluster_doc is not None:
                problems.append(
                    doc.locate(
                        ("cluster",), "one cluster across all files", f"a second one (first in {cluster_doc.file})"
                    )
                )
                continue
            cluster_doc = doc
            try:
                cluster = Cluster.model_validate(doc.data["cluster"])
            except ValidationError as e:
                problems.extend(_from_pydantic(doc, ("cluster",), e))
        raw_jobs = doc.data.get("jobs", [])
        if not isinstance(raw_jobs, list):
            problems.append(doc.locate(("jobs",), "a list of jobs", _found(raw_jobs)))
            continue
        for i, raw in enumerate(raw_jobs):
            try:
                jobs.append(Job.model_validate(raw))
                job_origin.append((doc, i))
            except ValidationError as e:
                problems.extend(_from_pydantic(doc, ("jobs", i), e))
    if cluster_doc is None:
        problems.append(docs[0].locate((), "a 'cluster' section in one of the files", "none"))
    if not jobs and not problems:
        where = next((d for d in docs if "jobs" in d.data), docs[0])
        found = "an empty list" if "jobs" in where.data else "no 'jobs' section"
        problems.append(where.locate(("jobs",), "at least one job", found))
    if problems or cluster is None:
        raise SpecError(problems)
    scenario = Scenario(cluster=cluster, jobs=jobs, **meta)
    located = [_relocate(p, cluster_doc, job_origin) for p in scenario.problems()]
    if located:
        raise SpecError(located)
    return scenario


def group_files(files: list[str | FsPath] | tuple[str | FsPath, ...], merge: bool = False) -> tuple[list[list], str]:
    """Which files make one scenario each: every file holding both ``cluster`` and ``jobs``
    alone; all of them merged with ``merge`` or when none is complete on its own. Returns
    the groups and a sentence saying which happened. Unreadable files stay alone (their
    error is reported when they are loaded)."""
    if len(files) <= 1:
        return [list(files)], ""
    if merge:
        return [list(files)], f"{len(files)} files merged into one scenario (--merge)"
    complete = []
    for f in files:
        try:
            data = _read(f).data
        except SpecError:
            complete.append(True)
            continue
        complete.append("cluster" in data and "jobs" in data)
    if not any(complete):
        return [list(files)], f"{len(files)} files merged into one scenario (none is complete on its own)"
    partial = [str(f) for f, ok in zip(files, complete, strict=True) if not ok]
    note = f"{len(files) - len(partial)} complete scenario files validated one by one"
    if partial:
        note += f"; {', '.join(partial)} not complete on its own (pass --merge to merge all files into one scenario)"
    return [[f] for f in files], note


def _relocate(p: Problem, cluster_doc: _Doc, job_origin: list[tuple[_Doc, int]]) -> Located:
    """Map a scenario path (jobs[i] of the merged list) back to its file and index."""
    if len(p.path) >= 2 and p.path[0] == "jobs" and isinstance(p.path[1], int):
        doc, i = job_origin[p.path[1]]
        return doc.locate(("jobs", i, *p.path[2:]), p.expected, p.found)
    doc = job_origin[0][0] if job_origin and p.path[:1] == ("jobs",) else cluster_doc
    return doc.locate(p.path, p.expected, p.found)


def locate_problems(files: list[str | FsPath] | tuple[str | FsPath, ...], problems: list[Problem]) -> SpecError:
    """Problems found after loading (e.g. by an engine that cannot run a job), located in the spec files."""
    docs = [_read(f) for f in files]
    job_origin = [(doc, i) for doc in docs for i in range(len(doc.data.get("jobs") or []))]
    cluster_doc = next((d for d in docs if "cluster" in d.data), docs[0])
    return SpecError([_relocate(p, cluster_doc, job_origin) for p in problems])


def scenario_schema() -> dict[str, Any]:
    """JSON Schema of a scenario document."""
    return Scenario.model_json_schema(by_alias=True)
