"""A Python job's template → its user's own streaming query, run under Strata's control.

The user's function ``build(spark)`` gets a session whose ``readStream`` is
Spark's own :class:`~pyspark.sql.streaming.DataStreamReader` with one thing
added: when a source is loaded, Strata records what it reads (format,
directories) and sets the source's read limit from L0's rate cap —
``maxFilesPerTrigger`` for file sources, ``maxOffsetsPerTrigger`` for Kafka
(DESIGN.md, "How each level maps onto Spark"). Spark reads such options only
when a query starts, so a changed limit is applied by restarting the query
from its own checkpoint at a batch boundary (:meth:`UserPipeline.restart`):
the batch Spark had planned is replayed as planned, later batches use the new
limit, and nothing is read twice or skipped. A Python data source registered
through the session is read through its capped twin instead, which takes the
cap at every batch with no restart (:mod:`strata.spark.python_sources`).

Everything else is :class:`strata.spark.pipelines.Pipeline`: the query's
sink runs inside Strata's ``foreachBatch`` (so each batch passes the dispatch
gate and runs in its FAIR pool), and each batch's record carries sink-side
latency from the declared event-time column.

A query can also be rehearsed (:func:`pipeline_for` with a
:class:`~strata.spark.rehearsal.Rehearsal`: what a warm-up runs before the
sources' epoch): its file sources are then read from samples under the
rehearsal's scratch directory and so is its sink (Parquet where the run's is, else
a memory sink), so nothing the run reads or writes is touched.
"""

from __future__ import annotations

import functools
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from strata.model.callables import where_defined
from strata.model.job import Job, Template
from strata.model.spec import Located, SpecError
from strata.model.user import DeclarationError, PythonJob
from strata.spark import keyed
from strata.spark.files import FileProbe
from strata.spark.pipelines import Pipeline, PipelineOptions
from strata.spark.python_sources import CONTROL_OPTION, capped, capped_name
from strata.spark.rehearsal import Rehearsal
from strata.spark.sinks import ConsoleSink, FunctionSink, MemorySink, ParquetSink, Sink
from strata.spark.sources import RateCap

FILE_FORMATS = ("json", "csv", "parquet", "orc", "text")
LOADERS = (*FILE_FORMATS, "load", "table")


@dataclass
class ReadLimits:
    """The read limits Strata sets on a query's sources when it (re)starts; None: Spark's default (no limit)."""

    files_per_trigger: int | None = None
    offsets_per_trigger: int | None = None
    reads: list[tuple[str, str | None]] = field(default_factory=list)  # (format, path) of every source loaded
    event_times: dict[str, str] = field(default_factory=dict)  # directory → its event-time column, where not the job's
    # Python data sources registered through Strata's session: name (lower case) → its capped twin's name
    # (strata.spark.python_sources), read through ``control_file``, which holds L0's cap in rows per batch
    python_sources: dict[str, str] = field(default_factory=dict)
    control_file: Path | None = None
    capped: bool = False  # a source read through the control file was loaded
    rehearsal: Rehearsal | None = None  # a rehearsal's sources stand in for the query's own (None: the run's)


