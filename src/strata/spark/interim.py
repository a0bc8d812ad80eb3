"""INTERIM control loop — to be replaced by ``strata.hierarchy.controller.Controller`` (issue 9).

Same API as the hierarchy's Controller (``start(now) → Decisions``,
``step(observation) → Decisions``), so :mod:`strata.spark.demo` swaps it out by
changing one line once that Controller is committed. It calls the levels' pure
functions and nothing else:

- every ``epoch_s``: the learner (:mod:`strata.learning`) refits cost per record
  and selectivity per PE from the observation and sets source rates to the
  offered (generated) rates; SODA (:func:`strata.plan.epoch.plan`) re-plans:
  admission and template per job, cpu goals (→ ``cpu_share`` per job), and a
  rate cap on a source when the plan processes less than is offered. A template
  change is accepted only when the plan's importance beats the running
  templates' by ``switch_gain`` (hysteresis: a switch costs a query restart);
- every step: AutoFlow's hotspot diminishing (:func:`strata.balance.diminish_hotspots`)
  on each managed keyed operator's key-group loads (records) → moves;
- dispatch: the configured L2 strategy (Cameo's least laxity by default).

What it does not do, and the Controller does: budgets and signals between the
levels (deadline-miss pressure, irreducible hotspots, re-planning only the
affected component).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from strata.balance import BalanceConfig, diminish_hotspots
from strata.hierarchy.protocol import Decisions, Move, Observation
from strata.learning import ResourceLearner
from strata.model import OperatorKind, Scenario, importance, joined_graph, pe_id, propagate
from strata.plan import Options, Plan, PlanError, plan


@dataclass(frozen=True)
class InterimConfig:
    epoch_s: float = 15.0
    budget_s: float = 2.0  # planner time per epoch
    dispatch: str = "cameo"
    switch_gain: float = 0.05  # a template switch needs this much more planned importance
    cap_below: float = 0.95  # cap a source when the plan processes less than this share of its offered rate
    balance: BalanceConfig = field(default_factory=lambda: BalanceConfig(threshold=1.1, max_moves=8,
                                                                         cooldown_s=4.0))


def offered_rates(scenario: Scenario) -> dict[str, float]:
    """Each source's long-run mean offered rate from its arrival process (the prior before any observation)."""
    out = {}
    for job in scenario.jobs:
        for op in job.templates[0].operators:
            if op.kind is OperatorKind.SOURCE:
                a = op.source.arrivals
                factor = 1.0
                if a.process == "onoff":
                    factor = 1.0 + (a.burst_factor - 1.0) * min(a.on_s, a.period_s) / a.period_s
                out[pe_id(job.id, op.name)] = op.source.rate * factor
    return out


class InterimController:
    """Learner → planner → enforcement each epoch; balancer each step (see the module docstring)."""

    def __init__(self, scenario: Scenario, config: InterimConfig | None = None) -> None:
        self.scenario = scenario
        self.config = config or InterimConfig()
        self.learner = ResourceLearner()
        self.plan: Plan | None = None
        self.epoch = 0
        self.last_epoch_at = 0.0
        self.offered = offered_rates(scenario)
        self.moved_at: dict[tuple[str, int], float] = {}
        self.log: list[dict] = []

    # ------------------------------------------------------------------ L0

    def _plan(self, now: float, running: dict[str, str] | None) -> Decisions:
        refined = self.learner.refine(self.scenario, self.offered)
        try:
            new = plan(refined, self.plan, Options(budget_s=self.config.budget_s))
        except PlanError as e:
            self.log.append({"t": now, "epoch": self.epoch, "event": "plan failed", "detail": str(e)})
            return Decisions(self.epoch)
        templates = dict(new.templates)
        if running:
            kept = {j: running.get(j, t) for j, t in templates.items()}
            if kept != templates:
                before = importance(joined_graph(refined, kept), propagate(joined_graph(refined, kept)))
                if new.importance < before * (1 + self.config.switch_gain):
                    templates = kept
        self.plan = new
        graph = joined_graph(refined, templates)
        rates = propagate(graph, new.cpu_goal)
        share: dict[str, float] = {}
        for pe, cores in new.cpu_goal.items():
            job = pe.split(".")[0]
            if job in templates:
                share[job] = share.get(job, 0.0) + cores
        limits: dict[str, float | None] = {}
        for pe in graph:
            if graph.nodes[pe]["op"].kind is OperatorKind.SOURCE:
                offered = self.offered.get(pe, 0.0)
                limits[pe] = rates[pe] if offered > 0 and rates[pe] < self.config.cap_below * offered else None
        self.log.append({"t": now, "epoch": self.epoch, "event": "plan", "templates": templates,
                         "importance": new.importance, "share": share, "limits": limits})
        return Decisions(self.epoch, admitted=templates, cpu_share=share, rate_limits=limits,
                         dispatch=self.config.dispatch if self.epoch == 0 else None, replan=("*",),
                         reasons=("epoch",))

    def start(self, now: float = 0.0) -> Decisions:
        self.last_epoch_at = now
        return self._plan(now, None)

    # ------------------------------------------------------------------ per step

    def _learn(self, obs: Observation) -> None:
        w = obs.window
        span = max(w.now - w.start, 1e-6)
        per_pe: dict[str, tuple[float, float]] = {}
        for inst in w.instances:
            rec, busy = per_pe.get(inst.pe, (0.0, 0.0))
            per_pe[inst.pe] = (rec + inst.records, busy + inst.busy)
        for pe, (records, busy) in per_pe.items():
            self.learner.observe(pe, records, w.rates.get(pe, 0.0) * span, busy)
        for pe, rate in w.ingest.items():
            if rate > 0:
                self.offered[pe] = 0.7 * self.offered.get(pe, rate) + 0.3 * rate

    def _balance(self, obs: Observation) -> list[Move]:
        moves = []
        w = obs.window
        for pe, table in w.routing.items():
            loads = {kg.key_group: float(kg.records) for kg in w.key_groups if kg.pe == pe}
            if not loads:
                continue
            instances = max(table) + 1 if table else 0
            moved = {g: t for (p, g), t in self.moved_at.items() if p == pe}
            result = diminish_hotspots(loads, dict(enumerate(table)), instances, config=self.config.balance,
                                       moved_at=moved, now=w.now)
            for t in result.transfers:
                moves.append(Move(pe, t.key_group, t.dst))
                self.moved_at[(pe, t.key_group)] = w.now
        return moves

    def step(self, obs: Observation) -> Decisions:
        self._learn(obs)
        moves = self._balance(obs)
        if obs.now - self.last_epoch_at >= self.config.epoch_s:
            self.epoch += 1
            self.last_epoch_at = obs.now
            decisions = self._plan(obs.now, dict(obs.templates))
            decisions.moves = moves
            return decisions
        return Decisions(self.epoch, moves=moves, reasons=("window",) if moves else ())
