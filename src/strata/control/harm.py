"""Do no harm: every decision on a job carries the gain the plan predicts, and is reverted when it did worse
(DESIGN.md rule 8; Dangwal et al.'s co-operating hierarchy, where a level's decision must not cost the objective
it is judged on).

Plain Spark — :class:`strata.control.loop.Plain` — runs every job on its first template, uncapped, in the default
FAIR pool (weight 1: equal shares), admitted, on the processing-time triggers its user set (:attr:`HarmGuard.
plain_triggers`: on Spark the runner gives plain Spark the Controller's triggers, so they are no departure; none:
batches back to back). Each of the Controller's decisions that departs
from that on one job (kinds: ``template``, ``rate cap``, ``pool``, ``admission`` (a stop), ``trigger``) enters a
ledger with the gain the model predicts for it over the plain setting, in the job's objective: its **on-time
importance rate** — the importance (SODA §3: Σ stream weight × value(rate)) of its template at the source rate
read and delivered within the target latency, i.e. read rate × (1 − miss share).

The predicted gain is the plan's own rate model over the shared cores: each admitted job needs offered ×
(learned) core-seconds per source record, capped at its rate cap; FAIR shares the cluster's cores by pool weight,
work conserving (weighted max–min, :func:`fair_shares`); a job processes what its share buys, and what it cannot
process is late. The gain is the job's objective with the decision applied to the plain setting minus the plain
setting's.

The counterfactual a decision is judged against — what plain Spark would have given the job — is *observed*
wherever it can be: the job's objective in the last ``baseline_windows`` windows it ran with this kind at its
plain value (before the decision, or in a period the decision was reverted), outside the ``settle_windows`` after
any change of its setting, each at most the source rate offered in the judged windows (plain cannot read what was
not offered). The rate model is not trusted for it: inside one application the tasks of bulk queries, which
Spark does not preempt, and the driver's per-query work delay a critical job in a way the model leaves out, so at
overload the model says plain keeps a job on time that plain Spark leaves late, and a decision that helped looked
worse than that fiction (issue 29: a critical job's pool and trigger reverted at overload). Only where no plain
window exists (a decision in force from the start) is the model's plain prediction, with the offered rates
measured now, the counterfactual — and a revert on it is a *trial*: once the reverted period has given
``judge_windows`` settled windows of plain, the decision is judged again on its own windows against them, and is
restored (and kept) unless it fails against plain as observed too.

:func:`judge`: once ``judge_windows`` windows have been seen after the decision took effect (a job's first output
under it; at once for a stop) and ``settle_windows`` more before them passed (the transition), the observed
objective's mean minus the counterfactual is the observed gain. The decision is reverted when the observed gain
is below min(0, predicted gain) − a noise margin: a decision predicted to gain must not leave the job worse than
plain Spark; one predicted to cost the job something (a cap or a stop giving way to other jobs) must not cost more
than predicted. The margin is ``noise_z`` × the standard deviation of the observed counterfactual's windows, at
least ``noise_share`` of the counterfactual and ``noise_floor``. Of one job's failing decisions one is reverted
per step (the one the model says moves the job most), the others watched afresh. A reverted (job, kind) is held
at its plain value for ``cooldown_s`` (hysteresis) unless its trial restores it, then the Controller may decide it
again and it is judged again. A decision judged harmless is not judged again until its value changes.

Without overload (:func:`plain_demand` within ``busy_limit`` of the cores ``calm_windows`` looks in a row; overload
again once it exceeds the cores: offered rates swing with bursts), a bulk job
(target latency above the Controller's ``critical_latency_s``) is held as plain Spark runs it: first template, no
cap, the default pool — there is nothing to gain for anyone.

No harm before evidence, and a decision must pay (issue 29). A job the Controller has not observed yet (no cost
learned from the engine's accounting) is planned as plain Spark runs it (:meth:`HarmGuard.planning`: its first
template, required); a switch away from a job's first template, and a pacing cap (the Controller asks
:meth:`HarmGuard.worth`), are made only when the rate model predicts them a gain over *all* jobs
(:func:`predicted_gain`: the change applied to every job as it runs) above ``noise_share`` of the objectives they
move, at least ``noise_floor`` — a cap or a cheaper template costs its own job and pays only through the cores it
leaves the others. What is not made is recorded once (``Decisions.withheld``; Spark: a ``withheld`` row).

Caps, pools and triggers are held plain by rewriting the step's :class:`~strata.protocol.engine.Decisions`;
templates and admission come with a placement and cpu, so they are held through the plan
(:meth:`HarmGuard.planning`: the job offers the planner only its first template, or is required;
:meth:`HarmGuard.replan_due`: its component is re-planned at once). Each revert adds a (job, why) line to
``Decisions.reverts``, which engines log (Spark: a ``revert`` row in decisions.csv). Pure: plain data in,
decisions out; the clock comes in the observations.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace

from strata.model import Job, OperatorKind, Scenario, Template, joined_graph
from strata.model.importance import importance, propagate
from strata.model.job import KEYED_KINDS
from strata.model.traffic import as_emitted
from strata.protocol.engine import Decisions
from strata.protocol.units import SHARE_POOLS
from strata.protocol.window import WindowStats

KINDS = ("template", "rate cap", "pool", "admission", "trigger")
PLANNED = ("template", "admission")  # held plain through the plan: they come with a placement and cpu
PLAIN_POOL = "w1"  # FAIR's default weight 1: every job the same share


@dataclass(frozen=True)
class HarmConfig:
    """The do-no-harm knobs, with their defaults (docs/hierarchy.md, "Do no harm")."""

    enabled: bool = True
    judge_windows: int = 3  # windows observed after a decision took effect before it is judged ...
    settle_windows: int = 2  # ... after these first ones, left out: the transition (a restart, a backlog draining)
    baseline_windows: int = 4  # windows a job ran a kind plain: the observed counterfactual and its noise
    noise_z: float = 2.0  # margin = noise_z × the counterfactual windows' standard deviation ...
    noise_share: float = 0.1  # ... at least this share of the counterfactual ...
    noise_floor: float = 1e-3  # ... and at least this (importance/s)
    cooldown_s: float = 120.0  # a reverted (job, kind) is held at its plain value this long
    busy_limit: float = 0.9  # no overload: the plain setting needs at most this share of the cores ...
    calm_windows: int = 3  # ... for this many windows in a row (overload again: more than all the cores)

    def __post_init__(self) -> None:
        if self.judge_windows < 1 or self.baseline_windows < 0 or self.settle_windows < 0:
            raise ValueError("judge_windows must be ≥ 1, baseline_windows and settle_windows ≥ 0")
        if self.noise_z < 0 or self.noise_share < 0 or self.noise_floor < 0 or self.cooldown_s < 0:
            raise ValueError("noise_z, noise_share, noise_floor and cooldown_s must be ≥ 0")
        if self.busy_limit <= 0:
            raise ValueError(f"busy_limit must be > 0; found {self.busy_limit}")


@dataclass(frozen=True)
class Setting:
    """What is in force for one job: its template (None: stopped), rate cap over its sources (records/s; None:
    none), FAIR pool weight and trigger (s; None: batches back to back)."""

    template: str | None
    cap: float | None = None
    weight: float = 1.0
    trigger: float | None = None


@dataclass(frozen=True)
class JobModel:
    """What the model knows of one job now: its offered rate (records/s at its sources), each template's
    core-seconds per source record, and its importance rate at a given on-time source rate per template."""

    offered: float
    first: str
    cost: Mapping[str, float]
    value: Callable[[str, float], float]


def fair_shares(demand: Mapping[str, float], weight: Mapping[str, float], cores: float) -> dict[str, float]:
    """Cores each job gets from a work-conserving weighted fair scheduler (FAIR pools): weighted max–min.

    Cores go out in proportion to weight; a job that needs less than its part keeps only what it needs and the
    rest is shared again among the others. E.g. demand a 3, b 1, c 1 on 4 cores, weights 1, 1, 2: parts 1, 1, 2 →
    b keeps 1, c 1; the 2 left go to a.
    """
    alloc: dict[str, float] = {}
    active = {j for j, d in demand.items() if d > 0}
    left = cores
    while active:
        unit = left / sum(weight.get(j, 1.0) for j in active)
        full = {j for j in active if demand[j] <= weight.get(j, 1.0) * unit + 1e-12}
        if not full:
            for j in active:
                alloc[j] = weight.get(j, 1.0) * unit
            break
        for j in full:
            alloc[j] = demand[j]
            left -= demand[j]
        active -= full
    return {j: alloc.get(j, 0.0) for j in demand}


def on_time_rates(models: Mapping[str, JobModel], settings: Mapping[str, Setting], cores: float) -> dict[str, float]:
    """Job → source records/s processed on time under ``settings``: what its fair share of ``cores`` buys, at most
    its offered rate and its cap (0 for a stopped job)."""
    wanted: dict[str, float] = {}
    demand: dict[str, float] = {}
    for job, m in models.items():
        s = settings[job]
        if s.template is None:
            continue
        wanted[job] = min(m.offered, math.inf if s.cap is None else s.cap)
        demand[job] = wanted[job] * m.cost[s.template]
    alloc = fair_shares(demand, {j: settings[j].weight for j in demand}, cores)
    out = dict.fromkeys(models, 0.0)
    for job, rate in wanted.items():
        cost = models[job].cost[settings[job].template]
        out[job] = rate if cost <= 0 else min(rate, alloc[job] / cost)
    return out


def objectives(models: Mapping[str, JobModel], settings: Mapping[str, Setting], cores: float) -> dict[str, float]:
    """Job → predicted on-time importance rate under ``settings``."""
    rates = on_time_rates(models, settings, cores)
    out = {}
    for job, m in models.items():
        t = settings[job].template
        out[job] = 0.0 if t is None else m.value(t, rates[job])
    return out


def plain_settings(models: Mapping[str, JobModel]) -> dict[str, Setting]:
    """What plain Spark runs: every job on its first template, uncapped, weight 1, no trigger."""
    return {job: Setting(m.first) for job, m in models.items()}


def predicted_gain(
    models: Mapping[str, JobModel],
    change: Mapping[str, Setting],
    cores: float,
    base: Mapping[str, Setting] | None = None,
) -> tuple[float, float]:
    """What ``change`` (job → its setting) applied to ``base`` (default: the plain setting) is predicted to bring:
    (Σ over every job of its objective with the change − without; Σ of the objective without it over the jobs
    whose objective it moves, the stake the noise margin is a share of). Every job counts: a cap or a cheaper
    template costs its own job and pays only through the cores it leaves the others. E.g. two jobs on one core,
    each offered 1 rec/s at 1 core-s per record and worth its on-time rate: plain gives each 0.5 rec/s; a cap of
    0.25 rec/s on one gives the other 0.75: gain 0 (the one's loss is the other's gain), stake 1."""
    base = dict(base or plain_settings(models))
    before = objectives(models, base, cores)
    after = objectives(models, {**base, **change}, cores)
    moved = [j for j in models if abs(after[j] - before[j]) > 1e-9 * max(1.0, abs(before[j]))]
    return sum(after[j] - before[j] for j in models), sum(abs(before[j]) for j in moved)


def plain_demand(models: Mapping[str, JobModel]) -> float:
    """Cores the plain setting needs: Σ offered × cost of the first template over every job."""
    return sum(m.offered * m.cost[m.first] for m in models.values())


def job_models(model: Scenario) -> dict[str, JobModel]:
    """Each job's :class:`JobModel` on ``model``, the scenario as learned — costs, selectivities, and source rates
    the offered load (observed, else the prior the planner uses) — its window aggregates linearised at those
    rates as the engines emit (:func:`strata.model.traffic.as_emitted`). A job's offered rate is its first
    template's; the other templates read the same sources."""
    emitted = as_emitted(model)
    out = {}
    for job in model.jobs:
        rate = sum(op.source.rate for op in job.templates[0].operators if op.kind is OperatorKind.SOURCE)
        graphs, costs = {}, {}
        for tpl in job.templates:
            graph = joined_graph(emitted, {job.id: tpl.name})
            graphs[tpl.name] = graph
            costs[tpl.name] = _cost_per_record(graph, rate)
        out[job.id] = JobModel(rate, job.templates[0].name, costs, _valuer(graphs))
    return out