class LimitedReader:
    """Spark's DataStreamReader, recording each source loaded and setting Strata's read limit on it."""

    def __init__(self, reader, limits: ReadLimits) -> None:
        self._reader = reader
        self._limits = limits
        self._format: str | None = None
        self._schema = None
        self._options: dict[str, object] = {}  # a rehearsal writes CSV rows as the user's reader reads them

    def option(self, key: str, value) -> LimitedReader:
        self._options[key] = value
        self._reader = self._reader.option(key, value)
        return self

    def options(self, **options) -> LimitedReader:
        self._options.update(options)
        self._reader = self._reader.options(**options)
        return self

    def format(self, source: str) -> LimitedReader:
        self._format = source
        self._reader = self._reader.format(source)
        return self

    def schema(self, schema) -> LimitedReader:
        self._schema = schema  # a rehearsal writes rows of it when the source has no file yet
        self._reader = self._reader.schema(schema)
        return self

    def __getattr__(self, name: str):
        attr = getattr(self._reader, name)
        if name in LOADERS:
            return functools.partial(self._load, name)
        if not callable(attr):
            return attr

        @functools.wraps(attr)
        def chained(*args, **kwargs):
            result = attr(*args, **kwargs)
            return self if result is self._reader else result

        return chained

    def _load(self, how: str, path=None, *args, **kwargs):
        fmt = how if how in FILE_FORMATS else (kwargs.get("format") or self._format)
        reader = self._reader
        if fmt in FILE_FORMATS and self._limits.files_per_trigger is not None:
            reader = reader.option("maxFilesPerTrigger", self._limits.files_per_trigger)
        if fmt == "kafka" and self._limits.offsets_per_trigger is not None:
            reader = reader.option("maxOffsetsPerTrigger", self._limits.offsets_per_trigger)
        twin = self._limits.python_sources.get((fmt or "").lower())
        if twin is not None and self._limits.control_file is not None:
            reader = reader.format(twin).option(CONTROL_OPTION, str(self._limits.control_file))
            self._limits.capped = True
        if self._limits.rehearsal is not None:
            # a loader's keywords (``csv(path, header=True, sep=";")``, ``load(path, **options)``) are options too
            given = {k: v for k, v in kwargs.items() if k not in ("schema", "format") and v is not None}
            options = {**self._options, **given}
            path = self._rehearsed(how, fmt, twin, path, kwargs.get("schema", self._schema), options)
        self._limits.reads.append((fmt or "?", None if path is None else str(path)))
        loader = getattr(reader, how)
        return loader(path, *args, **kwargs) if path is not None else loader(*args, **kwargs)

    def _rehearsed(self, how: str, fmt: str | None, twin: str | None, path, schema, options: dict[str, object]):
        """The path a rehearsal reads in place of ``path`` (a file source's sample), or ``path`` with the
        rehearsal refused: no other source stands in. ``options``: the reader's, which written CSV rows follow."""
        rehearsal = self._limits.rehearsal
        if fmt in FILE_FORMATS and isinstance(path, str | Path):
            return rehearsal.stand_in(fmt, str(path), schema, options)
        if twin is not None:
            rehearsal.refuse(f"reads a Python data source ({fmt})")
        elif how == "table":
            rehearsal.refuse(f"reads a table ({path})")
        else:
            rehearsal.refuse("reads Kafka" if fmt == "kafka" else f"reads a {fmt or 'streaming'} source")
        return path


class LimitedRegistration:
    """Spark's ``spark.dataSource``: registering a Python data source also registers its capped twin
    (:func:`strata.spark.python_sources.capped`), which the query then reads."""

    def __init__(self, registration, limits: ReadLimits) -> None:
        self._registration = registration
        self._limits = limits

    def register(self, source) -> None:
        self._registration.register(source)
        self._registration.register(capped(source))
        self._limits.python_sources[source.name().lower()] = capped_name(source)

    def __getattr__(self, name: str):
        return getattr(self._registration, name)


class LimitedSession:
    """The SparkSession a template function gets: Spark's own, except ``readStream`` (see :class:`LimitedReader`)
    and :meth:`output_of`, which :meth:`PythonJob.stream` calls."""

    def __init__(self, spark, limits: ReadLimits, reader: PythonJob | None = None, run_root: Path | None = None):
        self._spark = spark
        self._limits = limits
        self._reader = reader
        self._run_root = run_root

    @property
    def readStream(self) -> LimitedReader:
        return LimitedReader(self._spark.readStream, self._limits)

    @property
    def dataSource(self) -> LimitedRegistration:
        return LimitedRegistration(self._spark.dataSource, self._limits)

    def output_of(self, producer: PythonJob):
        """``producer``'s output as a file source over its Parquet directory (``batch_id=<b>/`` partitions, each
        written once: :class:`~strata.spark.sinks.ParquetSink`), with the schema of its first template's query."""
        if self._reader is None or producer.id not in self._reader.reads:
            who = self._reader.id if self._reader is not None else "this job"
            raise DeclarationError(
                f"{producer.id}.stream(spark)", f"job({who!r}, reads=[{producer.id!r}, ...]) declared", "no reads"
            )
        first = next(iter(producer.templates.values()))
        built = first(LimitedSession(self._spark, ReadLimits(), producer, self._run_root))
        schema = built.schema.add("batch_id", "long")
        directory = output_directory(producer, self._run_root)
        directory.mkdir(parents=True, exist_ok=True)
        self._limits.event_times[str(directory)] = producer.event_time
        return self.readStream.schema(schema).parquet(str(directory))

    def __getattr__(self, name: str):
        return getattr(self._spark, name)


