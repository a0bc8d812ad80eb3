"""The micro-batch dispatch gate's mechanism on Spark (Cameo on Spark, DESIGN.md; the policy is L2's).

Every streaming query runs its micro-batches one after another on its own
thread; the gate sits at the top of each query's ``foreachBatch`` (a
:class:`~strata.spark.pipelines.BatchHook`), where a batch is planned but none
of its Spark jobs has run yet. Pending batches of all queries wait there until
the gate's policy (a :class:`~strata.protocol.units.BatchGatePolicy`, the
controller injects :class:`strata.dispatch.gate.GateCore`) lets them go.

This module only observes and enforces: it knows each batch's size and oldest
record without running the batch, from what the query's source reported
(:meth:`~strata.spark.pipelines.Pipeline.pending_batch`: a batch over
directories is the files Spark took into it, with their oldest event time and
bytes, :mod:`strata.spark.files`; a generated batch is the offsets Spark logged
for it); a source that reports neither is priced by what arrived since its
previous batch was released and that batch's size. It measures each batch's
duration, blocks the query's thread until its batch is released, and sets the
batch's FAIR pool (``spark.scheduler.pool`` set in the batch's thread applies
to every job of the batch).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

from strata.protocol.units import URGENT_POOL, BatchGatePolicy

__all__ = ["URGENT_POOL", "Gate"]


@dataclass
class _QueryTrack:
    """What the gate remembers of one query between its batches."""

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
        """The query's record (created on its first batch, and again after :meth:`forget`: a restarted
        template's batches are not the old one's, so what the policy learned of those no longer holds)."""
        t = self._tracks.get(pipeline.name)
        if t is None:
            t = self._tracks[pipeline.name] = _QueryTrack()
            with self._cond:
                self.core.forget(pipeline.name, waiting=False)
        return t

    def _learn(self, pipeline, t: _QueryTrack) -> None:
        """Report the previous batch (its rows now in lastProgress) to the policy."""
        progress = pipeline.query.lastProgress if pipeline.query is not None else None
        if not progress or t.last_batch is None or progress["batchId"] != t.last_batch:
            return
        t.last_rows = int(progress["numInputRows"])
        if t.last_duration is not None:
            with self._cond:
                self.core.learn(pipeline.name, t.last_rows, t.last_duration)
        t.last_batch = None

    def pending(self, pipeline, now: float, batch_id: int) -> tuple[float, int]:
        """The pending batch's oldest event time and size, as its source reported them; a source that reports
        neither: the time since the previous batch was released, and that batch's size."""
        t = self.track(pipeline)
        self._learn(pipeline, t)
        oldest, rows = pipeline.pending_batch(batch_id)
        if oldest is not None:
            return oldest, rows
        since = t.last_release if t.last_release is not None else (pipeline.started_at or now)
        return min(since, now), t.last_rows

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