def _sources(graph) -> dict[str, float]:
    """Source PE → its share of the job's offered rate (by the model's source rates)."""
    rates = {pe: graph.nodes[pe]["op"].source.rate for pe in graph if graph.nodes[pe]["op"].kind is OperatorKind.SOURCE}
    total = sum(rates.values())
    return {pe: (r / total if total > 0 else 1.0 / len(rates)) for pe, r in rates.items()}


def _cost_per_record(graph, rate: float) -> float:
    """Core-seconds the job's PEs spend per source record at ``rate`` (every PE's input × its cost per record)."""
    split = _sources(graph)
    probe = rate if rate > 0 else 1.0
    out = propagate(graph, None, {pe: probe * s for pe, s in split.items()})
    busy = 0.0
    for pe in graph:
        op = graph.nodes[pe]["op"]
        into = probe * split[pe] if pe in split else sum(out[u] for u in graph.predecessors(pe))
        busy += into * op.cost_per_record
    return busy / probe


def _valuer(graphs: Mapping) -> Callable[[str, float], float]:
    def value(template: str, rate: float) -> float:
        graph = graphs[template]
        split = _sources(graph)
        return importance(graph, propagate(graph, None, {pe: rate * s for pe, s in split.items()}))

    return value


def on_time_read(window: WindowStats, sources: Iterable[str], job: str) -> float:
    """The job's source records/s read in ``window`` and delivered within target: read rate × (1 − miss share)."""
    read = sum(window.rates.get(pe, 0.0) for pe in sources)
    stats = window.latency.get(job)
    return read * (1.0 - (stats.miss_rate if stats is not None and stats.records else 0.0))


