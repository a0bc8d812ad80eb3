"""Streaming sources: Strata's synthetic source as a Python data source, and Spark's file sources.

``strata-generator`` is a PySpark Data Source (``pyspark.sql.datasource``)
whose rows are a pure function of their offsets (:mod:`strata.model.inputs`):
offsets are ``{"row": i, "epoch": e}`` and any offset range replays the same
rows, which is what makes the pipelines exactly once.

Clocks: with ``clock=wall`` (the default) a record is available once its event
time has passed (epoch + t ≤ now), so the source offers the spec's rate in
real time; ``clock=virtual`` makes every record up to ``end_s`` available at
once (tests, benchmarks). The epoch is fixed by the first offset and carried in
every offset, so a query restarted from its checkpoint regenerates the same
event times.

Rate caps (admission control). Spark calls ``latestOffset(start, limit)`` in a
Python planner process of its own, not in the driver's interpreter, so a
controller cannot reach the reader object. The cap therefore travels through a
small JSON file, the *control file* (option ``control_file``), that
:class:`RateCap` writes atomically and the reader re-reads whenever its mtime
changes: ``{"max_rows_per_batch": N}`` caps each micro-batch at N rows, ``0``
pauses the source (no new batch is planned), ``null`` lifts the cap. The cap
is applied on top of Spark's ``ReadLimit``: the source honours
``ReadMaxRows`` from ``getDefaultReadLimit`` (option ``max_rows_per_batch``)
and the control file, whichever is smaller; under ``ReadAllAvailable`` only
the control file applies.

Task sizes: ``{"max_rows_per_task": R}`` in the same file splits each batch
into more input partitions, a multiple of ``partitions`` (so every core gets
as many), each of at most R rows; ``null`` or absent: ``partitions`` splits.
Spark cannot preempt a task, so shorter tasks are how a latency-critical
batch gets a core sooner beside a heavy one, without reading less
(:class:`strata.control.micro_batches.BatchSizing`).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from strata.model.inputs import Timeline, Workload, record_columns
from strata.spark.worker_heap import freeze_worker_heap

NAME = "strata-generator"
SCHEMA = "id LONG, event_time TIMESTAMP, key LONG, value DOUBLE"
ARROW_SCHEMA = pa.schema(
    [("id", pa.int64()), ("event_time", pa.timestamp("us", tz="UTC")), ("key", pa.int64()), ("value", pa.float64())]
)


class RateCap:
    """The control file of one source: the controller's side of the rate-cap channel."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def set(self, max_rows_per_batch: int | None) -> None:
        """Cap rows per micro-batch (None lifts the cap, 0 pauses); atomic for the reader."""
        self._write("max_rows_per_batch", max_rows_per_batch, least=0)

    def split(self, max_rows_per_task: int | None) -> None:
        """At most this many rows (≥ 1) in one input partition of a batch (None: the source's own split)."""
        self._write("max_rows_per_task", max_rows_per_task, least=1)

    def get(self) -> int | None:
        """The cap now in force (None when there is no file or no cap)."""
        return self._read("max_rows_per_batch")

    def task_rows(self) -> int | None:
        """The rows per task now in force (None when there is no file or no bound)."""
        return self._read("max_rows_per_task")

    def _read(self, key: str) -> int | None:
        value = self._values().get(key)
        return None if value is None else int(value)

    def _values(self) -> dict:
        try:
            return json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}

    def _write(self, key: str, value: int | None, least: int) -> None:
        """The file with ``key`` set to ``value`` (None, or at least ``least``) and the other entries kept (only
        the driver writes it)."""
        if value is not None and value < least:
            raise ValueError(f"{key} must be ≥ {least} or None; got {value}")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps({**self._values(), key: value}))
        os.replace(tmp, self.path)


@dataclass(frozen=True)
class RowRange(InputPartition):
    """Records [lo, hi) of one micro-batch split, with the ticks they fall in."""

    lo: int
    hi: int
    epoch: float
    segments: tuple[tuple[int, int, int], ...]


