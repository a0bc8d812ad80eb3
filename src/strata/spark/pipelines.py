"""A job template → one Structured Streaming query (DESIGN.md, "How each level maps onto Spark").

A template that Spark runs is a chain ``source → operators → sink``. Stateless
operators (filter, map, stream–static join) and Spark-managed aggregations
(window_aggregate with watermark, append mode; keyed_stateful, update mode) are
planned inside the streaming query. A keyed operator named in ``managed`` (by
default every keyed_stateful operator) keeps its state in Strata's movable
store (:mod:`strata.spark.state`) instead and runs, with everything after it,
in ``foreachBatch``, where the sink also writes. Every output row carries an
``event_time``: the record's own for row-wise operators, the window end for
windows (the time the result became due), the newest record's for keyed
aggregates; latency at the sink is commit time − event_time.

:func:`check_template` finds what Spark cannot run before any session exists;
:class:`Pipeline` analyses every expression when it is built, so a bad spec
fails before any query starts. Knobs for the controller, applied per batch and
decided elsewhere: :attr:`Pipeline.pool` (FAIR pool), :attr:`Pipeline.rate_cap`
(rows per batch), the store's :meth:`~strata.spark.state.KeyedStateStore.route`
(routing table), and :attr:`Pipeline.hooks` (called before and after every
batch, in the driver: the place for issue 8's dispatch gate).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

import numpy as np

from strata.model import AggregateSpec, Job, Operator, OperatorKind, Problem, Template
from strata.model.inputs import GENERATED_PROCESSES, static_dimension
from strata.model.scenario import Path as DocPath
from strata.spark.checkpoint import clear_unplanned
from strata.spark.files import FileProbe
from strata.spark.replay import plan_reason
from strata.spark.sinks import ConsoleSink, MemorySink, ParquetSink, Sink, timed
from strata.spark.sources import NAME as SYNTHETIC
from strata.spark.sources import LoggedBatches, RateCap, register, synthetic_options
from strata.spark.state import KeyedSpec, KeyedStateStore

START_ATTEMPTS = 5
AGGREGATIONS = (OperatorKind.WINDOW_AGGREGATE, OperatorKind.KEYED_STATEFUL)
ROW_WISE = (OperatorKind.FILTER, OperatorKind.MAP, OperatorKind.JOIN)


class PipelineProblems(Exception):
    """Problems (with document paths) that keep a template from running on Spark."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        super().__init__("; ".join(f"{p.path}: expected {p.expected}; found {p.found}" for p in problems))


@dataclass(frozen=True)
class PipelineOptions:
    """How a template runs: sink, source clock, trigger, which keyed operators use the movable store."""

    sink: Literal["parquet", "memory", "console"] = "parquet"
    clock: Literal["wall", "virtual"] = "wall"
    end_s: float | None = None
    epoch: float | None = None
    tick_s: float = 0.1
    input_partitions: int = 2
    max_rows_per_batch: int | None = None
    trigger_s: float | None = None
    available_now: bool = False
    managed: frozenset[str] | None = None
    state_partitions: int = 2
    start_row: int = 0  # first generated record this query reads (a template switch resumes here)

    def is_managed(self, op: Operator) -> bool:
        if op.kind not in AGGREGATIONS:
            return False
        return op.kind is OperatorKind.KEYED_STATEFUL if self.managed is None else op.name in self.managed


class BatchHook(Protocol):
    """Called in the driver around every micro-batch of a pipeline (issue 8's gate blocks in ``before``)."""

    def before(self, pipeline: Pipeline, batch_id: int) -> None: ...

    def after(self, pipeline: Pipeline, record: dict) -> None: ...


# ---------------------------------------------------------------------- checks