Seen = tuple[str | None, float, float]  # one window of a job: template in force, on-time source records/s, offered


@dataclass(frozen=True)
class Pending:
    """One decision awaiting judgement: what was decided against the plain value, the gain predicted for it,
    the counterfactual's windows and the windows seen since it took effect.

    ``value`` is the decision's identity (a new value of the same kind is a new decision; a cap is one decision
    whatever its rate, which pacing moves by steps); ``shown`` what the record says (a cap's rate).
    ``baseline`` and ``seen`` are :data:`Seen` windows: ``baseline`` the job's windows under the plain value of
    this kind before the decision (empty: the model's plain prediction is the counterfactual). A *trial* — the
    plain value in force after a revert judged on the model — is a Pending too: the reverted decision's, its
    ``baseline`` the decision's own windows, its ``seen`` plain's since the revert, its ``restore`` the pool or
    trigger to put back."""

    job: str
    kind: str
    value: str
    plain: str
    made_at: float
    predicted_gain: float
    baseline: tuple[Seen, ...]
    seen: tuple[Seen, ...] = ()
    shown: str = ""
    settled: int = 0  # windows since it took effect left out (``settle_windows``)
    restore: str | float | None = None


@dataclass(frozen=True)
class Verdict:
    """A judged decision: its observed objective, the counterfactual's (``basis``: ``observed`` in the baseline
    windows, or ``predicted`` by the rate model), the noise margin, whether it fails."""

    pending: Pending
    observed: float
    plain: float
    margin: float
    revert: bool
    basis: str = "observed"

    def reason(self, now: float, cooldown_s: float) -> str:
        """The revert record: the decision, predicted vs observed gain over plain, the margin and the windows."""
        p = self.pending
        if self.basis == "observed":
            against = f"plain's {self.plain:.4g} observed over {len(p.baseline)} windows"
            held = f"held plain {cooldown_s:.0f} s"
        else:
            against = f"plain's {self.plain:.4g} as the model predicts it, no plain window observed"
            held = f"held plain {cooldown_s:.0f} s, on trial: restored unless plain as observed does better"
        return (
            f"{p.kind} {p.shown or p.value} → {p.plain}: predicted {p.predicted_gain:+.4g}/s vs plain, observed "
            f"{self.observed - self.plain:+.4g}/s ({self.observed:.4g} against {against}; noise "
            f"margin {self.margin:.4g}) over {len(p.seen)} windows, decided {now - p.made_at:.0f} s ago; {held}"
        )

    def restored(self) -> str:
        """The record of a trial that restores its decision: its windows against plain's observed on trial."""
        p = self.pending
        return (
            f"restored:{p.job} {p.kind} {p.shown or p.value} (do no harm: {self.observed:.4g} under it against plain's "
            f"{self.plain:.4g} observed on trial over {len(p.baseline)} windows; noise margin {self.margin:.4g})"
        )


