"""Observation: a StreamingQueryListener turning Spark's progress events into per-batch rows.

Per query and batch: input rows, rates, batch duration and its phases, the
source's offsets (start, end, latest available) and so the backlog in rows,
the watermark and state rows. Sink-side measurements (latency percentiles,
per-partition load of managed keyed operators) come from
:class:`strata.spark.pipelines.Pipeline`; :mod:`strata.spark.measure` writes both.
"""

from __future__ import annotations

import json
import threading
from datetime import datetime

from pyspark.sql.streaming import StreamingQueryListener
from pyspark.sql.streaming.listener import JStreamingQueryListener


def _row_offset(offset: str | dict | None) -> int | None:
    """A source offset as a count of records (a dict or its JSON text), or None where it is not one.

    The synthetic source's ``{"row": n}``; Kafka's ``{"topic": {"partition": offset, ...}, ...}``, whose offsets count
    records per partition, so their sum does too (start, end and latest summed alike: end − start = records
    read, latest − end = records behind). A file source's offset counts batches, not records: None."""
    value = offset
    if isinstance(offset, str):
        try:
            value = json.loads(offset)
        except ValueError:
            return None
    if not isinstance(value, dict):
        return None
    if "row" in value:
        return int(value["row"])
    if value and all(isinstance(parts, dict) for parts in value.values()):
        offsets = [o for parts in value.values() for o in parts.values()]
        if offsets and all(isinstance(o, int) and not isinstance(o, bool) for o in offsets):
            return sum(offsets)
    return None


def _seconds(timestamp: str | None) -> float | None:
    """A progress timestamp (ISO 8601, UTC) as seconds since the Unix epoch."""
    if not timestamp:
        return None
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


def progress_row(progress: dict) -> dict:
    """One flat row from a StreamingQueryProgress (as its JSON dict)."""
    source = (progress.get("sources") or [{}])[0]
    start, end = _row_offset(source.get("startOffset")), _row_offset(source.get("endOffset"))
    latest = _row_offset(source.get("latestOffset"))
    durations = progress.get("durationMs") or {}
    state = progress.get("stateOperators") or []
    return {
        "query": progress.get("name"),
        "id": progress.get("id"),
        "t": _seconds(progress.get("timestamp")),
        "batch_id": progress.get("batchId"),
        "timestamp": progress.get("timestamp"),
        "input_rows": progress.get("numInputRows"),
        "input_rows_per_s": progress.get("inputRowsPerSecond"),
        "processed_rows_per_s": progress.get("processedRowsPerSecond"),
        "batch_ms": durations.get("triggerExecution"),
        "add_batch_ms": durations.get("addBatch"),
        "plan_ms": durations.get("queryPlanning"),
        "latest_offset_ms": durations.get("latestOffset"),
        "start_row": start,
        "end_row": end,
        "latest_row": latest,
        "backlog_rows": None if latest is None or end is None else max(0, latest - end),
        "watermark": (progress.get("eventTime") or {}).get("watermark"),
        "state_rows": sum(op.get("numRowsTotal", 0) for op in state) if state else None,
    }


class _JsonProgress(JStreamingQueryListener):
    """The JVM's side of :class:`ProgressListener`: a progress event read as its JSON text, two py4j calls.

    PySpark's own (``QueryProgressEvent.fromJObject``) reads every field of the progress, of each source, sink
    and state operator and of each metrics map with a py4j call of its own (591 for a windowed count, 79 ms:
    bench_progress_events.py), on the listener bus's one thread. In a cell with a small CPU share and five
    queries, the events fell behind the batches until the last 20 s of the run's progress never reached the
    driver (bench_platform, ``strata-cells``: 40 of 89 batches, 27 Nov). Started and
    terminated events are rare and keep PySpark's.
    """

    def onQueryProgress(self, jevent) -> None:
        self.pylistener.on_progress(json.loads(jevent.progress().json()))