def output_directory(declared: PythonJob, run_root: Path | None) -> Path:
    """Where a Python job's Parquet sink writes: its declared path, else ``<run>/jobs/<job>/output`` (one directory
    for every segment of the job, as its checkpoint is: batch ids continue across segments)."""
    if declared.sink.path:
        return Path(declared.sink.path)
    if run_root is None:
        raise ValueError(f"job {declared.id!r}: its output directory needs a run directory")
    return run_root / "jobs" / declared.id / "output"


def _located(fn, declared: PythonJob, template: str, expected: str, found: str, error: BaseException | None = None):
    """A SpecError at the user's line: where the error was raised in the template's file, else the function."""
    file, line = where_defined(fn)  # through partials, bound methods and callable objects
    source = str(Path(file or declared.origin.rsplit(":", 1)[0]).resolve())
    if error is not None:
        frames = [
            f.lineno for f in traceback.extract_tb(error.__traceback__) if str(Path(f.filename).resolve()) == source
        ]
        line = frames[-1] if frames else line
    where = (f"job {declared.id!r}", "template", template)
    return SpecError([Located(source, line, where, expected, found)])


@dataclass
class UserPipeline(Pipeline):
    """One Python job's template as its user wrote it, run by :class:`Pipeline`'s machinery."""

    declared: PythonJob | None = None
    limits: ReadLimits = field(default_factory=ReadLimits)
    written: dict[int, np.ndarray] = field(default_factory=dict)  # batch id → event times (µs) of its output

    def _chain(self) -> list:
        """The planner's chain of the template (``input → query → out``): Spark runs the user's query as it is."""
        return list(self.template.operators)

    def _build(self):
        return self._build_user(), []

    @property
    def continues_checkpoint(self) -> bool:
        return True

    def pending_batch(self, batch_id: int) -> tuple[float | None, int]:
        """A batch over directories: the files Spark logged into it (:class:`~strata.spark.files.FileProbe`)."""
        return self.probe.batch(batch_id) if self.probe is not None else (None, 0)

    @property
    def checkpoint(self) -> Path:
        """One checkpoint per job, across its segments: a template switch between stateless queries continues it
        (Spark keeps a checkpoint across changes to stateless operators), so the new template reads on from the
        first record the old one did not commit; stateful templates never switch (the engine refuses)."""
        return self.run_dir.parent / "checkpoint"

    @property
    def stateful(self) -> bool:
        """Whether the query keeps state between batches (its template cannot change without losing it)."""
        if self.store is not None:  # a keyed aggregate in Strata's store (strata.keyed_aggregate)
            return True
        plan = self.stream._jdf.queryExecution().analyzed().toString()
        return any(
            op in plan for op in ("Aggregate", "Deduplicate", "FlatMapGroupsWithState", "TransformWithState", "Join ")
        )

    def _make_sink(self) -> Sink:
        spec = self.declared.sink
        column = self.declared.event_time
        # a run's sink override (memory, console) does not apply to output other jobs read
        kind = spec.kind if self.options.sink == "parquet" or self.declared.readers else self.options.sink
        if self.limits.rehearsal is not None:  # writes nowhere the run reads, whatever the job declares
            # Parquet under the rehearsal's scratch, so the run's first batch finds Spark's file writer warm; a
            # function or a table of the user's is not called on rehearsal rows
            scratch = self.limits.rehearsal.scratch / "output"
            return ParquetSink(scratch, column) if kind == "parquet" else MemorySink(column)
        if kind == "parquet":
            return ParquetSink(output_directory(self.declared, self.run_root), column)
        if kind == "memory":
            return MemorySink(column)
        if kind == "console":
            return ConsoleSink(self.name)
        if kind == "foreach_batch":
            return FunctionSink(spec.fn, column)
        return FunctionSink(lambda df, _b: df.write.mode("append").saveAsTable(spec.table), column)

    @property
    def run_root(self) -> Path:
        """The run's directory (``<run>/jobs/<job>/<segment>`` is this pipeline's)."""
        return self.run_dir.parents[2]

    def output_mode(self) -> str:
        return self.declared.sink.output_mode

    def wrote(self, batch_id: int, event_micros: np.ndarray) -> None:
        with self._lock:
            self.written[batch_id] = event_micros  # a replayed batch replaces its first attempt

    def _build_user(self):
        from pyspark.errors import PySparkException

        fn = self.declared.templates[self.template.name]
        self.limits.reads.clear()
        self.limits.capped = False
        self.limits.control_file = self.run_dir / "control" / f"{self.name}.json"
        try:
            df = fn(LimitedSession(self.spark, self.limits, self.declared, self.run_root))
        except DeclarationError as e:
            raise _located(fn, self.declared, self.template.name, f"{e.where}: {e.expected}", e.found, e) from None
        except PySparkException as e:
            message = str(e).strip().splitlines()[0][:300]
            raise _located(fn, self.declared, self.template.name, "a query Spark can analyse", message, e) from None
        except Exception as e:  # the user's code failed while building the query: say where
            found = f"{type(e).__name__}: {e}"[:300]
            raise _located(
                fn, self.declared, self.template.name, "a function that builds the query", found, e
            ) from None
        if self.declared.keyed is not None:  # its keyed aggregate runs per batch in Strata's movable store
            try:
                df = keyed.attach(self, df, self.declared.keyed)
            except DeclarationError as e:
                raise _located(fn, self.declared, self.template.name, f"{e.where}: {e.expected}", e.found) from None
        if not getattr(df, "isStreaming", False):
            found = type(df).__name__ if not hasattr(df, "isStreaming") else "a batch DataFrame"
            raise _located(fn, self.declared, self.template.name, "a streaming DataFrame (spark.readStream…)", found)
        column = self.declared.event_time
        if column not in df.columns:
            raise _located(
                fn,
                self.declared,
                self.template.name,
                f"an output column {column!r} holding each row's event time (job(event_time=...))",
                f"columns {df.columns}",
            )
        # a Python data source read through its capped twin takes L0's cap per batch, as the synthetic source does
        self.rate_cap = RateCap(self.limits.control_file) if self.limits.capped else None
        directories = [p for fmt, p in self.limits.reads if fmt in FILE_FORMATS and p is not None]
        if directories:
            self.probe = FileProbe(
                directories,
                self.checkpoint,
                {p: fmt for fmt, p in self.limits.reads if p is not None},
                self.declared.event_time,
                dict(self.limits.event_times),
            )
        return df

    # -------------------------------------------------------------- L0's rate cap as the source's read limit

    @property
    def read_limit(self) -> str | None:
        """The read limit Strata sets on this query: ``"files"`` (it reads directories: ``maxFilesPerTrigger``),
        ``"offsets"`` (Kafka: ``maxOffsetsPerTrigger``, one offset a record), or None (neither)."""
        if self.probe is not None:
            return "files"
        return "offsets" if any(fmt == "kafka" for fmt, _ in self.limits.reads) else None

    @property
    def limit(self) -> int | None:
        """The read limit in force (files or offsets a batch; None: none)."""
        return self.limits.offsets_per_trigger if self.read_limit == "offsets" else self.limits.files_per_trigger

    def _set_limit(self, limit: int | None) -> None:
        if self.read_limit == "offsets":
            self.limits.offsets_per_trigger = limit
        else:
            self.limits.files_per_trigger = limit


