"""Keyed state that can move: a Strata-managed store for rebalanced keyed operators.

Spark's own state store is partitioned by a hash of the grouping key that is
fixed for the life of a query, so the balancer (AutoFlow, L1) cannot move a hot
key group while the query runs. Keyed operators that Strata rebalances keep
their state here instead, and run inside ``foreachBatch``:

1. key → key group ``g = pmod(xxhash64(key), G)``; key group → partition
   ``p = routing[g]``, the routing table in force for this micro-batch.
2. Windowed operators only: a small aggregate of the batch gives its newest
   event time and so the new watermark (the rows per key group, the load the
   balancer needs, are counted by the tasks and read back at commit).
3. Rows are shuffled so that partition p is exactly Spark task p (a slot value
   whose Murmur3 hash lands on p is looked up once), plus one marker row per
   partition so every task runs even without rows. Unwindowed, the JVM then
   combines each task's rows per key (no second exchange), so Python receives
   one row per key. The whole plan is one SQL statement (``_statement``).
4. Task p takes its key groups at the previous committed batch — from its
   Python worker's memory when that is provably at that version, else from the
   group's newest snapshot plus the changelogs after it, whoever wrote them
   (:mod:`strata.spark.state_table`) — folds the batch in, emits results and
   writes the batch's file ``v=<b>/part=<p>.parquet``: one row group per key
   group of the rows the batch changed, then one per group whose changelog
   since its last snapshot outweighs that snapshot, holding its whole state
   (a group whose every row the batch changed is its own snapshot). So
   snapshot I/O amortises to a constant per changed row, and a task writes one
   file per batch (:mod:`strata.spark.state_log`).
5. After the sink has written the batch's output, the driver writes
   ``manifests/<batch>.json`` (batch, watermark, routing, each group's newest
   snapshot) and deletes the files and manifests that no replay can need.

State is versioned per batch id: batch b reads the newest manifest older than
b, so a replay of b after a crash recomputes identical state and output, and a
routing table changed between batches moves a key group's state with it (the
next owner reads the group's snapshot and changelogs, or has it in memory) with
no query restart. The batch boundary is the barrier AutoFlow's markers provide
in a record-at-a-time engine.

Cost per batch: proportional to the rows the batch changes (fold, changelog)
plus amortised snapshot rewrites, and a move costs the moved group's state
(its snapshot plus its changelog row groups since), not the whole state's.
Windows follow Spark's append mode: a window is emitted once, when its end ≤
watermark = newest event time seen − ``watermark_s`` (here including the
current batch).
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from strata.model import AggregateSpec, WindowSpec
from strata.spark.prompt_ack import acknowledge_promptly
from strata.spark.state_log import StateLog, state_schema
from strata.spark.state_table import CACHE, NO_TIME, StateCache, Version, fold, rows_table, snapshot_due
from strata.spark.worker_heap import freeze_worker_heap

US = 1_000_000


@dataclass(frozen=True)
class KeyedSpec:
    """What a managed keyed operator computes: an aggregate per key (per window when windowed).

    The columns are the user's: ``key`` (integral, cast to long, or string as
    ``key_type`` says), ``value`` (the aggregated column; default the
    aggregate's ``column``; a count over a frame without it counts rows) and
    ``event_time`` (a timestamp). The output names the key and event-time
    columns the same, and the aggregate after its function. ``snapshot_factor``,
    ``min_log_versions`` and ``max_log_versions`` tune when a key group's snapshot is rewritten
    (:func:`strata.spark.state_table.snapshot_due`). ``combine`` says whether an unwindowed
    batch's records are combined per key before the shuffle (None: decided batch by batch,
    :func:`combines_before_shuffle`).
    """

    aggregate: AggregateSpec
    window: WindowSpec | None
    key_groups: int
    partitions: int
    key: str = "key"
    value: str | None = None
    event_time: str = "event_time"
    key_type: Literal["long", "string"] = "long"
    snapshot_factor: float = 1.0
    max_log_versions: int = 32
    min_log_versions: int = 2
    recent_versions: int = 8  # changelogs kept for a worker that served a group lately to catch up from
    combine: bool | None = None

    @property
    def out_column(self) -> str:
        return self.aggregate.fn

    @property
    def value_column(self) -> str:
        return self.value or self.aggregate.column

    @property
    def arrow_key_type(self) -> pa.DataType:
        return pa.string() if self.key_type == "string" else pa.int64()

    @property
    def window_us(self) -> int | None:
        return round(self.window.size_s * US) if self.window is not None else None

    def output_schema(self) -> pa.Schema:
        agg = pa.int64() if self.aggregate.fn == "count" else pa.float64()
        ts = pa.timestamp("us", tz="UTC")
        cols = [("window_start", ts), ("window_end", ts)] if self.window else []
        return pa.schema([*cols, (self.key, self.arrow_key_type), (self.out_column, agg), (self.event_time, ts)])

    def spark_output_schema(self) -> str:
        agg = "LONG" if self.aggregate.fn == "count" else "DOUBLE"
        win = "window_start TIMESTAMP, window_end TIMESTAMP, " if self.window else ""
        key = "STRING" if self.key_type == "string" else "LONG"
        return f"{win}`{self.key}` {key}, `{self.out_column}` {agg}, `{self.event_time}` TIMESTAMP"


@dataclass(frozen=True)
class BatchPlan:
    """What the driver decided for one batch before running it (and commits after the sink wrote)."""

    batch_id: int
    watermark_us: int
    routing: tuple[int, ...]
    partitions: int
    group_rows: dict[int, int]
    previous: dict | None
    # committed versions a reader of changelogs may need: (batch, routing, watermark µs), oldest first
    history: tuple[tuple[int, tuple[int, ...], int], ...] = ()
    # per key group, the batch whose file holds its newest snapshot as of the previous batch (−1: none yet)
    bases: tuple[int, ...] = ()
    # what each task recorded in its file's footer, by partition (filled in by commit)
    tasks: dict[int, dict] = field(default_factory=dict)
    # whether the batch's records were combined per key before the shuffle (KeyedStateStore._statement)
    combined: bool = False

    @property
    def partition_rows(self) -> list[int]:
        """Rows of the batch per partition under its routing table (the load the balancer evens out)."""
        load = [0] * self.partitions
        for g, n in self.group_rows.items():
            load[self.routing[g]] += n
        return load


def hash_routing(key_groups: int, partitions: int) -> tuple[int, ...]:
    """The routing table of plain hash partitioning: key group g on partition g mod P."""
    return tuple(g % partitions for g in range(key_groups))


@dataclass
class KeyedStateStore:
    """The driver side of one managed keyed operator: routing table, manifests, per-batch plans."""

    spec: KeyedSpec
    directory: Path
    _routing: tuple[int, ...] = ()
    _slots: tuple[int, ...] = ()
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _manifests: dict[int, tuple[int, dict]] = field(default_factory=dict)
    _sql: tuple | None = None  # ((value column present, routing, combined first), the plan as one SQL statement)
    _combine: bool = False  # whether the next batch combines records per key before the shuffle (commit)
    _out_type: object = None  # the tasks' output StructType (_output_type)
    # the temporary view of the batch's frame that statement reads: one name per store, as a session may hold several
    _view: str = field(default_factory=lambda: f"strata_keyed_{uuid.uuid4().hex}")

    def __post_init__(self) -> None:
        self.directory = Path(self.directory)
        (self.directory / "manifests").mkdir(parents=True, exist_ok=True)
        self.log = StateLog(self.directory)
        if not self._routing:
            self._routing = hash_routing(self.spec.key_groups, self.spec.partitions)

    # ------------------------------------------------------------------ the balancer's knob

    @property
    def routing(self) -> tuple[int, ...]:
        """The routing table the next batch will use (key group → partition)."""
        return self._routing

    def route(self, routing: list[int] | tuple[int, ...]) -> None:
        """Replace the routing table; it takes effect at the next micro-batch."""
        routing = tuple(int(p) for p in routing)
        if len(routing) != self.spec.key_groups:
            raise ValueError(f"routing needs {self.spec.key_groups} entries (one per key group); got {len(routing)}")
        bad = [p for p in routing if not 0 <= p < self.spec.partitions]
        if bad:
            raise ValueError(f"partitions must be in 0..{self.spec.partitions - 1}; got {bad[:5]}")
        with self._lock:
            self._routing = routing

    @property
    def reads_input_twice(self) -> bool:
        """Whether ``prepare`` evaluates the batch's frame twice (windows: newest event time first), so a caller
        should persist it; unwindowed, the frame is read once, by the fold."""
        return self.spec.window is not None

    # ------------------------------------------------------------------ per batch

    def _manifest(self, batch: int) -> dict:
        """A committed manifest, re-read only if a replay rewrote it (its mtime changed)."""
        path = self.directory / "manifests" / f"{batch}.json"
        mtime = path.stat().st_mtime_ns
        seen = self._manifests.get(batch)
        if seen is None or seen[0] != mtime:
            seen = self._manifests[batch] = (mtime, json.loads(path.read_text()))
        return seen[1]

    def plan(self, batch_id: int, group_rows: dict[int, int], newest_us: int | None) -> BatchPlan:
        """Batch ``batch_id``'s plan from its rows per key group and newest event time (no Spark needed)."""
        spec = self.spec
        with self._lock:
            routing = self._routing
        committed = [b for b in self.log.manifests() if b < batch_id]
        self._manifests = {b: m for b, m in self._manifests.items() if b in committed}
        history = tuple(
            (b, tuple(m["routing"]), int(m["watermark_us"])) for b in committed for m in [self._manifest(b)]
        )
        previous = self._manifest(committed[-1]) if committed else None
        watermark = previous["watermark_us"] if previous else -(2**62)
        if newest_us is not None and spec.window is not None:
            watermark = max(watermark, newest_us - round(spec.window.watermark_s * US))
        bases = _bases(previous, spec.key_groups)
        return BatchPlan(batch_id, watermark, routing, spec.partitions, dict(group_rows), previous, history, bases)

    def task(self, plan: BatchPlan) -> _Task:
        """The picklable executor function for ``plan``."""
        return _Task(
            self.spec,
            str(self.directory),
            plan.batch_id,
            plan.watermark_us,
            plan.routing,
            plan.previous["batch"] if plan.previous else None,
            plan.history,
            plan.bases,
        )

    def _slot_values(self, spark) -> tuple[int, ...]:
        """For each partition p, a long whose Spark Murmur3 hash mod P is p (what ``repartition`` uses)."""
        if not self._slots:
            from pyspark.sql import functions as F

            n = self.spec.partitions
            rows = spark.range(64 * n).select("id", F.pmod(F.hash("id"), F.lit(n)).alias("p")).collect()
            first: dict[int, int] = {}
            for r in rows:
                first.setdefault(r["p"], r["id"])
            if len(first) < n:
                raise RuntimeError(f"no slot value found for some of {n} partitions")
            self._slots = tuple(first[p] for p in range(n))
        return self._slots

    def _statement(self, valued: bool, routing: tuple[int, ...], slots: tuple[int, ...], combine: bool) -> str:
        """The batch's plan over the view of its frame as one SQL statement, built once per routing table and form.

        One ``spark.sql`` call instead of a DataFrame step per operation: each
        step, Column and list element was a py4j round trip (164 per batch with
        the projection's Columns already cached, some 40 ms of driver time a
        batch, more when the machine is busy), and the text is analysed in the
        JVM in one go. In order:

        - the projection: kg = pmod(xxhash64(key), G); slot, for key group g, a
          long whose Murmur3 hash mod P is routing[g] (:meth:`_slot_values`);
          x the aggregated value (1.0 when a count's frame has no value column);
        - one marker row per partition, kg −1 (no key hashes there), so every
          task runs even without rows;
        - ``REPARTITION(P, slot)``: partition p is exactly Spark task p (a
          repartition by number, which adaptive execution never coalesces);
        - unwindowed, the rows are combined per key in the JVM, so the Python
          worker receives one row per key instead of one per record (at 10k
          keys a twentieth of the rows through Arrow, and no hash aggregation
          in Python), with only the partials the aggregate needs (n, et and
          rows always; s for sums and means, m for min and max). Windows
          need each record's event time, so their records go to Python as
          they are. Python does not receive ``slot``: every column sent costs
          the JVM's Arrow conversion per row.

        Unwindowed, ``combine`` says where the rows are combined (see
        :func:`combines_before_shuffle`): false, after the shuffle on
        ``slot``, where a task holds all rows of its key groups, so the
        grouping needs no exchange of its own; true, before it, as Spark's
        own aggregation does (partial aggregates per map task, an exchange on
        the key, the final aggregate, and only then kg, slot and the shuffle
        on ``slot`` of one row per key): a third stage, but far fewer rows
        shuffled when keys repeat. The Spark job alone into the noop sink
        (200k-row batches, local[2], medians over 32 and 22 batches): at 10k
        keys 82 ms combined first against 110 ms after; at 10M keys, every
        record a new key, 192 ms against 128 ms.
        """
        form = (valued, routing, combine)
        if self._sql is not None and self._sql[0] == form:
            return self._sql[1]
        spec = self.spec

        def name(column: str) -> str:
            return "`" + column.replace("`", "``") + "`"

        key = "STRING" if spec.key_type == "string" else "BIGINT"
        x = f"CAST({name(spec.value_column)} AS DOUBLE)" if valued else "1.0D"
        # BIGINT, as in _slot_values: an INT hashes differently and lands rows on the wrong task
        table = ", ".join(f"{slots[p]}L" for p in routing)
        kg = f"CAST(pmod(xxhash64(key), {spec.key_groups}) AS INT)"
        slot = f"element_at(array({table}), kg + 1)"
        records = (
            f"SELECT CAST({name(spec.key)} AS {key}) AS key, CAST({name(spec.event_time)} AS TIMESTAMP) AS event_time,"
            f" {x} AS x FROM {self._view}"
        )
        fn = spec.aggregate.fn
        # n: non-null values, as Arrow's count; rows: records, nulls included (the balancer's load); s and m only
        # for the functions that read them (columns cost Arrow conversion in the JVM for every row sent to Python)
        partials = {"n": ("count(x)", "BIGINT")}
        if fn in ("sum", "avg"):
            partials["s"] = ("sum(x)", "DOUBLE")
        if fn in ("min", "max"):
            partials["m"] = (f"{fn}(x)", "DOUBLE")
        partials |= {"et": ("max(event_time)", "TIMESTAMP"), "rows": ("count(1)", "BIGINT")}
        aggregates = ", ".join(f"{e} AS {c}" for c, (e, _) in partials.items())
        values = ", ".join(f"({slots[p]}L)" for p in range(spec.partitions))
        null = "CAST(NULL AS {})".format
        if combine:
            carried = ", ".join(partials)
            combined = f"SELECT key, {aggregates} FROM ({records}) GROUP BY key"
            rows = (
                f"SELECT kg, key, {slot} AS slot, {carried} FROM (SELECT {kg} AS kg, key, {carried} FROM ({combined}))"
            )
            marker_types = [t for _, t in partials.values()]
        else:
            carried = "x, event_time"
            projected = f"SELECT {kg} AS kg, key, event_time, x FROM ({records})"
            rows = f"SELECT kg, key, {slot} AS slot, {carried} FROM ({projected})"
            marker_types = ["DOUBLE", "TIMESTAMP"]
        nulls = ", ".join(map(null, marker_types))
        markers = f"SELECT -1, {null(key)}, slot, {nulls} FROM VALUES {values} AS markers(slot)"
        shuffled = f"SELECT /*+ REPARTITION({spec.partitions}, slot) */ * FROM ({rows} UNION ALL {markers})"
        if spec.window is None and not combine:
            sql = f"SELECT kg, key, {aggregates} FROM ({shuffled}) GROUP BY kg, key, slot"
        else:  # slot has done its work in the shuffle; Python need not receive it
            sql = f"SELECT kg, key, {carried} FROM ({shuffled})"
        self._sql = (form, sql)
        return sql

    def prepare(self, df, batch_id: int):
        """The batch's output DataFrame (evaluate it exactly once) and the plan to commit afterwards.

        The frame is registered as a temporary view (one per store, replaced
        every batch) for :meth:`_statement` to read.
        """
        from pyspark.sql import functions as F

        spec = self.spec
        slots = self._slot_values(df.sparkSession)
        columns = df.columns
        if spec.value_column not in columns and spec.aggregate.fn != "count":
            raise ValueError(f"no column {spec.value_column!r} to aggregate in {columns}")
        newest_us = None
        if spec.window is not None:
            # only windows need the batch's newest event time before the fold (the watermark that closes them);
            # the rows per key group come back from the tasks themselves (commit)
            newest = df.agg(F.max(spec.event_time).alias("t")).collect()[0]["t"]
            newest_us = round(newest.timestamp() * US) if newest is not None else None
        plan = self.plan(batch_id, {}, newest_us)
        df.createOrReplaceTempView(self._view)
        combine = spec.window is None and (self._combine if spec.combine is None else spec.combine)
        plan = replace(plan, combined=combine)
        statement = self._statement(spec.value_column in columns, plan.routing, slots, combine)
        shuffled = df.sparkSession.sql(statement)
        return shuffled.mapInArrow(self.task(plan), self._output_type()), plan

    def _output_type(self):
        """The tasks' output schema as a StructType, parsed once: given as DDL, mapInArrow had the JVM parse it
        three times a batch."""
        if self._out_type is None:
            from pyspark.sql.types import StructType

            self._out_type = StructType.fromDDL(self.spec.spark_output_schema())
        return self._out_type

    def commit(self, plan: BatchPlan) -> None:
        """Record the batch's files as committed (after its output was written); drop what no replay needs.

        The batch's rows per key group (the balancer's load) are filled into
        ``plan.group_rows`` from what the tasks counted, read from their
        files' footers: that saves the extra Spark job a count before the
        batch would cost. The same footers say which groups each task
        snapshotted, which the manifest records (``snapshots``: per group, the
        batch whose file holds its newest whole state), and how many distinct
        keys the batch had, from which the next batch's plan is chosen.
        """
        snapshots = list(plan.bases) if plan.bases else [-1] * self.spec.key_groups
        keys = 0
        for p in range(plan.partitions):
            meta = plan.tasks[p] = self.log.changelog_meta(plan.batch_id, p)
            for g, n in meta.get("group_rows", {}).items():
                plan.group_rows[int(g)] = n
            for g in meta.get("full", []):
                snapshots[g] = plan.batch_id
            keys += meta.get("keys", 0)
        self._combine = combines_before_shuffle(sum(plan.group_rows.values()), keys)
        self.log.write_manifest(
            {
                "batch": plan.batch_id,
                "watermark_us": plan.watermark_us,
                "routing": list(plan.routing),
                "snapshots": snapshots,
            }
        )
        # a replay of this batch (crash before Spark commits it) rebuilds from the previous version
        self.log.collect(
            plan.previous["batch"] if plan.previous else None,
            list(plan.bases) if plan.previous else None,
            self.spec.recent_versions,
        )