class ProgressListener(StreamingQueryListener):
    """Collects progress rows and terminations of every query of the session.

    Events arrive once per batch on the listener bus; polling ``recentProgress`` instead costs one py4j
    call per retained batch on every observation, in the driver the batches' callbacks also need.
    """

    @property
    def _jlistener(self):
        """PySpark's wrapper around :class:`_JsonProgress` (in place of its field-by-field progress events)."""
        from pyspark import SparkContext

        if not hasattr(self, "_jlistenerobj"):
            self._jlistenerobj = SparkContext._jvm.PythonStreamingQueryListenerWrapper(_JsonProgress(self))
        return self._jlistenerobj

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ended = threading.Condition(self._lock)
        self.rows: list[dict] = []
        self.terminated: dict[str, str | None] = {}
        self.names: dict[str, str] = {}
        self._inputs: dict[str, dict[int, int]] = {}  # query id → batch id → input rows
        self._durations: dict[str, dict[int, float]] = {}  # query id → batch id → trigger execution (ms)
        self._offsets: dict[str, list[tuple[float, int]]] = {}  # query id → (trigger time, source's latest row)

    def onQueryStarted(self, event) -> None:
        with self._lock:
            self.names[str(event.runId)] = event.name

    def onQueryProgress(self, event) -> None:
        self.on_progress(json.loads(event.progress.json))

    def on_progress(self, progress: dict) -> None:
        """One batch's progress, as its JSON dict."""
        row = progress_row(progress)
        with self._lock:
            self.rows.append(row)
            self._inputs.setdefault(str(row["id"]), {})[int(row["batch_id"])] = int(row["input_rows"] or 0)
            if row["batch_ms"] is not None:
                self._durations.setdefault(str(row["id"]), {})[int(row["batch_id"])] = float(row["batch_ms"])
            if row["t"] is not None and row["latest_row"] is not None:
                self._offsets.setdefault(str(row["id"]), []).append((row["t"], row["latest_row"]))

    def onQueryIdle(self, event) -> None:
        """Idle triggers carry no batch."""

    def onQueryTerminated(self, event) -> None:
        """Keyed by run id: a query restarted from its checkpoint keeps its id but gets a new run id."""
        with self._ended:
            self.terminated[str(event.runId)] = event.exception
            self._ended.notify_all()

    def wait_terminated(self, run_id: str, timeout_s: float = 30.0) -> bool:
        """Wait until the listener bus delivered a run's termination (so all its progress events too)."""
        with self._ended:
            return self._ended.wait_for(lambda: str(run_id) in self.terminated, timeout_s)

    def of(self, query) -> dict[int, int]:
        """Batch id → input rows of the query's committed batches so far (a query keeps its id across restarts)."""
        with self._lock:
            return dict(self._inputs.get(str(query.id), {}))

    def durations(self, query) -> dict[int, float]:
        """Batch id → milliseconds Spark's trigger took for it (planning, the batch's jobs, commit): the driver's
        part of a batch is this less its tasks' time."""
        with self._lock:
            return dict(self._durations.get(str(query.id), {}))

    def offered(self, query, now: float) -> tuple[float | None, int | None]:
        """(records/s the source offered, its latest offset) from the query's last two progress events up to ``now``.

        A source that reports its latest available offset (``reportLatestOffset``: the synthetic source; Kafka's
        offsets would serve the same way) tells what arrived whether or not the query read it; a source that
        does not (files) gives (None, None). A source that has offered nothing yet is unobserved, not idle.
        """
        with self._lock:
            seen = [s for s in self._offsets.get(str(query.id), ()) if s[0] <= now][-2:]
        if not seen:
            return None, None
        latest = seen[-1][1]
        if len(seen) < 2 or seen[-1][0] <= seen[0][0] or latest <= 0:
            return None, latest
        return (latest - seen[0][1]) / (seen[-1][0] - seen[0][0]), latest

    def snapshot(self) -> list[dict]:
        with self._lock:
            return list(self.rows)

    def latest(self, query: str) -> dict | None:
        with self._lock:
            for row in reversed(self.rows):
                if row["query"] == query:
                    return row
        return None