def pipeline_for(
    spark,
    job: Job,
    template: Template,
    run_dir: Path,
    options: PipelineOptions,
    here: tuple = (),
    files_per_trigger: int | None = None,
    rehearsal: Rehearsal | None = None,
) -> Pipeline:
    """The query of ``job``'s ``template``: its user's own (:class:`UserPipeline`) for a job declared in Python
    (``job.declared``), else the template's operators built by :class:`Pipeline`. ``files_per_trigger``: a static
    read limit on a user query, as a careful Spark user sets it (None: Spark's default, or Strata's caps).
    ``rehearsal``: a user query is rehearsed (its sources' samples, a memory sink; :mod:`strata.spark.rehearsal`)
    rather than run; ``rehearsal.refused`` says when it cannot be.
    Raises SpecError (Python jobs) or PipelineProblems (YAML templates), located, before anything starts."""
    if job.declared is not None:
        # a user query's run directory is a segment's: ``<run>/jobs/<job>/<segment>`` (its checkpoint is the job's)
        limits = ReadLimits(files_per_trigger=files_per_trigger, rehearsal=rehearsal)
        return UserPipeline(spark, job, template, run_dir, options, here=here, declared=job.declared, limits=limits)
    return Pipeline(spark, job, template, run_dir, options, here=here)
