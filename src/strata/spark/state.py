"""Keyed state that can move: a Strata-managed store for rebalanced keyed operators.

Spark's own state store is partitioned by a hash of the grouping key that is
fixed for the life of a query, so the balancer (AutoFlow, L1) cannot move a hot
key group while the query runs. Keyed operators that Strata rebalances keep
their state here instead, and run inside ``foreachBatch``:

1. key → key group ``g = pmod(xxhash64(key), G)``; key group → partition
   ``p = routing[g]``, the routing table in force for this micro-batch.
2. A small aggregate of the batch gives rows and the newest event time per key
   group (the load the balancer needs) and the new watermark.
3. Rows are shuffled so that partition p is exactly Spark task p (a slot value
   whose Murmur3 hash lands on p is looked up once), plus one marker row per
   partition so every task runs even without rows.
4. Task p loads the state of its key groups from the snapshot files named by the
   previous batch's manifest — whichever partition wrote them — folds the batch
   in, emits results, and writes a snapshot of its key groups for this batch
   (``v=<batch>/part=<p>.parquet``, written to a temporary name and renamed).
5. After the sink has written the batch's output, the driver writes
   ``manifests/<batch>.json`` (batch, watermark, routing); older versions than
   the previous batch's are deleted.

State is versioned per batch id: batch b reads the newest manifest older than
b, so a replay of b after a crash recomputes identical state and output, and a
routing table changed between batches moves a key group's state with it (the
next owner reads the group's last snapshot) with no query restart. The batch
boundary is the barrier AutoFlow's markers provide in a record-at-a-time engine.

Cost: every batch re-reads and re-writes the snapshots of all key groups (state
size × 2 of local I/O per batch), plus one extra small Spark job (step 2) and
a shuffle of the batch. Moving a key group costs nothing beyond that, because
every batch already reads state from the shared directory; on a multi-machine
cluster the directory must be on a shared file system. Windows follow Spark's
append mode: a window is emitted once, when its end ≤ watermark = newest event
time seen − ``watermark_s`` (here including the current batch).
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from strata.model import AggregateSpec, WindowSpec

US = 1_000_000


@dataclass(frozen=True)
class KeyedSpec:
    """What a managed keyed operator computes: an aggregate per key (per window when windowed)."""

    aggregate: AggregateSpec
    window: WindowSpec | None
    key_groups: int
    partitions: int

    @property
    def out_column(self) -> str:
        return self.aggregate.fn

    def output_schema(self) -> pa.Schema:
        agg = pa.int64() if self.aggregate.fn == "count" else pa.float64()
        ts = pa.timestamp("us", tz="UTC")
        cols = [("window_start", ts), ("window_end", ts)] if self.window else []
        return pa.schema([*cols, ("key", pa.int64()), (self.out_column, agg), ("event_time", ts)])

    def spark_output_schema(self) -> str:
        agg = "LONG" if self.aggregate.fn == "count" else "DOUBLE"
        win = "window_start TIMESTAMP, window_end TIMESTAMP, " if self.window else ""
        return f"{win}key LONG, {self.out_column} {agg}, event_time TIMESTAMP"


@dataclass(frozen=True)
class BatchPlan:
    """What the driver decided for one batch before running it (and commits after the sink wrote)."""

    batch_id: int
    watermark_us: int
    routing: tuple[int, ...]
    partitions: int
    group_rows: dict[int, int]
    previous: dict | None

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

    def __post_init__(self) -> None:
        self.directory = Path(self.directory)
        (self.directory / "manifests").mkdir(parents=True, exist_ok=True)
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

    # ------------------------------------------------------------------ per batch

    def _manifests(self) -> list[int]:
        return sorted(int(p.stem) for p in (self.directory / "manifests").glob("*.json"))

    def _previous(self, batch_id: int) -> dict | None:
        older = [b for b in self._manifests() if b < batch_id]
        if not older:
            return None
        return json.loads((self.directory / "manifests" / f"{older[-1]}.json").read_text())

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

    def prepare(self, df, batch_id: int):
        """The batch's output DataFrame (evaluate it exactly once) and the plan to commit afterwards."""
        from pyspark.sql import functions as F

        spec = self.spec
        with self._lock:
            routing = self._routing
        previous = self._previous(batch_id)
        slots = self._slot_values(df.sparkSession)
        col = spec.aggregate.column
        keyed = df.select(
            F.pmod(F.xxhash64("key"), F.lit(spec.key_groups)).cast("int").alias("kg"),
            F.col("key").cast("long").alias("key"),
            F.col("event_time"),
            F.col(col).cast("double").alias("x"),
        )
        stats = keyed.groupBy("kg").agg(F.count(F.lit(1)).alias("n"), F.max("event_time").alias("t")).collect()
        group_rows = {int(r["kg"]): int(r["n"]) for r in stats}
        newest = max((r["t"] for r in stats if r["t"] is not None), default=None)
        watermark = previous["watermark_us"] if previous else -(2**62)
        if newest is not None and spec.window is not None:
            newest_us = round(newest.timestamp() * US)
            watermark = max(watermark, newest_us - round(spec.window.watermark_s * US))
        plan = BatchPlan(batch_id, watermark, routing, spec.partitions, group_rows, previous)
        # long, as in _slot_values: an int literal hashes differently and lands rows on the wrong task
        slot_of_group = F.array(*[F.lit(slots[p]).cast("long") for p in routing])
        rows = keyed.withColumn("slot", F.element_at(slot_of_group, F.col("kg") + 1)).withColumn("marker", F.lit(False))
        markers = df.sparkSession.createDataFrame(
            [(-1, 0, None, None, slots[p], True) for p in range(spec.partitions)], rows.schema
        )
        task = _Task(
            spec,
            str(self.directory),
            plan.batch_id,
            plan.watermark_us,
            routing,
            previous["batch"] if previous else None,
            tuple(previous["routing"]) if previous else (),
        )
        out = (
            rows.unionByName(markers).repartition(spec.partitions, "slot").mapInArrow(task, spec.spark_output_schema())
        )
        return out, plan

    def commit(self, plan: BatchPlan) -> None:
        """Record the batch's snapshot set (after its output was written); drop versions no replay needs."""
        manifest = {"batch": plan.batch_id, "watermark_us": plan.watermark_us, "routing": list(plan.routing)}
        path = self.directory / "manifests" / f"{plan.batch_id}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(manifest))
        os.replace(tmp, path)
        keep = plan.previous["batch"] if plan.previous else plan.batch_id
        for b in self._manifests():
            if b < keep:
                (self.directory / "manifests" / f"{b}.json").unlink(missing_ok=True)
        for version in self.directory.glob("v=*"):
            if int(version.name[2:]) < keep:
                for f in version.iterdir():
                    f.unlink()
                version.rmdir()


