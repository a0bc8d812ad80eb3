"""Jobs declared in Python: a team's own Structured Streaming queries under Strata.

A job is what SODA's planner sees (§1.1: rank, required, templates, value of
its output) plus what Spark runs: each template is a user function
``build(spark) -> streaming DataFrame`` that may use anything PySpark allows
(Python and pandas UDFs, chained aggregations with watermarks, stream–stream
joins, ``transformWithStateInPandas``), and the job's sink. Declaring a job
registers it; ``strata run jobs.py`` runs the file and schedules every job it
declared, next to YAML jobs in the same run.

The planner's view of a Python template is the chain ``input → query → out``:
the query's cost per record and selectivity start from the declared priors (or
neutral ones) and are learned from Spark's progress like every other PE; the
rate prior only seeds the estimator until the source is observed. A job that
reads other jobs' output (``job(reads=...)``, SODA's shared streams, §1.1) has
no source of its own: its chain is ``query → out``, fed by each producer's
``query`` PE, so the planner sees the link (a reader is worth nothing without
its producers) and the reader's template gets the producer's output with
``producer.stream(spark)``. Nothing here imports PySpark: the functions are
called on the Spark side.
"""

from __future__ import annotations

import os
import re
import runpy
import sys
import threading
import traceback
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path as FsPath
from typing import Any, Literal

from pydantic import TypeAdapter, ValidationError

from strata.model.callables import describe, name_of, takes_one_argument
from strata.model.cluster import Cluster, Node
from strata.model.functions import IdentityValue, ValueFunction
from strata.model.job import Job, Operator, OperatorKind, SourceSpec, Stream, Template
from strata.model.scenario import Scenario
from strata.model.spec import Located, SpecError, load_scenario

NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]*$")
INPUT, QUERY, OUT = "input", "query", "out"
"""The PEs of a Python template as the planner sees it."""

OUTPUT_MODES = ("append", "update", "complete")


class DeclarationError(ValueError):
    """A bad argument to :func:`job` or :func:`sink`: which field, what was expected, what was found."""

    def __init__(self, where: str, expected: str, found: object):
        self.where, self.expected, self.found = where, expected, repr(found)
        super().__init__(f"{where}: expected {expected}; found {self.found}")


@dataclass(frozen=True)
class SinkSpec:
    """Where a job's output goes, written from Strata's ``foreachBatch`` (so every batch passes the gate).

    ``parquet``: idempotent per batch id under ``path`` (default: the run directory); ``memory``: kept in
    the driver (tests); ``foreach_batch``: the user's ``fn(df, batch_id)``, which must be idempotent per
    batch id for exactly once (Spark's own contract for foreachBatch); ``table``: appended to a table
    (``df.write.saveAsTable``; a replayed batch appends again: at least once).
    """

    kind: Literal["parquet", "memory", "foreach_batch", "table"] = "parquet"
    path: str | None = None
    fn: Callable | None = None
    table: str | None = None
    output_mode: str = "append"


def parquet(path: str | FsPath | None = None, output_mode: str = "append") -> SinkSpec:
    return SinkSpec("parquet", path=None if path is None else str(path), output_mode=_mode(output_mode))


def memory(output_mode: str = "append") -> SinkSpec:
    return SinkSpec("memory", output_mode=_mode(output_mode))


def foreach_batch(fn: Callable, output_mode: str = "append") -> SinkSpec:
    if not callable(fn):
        raise DeclarationError("foreach_batch(fn)", "a function fn(df, batch_id)", fn)
    return SinkSpec("foreach_batch", fn=fn, output_mode=_mode(output_mode))


def table(name: str, output_mode: str = "append") -> SinkSpec:
    if not isinstance(name, str) or not name:
        raise DeclarationError("table(name)", "a table name", name)
    return SinkSpec("table", table=name, output_mode=_mode(output_mode))


def _mode(mode: str) -> str:
    if mode not in OUTPUT_MODES:
        raise DeclarationError("output_mode", " or ".join(OUTPUT_MODES), mode)
    return mode


