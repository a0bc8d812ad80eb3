"""L2 dispatch at micro-batch granularity: a gate in ``foreachBatch`` (Cameo on Spark, DESIGN.md).

Every streaming query runs its micro-batches one after another on its own
thread; the gate sits at the top of each query's ``foreachBatch`` (a
:class:`~strata.spark.pipelines.BatchHook`), where a batch is planned but none
of its Spark jobs has run yet. Pending batches of all queries wait there and are
released in the dispatch strategy's order, at most ``max_running`` at once —
except that an urgent batch (below ``urgent_laxity_s`` of slack) never waits
for a slot: batches cannot be preempted, so it goes over the bound into the
urgent pool, whose tasks take the next free cores; and a batch with plenty of
slack (above ``hold_laxity_s``) does not start while an urgent batch runs.

A batch is priced as Cameo prices a message (docs/dispatch.md, "Micro-batches"):

- ``t_MF``: the event time of the batch's oldest record — known without touching
  the data, because the generator's record i has a pure-function event time and
  the batch starts where the previous one ended; for a windowed job, the first
  window firing at or after it (:func:`strata.dispatch.next_due`);
- ``L``: the job's target latency;
- ``C_OM``: a learned batch-cost model per query (:class:`~strata.dispatch.LinearCost`:
  fixed + per-record seconds, fitted on the batches' measured durations).

The batch also gets its FAIR pool here (``spark.scheduler.pool`` set in the
batch's thread applies to every job of the batch): ``urgent`` when its laxity
(deadline − now) is below ``urgent_laxity_s``, else the pool L0's cpu share gave
its job. :class:`GateCore` is the policy over plain numbers (time passed in);
:class:`Gate` is the Spark-side mechanism (threads, clock, offsets).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from strata.dispatch import LinearCost, Strategy, WorkUnit, next_due, strategy
from strata.model import Job, OperatorKind
from strata.spark.workload import Timeline, Workload

URGENT_POOL = "urgent"


@dataclass(frozen=True)
class GateConfig:
    """Knobs of the gate, with their defaults."""

    strategy: str = "cameo"  # a strata.dispatch.STRATEGIES name
    max_running: int = 2  # batches of all queries running at once (Spark tasks still share the cores)
    urgent_laxity_s: float = 1.0  # a batch with less slack than this runs in the urgent pool
    hold_laxity_s: float = 5.0  # a batch with more slack than this waits while an urgent batch runs (0: never)
    cost_decay: float = 0.9  # LinearCost's weight per older batch

    def __post_init__(self) -> None:
        if self.max_running < 1:
            raise ValueError(f"max_running must be ≥ 1; got {self.max_running}")
        strategy(self.strategy)  # fails early, naming the choices


@dataclass
class Pending:
    """A batch waiting at the gate: its work unit and the key the strategy gave it on arrival."""

    unit: WorkUnit
    key: float


@dataclass
class GateCore:
    """Which waiting batch goes next, and in which pool: pure policy over plain numbers.

    Keys are computed once, when a batch arrives (stateful strategies such as
    fair share advance their virtual time only at release).
    """

    config: GateConfig = field(default_factory=GateConfig)
    waiting: dict[str, Pending] = field(default_factory=dict)
    running: set[str] = field(default_factory=set)
    urgent_running: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.by: Strategy = strategy(self.config.strategy)

    def arrive(self, unit: WorkUnit) -> None:
        if unit.job in self.waiting or unit.job in self.running:
            raise ValueError(f"query {unit.job!r} already has a batch at the gate")
        self.waiting[unit.job] = Pending(unit, self.by.key(unit))

    def next_release(self, now: float) -> str | None:
        """The job whose batch goes now, or None (nobody waiting, or no slot free and nothing urgent).

        A batch is not preemptible, so an urgent batch (laxity below ``urgent_laxity_s``) does not wait
        for a slot: it is released over the bound, into the urgent pool, whose tasks then take the next
        free cores ahead of the running batches' remaining tasks. For the same reason a batch with slack
        to spare (above ``hold_laxity_s``) is not started while an urgent batch runs: once started it
        would hold cores the urgent batch's tasks need; it waits until then, or until its slack shrinks.
        """
        if not self.waiting:
            return None
        best = min(self.waiting.values(), key=lambda p: (p.key, p.unit.seq))
        slack = self.laxity(best.unit, now)
        if slack < self.config.urgent_laxity_s:
            return best.unit.job
        if len(self.running) >= self.config.max_running:
            return None
        if self.config.hold_laxity_s and slack > self.config.hold_laxity_s and self.urgent_running:
            return None
        return best.unit.job

    @staticmethod
    def laxity(unit: WorkUnit, now: float) -> float:
        """Slack left: the latest start that meets the target (t_MF + L − C_OM − C_path), minus now."""
        return unit.frontier + unit.target_latency - unit.own_cost - unit.path_cost - now

    def release(self, job: str, now: float) -> Pending:
        pending = self.waiting.pop(job)
        self.running.add(job)
        if self.laxity(pending.unit, now) < self.config.urgent_laxity_s:
            self.urgent_running.add(job)
        self.by.started(pending.unit, pending.key)
        return pending

    def finish(self, job: str) -> None:
        self.running.discard(job)
        self.urgent_running.discard(job)

    def pool(self, unit: WorkUnit, base_pool: str | None, now: float) -> str | None:
        """The FAIR pool of a released batch: urgent when its laxity is short, else its job's pool."""
        return URGENT_POOL if self.laxity(unit, now) < self.config.urgent_laxity_s else base_pool