def combines_before_shuffle(records: int, keys: int) -> bool:
    """Whether a batch's records are best combined per key before the shuffle on ``slot``, judged from the
    previous batch's ``records`` and distinct ``keys``: when there were at least four records per key.

    Combining first (:meth:`KeyedStateStore._statement`) adds an exchange on the key, so it pays only when it
    shrinks what is shuffled by much: 20 records per key (10k keys, 200k-row batches) made the batch's Spark
    work 25% faster, one (10M keys) 50% slower. Key counts drift slowly in a stream, so the previous batch is
    the estimate; the first batch of a run shuffles records as they are.
    """
    return keys > 0 and 4 * keys <= records


def _bases(manifest: dict | None, key_groups: int) -> tuple[int, ...]:
    """Per key group, the batch of its newest snapshot as of ``manifest`` (−1: none, or no manifest yet)."""
    if manifest is None:
        return (-1,) * key_groups
    if "snapshots" not in manifest:
        # manifests before snapshots moved into the batch's files name none; the files they need are gone
        raise RuntimeError(
            f"manifest of batch {manifest['batch']} names no snapshots: this store directory was written by an "
            "older version of the store (separate snapshot files); start the query from a new directory"
        )
    return tuple(int(b) for b in manifest["snapshots"])


def batch_partials(rows: pa.Table | pd.DataFrame, spec: KeyedSpec) -> pd.DataFrame:
    """A batch's partials per (kg, key, window start): the pure part of the fold.

    ``rows`` are records (kg, key, event_time, x) or, unwindowed, the partials
    the JVM already combined per key (kg, key, n, s, m, et, rows: what
    :meth:`KeyedStateStore.prepare` sends), which only change form here.
    Records unwindowed go through Arrow's hash aggregation (several times
    faster than pandas' groupby on a 100k-row batch); windows first copy each
    record into every window containing it, in pandas.
    """
    cols = ["kg", "key", "ws", "n", "s", "m", "et"]
    if isinstance(rows, pd.DataFrame):
        rows = pa.Table.from_pandas(rows, preserve_index=False)
    if not rows.num_rows:
        return pd.DataFrame({c: pd.Series(dtype=object if c == "key" else "int64") for c in cols})
    combined = "n" in rows.column_names
    et = pc.cast(pc.cast(rows.column("et" if combined else "event_time"), pa.timestamp("us", tz="UTC")), pa.int64())
    key = pc.cast(rows.column("key"), spec.arrow_key_type)
    if combined:
        return pd.DataFrame(
            {
                "kg": pc.cast(rows.column("kg"), pa.int32()).to_numpy(),
                "key": key.to_numpy(zero_copy_only=False),
                "ws": np.zeros(rows.num_rows, np.int64),
                "n": pc.cast(rows.column("n"), pa.int64()).to_numpy(),
                # Spark's sum and max of only nulls are null: the partials say 0 and NaN (and so do the partials
                # the JVM leaves out because the function does not read them)
                "s": _partial(rows, "s", 0.0),
                "m": _partial(rows, "m", np.nan),
                "et": pc.fill_null(et, NO_TIME).to_numpy(),
            }
        )
    x = pc.cast(rows.column("x"), pa.float64())
    top = "min" if spec.aggregate.fn == "min" else "max"
    if spec.window is None:
        t = pa.table({"kg": pc.cast(rows.column("kg"), pa.int32()), "key": key, "x": x, "et": et})
        out = t.group_by(["kg", "key"], use_threads=False).aggregate(
            [("x", "count"), ("x", "sum"), ("x", top), ("et", "max")]
        )
        return pd.DataFrame(
            {
                "kg": out.column("kg").to_numpy(),
                "key": out.column("key").to_numpy(zero_copy_only=False),
                "ws": np.zeros(out.num_rows, np.int64),
                "n": out.column("x_count").to_numpy(),
                # Arrow's sum and max of only nulls are null: the partials say 0 and NaN
                "s": pc.fill_null(out.column("x_sum"), 0.0).to_numpy(),
                "m": out.column(f"x_{top}").to_numpy(zero_copy_only=False).astype(np.float64),
                "et": out.column("et_max").to_numpy(),
            }
        )
    base = pd.DataFrame(
        {
            "kg": rows.column("kg").to_numpy().astype(np.int32),
            "key": key.to_numpy(zero_copy_only=False),
            "x": x.to_numpy(zero_copy_only=False).astype(np.float64),
            "et": et.to_numpy(),
        }
    )
    base = _explode_windows(base, spec.window)
    valid = base["x"].notna()
    base["n"] = valid.astype(np.int64)
    base["s"] = base["x"].where(valid, 0.0)
    base["m"] = base["x"]
    agg = {"n": "sum", "s": "sum", "m": top, "et": "max"}
    return base.groupby(["kg", "key", "ws"], as_index=False, sort=False).agg(agg)[cols]