@dataclass
class PythonJob:
    """One declared job: the planner's attributes and the template functions Spark runs."""

    id: str
    rank: int
    required: bool = False
    target_latency_s: float = 60.0
    event_time: str = "event_time"
    sink: SinkSpec = field(default_factory=SinkSpec)
    weight: float = 1.0
    value: Any = None
    rate: float = 100.0
    cost_per_record: float = 1e-4
    selectivity: float = 1.0
    cpu_min: float = 0.0
    templates: dict[str, Callable] = field(default_factory=dict)
    origin: str = "<python>"
    reads: tuple[str, ...] = ()  # jobs whose output this job reads (shared streams)
    readers: tuple[str, ...] = ()  # jobs of the run that read this job's output (set when the run is assembled)
    keyed: Any = None  # its keyed aggregate in Strata's movable store (strata.keyed_aggregate: model/keyed.py)

    def template(self, name: str | Callable | None = None) -> Callable:
        """Decorator: ``@job.template("cheap")`` (or bare ``@job.template``: the function's name) adds a template;
        the first one added is the job's default. A template is any callable taking the session as its one
        required argument (:mod:`strata.model.callables`): ``job.template(build)`` in a loop with ``def
        build(spark, i=i)``, or with ``functools.partial(build, i=i)``, declares one per job."""

        def add(fn: Callable) -> Callable:
            if not takes_one_argument(fn):
                raise DeclarationError(
                    f"job {self.id!r}: template",
                    "a callable taking the session as its one required argument, like build(spark) -> streaming "
                    "DataFrame (defaults, functools.partial, bound methods and lambdas are fine)",
                    describe(fn),
                )
            label = name_of(fn) if name is None or callable(name) else name
            if not isinstance(label, str) or not NAME.match(label):
                raise DeclarationError(f"job {self.id!r}: template name", "a name like 'full' or 'sampled'", label)
            if label in self.templates:
                raise DeclarationError(f"job {self.id!r}: template {label!r}", "a template name used once", label)
            self.templates[label] = fn
            return fn

        return add(name) if callable(name) else add

    def stream(self, spark):
        """This job's output as a streaming DataFrame, inside another job's template (``spark`` is the session the
        template got; the reading job declares ``reads=[this job]``). Its rows carry a ``batch_id`` column: the
        producer's batch that wrote them."""
        output_of = getattr(spark, "output_of", None)
        if output_of is None:
            raise DeclarationError(f"{self.id}.stream(spark)", "the session Strata passes to a template", spark)
        return output_of(self)

    def model(self) -> Job:
        """The planner's view: one ``input → query → out`` chain per template (``query → out`` fed by the
        producers' ``query`` PEs for a job that reads other jobs' output)."""
        if not self.templates:
            raise DeclarationError(f"job {self.id!r}", "at least one template (@job.template)", "none")
        value = self.value if self.value is not None else IdentityValue()
        own = [] if self.reads else [Operator(name=INPUT, kind=OperatorKind.SOURCE, source=SourceSpec(rate=self.rate))]
        ops = [
            *own,
            Operator(
                name=QUERY,
                kind=OperatorKind.MAP,
                cost_per_record=self.cost_per_record,
                selectivity=self.selectivity,
                cpu_min=self.cpu_min,
            ),
            Operator(name=OUT, kind=OperatorKind.SINK, cost_per_record=1e-6),
        ]
        feeds = [f"{producer}.{QUERY}" for producer in self.reads] or [INPUT]
        streams = [
            *(Stream(src=src, dst=QUERY) for src in feeds),
            Stream(src=QUERY, dst=OUT, weight=self.weight, value=value),
        ]
        planned = Job(
            id=self.id,
            rank=self.rank,
            required=self.required,
            target_latency_s=self.target_latency_s,
            templates=[Template(name=t, operators=ops, streams=streams) for t in self.templates],
            declared=self,
        )
        return planned if self.keyed is None else self.keyed.into(planned)  # input → query → <keyed> → out


_registry = threading.local()


def _declared() -> list[PythonJob]:
    if not hasattr(_registry, "jobs"):
        _registry.jobs = []
    return _registry.jobs