def judge(pending: Pending, model: JobModel, predicted_plain: float, config: HarmConfig) -> Verdict | None:
    """The verdict on ``pending`` once it has ``judge_windows`` windows (None before): fails when the observed
    objective − the counterfactual < min(0, predicted gain) − the noise margin.

    The counterfactual is the mean objective of ``pending.baseline``'s windows, each at the on-time rate it saw but
    at most the mean rate offered in the judged windows; without baseline windows, ``predicted_plain`` (the rate
    model's plain prediction now). The margin: ``noise_z`` × the baseline windows' standard deviation, at least
    ``noise_share`` of the counterfactual and ``noise_floor``."""
    if len(pending.seen) < config.judge_windows:
        return None

    def worth(template: str | None, rate: float) -> float:
        return 0.0 if template is None else model.value(template, rate)

    observed = statistics.fmean(worth(t, r) for t, r, _ in pending.seen)
    offered = statistics.fmean(o for _, _, o in pending.seen)
    base = [worth(t, min(r, offered) if offered > 0 else r) for t, r, _ in pending.baseline]
    if base:
        plain, basis = statistics.fmean(base), "observed"
    else:
        plain, basis = predicted_plain, "predicted"
    spread = statistics.pstdev(base) if len(base) >= 2 else 0.0
    margin = max(config.noise_z * spread, config.noise_share * abs(plain), config.noise_floor)
    bad = observed - plain < min(0.0, pending.predicted_gain) - margin
    return Verdict(pending, observed, plain, margin, bad, basis)


def _identity(kind: str, s: Setting) -> str:
    """The decided value of ``kind`` in ``s`` as the ledger tells decisions apart."""
    if kind == "template":
        return str(s.template)
    if kind == "admission":
        return "stopped" if s.template is None else "admitted"
    if kind == "rate cap":
        return "none" if s.cap is None else "capped"
    if kind == "pool":
        return f"weight {s.weight:g}"
    return "none" if s.trigger is None else f"{s.trigger:g} s"


def _applied(kind: str, plain: Setting, s: Setting) -> Setting:
    """``plain`` with only ``kind`` of ``s`` applied: the decision's own effect."""
    field_of = {
        "template": "template",
        "admission": "template",
        "rate cap": "cap",
        "pool": "weight",
        "trigger": "trigger",
    }
    return replace(plain, **{field_of[kind]: getattr(s, field_of[kind])})


def stateful(template: Template) -> bool:
    """Whether a running query of ``template`` keeps state (windows, keyed state, joins): it cannot switch
    template without dropping it, so the engine refuses the switch."""
    return any(op.kind in KEYED_KINDS for op in template.operators)