def operator_chain(template: Template) -> list[int] | None:
    """Operator indices along source → … → sink, or None when the template is not such a chain."""
    index = {op.name: i for i, op in enumerate(template.operators)}
    nxt: dict[int, int] = {}
    for st in template.streams:
        if st.is_external or st.src not in index or st.dst not in index or index[st.src] in nxt:
            return None
        nxt[index[st.src]] = index[st.dst]
    sources = [i for i, op in enumerate(template.operators) if op.kind is OperatorKind.SOURCE]
    if len(sources) != 1:
        return None
    order = [sources[0]]
    while order[-1] in nxt and len(order) <= len(template.operators):
        order.append(nxt[order[-1]])
    return order if len(order) == len(template.operators) else None


def check_template(job: Job, template: Template, here: DocPath) -> list[Problem]:
    """Everything that keeps ``template`` from running on Spark, located by document path (no Spark needed)."""
    problems: list[Problem] = []
    for k, st in enumerate(template.streams):
        if st.is_external:
            problems.append(
                Problem(
                    (*here, "streams", k, "from"),
                    "a stream within the job (shared streams are not supported on Spark)",
                    repr(st.src),
                )
            )
    ins: dict[str, int] = {}
    outs: dict[str, int] = {}
    for st in template.streams:
        outs[st.src] = outs.get(st.src, 0) + 1
        ins[st.dst] = ins.get(st.dst, 0) + 1
    for i, op in enumerate(template.operators):
        at = (*here, "operators", i)
        if ins.get(op.name, 0) > 1 or outs.get(op.name, 0) > 1:
            problems.append(
                Problem(
                    at,
                    "a chain source → … → sink (one input and one output per operator on Spark)",
                    f"{op.name!r} with {ins.get(op.name, 0)} inputs, {outs.get(op.name, 0)} outputs",
                )
            )
        if (
            op.kind is OperatorKind.SOURCE
            and op.source.path is None
            and op.source.arrivals.process not in GENERATED_PROCESSES
        ):
            problems.append(
                Problem(
                    (*at, "source", "arrivals", "process"),
                    "constant, poisson, onoff or diurnal arrivals (trace replay does not run on Spark)",
                    repr(op.source.arrivals.process),
                )
            )
        if op.kind is OperatorKind.FILTER and not op.predicate:
            problems.append(Problem((*at, "predicate"), "a Spark SQL boolean expression for a filter", "nothing"))
        if op.kind is OperatorKind.MAP and not op.expressions:
            problems.append(Problem((*at, "expressions"), "Spark SQL select expressions for a map", "nothing"))
        if op.kind is OperatorKind.WINDOW_AGGREGATE and op.window.slide_s and op.window.slide_s > op.window.size_s:
            problems.append(
                Problem(
                    (*at, "window", "slide_s"), f"a slide ≤ size_s ({op.window.size_s:g})", f"{op.window.slide_s:g}"
                )
            )
    kinds = [op.kind for op in template.operators]
    if kinds.count(OperatorKind.SOURCE) != 1:
        problems.append(
            Problem(
                (*here, "operators"),
                "exactly one source operator on Spark",
                f"{kinds.count(OperatorKind.SOURCE)} sources",
            )
        )
    if kinds.count(OperatorKind.SINK) != 1:
        problems.append(
            Problem(
                (*here, "operators"), "exactly one sink operator on Spark", f"{kinds.count(OperatorKind.SINK)} sinks"
            )
        )
    if problems:
        return problems
    chain = operator_chain(template)
    if chain is None:
        return [
            Problem(
                (*here, "streams"),
                "streams joining every operator into one chain source → … → sink",
                "operators off the chain",
            )
        ]
    seen_aggregation = None
    for i in chain:
        op = template.operators[i]
        at = (*here, "operators", i)
        if op.kind in AGGREGATIONS:
            if seen_aggregation is not None:
                problems.append(
                    Problem(
                        (*at, "kind"),
                        "at most one aggregation per template on Spark",
                        f"{op.kind.value} after {seen_aggregation!r}",
                    )
                )
            seen_aggregation = op.name
        elif op.kind is OperatorKind.JOIN and seen_aggregation is not None:
            problems.append(
                Problem(
                    (*at, "kind"), "a stream–static join before the aggregation", f"join after {seen_aggregation!r}"
                )
            )
    return problems