def job(
    name: str,
    *,
    rank: int,
    required: bool = False,
    target_latency_s: float = 60.0,
    event_time: str = "event_time",
    sink: SinkSpec | None = None,
    weight: float = 1.0,
    value: Any = None,
    rate: float | None = None,
    cost_per_record: float | None = None,
    selectivity: float | None = None,
    cpu_min: float = 0.0,
    reads: PythonJob | str | list[PythonJob | str] | tuple = (),
) -> PythonJob:
    """Declare a job (SODA §1.1): lower ``rank`` is more important; ``required`` jobs are always admitted;
    ``target_latency_s`` is Cameo's latency target; ``event_time`` names the output column holding each
    output row's event time (latency at the sink = commit time − it); ``value`` is the value function of the
    output rate (a dict as in YAML, e.g. ``{"kind": "step", ...}``; default identity) and ``weight`` its weight.
    ``rate``, ``cost_per_record`` (core-seconds) and ``selectivity`` are optional priors: Strata learns them.
    ``reads`` names the jobs whose output this job's templates read (``producer.stream(spark)``); such a job
    reads nothing else."""
    if not isinstance(name, str) or not NAME.match(name):
        raise DeclarationError("job(name)", "a name of letters, digits, '_' or '-', not starting with a digit", name)
    if any(j.id == name for j in _declared()):
        raise DeclarationError(f"job({name!r})", "a job name declared once", name)
    if not isinstance(rank, int) or isinstance(rank, bool) or rank < 0:
        raise DeclarationError(f"job({name!r}): rank", "an integer ≥ 0 (lower is more important)", rank)
    for field_name, x in (("target_latency_s", target_latency_s), ("weight", weight), ("cpu_min", cpu_min)):
        if not isinstance(x, int | float) or x < 0 or (field_name == "target_latency_s" and x <= 0):
            raise DeclarationError(
                f"job({name!r}): {field_name}", "a number > 0" if "target" in field_name else "a number ≥ 0", x
            )
    for field_name, x in (("rate", rate), ("cost_per_record", cost_per_record), ("selectivity", selectivity)):
        if x is not None and (not isinstance(x, int | float) or x <= 0):
            raise DeclarationError(f"job({name!r}): {field_name}", "a number > 0 or None (learned)", x)
    if sink is not None and not isinstance(sink, SinkSpec):
        raise DeclarationError(f"job({name!r}): sink", "strata.parquet(), memory(), foreach_batch(fn) or table()", sink)
    if not isinstance(event_time, str) or not event_time:
        raise DeclarationError(f"job({name!r}): event_time", "the name of the output's event-time column", event_time)
    producers = tuple(r.id if isinstance(r, PythonJob) else r for r in _as_list(reads))
    for r in producers:
        if not isinstance(r, str) or not NAME.match(r) or r == name:
            raise DeclarationError(f"job({name!r}): reads", "other jobs (strata.job(...) objects or names)", r)
    parsed = None
    if value is not None:
        try:
            parsed = TypeAdapter(ValueFunction).validate_python(value)
        except ValidationError as e:
            raise DeclarationError(
                f"job({name!r}): value", "a value function (as in YAML)", e.errors()[0]["msg"]
            ) from None
    declared = PythonJob(
        id=name,
        rank=rank,
        required=bool(required),
        target_latency_s=float(target_latency_s),
        event_time=event_time,
        sink=sink or SinkSpec(),
        weight=float(weight),
        value=parsed,
        rate=float(rate) if rate else 100.0,
        cost_per_record=float(cost_per_record) if cost_per_record else 1e-4,
        selectivity=float(selectivity) if selectivity else 1.0,
        cpu_min=float(cpu_min),
        origin=_caller(),
        reads=producers,
    )
    _declared().append(declared)
    return declared


def _as_list(x) -> list:
    return list(x) if isinstance(x, list | tuple) else [x]


def _caller() -> str:
    """file:line of the ``job(...)`` call (the frame itself: ``inspect.stack`` would read every frame's source)."""
    frame = sys._getframe(2)
    return f"{frame.f_code.co_filename}:{frame.f_lineno}"


@contextmanager
def collecting() -> Iterator[list[PythonJob]]:
    """Jobs declared inside the block (the registry is per thread, so loading one file cannot see another's)."""
    saved = _declared()
    _registry.jobs = []
    try:
        yield _registry.jobs
    finally:
        _registry.jobs = saved


def load_jobs(path: str | FsPath) -> list[PythonJob]:
    """Run a Python file that declares jobs (its ``if __name__ == "__main__"`` block does not run) and return them.

    Any error, in a declaration or elsewhere in the file, is a :class:`SpecError` located at the file's line."""
    path = FsPath(path)
    if not path.is_file():
        raise SpecError([Located(str(path), None, (), "a Python file declaring jobs", "no such file")])
    folder = str(path.resolve().parent)
    sys.path.insert(0, folder)  # the file imports its own helper modules, as `python jobs.py` would
    try:
        with collecting() as jobs:
            try:
                runpy.run_path(str(path), run_name="__strata_jobs__")
            except SyntaxError as e:
                raise SpecError([Located(str(path), e.lineno, (), "valid Python", e.msg or "a syntax error")]) from None
            except DeclarationError as e:
                raise SpecError(
                    [Located(str(path), _line_in(path, e), (), f"{e.where}: {e.expected}", e.found)]
                ) from None
            except Exception as e:  # the user's module failed to import: say where, not a traceback
                found = f"{type(e).__name__}: {e}"[:300]
                kind = SessionNeeded if _needs_session(e) else SpecError
                raise kind([Located(str(path), _line_in(path, e), (), "a file that runs", found)]) from None
            found = list(jobs)
    finally:
        sys.path.remove(folder)
    if not found:
        raise SpecError([Located(str(path), None, (), "at least one strata.job(...) declaration", "none")])
    for j in found:
        if not j.templates:
            line = int(j.origin.rsplit(":", 1)[1]) if j.origin.startswith(str(path)) else None
            raise SpecError([Located(str(path), line, (), f"job {j.id!r}: at least one @template", "none")])
    return found