def batch_frontier(job: Job, template_name: str, oldest_event_time: float) -> float:
    """Cameo's t_MF of a batch: its oldest record's event time, or the first window firing at/after it."""
    for op in job.template(template_name).operators:
        if op.kind is OperatorKind.WINDOW_AGGREGATE:
            w = op.window
            return next_due(oldest_event_time, w.size_s, w.slide_s or w.size_s, w.watermark_s)
    return oldest_event_time


@dataclass
class _QueryTrack:
    """What the gate remembers of one query between its batches."""

    timeline: Timeline
    epoch: float
    tick_s: float
    start_row: int = 0
    cost: LinearCost = field(default_factory=LinearCost)
    last_duration: float | None = None
    last_batch: int | None = None


class Gate:
    """The :class:`~strata.spark.pipelines.BatchHook` that enforces L2 dispatch on Spark.

    ``base_pools`` (job → pool) is L0's cpu share, written by the engine adapter;
    ``on_release`` receives one row per released batch (for the metrics tables).
    """

    def __init__(
        self,
        config: GateConfig | None = None,
        clock: Callable[[], float] = time.time,
        on_release: Callable[[dict], None] | None = None,
    ) -> None:
        self.config = config or GateConfig()
        self.core = GateCore(self.config)
        self.clock = clock
        self.base_pools: dict[str, str] = {}
        self.on_release = on_release
        self._cond = threading.Condition()
        self._tracks: dict[str, _QueryTrack] = {}
        self._seq = itertools.count()

    # -------------------------------------------------------------- bookkeeping per query

    def track(self, pipeline) -> _QueryTrack:
        """The query's record (created on its first batch; a restarted template starts from its start row)."""
        t = self._tracks.get(pipeline.name)
        workload = Workload.of(pipeline.chain[0].source)
        if t is None or t.timeline.spec != workload:
            o = pipeline.options
            t = _QueryTrack(Timeline(workload, o.tick_s), float(o.epoch), o.tick_s, start_row=o.start_row)
            self._tracks[pipeline.name] = t
        return t

    def _learn(self, pipeline, t: _QueryTrack) -> None:
        """Fold the previous batch (its rows now in lastProgress) into the cost model; move the start row."""
        progress = pipeline.query.lastProgress if pipeline.query is not None else None
        if not progress or t.last_batch is None or progress["batchId"] != t.last_batch:
            return
        end = (progress["sources"] or [{}])[0].get("endOffset")
        if isinstance(end, str):
            import json

            end = json.loads(end)
        if isinstance(end, dict) and "row" in end:
            t.start_row = int(end["row"])
        if t.last_duration is not None:
            t.cost.observe(float(progress["numInputRows"]), t.last_duration)
        t.last_batch = None

    def unit(self, pipeline, now: float) -> WorkUnit:
        """The pending batch as a Cameo work unit (size estimated from what the source has available)."""
        t = self.track(pipeline)
        self._learn(pipeline, t)
        first = t.timeline.tick_of_row(t.start_row)
        oldest = t.epoch + first * t.tick_s
        available = t.timeline.rows_before_tick(max(0, int((now - t.epoch) / t.tick_s)))
        cap = pipeline.rate_cap.get() if pipeline.rate_cap is not None else None
        size = max(0, available - t.start_row)
        if cap is not None:
            size = min(size, cap)
        cost = t.cost.predict(size)
        frontier = batch_frontier(pipeline.job, pipeline.template.name, oldest)
        return WorkUnit(pipeline.name, frontier, pipeline.job.target_latency_s, cost, 0.0, now, next(self._seq))

    # -------------------------------------------------------------- the hook

    def before(self, pipeline, batch_id: int) -> None:
        now = self.clock()
        unit = self.unit(pipeline, now)
        with self._cond:
            self.core.arrive(unit)
            while self.core.next_release(self.clock()) != pipeline.name:
                self._cond.wait(timeout=0.05)
            pending = self.core.release(pipeline.name, self.clock())
        released = self.clock()
        pool = self.core.pool(pending.unit, self.base_pools.get(pipeline.name), released)
        pipeline.spark.sparkContext.setLocalProperty("spark.scheduler.pool", pool)
        t = self._tracks[pipeline.name]
        t.last_batch = batch_id
        if self.on_release is not None:
            fixed, per_record = t.cost.coefficients()
            self.on_release(
                {
                    "query": pipeline.name,
                    "batch_id": batch_id,
                    "arrived": now,
                    "released": released,
                    "frontier": unit.frontier,
                    "deadline": unit.frontier + unit.target_latency,
                    "predicted_cost": unit.own_cost,
                    "key": pending.key,
                    "pool": pool,
                    "cost_fixed": fixed,
                    "cost_per_record": per_record,
                }
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
            self.core.waiting.pop(job, None)
            self.core.finish(job)
            self._tracks.pop(job, None)
            self._cond.notify_all()
