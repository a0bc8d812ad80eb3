"""L2 dispatch at micro-batch granularity: the gate's policy (Cameo on Spark, DESIGN.md).

Pending batches of all queries wait at a gate (the mechanism is
:class:`strata.spark.gate.Gate`) and are released in the dispatch strategy's
order, at most ``max_running`` at once — except that an urgent batch (below
``urgent_laxity_s`` of slack) never waits for a slot: batches cannot be
preempted, so it goes over the bound into the urgent pool, whose tasks take the
next free cores; a batch of a latency-critical job (target at most
``critical_s``) never waits either, as FAIR pools by hand run it (issue 29);
and a batch with plenty of slack (above ``hold_laxity_s``) does not start while
an urgent batch runs.

A batch is priced as Cameo prices a message (docs/dispatch.md, "Micro-batches"):

- ``t_MF``: the event time of the batch's oldest record; for a windowed job, the
  first window firing at or after it (:func:`strata.dispatch.priority.next_due`);
- ``L``: the job's target latency;
- ``C_OM``: a learned batch-cost model per query (:class:`~strata.dispatch.profiling.LinearCost`:
  fixed + per-record seconds, fitted on the batches' measured durations).

The batch's FAIR pool is ``urgent`` when its laxity (deadline − now) is below
``urgent_laxity_s``, else the pool L0's cpu share gave its job. :class:`GateCore`
is this policy over plain numbers, time passed in; it implements
:class:`strata.protocol.units.BatchGatePolicy`.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, replace

from strata.dispatch.priority import deadline, next_due
from strata.dispatch.profiling import LinearCost
from strata.dispatch.strategies import Strategy, WorkUnit, strategy
from strata.model import Job, OperatorKind
from strata.protocol.units import URGENT_POOL, BatchRelease

__all__ = ["URGENT_POOL", "GateConfig", "GateCore", "Pending", "batch_frontier"]


@dataclass(frozen=True)
class GateConfig:
    """Knobs of the gate, with their defaults."""

    strategy: str = "edf"  # a strata.dispatch.STRATEGIES name or alias; the dispatch level's own (HierarchyConfig)
    max_running: int = 2  # batches of all queries running at once (Spark tasks still share the cores)
    urgent_laxity_s: float = 1.0  # a batch with less slack than this runs in the urgent pool
    hold_laxity_s: float = 5.0  # a batch with more slack than this waits while an urgent batch runs (0: never)
    cost_decay: float = 0.9  # LinearCost's weight per older batch
    # A batch of a job with a target latency this short or shorter (latency-critical) is released at once, over the
    # bound, and holds a slot while it runs. Holding it for a bulk batch to end cannot help it: FAIR pools by hand
    # start it at once, and its tasks take the next free cores (measured, bench_one_app: held 0.13 s a batch on
    # average, up to 0.66 s, of a 2 s target). 0: no batch is latency-critical.
    critical_s: float = 0.0
    widen_after_s: float = 10.0  # the period the bound is judged over (0: never widened)
    widen_share: float = 0.8  # held back by a full bound this share of a period or more: widen by one

    def __post_init__(self) -> None:
        if self.max_running < 1:
            raise ValueError(f"max_running must be ≥ 1; got {self.max_running}")
        strategy(self.strategy)  # fails early, naming the choices


@dataclass
class BoundPeriod:
    """One period over which the gate's bound is judged: when it began, the last look, the time a batch was held
    back by a full bound, and the most batches seen running at once."""

    start: float
    last: float
    held_s: float = 0.0
    holding: bool = False  # at the last look, a batch waited for a full bound
    peak: int = 0


@dataclass
class Pending:
    """A batch waiting at the gate: its work unit and the key the strategy gave it on arrival."""

    unit: WorkUnit
    key: float


def batch_frontier(job: Job, template_name: str, oldest_event_time: float) -> float:
    """Cameo's t_MF of a batch: its oldest record's event time, or the first window firing at/after it."""
    for op in job.template(template_name).operators:
        if op.kind is OperatorKind.WINDOW_AGGREGATE:
            w = op.window
            return next_due(oldest_event_time, w.size_s, w.slide_s or w.size_s, w.watermark_s)
    return oldest_event_time


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
    costs: dict[str, LinearCost] = field(default_factory=dict)  # query → its batch-cost model
    widened: int = 0  # slots over config.max_running, from the periods the bound held batches back
    period: BoundPeriod | None = None  # the period the bound is being judged over (None: none started)

    def __post_init__(self) -> None:
        self.by: Strategy = strategy(self.config.strategy)
        self._seq = itertools.count()

    @property
    def bound(self) -> int:
        """Batches let run at once, over which only urgent and latency-critical batches go."""
        return self.config.max_running + self.widened

    def _judge_bound(self, now: float, waiting: bool) -> None:
        """Account the time since the last look (held back if, then, a batch that is not urgent waited for a full
        bound; ``waiting``: such a batch waits now) and, at the end of a period, widen a bound that held batches
        back most of it, or narrow a widened one its batches never filled."""
        if not self.config.widen_after_s:
            return
        p = self.period
        if p is not None and now >= p.last:
            if p.holding:
                p.held_s += now - p.last
            p.last = now
            p.peak = max(p.peak, len(self.running))
            if now - p.start < self.config.widen_after_s:
                p.holding = waiting and len(self.running) >= self.bound
                return
            if p.held_s >= self.config.widen_share * (now - p.start):
                self.widened += 1
            elif self.widened and p.peak < self.bound:
                self.widened -= 1
        held = waiting and len(self.running) >= self.bound
        self.period = BoundPeriod(now, now, holding=held, peak=len(self.running))

    # ------------------------------------------------------------------ strategy

    @property
    def strategy(self) -> str:
        return self.config.strategy

    def use(self, name: str) -> None:
        """Order the next batches by strategy ``name``; batches already waiting keep their keys."""
        by = strategy(name)  # fails before changing anything, naming the choices
        self.config = replace(self.config, strategy=name)
        self.by = by

    # ------------------------------------------------------------------ units of work

    def enqueue(self, unit: WorkUnit) -> None:
        if unit.job in self.waiting or unit.job in self.running:
            raise ValueError(f"query {unit.job!r} already has a batch at the gate")
        self.waiting[unit.job] = Pending(unit, self.by.key(unit))

    def next_release(self, now: float) -> str | None:
        """The job whose batch goes now, or None (nobody waiting, or no slot free and nothing urgent).

        A batch is not preemptible, so an urgent batch (laxity below ``urgent_laxity_s``) does not wait
        for a slot: it is released over the bound, into the urgent pool, whose tasks then take the next
        free cores ahead of the running batches' remaining tasks. For the same reason a batch with slack
        to spare (above ``hold_laxity_s``) is not started while an urgent batch runs: once started it
        would hold cores the urgent batch's tasks need; it waits until then, or until its slack shrinks. A
        latency-critical job's batch (target at most ``critical_s``) goes at once too, the most pressing first.
        Under a deadline order a batch already past its latest start comes after every batch that is not
        (:meth:`first`): it goes over the bound only once no such batch waits.
        """
        bulk = [p for p in self.waiting.values() if p.unit.target_latency > self.config.critical_s]
        best = self.first(bulk, now)
        slack = self.laxity(best.unit, now) if best is not None else math.inf
        self._judge_bound(now, waiting=best is not None and slack >= self.config.urgent_laxity_s)
        critical = [p for p in self.waiting.values() if p.unit.target_latency <= self.config.critical_s]
        if critical:
            return self.first(critical, now).unit.job
        if best is None:
            return None
        if slack < self.config.urgent_laxity_s:
            return best.unit.job
        if len(self.running) >= self.bound:  # the bound as judged at this look
            return None
        if self.config.hold_laxity_s and slack > self.config.hold_laxity_s and self.urgent_running:
            return None
        return best.unit.job

    def first(self, pending: list[Pending], now: float) -> Pending | None:
        """The batch the strategy releases first: the smallest key, but under a deadline order (``llf``, ``edf``) a
        batch past its latest start (``Strategy.overdue``: laxity below 0) after every batch that is not — the order
        the simulator's dispatcher serves messages in."""
        overdue = self.by.overdue
        return min(pending, key=lambda p: (overdue(p.unit, now), p.key, p.unit.seq), default=None)

    @staticmethod
    def laxity(unit: WorkUnit, now: float) -> float:
        """Slack left: Cameo's deadline (the latest start that meets the target, t_MF + L − C_OM − C_path) − now."""
        return deadline(unit.frontier, unit.target_latency, unit.own_cost, unit.path_cost) - now

    def take(self, job: str, now: float) -> Pending:
        """Let ``job``'s waiting unit go: it holds a slot (and counts as urgent if short of slack) until finished."""
        pending = self.waiting.pop(job)
        self.running.add(job)
        if self.period is not None:
            self.period.peak = max(self.period.peak, len(self.running))
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

    # ------------------------------------------------------------------ micro-batches (BatchGatePolicy)

    def cost(self, query: str) -> LinearCost:
        """``query``'s batch-cost model (a fresh one on first use)."""
        model = self.costs.get(query)
        if model is None:
            model = self.costs[query] = LinearCost(self.config.cost_decay)
        return model

    def price(self, query: str, job: Job, template: str, oldest_event_time: float, rows: int, now: float) -> WorkUnit:
        """A pending batch of ``rows`` records as a Cameo work unit: t_MF, the job's L, the predicted cost."""
        frontier = batch_frontier(job, template, oldest_event_time)
        cost = self.cost(query).predict(rows)
        return WorkUnit(query, frontier, job.target_latency_s, cost, 0.0, now, next(self._seq))

    def arrive(self, query: str, job: Job, template: str, oldest_event_time: float, rows: int, now: float) -> None:
        self.enqueue(self.price(query, job, template, oldest_event_time, rows, now))

    def release(self, query: str, base_pool: str | None, now: float) -> BatchRelease:
        pending = self.take(query, now)
        unit = pending.unit
        fixed, per_record = self.cost(query).coefficients()
        return BatchRelease(
            frontier=unit.frontier,
            deadline=unit.frontier + unit.target_latency,
            predicted_cost=unit.own_cost,
            key=pending.key,
            pool=self.pool(unit, base_pool, now),
            cost_fixed=fixed,
            cost_per_record=per_record,
            bound=self.bound,
        )

    def learn(self, query: str, rows: int, seconds: float) -> None:
        self.cost(query).observe(float(rows), seconds)

    def forget(self, query: str, *, waiting: bool = True) -> None:
        self.costs.pop(query, None)
        if waiting:
            self.waiting.pop(query, None)
            self.finish(query)