class SessionNeeded(SpecError):
    """A jobs file that makes, when imported, what PySpark makes only with a session (a module-level UDF with a
    DDL type): it loads under ``strata run``, which runs it once the session exists, not without Spark."""


def _needs_session(error: BaseException) -> bool:
    # PySpark's error condition, read without importing PySpark (getErrorClass before PySpark 4)
    condition = getattr(error, "getCondition", None) or getattr(error, "getErrorClass", None)
    return callable(condition) and condition() == "SESSION_OR_CONTEXT_NOT_EXISTS"


def split_files(files: Iterable[str | FsPath]) -> tuple[tuple[str | FsPath, ...], tuple[str | FsPath, ...]]:
    """A run's files by kind, each in the order given: the YAML spec files, then the Python jobs files."""
    files = tuple(files)
    return tuple(f for f in files if FsPath(f).suffix != ".py"), tuple(f for f in files if FsPath(f).suffix == ".py")


def load_python_run(
    python_files: Iterable[str | FsPath],
    yaml_files: Iterable[str | FsPath],
    name: str,
    declared: Iterable[PythonJob] = (),
) -> Scenario:
    """The scenario of a run of these files: every job the Python files declare (after ``declared``, those already
    declared in this process) added to the YAML files' scenario (:func:`with_python_jobs`). Raises SpecError,
    located at the file's line."""
    jobs = list(declared) + [j for f in python_files for j in load_jobs(f)]
    return with_python_jobs(jobs, list(yaml_files), name)


def _line_in(path: FsPath, error: BaseException) -> int | None:
    """The line of ``path`` where ``error`` was raised (its innermost frame in that file)."""
    target = str(path.resolve())
    lines = [f.lineno for f in traceback.extract_tb(error.__traceback__) if str(FsPath(f.filename).resolve()) == target]
    return lines[-1] if lines else None


def with_python_jobs(
    declared: list[PythonJob], yaml_files: list[str | FsPath], name: str, cores: float | None = None
) -> Scenario:
    """The YAML files' scenario (cluster and jobs) with the Python jobs added (each :class:`Job` carries its
    declaration in ``declared``); without YAML the cluster is this machine: one node of ``cores`` (default: all
    of them), as the embedded ``local[*]`` session has."""
    if yaml_files:
        base = load_scenario(*yaml_files)
    else:
        node = Node(name="local", cores=cores or float(os.cpu_count() or 1), memory=8 * 2**30)
        base = Scenario(name=name, cluster=Cluster(nodes=[node]))
    taken = {j.id for j in base.jobs}
    python = {j.id: j for j in declared}
    for j in declared:
        file, _, line = j.origin.rpartition(":")
        if j.id in taken:
            raise SpecError([Located(file, int(line), (), "a job name not used by another job", repr(j.id))])
        taken.add(j.id)
        for r in j.reads:
            # a shared stream on Spark is the producer's Parquet output directory, read as a file source
            if r not in python or python[r].sink.kind != "parquet":
                found = repr(r) if r not in python else f"{r!r} writes to {python[r].sink.kind}"
                expected = f"job({j.id!r}): reads: a Python job of this run writing strata.parquet()"
                raise SpecError([Located(file, int(line), (), expected, found)])
            if j.id not in python[r].readers:
                python[r].readers = (*python[r].readers, j.id)
    return with_jobs(base, [*base.jobs, *(j.model() for j in declared)])


def with_jobs(scenario: Scenario, jobs: list[Job]) -> Scenario:
    """``scenario`` with ``jobs``, validated as a whole (links between jobs, cluster fit). The jobs are kept as
    they are, declarations included: a dump would drop them."""
    return Scenario.model_validate({**scenario.model_dump(by_alias=True, exclude={"jobs"}), "jobs": jobs})


def declared_here() -> list[PythonJob]:
    """The jobs declared so far in this thread (a jobs file run as ``__main__``, e.g. under spark-submit)."""
    return list(_declared())
