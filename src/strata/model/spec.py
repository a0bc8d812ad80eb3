"""Spec files → a validated :class:`Scenario`, with located errors.

A scenario is one YAML file holding ``cluster`` and ``jobs``, or several files
whose top-level keys are merged (``cluster`` in exactly one; ``jobs`` lists
concatenated; ``name``/``description`` from the first that has them). Every
problem is reported with its file, line, path inside the document, what was
expected and what was found; the CLI turns :class:`SpecError` into exit code 2.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path as FsPath
from typing import Any

import yaml
from pydantic import ValidationError

from strata.model.cluster import Cluster
from strata.model.job import Job
from strata.model.scenario import Path, Problem, Scenario

TOP_LEVEL = ("name", "description", "cluster", "jobs")


@dataclass(frozen=True)
class Located:
    file: str
    line: int | None
    path: Path
    expected: str
    found: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {format_path(self.path) or '<document>'}: expected {self.expected}; found {self.found}"


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


def _read(file: str | FsPath) -> _Doc:
    name = str(file)
    try:
        text = FsPath(file).read_text()
    except OSError as e:
        raise SpecError([Located(name, None, (), "a readable spec file", e.strerror or str(e))]) from None
    try:
        node = yaml.compose(text)
        data = yaml.safe_load(text)
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
    if problems or cluster is None:
        raise SpecError(problems)
    scenario = Scenario(cluster=cluster, jobs=jobs, **meta)
    located = [_relocate(p, cluster_doc, job_origin) for p in scenario.problems()]
    if located:
        raise SpecError(located)
    return scenario


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