@dataclass
class HarmGuard:
    """The ledger and its memory over a run: what is in force, pending decisions, trials, cooldowns, and each
    job's recent windows under each kind's plain value (the observed counterfactual).

    ``sources``: job → its source PEs (over every template); a job whose target latency is above
    ``critical_latency_s`` is bulk (held plain without overload).
    """

    scenario: Scenario
    sources: Mapping[str, list[str]]
    critical_latency_s: float
    config: HarmConfig = field(default_factory=HarmConfig)
    pending: dict[tuple[str, str], Pending] = field(default_factory=dict)
    kept: dict[tuple[str, str], str] = field(default_factory=dict)  # judged harmless, by identity
    cooldown: dict[tuple[str, str], float] = field(default_factory=dict)  # (job, kind) → held plain until
    trials: dict[tuple[str, str], Pending] = field(default_factory=dict)  # reverted on the model: plain watched
    plain_seen: dict[tuple[str, str], list[Seen]] = field(default_factory=dict)  # (job, kind) → windows it ran plain
    steady: dict[str, tuple[tuple[str, ...], int]] = field(default_factory=dict)  # job → setting, windows under it
    templates: dict[str, str] = field(default_factory=dict)  # in force: job → template (absent: stopped)
    caps: dict[str, float | None] = field(default_factory=dict)  # in force: source PE → records/s
    pools: dict[str, str] = field(default_factory=dict)  # in force: job → FAIR pool
    triggers: dict[str, float] = field(default_factory=dict)  # in force: job → trigger s
    # job → the processing-time trigger (s) plain Spark runs it with: the reference a trigger is judged from. Every
    # Spark mode runs the Controller's triggers (spark_loop.run_mode gives them to Plain): judged against none, the
    # critical job's 0.5 s poll was "reverted" on the model's fiction (bench_one_app, seed 1: −986/s at t = 11 s).
    plain_triggers: Mapping[str, float] = field(default_factory=dict)
    calm: bool | None = None  # no overload (None: not looked yet): bulk jobs held plain
    calm_looks: int = 0  # consecutive looks below busy_limit
    # (job, kind) → why the Controller did not make a decision the plan proposed (kind "evidence": none before the
    # job is observed; a kind of KINDS: no predicted gain beyond noise); each new one goes out once in
    # Decisions.withheld
    withheld: dict[tuple[str, str], str] = field(default_factory=dict)
    told: dict[tuple[str, str], str] = field(default_factory=dict)  # the withheld records already sent

    def settings(self) -> dict[str, Setting]:
        """Job → the setting in force (as the decisions seen so far enforce it)."""
        out = {}
        for job in self.scenario.jobs:
            capped = [c for pe in self.sources[job.id] if (c := self.caps.get(pe)) is not None]
            out[job.id] = Setting(
                self.templates.get(job.id),
                sum(capped) if capped else None,
                # The weight-32 pool (URGENT_POOL) is not a share pool: a latency-critical job runs in it from the
                # first plan on, as FAIR pools by hand put it (budgets.critical_pools), so it is the reference that
                # job's pool is judged from, as w1 is the others' — weight 1 here, not a decision to judge.
                float(SHARE_POOLS.get(self.pools.get(job.id, PLAIN_POOL), 1)),
                self.triggers.get(job.id),
            )
        return out

    def review(
        self, d: Decisions, now: float, window: WindowStats | None, models: Mapping[str, JobModel], cores: float
    ) -> Decisions:
        """One step at ``now``: judge the pending decisions on ``window`` (None: the start), revert the harmful
        ones, hold plain what must be (reverted, within cooldown; bulk jobs without overload), then enter ``d``'s
        decisions that depart from plain in the ledger. ``models``: the jobs' models now; ``cores``: the cores
        they share."""
        if not self.config.enabled:
            return d
        if window is not None:
            self._observe(window)
        plain = {job: replace(s, trigger=self.plain_triggers.get(job)) for job, s in plain_settings(models).items()}
        predicted_plain = objectives(models, plain, cores)
        restored = self._try(models, predicted_plain)
        failed: dict[str, list[Verdict]] = {}
        for key, p in sorted(self.pending.items()):
            verdict = judge(p, models[p.job], predicted_plain[p.job], self.config)
            if verdict is None:
                continue
            if verdict.revert:
                failed.setdefault(p.job, []).append(verdict)
            else:
                del self.pending[key]
                self.kept[key] = p.value
        verdicts = []
        for job, bad in failed.items():
            # One change at a time: the job's objective cannot tell its decisions apart, so the one the model says
            # moves the job most (then the latest) is reverted; the others are watched afresh from here. A decision
            # on the job that took effect and is still being judged is a suspect too: when it is the one the model
            # blames, nothing is reverted until it is judged (its verdict decides).
            judging = [p for p in self.pending.values() if p.job == job and p.made_at < now]
            suspect = min(judging, key=lambda p: (p.predicted_gain, -p.made_at))
            if all(v.pending is not suspect for v in bad):
                continue
            worst = next(v for v in bad if v.pending is suspect)
            verdicts.append(worst)
            for v in bad:
                key = (job, v.pending.kind)
                if v is worst:
                    del self.pending[key]
                    self.cooldown[key] = now + self.config.cooldown_s
                else:
                    self.pending[key] = replace(v.pending, seen=(), settled=0)
        self.cooldown = {k: t for k, t in self.cooldown.items() if t > now}
        self.trials = {k: p for k, p in self.trials.items() if k in self.cooldown}
        reverted = {(v.pending.job, v.pending.kind) for v in verdicts}
        for v in verdicts:
            if v.basis == "predicted" and not (v.pending.kind in PLANNED and self._blocked(v.pending.job)):
                self._start_trial(v.pending, now)
        self._hold_plain(d, set(self.cooldown) | reverted)
        for v in restored:
            self._restore(d, v.pending)
            d.reasons = (*d.reasons, v.restored())
        for v in verdicts:
            why = v.reason(now, self.config.cooldown_s)
            if v.pending.kind in PLANNED:
                job = v.pending.job
                if self._blocked(job):
                    why += f"; not enforced: {self.templates[job]} keeps state (a switch would drop it)"
                else:
                    why += "; enforced by the next plan of its component"
            d.reverts = (*d.reverts, (v.pending.job, why))
        self._look(models, cores)
        if self.calm and self._hold_plain(d, {(j, k) for j in self._bulk() for k in ("rate cap", "pool")}):
            d.reasons = (*d.reasons, "no overload: bulk jobs run as plain Spark runs them")
        self._enforced(d)
        self._enter(now, models, plain, cores)
        self._tell(d)
        return d

    def _tell(self, d: Decisions) -> None:
        """Each newly withheld decision into ``d.withheld`` once (engines log it: Spark, a ``withheld`` row)."""
        self.told = {k: why for k, why in self.told.items() if k in self.withheld}
        new = [(job, why) for (job, kind), why in sorted(self.withheld.items()) if (job, kind) not in self.told]
        self.told.update({k: why for k, why in self.withheld.items() if k not in self.told})
        if new:
            d.withheld = (*d.withheld, *new)

    def planning(
        self,
        jobs: Iterable[Job],
        models: Mapping[str, JobModel],
        cores: float,
        unseen: Collection[str] = (),
        memory: float = math.inf,
    ) -> list[Job]:
        """``jobs`` as the planner may decide them: a job whose template is held plain (reverted, within its
        cooldown; a bulk job without overload) offers only its first template, one whose stop was reverted is
        required. A job running a stateful template keeps its templates (a switch would drop its state).

        No harm before evidence: a job in ``unseen`` (not observed yet: its costs are priors) is planned as plain
        Spark runs it — its first template, required (admitted) — while the first templates of the required jobs
        and of those fit ``cores`` and ``memory`` (else plain Spark cannot run them either: the plan decides). A
        job running its first template is offered another only when the switch is predicted (on the model as
        learned, every other job as it runs) to gain beyond noise over all jobs (:meth:`worth`); the first
        template stays otherwise. Each job held so is in :attr:`withheld`, with why."""
        if not self.config.enabled:
            return list(jobs)
        if self.calm is None:  # the start: the first look decides
            self._look(models, cores)
            self.calm = self.calm_looks > 0
        jobs = list(jobs)
        required = [j for j in jobs if j.required or j.id in unseen or j.id in self._held("admission")]
        fits = sum(j.templates[0].cpu_min for j in required) <= cores + 1e-9 and (
            sum(j.templates[0].memory for j in required) <= memory
        )
        self.withheld = {k: why for k, why in self.withheld.items() if k[1] not in (*PLANNED, "evidence")}
        base = self._running(models)
        out = []
        for job in jobs:
            first = job.templates[:1]
            if job.id in unseen and fits:
                self.withheld[(job.id, "evidence")] = (
                    f"no observation yet: runs as plain Spark runs it (template {first[0].name}, admitted, no cap, "
                    "at least its offered cpu) until its costs are learned"
                )
                job = job.model_copy(update={"templates": first, "required": True})
            elif job.id in unseen:
                self.withheld[(job.id, "evidence")] = (
                    "no observation yet, but the first templates of the jobs plain Spark would run do not fit "
                    f"({cores:g} cores): template and admission left to the plan"
                )
            elif job.id in self._held("template") and not self._blocked(job.id):
                job = job.model_copy(update={"templates": first})
            elif len(job.templates) > 1 and self.templates.get(job.id, first[0].name) == first[0].name:
                why = self._switch_worth(job, models, cores, base)
                if why is not None:
                    self.withheld[(job.id, "template")] = why
                    job = job.model_copy(update={"templates": first})
            if job.id in self._held("admission"):
                job = job.model_copy(update={"required": True})
            out.append(job)
        return out

    def worth(
        self, models: Mapping[str, JobModel], change: Mapping[str, Setting], cores: float, base: Mapping[str, Setting]
    ) -> tuple[bool, float, float]:
        """Whether ``change`` applied to ``base`` is predicted to gain beyond noise over all jobs
        (:func:`predicted_gain`): (worth it, gain, margin); the margin is ``noise_share`` of the stake, at least
        ``noise_floor``."""
        gain, stake = predicted_gain(models, change, cores, base)
        margin = max(self.config.noise_share * stake, self.config.noise_floor)
        return gain > margin, gain, margin

    def _switch_worth(
        self, job: Job, models: Mapping[str, JobModel], cores: float, base: Mapping[str, Setting]
    ) -> str | None:
        """None when some other template of ``job`` is worth a switch from its first; else why none is."""
        best: tuple[float, float, str] | None = None
        for tpl in job.templates[1:]:
            ok, gain, margin = self.worth(models, {job.id: Setting(tpl.name)}, cores, base)
            if ok:
                return None
            if best is None or gain > best[0]:
                best = (gain, margin, tpl.name)
        gain, margin, name = best
        return (
            f"template {job.templates[0].name} kept: {name} is predicted {gain:+.4g}/s over all jobs, "
            f"not above the noise margin {margin:.4g}/s"
        )

    def _running(self, models: Mapping[str, JobModel]) -> dict[str, Setting]:
        """Each job as the rate model sees it run now: its template in force (its first before it starts), no
        cap, the plain pool — the base a decision's predicted gain is measured from."""
        return {job: Setting(self.templates.get(job, m.first)) for job, m in models.items()}

    def withhold(self, key: tuple[str, str], why: str | None) -> None:
        """Record (``why``) or clear (None) a decision of ``key`` (job, kind) the Controller did not make."""
        if why is None:
            self.withheld.pop(key, None)
        else:
            self.withheld[key] = why

    def replan_due(self, templates: Mapping[str, str]) -> list[str]:
        """Jobs whose plan in force (job → template, admitted only) runs what is held plain: re-planned now."""
        due = {j for j in self._held("template") if templates.get(j, self._first(j)) != self._first(j)}
        due = {j for j in due if not self._blocked(j)}
        return sorted(due | {j for j in self._held("admission") if j not in templates})

    def _try(self, models: Mapping[str, JobModel], predicted_plain: Mapping[str, float]) -> list[Verdict]:
        """Judge each trial with ``judge_windows`` windows of plain: its decision judged again, on its own windows,
        against plain as observed on trial. One that passes is restored — its cooldown lifted, the decision kept;
        one that fails again stays held plain for the rest of its cooldown. Returns the restoring verdicts."""
        out = []
        for key, trial in sorted(self.trials.items()):
            if len(trial.seen) < self.config.judge_windows:
                continue
            del self.trials[key]
            again = replace(trial, baseline=trial.seen, seen=trial.baseline)
            verdict = judge(again, models[trial.job], predicted_plain[trial.job], self.config)
            if verdict is not None and not verdict.revert:
                self.cooldown.pop(key, None)
                self.kept[key] = trial.value
                out.append(verdict)
        return out

    def _start_trial(self, p: Pending, now: float) -> None:
        """Watch plain after ``p`` was reverted on the model's prediction: its windows become the counterfactual."""
        restore = {"pool": self.pools.get(p.job), "trigger": self.triggers.get(p.job)}.get(p.kind)
        self.trials[(p.job, p.kind)] = replace(p, made_at=now, baseline=p.seen, seen=(), settled=0, restore=restore)

    def _restore(self, d: Decisions, trial: Pending) -> None:
        """Put a restored pool or trigger back in ``d``; a cap comes back with the pacing's next caps, a template
        or a stop with the next plan (the hold is lifted)."""
        if trial.restore is None:
            return
        if trial.kind == "pool":
            pools = d.pools if d.pools is not None else self.pools
            d.pools = {**pools, trial.job: str(trial.restore)}
        elif trial.kind == "trigger":
            triggers = d.triggers if d.triggers is not None else self.triggers
            d.triggers = {**triggers, trial.job: float(trial.restore)}

    def _look(self, models: Mapping[str, JobModel], cores: float) -> None:
        """Overload, with hysteresis (offered rates swing with bursts): calm after ``calm_windows`` looks in a row
        below ``busy_limit`` of the cores, overloaded again once plain's demand exceeds the cores."""
        need = plain_demand(models)
        self.calm_looks = self.calm_looks + 1 if need <= self.config.busy_limit * cores else 0
        if need > cores:
            self.calm = False
        elif self.calm_looks >= self.config.calm_windows:
            self.calm = True

    def _held(self, kind: str) -> set[str]:
        held = {j for j, k in self.cooldown if k == kind}
        if kind == "template" and self.calm:
            held |= set(self._bulk())
        return held

    def _bulk(self) -> list[str]:
        return [j.id for j in self.scenario.jobs if j.target_latency_s > self.critical_latency_s]

    def _first(self, job: str) -> str:
        return self.scenario.job[job].templates[0].name

    def _blocked(self, job: str) -> bool:
        """Whether ``job`` runs a stateful template other than its first (held where it is)."""
        running = self.templates.get(job)
        return running not in (None, self._first(job)) and stateful(self.scenario.job[job].template(running))

    def _observe(self, window: WindowStats) -> None:
        """The window's on-time read rate of every job (and the rate offered it): into its pending decisions and
        trials (once they took effect: the job's first output under them; at once for a stopped job) and, for a
        job that ran, into its plain windows (:meth:`_remember`)."""
        settings = self.settings()
        for job in self.scenario.jobs:
            t = self.templates.get(job.id)
            rate = on_time_read(window, self.sources[job.id], job.id)
            offered = sum(window.ingest.get(pe, 0.0) for pe in self.sources[job.id])
            stats = window.latency.get(job.id)
            effect = t is None or rate > 0 or (stats is not None and stats.records > 0)
            for ledger in (self.pending, self.trials):
                for kind in KINDS:
                    p = ledger.get((job.id, kind))
                    if p is None or not (p.seen or p.settled or effect):
                        continue
                    if p.settled < self.config.settle_windows and t is not None:
                        ledger[(job.id, kind)] = replace(p, settled=p.settled + 1)
                    else:
                        ledger[(job.id, kind)] = replace(p, seen=(*p.seen, (t, rate, offered)))
            if t is not None and effect:
                self._remember(job.id, settings[job.id], (t, rate, offered))

    def _remember(self, job: str, setting: Setting, seen: Seen) -> None:
        """A window ``job`` ran in under ``setting``: once ``settle_windows`` of them have passed since its setting
        last changed (the transition: a start, a restart, a backlog draining), an observation of plain for each
        kind at its plain value — the last ``baseline_windows`` are kept."""
        plain = Setting(self._first(job), trigger=self.plain_triggers.get(job))
        identity = tuple(_identity(kind, setting) for kind in KINDS)
        last, count = self.steady.get(job, ((), 0))
        count = count if identity == last else 0
        self.steady[job] = (identity, count + 1)
        if count < self.config.settle_windows:
            return
        for kind in KINDS:
            if _identity(kind, setting) == _identity(kind, plain):
                past = self.plain_seen.setdefault((job, kind), [])
                past.append(seen)
                del past[: max(0, len(past) - self.config.baseline_windows)]

    def _hold_plain(self, d: Decisions, keys: set[tuple[str, str]]) -> bool:
        """Rewrite ``d`` so each (job, kind) in ``keys`` of a kind the Controller decides outside the plan (rate
        cap, pool, trigger) is at its plain value once enforced; returns whether that changes what an engine
        enforces (a cap asked for and not in force was never enforced: holding it changes nothing). Templates and
        admission are held through the plan (:meth:`planning`): they come with a placement and cpu."""
        changed = False
        for job, kind in sorted(keys):
            if kind == "rate cap":
                capped = [pe for pe in self.sources[job] if {**self.caps, **(d.rate_limits or {})}.get(pe) is not None]
                if capped:
                    d.rate_limits = {**(d.rate_limits or {}), **dict.fromkeys(capped)}
                    changed |= any(self.caps.get(pe) is not None for pe in capped)
            elif kind == "pool":
                pools = d.pools if d.pools is not None else self.pools
                if pools.get(job, PLAIN_POOL) != PLAIN_POOL:
                    d.pools, changed = {**pools, job: PLAIN_POOL}, True
            elif kind == "trigger":
                triggers = d.triggers if d.triggers is not None else self.triggers
                if triggers.get(job) != self.plain_triggers.get(job):
                    held = {j: s for j, s in triggers.items() if j != job}
                    if job in self.plain_triggers:
                        held[job] = self.plain_triggers[job]
                    d.triggers, changed = held, True
        return changed

    def _enforced(self, d: Decisions) -> None:
        """What is in force once ``d`` is enforced (fields left None are unchanged, as engines apply them)."""
        if d.admitted is not None:
            self.templates = dict(d.admitted)
        if d.rate_limits is not None:
            self.caps.update(d.rate_limits)
        if d.pools is not None:
            self.pools.update(d.pools)
        if d.triggers is not None:
            self.triggers = dict(d.triggers)

    def _enter(self, now: float, models: Mapping[str, JobModel], plain: Mapping[str, Setting], cores: float) -> None:
        """New ledger entries for what departs from plain now, with their predicted gain; an entry whose value
        went back to plain leaves the ledger. A (job, kind) held plain after a revert enters nothing."""
        settings = self.settings()
        base = objectives(models, plain, cores)
        for job, s in settings.items():
            for kind in KINDS:
                key = (job, kind)
                value, plain_value = _identity(kind, s), _identity(kind, plain[job])
                if value == plain_value or (kind != "admission" and s.template is None):
                    self.pending.pop(key, None)
                    self.kept.pop(key, None)
                    continue
                if key in self.cooldown or self.kept.get(key) == value:
                    continue
                if key in self.pending and self.pending[key].value == value:
                    continue
                self.kept.pop(key, None)
                if kind == "pool":  # a weight is relative: the decision is every job's pool
                    trial = {j: replace(plain[j], weight=settings[j].weight) for j in plain}
                else:
                    trial = {**plain, job: _applied(kind, plain[job], s)}
                gain = objectives(models, trial, cores)[job] - base[job]
                shown = f"{s.cap:.0f} rec/s" if kind == "rate cap" else value
                self.pending[key] = Pending(
                    job, kind, value, plain_value, now, gain, tuple(self.plain_seen.get(key, ())), shown=shown
                )