def _partial(rows: pa.Table, column: str, empty: float) -> np.ndarray:
    """A float partial of the JVM's combined rows, ``empty`` where null or where the plan did not compute it."""
    if column not in rows.column_names:
        return np.full(rows.num_rows, empty)
    return pc.fill_null(pc.cast(rows.column(column), pa.float64()), empty).to_numpy()


@dataclass(frozen=True)
class _Task:
    """The executor side: fold one partition's rows into its key groups' state (picklable)."""

    spec: KeyedSpec
    directory: str
    batch_id: int
    watermark_us: int
    routing: tuple[int, ...]
    previous_batch: int | None
    history: tuple[tuple[int, tuple[int, ...], int], ...]
    bases: tuple[int, ...] = ()  # per key group, the batch of its newest snapshot (−1: none)

    def __call__(self, batches):
        from pyspark import TaskContext

        acknowledge_promptly()  # before the first read: the JVM's first batch waits on our ACK
        # never empty: the driver adds one marker row per partition
        out = self.run(TaskContext.get().partitionId(), pa.Table.from_batches(list(batches)))
        freeze_worker_heap()
        yield out

    def run(self, partition: int, rows: pa.Table, cache: StateCache | None = None) -> pa.RecordBatch:
        """Partition ``partition``'s output for this batch; ``cache`` is this worker's (the process's by default)."""
        started = time.perf_counter()
        cache = CACHE if cache is None else cache
        spec = self.spec
        log = cache.log(self.directory)
        rows = rows.filter(pc.greater_equal(rows.column("kg"), 0))  # the driver's marker rows have kg −1
        fresh = batch_partials(rows, spec)
        groups = [g for g, p in enumerate(self.routing) if p == partition]
        history = {b: Version(r, w) for b, r, w in self.history}
        key_dtype = object if spec.key_type == "string" else np.int64
        bases = {g: b for g, b in enumerate(self.bases)}
        read_before = cache.io.bytes_read
        cache.last = {"cached": [], "caught_up": [], "rebuilt": []}
        # one read per file for every group that catches up or is rebuilt (a swap of Python workers)
        log.prefetch(cache.reads(log, groups, self.previous_batch, history, bases))
        states = {
            g: cache.acquire(log, g, self.previous_batch, history, spec.window_us, key_dtype, bases.get(g, -1))
            for g in groups
        }
        bytes_read = cache.io.bytes_read - read_before
        loaded = time.perf_counter()
        for state in states.values():
            # the fold changes the tables in place: until the changelog is on disk they are at no version,
            # so a retry of this task on this worker rebuilds instead of folding the batch in twice
            state.version = state.token = None
        changed = fold(states, fresh, spec.aggregate.fn == "min")
        key_type = spec.arrow_key_type
        per_group = {g: rows_table(g, parts, key_type, slots) for g, parts, slots in changed}
        changes = pa.concat_tables([per_group[g] for g in sorted(per_group)]) if per_group else None
        if changes is None:
            changes = state_schema(key_type).empty_table()
        if spec.window is None:
            emit = changes
        else:
            closed = [rows_table(g, states[g].close(self.watermark_us, spec.window_us), key_type) for g in groups]
            emit = pa.concat_tables(closed) if closed else state_schema(key_type).empty_table()
        kg = pd.Series(rows.column("kg").to_numpy())
        if "rows" in rows.column_names:  # partials: records per key were counted in the JVM
            counted = pd.Series(rows.column("rows").to_numpy()).groupby(kg).sum()
        else:
            counted = kg.value_counts()
        # the file holds every group's changes, and the whole state (a snapshot) of the groups due one — except,
        # unwindowed, a group whose every row the batch changed: its changes are its whole state already
        snapshots, full = [], []
        for g in groups:
            state, n = states[g], per_group[g].num_rows if g in per_group else 0
            state.log_rows += n
            state.log_versions += 1
            if not (spec.window is None and n and n == state.rows):
                if not snapshot_due(state, spec.snapshot_factor, spec.max_log_versions, spec.min_log_versions):
                    continue
                snapshots.append(state.to_arrow(key_type))
            full.append(g)
            state.base_rows, state.log_rows, state.log_versions = state.rows, 0, 0
        meta = {
            "bytes_read": bytes_read,
            "load_s": round(loaded - started, 4),  # input to pandas, partials, state acquired
            "fold_s": round(time.perf_counter() - loaded, 4),
            "group_rows": {str(g): int(n) for g, n in counted.items()},
            "keys": len(fresh),
            "full": full,
            **{k: sorted(v) for k, v in cache.last.items()},
        }
        snapshot_rows = pa.concat_tables(snapshots) if snapshots else None
        token = log.write_changelog(self.batch_id, partition, changes, snapshot_rows, meta)
        for state in states.values():
            state.version, state.token = self.batch_id, token
        return self._output(emit)

    def _output(self, emit: pa.Table) -> pa.RecordBatch:
        fn = self.spec.aggregate.fn
        n = emit.column("n").to_numpy()
        s = emit.column("s").to_numpy()
        m = emit.column("m").to_numpy()
        with np.errstate(invalid="ignore", divide="ignore"):
            value = {"count": n, "sum": s, "avg": s / n, "min": m, "max": m}[fn]
        ts = pa.timestamp("us", tz="UTC")
        cols: list[pa.Array] = []
        if self.spec.window is not None:
            ws = emit.column("ws").to_numpy()
            end = ws + self.spec.window_us
            cols += [pa.array(ws, type=ts), pa.array(end, type=ts)]
            event_time = end
        else:
            event_time = emit.column("et").to_numpy()
        cols += [emit.column("key").combine_chunks(), pa.array(value), pa.array(event_time, type=ts)]
        return pa.RecordBatch.from_arrays(cols, schema=self.spec.output_schema())


def _explode_windows(base: pd.DataFrame, window: WindowSpec) -> pd.DataFrame:
    """One row per (record, window containing it), windows aligned to the epoch as Spark's ``window()``."""
    size = round(window.size_s * US)
    slide = round((window.slide_s or window.size_s) * US)
    last = base["et"].to_numpy() - np.mod(base["et"].to_numpy(), slide)
    copies = []
    for j in range(-(-size // slide)):
        start = last - j * slide
        inside = start + size > base["et"].to_numpy()
        copies.append(base[inside].assign(ws=start[inside]))
    return pd.concat(copies, ignore_index=True)
