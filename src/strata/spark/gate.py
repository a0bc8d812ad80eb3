"""The micro-batch dispatch gate's mechanism on Spark (Cameo on Spark, DESIGN.md; the policy is L2's).

Every streaming query runs its micro-batches one after another on its own
thread; the gate sits at the top of each query's ``foreachBatch`` (a
:class:`~strata.spark.pipelines.BatchHook`), where a batch is planned but none
of its Spark jobs has run yet. Pending batches of all queries wait there until
the gate's policy (a :class:`~strata.protocol.units.BatchGatePolicy`, the
controller injects :class:`strata.dispatch.gate.GateCore`) lets them go.

This module only observes and enforces: it knows each batch's size and oldest
record without running the batch — the generator's record i has a pure-function
event time and the batch starts where the previous one ended; a user query's
batch over directories is the files Spark took into it (its checkpoint's file
log), with their oldest event time and bytes (:mod:`strata.spark.files`); any
other source is priced by what arrived since its previous batch was released
and that batch's size — measures each batch's duration, blocks the query's thread until its batch is released, and
sets the batch's FAIR pool (``spark.scheduler.pool`` set in the batch's thread
applies to every job of the batch).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

from strata.model.inputs import Timeline, Workload
from strata.protocol.units import URGENT_POOL, BatchGatePolicy
from strata.spark.user import UserPipeline

__all__ = ["URGENT_POOL", "Gate"]


@dataclass
class _QueryTrack:
    """What the gate remembers of one query between its batches."""

    timeline: Timeline | None
    epoch: float
    tick_s: float
    start_row: int = 0
    last_duration: float | None = None
    last_batch: int | None = None
    last_release: float | None = None
    last_rows: int = 0


class Gate:
    """The :class:`~strata.spark.pipelines.BatchHook` that enforces L2 dispatch on Spark.

    ``policy`` decides which batch goes and in which pool (:class:`strata.dispatch.gate.GateCore`);
    ``base_pools`` (job → pool) is L0's cpu share, written by the engine adapter;
    ``on_release`` receives one row per released batch (for the metrics tables).
    """

    def __init__(
        self,
        policy: BatchGatePolicy,
        clock: Callable[[], float] = time.time,
        on_release: Callable[[dict], None] | None = None,
    ) -> None:
        self.core = policy
        self.clock = clock
        self.base_pools: dict[str, str] = {}
        self.on_release = on_release
        self._cond = threading.Condition()
        self._tracks: dict[str, _QueryTrack] = {}

    @property
    def strategy(self) -> str:
        """The dispatch strategy the policy orders batches by."""
        return self.core.strategy

    def use(self, strategy: str) -> None:
        """Switch the policy's dispatch strategy for the next batches (the meta level's decision)."""
        with self._cond:
            self.core.use(strategy)
            self._cond.notify_all()

    # -------------------------------------------------------------- bookkeeping per query

    def track(self, pipeline) -> _QueryTrack:
        """The query's record (created on its first batch; a restarted template starts from its start row,
        and what the policy learned of the old template's batches no longer holds)."""
        t = self._tracks.get(pipeline.name)
        user = isinstance(pipeline, UserPipeline)
        workload = None if user else Workload.of(pipeline.chain[0].source)
        if t is None or (t.timeline.spec if t.timeline is not None else None) != workload:
            o = pipeline.options
            timeline = None if user else Timeline(workload, o.tick_s)
            t = _QueryTrack(timeline, float(o.epoch or 0.0), o.tick_s, start_row=o.start_row)
            self._tracks[pipeline.name] = t
            with self._cond:
                self.core.forget(pipeline.name, waiting=False)
        return t

    def _learn(self, pipeline, t: _QueryTrack) -> None:
        """Report the previous batch (its rows now in lastProgress) to the policy; move the start row."""
        progress = pipeline.query.lastProgress if pipeline.query is not None else None
        if not progress or t.last_batch is None or progress["batchId"] != t.last_batch:
            return
        end = (progress["sources"] or [{}])[0].get("endOffset")
        if isinstance(end, str):
            import json

            end = json.loads(end)
        if isinstance(end, dict) and "row" in end:
            t.start_row = int(end["row"])
        t.last_rows = int(progress["numInputRows"])
        if t.last_duration is not None:
            with self._cond:
                self.core.learn(pipeline.name, t.last_rows, t.last_duration)
        t.last_batch = None

    def pending(self, pipeline, now: float, batch_id: int) -> tuple[float, int]:
        """The pending batch's oldest event time and size (estimated from what the source has available)."""
        t = self.track(pipeline)
        self._learn(pipeline, t)
        if t.timeline is None:
            oldest, rows = pipeline.probe.batch(batch_id) if pipeline.probe is not None else (None, 0)
            if oldest is not None:
                return oldest, rows
            since = t.last_release if t.last_release is not None else (pipeline.started_at or now)
            return min(since, now), t.last_rows
        first = t.timeline.tick_of_row(t.start_row)
        oldest = t.epoch + first * t.tick_s
        available = t.timeline.rows_before_tick(max(0, int((now - t.epoch) / t.tick_s)))
        cap = pipeline.rate_cap.get() if pipeline.rate_cap is not None else None
        size = max(0, available - t.start_row)
        if cap is not None:
            size = min(size, cap)
        return oldest, size

    # -------------------------------------------------------------- the hook

    def before(self, pipeline, batch_id: int) -> None:
        name = pipeline.name
        now = self.clock()
        oldest, size = self.pending(pipeline, now, batch_id)
        with self._cond:
            self.core.arrive(name, pipeline.job, pipeline.template.name, oldest, size, now)
            while self.core.next_release(self.clock()) != name:
                self._cond.wait(timeout=0.05)
            released = self.clock()
            decision = self.core.release(name, self.base_pools.get(name), released)
        pipeline.spark.sparkContext.setLocalProperty("spark.scheduler.pool", decision.pool)
        self._tracks[name].last_batch = batch_id
        self._tracks[name].last_release = released
        if self.on_release is not None:
            self.on_release(
                {"query": name, "batch_id": batch_id, "arrived": now, "released": released, **asdict(decision)}
            )

    def after(self, pipeline, record: dict) -> None:
        t = self._tracks.get(pipeline.name)
        if t is not None:
            t.last_duration = record["finished"] - record["released"]
        with self._cond:
            self.core.finish(pipeline.name)
            self._cond.notify_all()

    def forget(self, job: str) -> None:
        """A query stopped (or switched template): drop its record and any slot it held."""
        with self._cond:
            self.core.forget(job)
            self._tracks.pop(job, None)
            self._cond.notify_all()