def task_splits(rows: int, splits: int, max_rows_per_task: int | None) -> int:
    """Input partitions for a batch of ``rows``: ``splits``, or the least multiple of it whose partitions hold at
    most ``max_rows_per_task`` rows each."""
    if not max_rows_per_task:
        return splits
    return splits * max(1, math.ceil(rows / (max_rows_per_task * splits)))


class SyntheticSource(DataSource):
    """``spark.readStream.format("strata-generator").option("spec", SourceSpec JSON)``.

    Options: ``spec`` (required), ``clock`` (wall|virtual), ``end_s`` (event-time
    bound; the source is finite), ``epoch`` (unix seconds; default: when the
    query first starts), ``tick_s`` (0.1), ``partitions`` (input splits per
    batch, 2), ``max_rows_per_batch``, ``control_file``.
    """

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema) -> SyntheticStreamReader:
        return SyntheticStreamReader(dict(self.options))


class SyntheticStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Plans row ranges in Spark's Python planner process; reads them in executors."""

    def __init__(self, options: dict[str, str]):
        self.spec = Workload.of(json.loads(options["spec"]))
        self.tick_s = float(options.get("tick_s", 0.1))
        self.clock = options.get("clock", "wall")
        self.end_s = float(options["end_s"]) if options.get("end_s") else None
        self.epoch = float(options["epoch"]) if options.get("epoch") else None
        self.splits = max(1, int(options.get("partitions", 2)))
        cap = options.get("max_rows_per_batch")
        self.default_cap = int(cap) if cap else None
        self.start_row = int(options.get("start_row", 0))
        self.cap = RateCap(options["control_file"]) if options.get("control_file") else None
        self.timeline = Timeline(self.spec, self.tick_s)
        self.frozen_now: float | None = None
        self.seen_epoch: float | None = None
        if self.clock not in ("wall", "virtual"):
            raise ValueError(f"clock must be 'wall' or 'virtual'; got {self.clock!r}")
        if self.clock == "virtual" and self.end_s is None:
            raise ValueError("a virtual clock needs end_s (otherwise the source is infinite at once)")

    def _available(self, epoch: float) -> int:
        """Records available now (or at the available-now target time): whole ticks past (wall), up to end_s."""
        limits = []
        if self.clock == "wall":
            now = self.frozen_now if self.frozen_now is not None else time.time()
            limits.append(int((now - epoch) / self.tick_s))
        if self.end_s is not None:
            limits.append(round(self.end_s / self.tick_s))
        return self.timeline.rows_before_tick(max(0, min(limits)))

    def initialOffset(self) -> dict:
        return {"row": self.start_row, "epoch": self.epoch if self.epoch is not None else time.time()}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.default_cap) if self.default_cap else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Freeze "now": the query ends once everything that had happened by this moment is read."""
        self.frozen_now = time.time()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        epoch = self.seen_epoch = float(start["epoch"])
        end = self._available(epoch)
        caps = [
            c
            for c in (self.cap.get() if self.cap else None, limit.max_rows if isinstance(limit, ReadMaxRows) else None)
            if c is not None
        ]
        if caps:
            end = min(end, start["row"] + min(caps))
        return {"row": max(end, start["row"]), "epoch": epoch}

    def reportLatestOffset(self) -> dict | None:
        """What is available now, regardless of caps: the backlog is this minus the end offset."""
        if self.seen_epoch is None:
            return None
        return {"row": self._available(self.seen_epoch), "epoch": self.seen_epoch}

    def partitions(self, start: dict, end: dict) -> list[RowRange]:
        lo, hi, epoch = int(start["row"]), int(end["row"]), float(end["epoch"])
        if hi <= lo:
            return []
        bounds = np.linspace(lo, hi, task_splits(hi - lo, self.splits, self.cap.task_rows() if self.cap else None) + 1)
        bounds = bounds.astype(np.int64)
        out = []
        for a, b in itertools.pairwise(bounds):
            if b > a:
                out.append(RowRange(int(a), int(b), epoch, tuple(self.timeline.segments(int(a), int(b)))))
        return out

    def read(self, partition: RowRange):
        """The partition's records, in a Python worker; the worker's heap frozen once its modules are loaded
        (:func:`~strata.spark.worker_heap.freeze_worker_heap`: else PySpark's full collection after every task costs
        each task some 50 ms of CPU, issue 28)."""
        cols = record_columns(self.spec, self.tick_s, list(partition.segments), partition.lo, partition.hi)
        micros = np.round((partition.epoch + cols["t"]) * 1e6).astype(np.int64)
        batch = pa.RecordBatch.from_arrays(
            [
                pa.array(cols["id"]),
                pa.array(micros, type=pa.timestamp("us", tz="UTC")),
                pa.array(cols["key"]),
                pa.array(cols["value"]),
            ],
            schema=ARROW_SCHEMA,
        )
        freeze_worker_heap()
        yield batch

    def commit(self, end: dict) -> None:
        """Nothing to release: rows are regenerated from offsets on demand."""


class LoggedBatches:
    """A generated source's batches as the source itself reported them: Spark writes each batch's end offset
    (``{"row", "epoch"}``) to the query's offset log before the batch runs, and the previous batch's end is its
    start (``start_row`` for the first batch of a query segment). Rows are a pure function of offsets, so the
    batch's size and its oldest record's event time follow without reading a row: what the dispatch gate prices a
    pending batch by, as it prices a file batch by the files Spark logged into it (:mod:`strata.spark.files`)."""

    def __init__(self, spec, tick_s: float, checkpoint: str | Path, start_row: int = 0) -> None:
        self.timeline = Timeline(Workload.of(spec), tick_s)
        self.tick_s = tick_s
        self.offsets = Path(checkpoint) / "offsets"
        self.start_row = start_row

    def batch(self, batch_id: int) -> tuple[float | None, int]:
        """Batch ``batch_id``'s oldest record's event time (unix seconds) and its rows; (None, 0) before Spark
        logged its offsets."""
        end = self._logged(batch_id)
        if end is None:
            return None, 0
        before = self._logged(batch_id - 1) if batch_id > 0 else None
        start = int(before["row"]) if before is not None else self.start_row
        oldest = float(end["epoch"]) + self.timeline.tick_of_row(start) * self.tick_s
        return oldest, max(0, int(end["row"]) - start)

    def _logged(self, batch_id: int) -> dict | None:
        """The source's end offset of ``batch_id`` in the offset log (its last line: this query's one source)."""
        try:
            lines = (self.offsets / str(batch_id)).read_text().splitlines()
        except FileNotFoundError:
            return None
        return json.loads(lines[-1]) if len(lines) >= 3 else None


def offered_rows(spec, epoch: float, tick_s: float, now: float) -> int:
    """Records a wall-clock generated source offers by ``now``: the latest offset its reader reports."""
    return Timeline(Workload.of(spec), tick_s).rows_before_tick(max(0, int((now - epoch) / tick_s)))


def register(spark) -> None:
    """Make ``format("strata-generator")`` available in ``spark`` (idempotent)."""
    spark.dataSource.register(SyntheticSource)


def synthetic_options(
    spec,
    *,
    clock: str = "wall",
    end_s: float | None = None,
    epoch: float | None = None,
    tick_s: float = 0.1,
    partitions: int = 2,
    max_rows_per_batch: int | None = None,
    control_file: str | Path | None = None,
    start_row: int = 0,
) -> dict[str, str]:
    """The reader options for one generated source (a SourceSpec), as strings."""
    opts = {"spec": spec.model_dump_json(), "clock": clock, "tick_s": str(tick_s), "partitions": str(partitions)}
    for key, value in (
        ("end_s", end_s),
        ("epoch", epoch),
        ("max_rows_per_batch", max_rows_per_batch),
        ("control_file", control_file),
        ("start_row", start_row or None),
    ):
        if value is not None:
            opts[key] = str(value)
    return opts


def expected_rows(spec, end_s: float, epoch: float, tick_s: float = 0.1) -> dict[str, np.ndarray]:
    """Every record a finite source (a SourceSpec) emits, computed offline (the reference side of the tests)."""
    spec = Workload.of(spec)
    timeline = Timeline(spec, tick_s)
    hi = timeline.rows_before_tick(round(end_s / tick_s))
    cols = record_columns(spec, tick_s, timeline.segments(0, hi), 0, hi)
    cols["event_time"] = np.round((epoch + cols.pop("t")) * 1e6).astype("datetime64[us]")
    return cols