@dataclass(frozen=True)
class _Task:
    """The executor side: fold one partition's rows into its key groups' state (picklable)."""

    spec: KeyedSpec
    directory: str
    batch_id: int
    watermark_us: int
    routing: tuple[int, ...]
    previous_batch: int | None
    previous_routing: tuple[int, ...]

    def __call__(self, batches):
        from pyspark import TaskContext

        me = TaskContext.get().partitionId()
        groups = {g for g, p in enumerate(self.routing) if p == me}
        # never empty: the driver adds one marker row per partition
        rows = pa.Table.from_batches(list(batches)).to_pandas()
        rows = rows[~rows["marker"].astype(bool)]
        state = self._load(groups)
        fresh = self._accumulate(rows)
        merged = self._merge(state, fresh)
        if self.spec.window is not None:
            size_us = round(self.spec.window.size_s * US)
            due = merged["ws"] + size_us <= self.watermark_us
            emit, keep = merged[due], merged[~due]
        else:
            emit = merged.merge(fresh[["kg", "key"]].drop_duplicates(), on=["kg", "key"])
            keep = merged
        self._save(me, keep)
        yield self._output(emit)

    # -- state rows: kg, key, ws (window start µs; 0 when unwindowed), n, s, m, et (newest event time µs)

    def _load(self, groups: set[int]) -> pd.DataFrame:
        parts = []
        if self.previous_batch is not None:
            owners = {self.previous_routing[g] for g in groups}
            for p in sorted(owners):
                t = pq.read_table(Path(self.directory) / f"v={self.previous_batch}" / f"part={p}.parquet")
                df = t.to_pandas()
                parts.append(df[df["kg"].isin(groups)])
        return pd.concat(parts, ignore_index=True) if parts else _empty_state()

    def _accumulate(self, rows: pd.DataFrame) -> pd.DataFrame:
        if rows.empty:
            return _empty_state()
        et = rows["event_time"].astype("datetime64[us, UTC]").astype("int64").to_numpy()
        base = pd.DataFrame(
            {
                "kg": rows["kg"].to_numpy(np.int32),
                "key": rows["key"].to_numpy(np.int64),
                "x": rows["x"].to_numpy(np.float64),
                "et": et,
            }
        )
        if self.spec.window is None:
            base["ws"] = np.int64(0)
        else:
            base = _explode_windows(base, self.spec.window)
        valid = base["x"].notna()
        base["n"] = valid.astype(np.int64)
        fn = self.spec.aggregate.fn
        base["s"] = base["x"].where(valid, 0.0)
        base["m"] = base["x"]
        agg = {"n": "sum", "s": "sum", "m": "min" if fn == "min" else "max", "et": "max"}
        return base.groupby(["kg", "key", "ws"], as_index=False).agg(agg)

    def _merge(self, state: pd.DataFrame, fresh: pd.DataFrame) -> pd.DataFrame:
        both = pd.concat([state, fresh], ignore_index=True)
        if both.empty:
            return _empty_state()
        fn = self.spec.aggregate.fn
        agg = {"n": "sum", "s": "sum", "m": "min" if fn == "min" else "max", "et": "max"}
        return both.groupby(["kg", "key", "ws"], as_index=False).agg(agg)

    def _save(self, me: int, keep: pd.DataFrame) -> None:
        out = Path(self.directory) / f"v={self.batch_id}"
        out.mkdir(parents=True, exist_ok=True)
        final = out / f"part={me}.parquet"
        tmp = out / f".part={me}.{os.getpid()}.tmp"
        pq.write_table(pa.Table.from_pandas(keep.astype(_STATE_TYPES), preserve_index=False), tmp)
        os.replace(tmp, final)

    def _output(self, emit: pd.DataFrame) -> pa.RecordBatch:
        fn = self.spec.aggregate.fn
        n, s, m = emit["n"].to_numpy(np.int64), emit["s"].to_numpy(np.float64), emit["m"].to_numpy(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            value = {"count": n, "sum": s, "avg": s / n, "min": m, "max": m}[fn]
        ts = pa.timestamp("us", tz="UTC")
        cols: dict[str, pa.Array] = {}
        if self.spec.window is not None:
            ws = emit["ws"].to_numpy(np.int64)
            end = ws + round(self.spec.window.size_s * US)
            cols["window_start"] = pa.array(ws, type=ts)
            cols["window_end"] = pa.array(end, type=ts)
            event_time = end
        else:
            event_time = emit["et"].to_numpy(np.int64)
        cols["key"] = pa.array(emit["key"].to_numpy(np.int64))
        cols[self.spec.out_column] = pa.array(value)
        cols["event_time"] = pa.array(event_time, type=ts)
        return pa.RecordBatch.from_arrays(list(cols.values()), schema=self.spec.output_schema())


_STATE_TYPES = {
    "kg": "int32",
    "key": "int64",
    "ws": "int64",
    "n": "int64",
    "s": "float64",
    "m": "float64",
    "et": "int64",
}


def _empty_state() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=t) for c, t in _STATE_TYPES.items()})


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