# ---------------------------------------------------------------------- building


def _duration(seconds: float) -> str:
    return f"{round(seconds * 1000)} milliseconds"


def _aggregate(op: Operator):
    from pyspark.sql import functions as F

    agg = op.aggregate or AggregateSpec()
    fn = {"count": F.count, "sum": F.sum, "avg": F.avg, "min": F.min, "max": F.max}[agg.fn]
    expr = fn(agg.column)
    return (expr if agg.fn == "count" else expr.cast("double")).alias(agg.fn)


@dataclass
class Pipeline:
    """One job's query: built (and analysed) on construction, started with :meth:`start`."""

    spark: object
    job: Job
    template: Template
    run_dir: Path
    options: PipelineOptions = field(default_factory=PipelineOptions)
    here: DocPath = ()
    pool: str | None = None
    hooks: list[BatchHook] = field(default_factory=list)
    records: list[dict] = field(default_factory=list)
    rate_cap: RateCap | None = None
    # its source splits each batch into tasks of the size the control file says (RateCap.split): the generator
    splits_tasks: bool = False
    store: KeyedStateStore | None = None
    query: object = None
    started_at: float | None = None
    busy: bool = False  # inside foreachBatch: at the gate or running the batch's work
    probe: FileProbe | None = None  # the query's file sources, listed against its checkpoint (user queries)
    restarts: int = 0
    restarted_at: float = 0.0
    _logged: LoggedBatches | None = None  # a generated source's batches, from the query's offset log
    unreproducible: str | None = None  # why its output cannot be recomputed from its input (strata.spark.replay)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.run_dir = Path(self.run_dir)
        self.name = self.job.id
        self.chain = self._chain()
        self.positions = {op.name: i for i, op in enumerate(self.template.operators)}
        self.sink: Sink = self._make_sink()
        self.stream, self.in_batch = self._build()
        self.unreproducible = self.unreproducible or plan_reason(self.stream)

    def _chain(self) -> list[Operator]:
        """The template's operators in chain order (a template Spark cannot run raises PipelineProblems)."""
        problems = check_template(self.job, self.template, self.here)
        if problems:
            raise PipelineProblems(problems)
        return [self.template.operators[i] for i in operator_chain(self.template)]

    # -------------------------------------------------------------- the query protocol the engine and gate use

    @property
    def continues_checkpoint(self) -> bool:
        """Whether the job's next segment continues this query's checkpoint (a template switch then keeps it):
        False here, every segment of a YAML job has its own checkpoint and sink."""
        return False

    @property
    def read_limit(self) -> str | None:
        """The read limit Strata can set on the query's source by restarting it (``"files"``, ``"offsets"``), or
        None: its cap (if any) is :attr:`rate_cap`, taken at every batch."""
        return None

    @property
    def limit(self) -> int | None:
        """The read limit in force (in :attr:`read_limit`'s unit; None: none)."""
        return None

    def pending_batch(self, batch_id: int) -> tuple[float | None, int]:
        """The batch about to run as its source reported it: its oldest record's event time and its rows;
        (None, 0) when the source reports neither (the gate then prices it by what arrived since the last one)."""
        return self._logged.batch(batch_id) if self._logged is not None else (None, 0)

    def stop_between_batches(self, timeout_s: float = 30.0) -> None:
        """Stop the query once it is not inside a batch's ``foreachBatch`` (within ``timeout_s``).

        Outside it the query is planning its next batch (a batch whose offsets are logged is replayed as
        planned by the next start), committing the last one (its sink already wrote it: the replay's write is
        skipped or idempotent), or idle. Waiting for ``isTriggerActive`` to drop instead would wait out the
        timeout on a query whose batches run back to back. A batch still inside ``foreachBatch`` at the
        timeout is stopped and replayed, as after a crash."""
        query = self.query
        deadline = time.time() + timeout_s
        while query is not None and query.isActive and time.time() < deadline and self.busy:
            time.sleep(0.02)
        if query is not None and query.isActive:
            query.stop()

    def restart(self, limit: int | None) -> None:
        """Start the stopped query again from its checkpoint, its source reading at most ``limit`` a batch (in
        :attr:`read_limit`'s unit; None: no limit). Raises ValueError for a limit on a query without one."""
        self._set_limit(limit)
        self.stream, self.in_batch = self._build()
        self.start()
        self.restarts += 1
        self.restarted_at = time.time()

    def _set_limit(self, limit: int | None) -> None:
        if limit is not None:
            raise ValueError(f"{self.name}: its source has no read limit a restart sets (its cap is per batch)")

    # -------------------------------------------------------------- paths and sink

    @property
    def checkpoint(self) -> Path:
        return self.run_dir / "checkpoints" / self.name

    def _make_sink(self) -> Sink:
        kind = self.options.sink
        if kind == "parquet":
            return ParquetSink(self.run_dir / "sinks" / self.name)
        return MemorySink() if kind == "memory" else ConsoleSink(self.name)

    # -------------------------------------------------------------- the query plan

    def _at(self, op: Operator, *rest: str | int) -> DocPath:
        return (*self.here, "operators", self.positions[op.name], *rest)

    def _source(self, op: Operator):
        if op.source.path is not None:
            return self._file_source(op)
        register(self.spark)
        self.rate_cap = RateCap(self.run_dir / "control" / f"{self.name}.json")
        self.splits_tasks = True
        o = self.options
        self._logged = LoggedBatches(op.source, o.tick_s, self.checkpoint, o.start_row)
        opts = synthetic_options(
            op.source,
            clock=o.clock,
            end_s=o.end_s,
            epoch=o.epoch,
            tick_s=o.tick_s,
            partitions=o.input_partitions,
            max_rows_per_batch=o.max_rows_per_batch,
            control_file=self.rate_cap.path,
            start_row=o.start_row,
        )
        return self.spark.readStream.format(SYNTHETIC).options(**opts).load()

    def _file_source(self, op: Operator):
        """Spark's file source over a data directory; the schema is inferred from the files already there."""
        from pyspark.errors import AnalysisException
        from pyspark.sql import functions as F

        src = op.source
        reader = self.spark.read.format(src.format)
        if src.format == "csv":
            reader = reader.option("header", "true").option("inferSchema", "true")
        try:
            schema = reader.load(src.path).schema
        except AnalysisException as e:
            raise PipelineProblems(
                [
                    Problem(
                        self._at(op, "source", "path"),
                        f"a directory of {src.format} files to infer the schema from",
                        str(e).strip().splitlines()[0][:200],
                    )
                ]
            ) from None
        if "event_time" not in schema.fieldNames():
            raise PipelineProblems(
                [
                    Problem(
                        self._at(op, "source", "path"),
                        "records with an event_time column",
                        f"columns {schema.fieldNames()}",
                    )
                ]
            )
        stream = self.spark.readStream.format(src.format).schema(schema)
        if src.format == "csv":
            stream = stream.option("header", "true")
        df = stream.load(src.path)
        return df.withColumn("event_time", F.col("event_time").cast("timestamp"))

    def _static(self, op: Operator):
        spec = op.join
        if spec.path is None:
            import pandas as pd

            return self.spark.createDataFrame(pd.DataFrame(static_dimension(spec.rows)))
        fmt = Path(spec.path).suffix.lstrip(".") or "parquet"
        reader = self.spark.read.format(fmt)
        if fmt == "csv":
            reader = reader.option("header", "true").option("inferSchema", "true")
        return reader.load(spec.path)

    def _apply(self, df, op: Operator):
        """``op`` applied to ``df``; analysis errors become located problems."""
        from pyspark.errors import AnalysisException, ParseException
        from pyspark.sql import functions as F

        field_of = {
            OperatorKind.FILTER: "predicate",
            OperatorKind.MAP: "expressions",
            OperatorKind.JOIN: "join",
            OperatorKind.WINDOW_AGGREGATE: "aggregate",
            OperatorKind.KEYED_STATEFUL: "aggregate",
        }
        try:
            if op.kind is OperatorKind.FILTER:
                return df.filter(F.expr(op.predicate))
            if op.kind is OperatorKind.MAP:
                out = df.selectExpr(*op.expressions)
                return out if "event_time" in out.columns else df.selectExpr(*op.expressions, "event_time")
            if op.kind is OperatorKind.JOIN:
                return df.join(F.broadcast(self._static(op)), on=op.join.on, how="inner")
            if op.kind is OperatorKind.WINDOW_AGGREGATE:
                w = op.window
                win = F.window("event_time", _duration(w.size_s), _duration(w.slide_s) if w.slide_s else None)
                fn = (op.aggregate or AggregateSpec()).fn
                return (
                    df.withWatermark("event_time", _duration(w.watermark_s))
                    .groupBy(win.alias("w"), "key")
                    .agg(_aggregate(op))
                    .select(
                        F.col("w.start").alias("window_start"),
                        F.col("w.end").alias("window_end"),
                        "key",
                        fn,
                        F.col("w.end").alias("event_time"),
                    )
                )
            if op.kind is OperatorKind.KEYED_STATEFUL:
                return df.groupBy("key").agg(_aggregate(op), F.max("event_time").alias("event_time"))
        except (AnalysisException, ParseException) as e:
            message = str(e).strip().splitlines()[0][:200]
            raise PipelineProblems(
                [
                    Problem(
                        self._at(op, field_of[op.kind]),
                        f"an expression Spark can analyse over columns {df.columns}",
                        message,
                    )
                ]
            ) from None
        raise AssertionError(f"unhandled operator kind {op.kind}")

    def _build(self):
        """The streaming DataFrame, and the operators that run per batch (the managed one and after)."""
        df = self._source(self.chain[0])
        ops = self.chain[1:-1]
        split = next((k for k, op in enumerate(ops) if self.options.is_managed(op)), None)
        for op in ops[:split]:
            df = self._apply(df, op)
        if split is None:
            return df, []
        managed = ops[split]
        spec = KeyedSpec(
            managed.aggregate or AggregateSpec(), managed.window, managed.key_groups, self.options.state_partitions
        )
        missing = {"key", "event_time", spec.aggregate.column} - set(df.columns)
        if missing:
            raise PipelineProblems(
                [
                    Problem(
                        self._at(managed, "aggregate"),
                        f"columns key, event_time and the aggregated column in {df.columns}",
                        f"missing {sorted(missing)}",
                    )
                ]
            )
        self.store = KeyedStateStore(spec, self.run_dir / "state" / self.name / managed.name)
        probe = self.spark.createDataFrame([], spec.spark_output_schema())
        for op in ops[split + 1 :]:
            probe = self._apply(probe, op)
        self.unreproducible = plan_reason(probe)
        return df, ops[split + 1 :]

    # -------------------------------------------------------------- running

    @property
    def stateful(self) -> bool:
        """Whether the query keeps state between batches (its template cannot change without losing it)."""
        return any(op.kind in AGGREGATIONS for op in self.chain)

    def output_mode(self) -> str:
        if any(op.kind is OperatorKind.KEYED_STATEFUL and not self.options.is_managed(op) for op in self.chain):
            return "update"
        return "append"

    def start(self, ready_timeout_s: float = 120.0):
        """Start the query (resuming from its checkpoint if there is one) and wait until its sources are up.

        Waiting matters: each Python source starts a planner process that must
        connect back to the JVM within Spark's fixed 10 s, and several starting
        at once on a busy machine miss it. A query that died of exactly that
        before reading anything is started again (up to ``START_ATTEMPTS``).
        """
        writer = (
            self.stream.writeStream.queryName(self.name)
            .outputMode(self.output_mode())
            .option("checkpointLocation", str(self.checkpoint))
            .foreachBatch(self._batch)
        )
        if self.options.available_now:
            writer = writer.trigger(availableNow=True)
        elif self.options.trigger_s:
            writer = writer.trigger(processingTime=_duration(self.options.trigger_s))
        self.started_at = time.time()
        for _attempt in range(START_ATTEMPTS):
            clear_unplanned(self.checkpoint)  # a start killed before its first batch was logged (or a failed try)
            self.query = writer.start()
            deadline = time.time() + ready_timeout_s
            while (
                self.query.isActive
                and time.time() < deadline
                and self.query.status["message"].startswith("Initializing")
            ):
                time.sleep(0.1)
            if self.query.isActive or not _missed_connect_back(self.query):
                break
        return self.query

    def _batch(self, df, batch_id: int) -> None:
        self.busy = True
        try:
            self._run_batch(df, batch_id)
        finally:
            self.busy = False

    def _run_batch(self, df, batch_id: int) -> None:
        started = time.time()
        # set even when None (Spark's default pool): the callback thread may be one an earlier run's query
        # used, and a pool it set there would otherwise still hold for this query's jobs
        df.sparkSession.sparkContext.setLocalProperty("spark.scheduler.pool", self.pool)
        for hook in self.hooks:
            hook.before(self, batch_id)
        released = time.time()
        pool = df.sparkSession.sparkContext.getLocalProperty("spark.scheduler.pool")  # a hook's (the gate's) choice
        plan = cached = None
        if self.store is not None:
            # a windowed store reads the batch twice (newest event time, then the fold): read the source once
            cached = df.persist() if self.store.reads_input_twice else None
            df, plan = self.store.prepare(cached if cached is not None else df, batch_id)
        for op in self.in_batch:
            df = self._apply(df, op)
        times = self.sink.write(df, batch_id)
        self.wrote(batch_id, times)
        if plan is not None:
            self.store.commit(plan)
            if cached is not None:
                cached.unpersist()
        done = time.time()
        known = timed(times)
        record = {
            "query": self.name,
            "batch_id": batch_id,
            "started": started,
            "released": released,
            "finished": done,
            "rows_out": int(times.size),
            # rows whose event-time column is null: written, but no latency can be measured for them
            "rows_untimed": int(times.size - known.size),
            "pool": pool,
            **latency_percentiles(done, known),
        }
        if plan is not None:
            record["partition_rows"] = plan.partition_rows
            record["group_rows"] = plan.group_rows
            record["watermark_us"] = plan.watermark_us
        with self._lock:
            self.records.append(record)
        for hook in self.hooks:
            hook.after(self, record)

    def wrote(self, batch_id: int, event_micros: np.ndarray) -> None:
        """The event times of what a batch wrote (a YAML template's sink is read back and verified instead)."""

    def result(self):
        """Everything the sink holds (pandas, with batch_id)."""
        return self.sink.read()

    def batch_records(self) -> Iterator[dict]:
        with self._lock:
            return iter(list(self.records))


def _missed_connect_back(query) -> bool:
    """The query died while starting because a Python planner process did not connect back in time."""
    error = query.exception()
    return error is not None and "failed to connect back" in str(error) and "INITIALIZING" in str(error)


def latency_percentiles(now: float, event_micros: np.ndarray) -> dict[str, float | None]:
    """End-to-end latency (now − event time, seconds) percentiles of the records a batch wrote."""
    if event_micros.size == 0:
        return {"latency_p50": None, "latency_p95": None, "latency_p99": None, "latency_max": None}
    lat = now - event_micros / 1e6
    p50, p95, p99 = np.percentile(lat, [50, 95, 99])
    return {
        "latency_p50": float(p50),
        "latency_p95": float(p95),
        "latency_p99": float(p99),
        "latency_max": float(lat.max()),
    }
