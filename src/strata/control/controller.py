"""The controller of the co-operating hierarchy (Dangwal et al., Meta; DESIGN.md rules 1–3).

One object composes the levels; the levels never call each other. The one
loop (:func:`strata.control.loop.run`) drives it over any engine::

    ctl = Controller(scenario, HierarchyConfig(epoch_s=60.0, window_s=5.0))
    run(engine, ctl, window_s=5.0, until=600.0)   # start(): full L0 epoch; then step() every window

Every field of the decisions is set here: L0's admission, templates, cpu
(pools) and placement, its rate caps (pacing, :mod:`strata.plan.pacing`), L1's
moves (:class:`strata.balance.level.TaskLevel`), the meta level's dispatch
choice. The one estimator of the model (:attr:`Controller.estimator`: cost per
record, selectivity and offered rate per PE, from the windows) is what every
(re)plan and the pacing start from, on every engine.

Each level decides one thing, with one primary objective, under the
constraints the levels above set (the full table is in docs/hierarchy.md):
meta (composition; cumulative score) → L0 planner (admission, template, cpu
goal and candidate nodes; importance) → L0 placement (instance → node among
the candidates; weighted max cpu/memory/count utilisation, move budget) → L1
scaling (active instances ≤ those placed; DS2) → L1 balancing (key group →
active instance; max/mean load, move budget, PEs being re-placed frozen) →
L2 dispatch (order of units of work; deadline misses).

Signals up (:mod:`~strata.control.signals`) — deadline-miss pressure,
irreducible hotspot, capacity shortfall, node loss — trigger a re-plan of
only the affected component (the jobs weakly connected to the signalling
job, or holding instances on a lost node) before the epoch ends: the
component is planned again by SODA on the cluster capacity the other jobs
leave free, with source rates and per-record costs taken from the
observations (so the re-plan is informed, not a repeat). Hysteresis: a
signal must persist ``raise_after`` windows, a re-planned job is left alone
``replan_cooldown_s``, a moved key group stays put ``balance.cooldown_s``,
and the placement may move at most ``placement.max_moves`` instances per
(re)plan; a job whose ingest moved by ``replan_on_change`` since its last
plan is new evidence, not a repeat, so its cooldowns do not hold it back and
it joins any component re-plan. The meta level's placement block is adopted
only while its plan keeps SODA's importance (L0's objective binds below).
With ``coordinated=False`` the same levels act alone on the same
signals — no cooldowns, no budgets, L1 not told what L0 is moving — the
uncoordinated baseline of the co-operation experiment.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

import networkx as nx

from strata.adapt.blocks import BALANCING, PLACEMENT, Composition
from strata.balance.level import TaskLevel, uncoordinated
from strata.control.budgets import critical_pools, l1_budget, pool_names, pools
from strata.control.cells import CellConfig, place
from strata.control.estimation import ResourceLearner, mean_offered_rates, offered_demand
from strata.control.harm import HarmConfig, HarmGuard, Setting, job_models
from strata.control.micro_batches import (
    BatchSizing,
    ReadLimitRestarts,
    TaskTimes,
    directory_triggers,
    trigger_intervals,
)
from strata.control.signals import KINDS, Debounce, Signal, SignalConfig, lost_nodes, observed_signals
from strata.model import Cluster, Scenario, critical_jobs, job_maps, joined_graph
from strata.plan import Options, Plan, PlanError, replan
from strata.plan.instances import Host, MultiBalanceConfig, place_instances
from strata.plan.pacing import PACING, pace
from strata.plan.placers import placer
from strata.plan.plan import restricted
from strata.protocol.engine import Decisions, Move, Observation, Placement
from strata.protocol.units import SHARE_POOLS


@dataclass(frozen=True)
class HierarchyConfig:
    """Every knob of the controller, with its default (docs/hierarchy.md)."""

    epoch_s: float = 60.0  # L0 cadence: a full SODA epoch
    window_s: float = 5.0  # L1 cadence: one control step
    plan: Options = field(default_factory=lambda: Options(budget_s=2.0))
    placement: MultiBalanceConfig = field(default_factory=lambda: MultiBalanceConfig(max_moves=4, min_gain=0.05))
    instance_cooldown_s: float = 120.0  # a moved instance stays on its node this long (unless the node is lost)
    balancing: str = "threshold"  # off | threshold | aggressive (the meta level may change it)
    placer: str = "planner"  # planner | greedy | round-robin (takes effect at the next (re)plan)
    dispatch: str = "edf"  # the dispatch level's own block (strata.adapt.Composition's default: why)
    smoothing: float = 0.5  # weight of the newest window in the loads L1 sees
    moves_per_window: int = 8  # L1 key-group moves per window, all PEs together
    signals: SignalConfig = field(default_factory=SignalConfig)
    replan_cooldown_s: float = 20.0
    placer_tolerance: float = 0.02  # importance a baseline placement block may give up against SODA's plan
    replan_on_change: float = 0.5  # relative ingest change since a job's last plan that lifts its cooldowns
    headroom: float = 0.2  # DS2 headroom, and the cpu margin a pressured component is re-planned with
    scaling: bool = True
    # L0 rate caps at the sources from the plan in force (strata.plan.pacing.PACING): "plan" (SODA microQ's admitted
    # ingest: what Spark's non-preemptible micro-batches need), "shares" (work conserving) or "off". Off by default:
    # under message-level deadline dispatch (the simulator) both kinds of caps lowered every composition's score on
    # bench_adapt_phases (docs/hierarchy.md, "Pacing"); strata run and the demo set "plan".
    pacing: str = "off"
    coordinated: bool = True
    # Builds the meta level (a strata.adapt Selector or Fixed) for the controller's scenario when none is passed:
    # how a caller that only hands over a config (the Spark demo's run loop) gets the learner.
    meta: Callable[[Scenario], object] | None = None
    # Micro-batch knobs (strata.control.micro_batches; engines that run micro-batches, i.e. Spark).
    critical_latency_s: float = 5.0  # a job with a latency target this short or shorter is latency-critical
    batches_per_target: float = 15.0  # trigger of a non-critical job: its target / this ...
    trigger_max_s: float = 5.0  # ... at most this
    critical_poll: float = 0.05  # a critical job's trigger: this × its target (how often its driver polls for input)
    critical_file_poll: float = 0.05  # ... when its query reads directories (micro_batches.directory_triggers)
    gate_reserved_cores: int = 1  # the gate lets the session's cores less this run at once (at least 1)
    # Bulk batches split into tasks whose longest fits the critical jobs' slack (micro_batches.BatchSizing,
    # Decisions.task_records): for engines whose units of work are micro-batches (strata run and the demo set it).
    size_batches: bool = False
    # ... never finer than keeps a task's fixed cost (core-seconds: its launch, its input split, its sink file)
    # within split_overhead_share of the records it holds (micro_batches.fewest_records)
    task_overhead_s: float = 0.0
    split_overhead_share: float = 0.1
    # L0's rate caps on user queries through their sources' read limits, which Spark reads only at start (every
    # change is a restart). Off by default: on bench_platform (--cap-reads) the caps, planned on costs learned
    # from batch times on a loaded machine, cost the bulk queries ~40% of their rows/s without lowering the
    # critical query's p99 (docs/spark.md, "Rate caps on user queries").
    cap_reads: bool = False
    read_limit_ratio: float = 1.5  # a read limit is changed (restart) only when it moves by this factor or more
    restart_every_s: float = 20.0  # and a query is restarted for a new read limit at most this often
    harm: HarmConfig = field(default_factory=HarmConfig)  # do no harm: judge, revert (strata.control.harm)
    # L0's cell placement (strata.control.cells): set only for an engine that runs cells (strata.runners.fleet);
    # None: no cell decisions.
    cells: CellConfig | None = None

    def triggers(self, scenario: Scenario) -> dict[str, float]:
        """Job → processing-time trigger (s) of ``scenario``'s jobs under these knobs."""
        return trigger_intervals(
            scenario, self.critical_latency_s, self.batches_per_target, self.trigger_max_s, self.critical_poll
        )

    def directory_triggers(self, scenario: Scenario) -> dict[str, float]:
        """Job → processing-time trigger (s) of ``scenario``'s latency-critical jobs when their queries read
        directories (the engine uses it in place of :meth:`triggers` for such a query)."""
        triggers = self.triggers(scenario)
        return directory_triggers(triggers, scenario, self.critical_latency_s, self.critical_file_poll)

    def read_restarts(self) -> ReadLimitRestarts:
        """The read-limit restart policy these knobs describe (given to the engine)."""
        return ReadLimitRestarts(self.cap_reads, self.read_limit_ratio, self.restart_every_s)

    def __post_init__(self) -> None:
        if self.balancing not in BALANCING:
            raise ValueError(f"balancing: expected one of {sorted(BALANCING)}; found {self.balancing!r}")
        if self.placer not in PLACEMENT:
            raise ValueError(f"placer: expected one of {PLACEMENT}; found {self.placer!r}")
        if self.pacing not in PACING:
            raise ValueError(f"pacing: expected one of {PACING}; found {self.pacing!r}")
        if self.epoch_s <= 0 or self.window_s <= 0:
            raise ValueError("epoch_s and window_s must be > 0 seconds")


@dataclass
class StepLog:
    """What one step saw and did (for reports and the benchmarks)."""

    time: float
    epoch: int
    signals: tuple[str, ...]
    replanned: tuple[str, ...]
    placement_moves: int  # instances whose node changed
    key_group_moves: int
    scaled: dict[str, int]
    dispatch: str | None
    skipped: tuple[str, ...] = ()  # signals ignored (cooldown) and why
    plan_seconds: float = 0.0
    balancing: str | None = None  # L1's balancing block in force after the step
    meta_seconds: float = 0.0  # wall time the meta level took to choose (its own cost per control step)


class Controller:
    """Budgets down, signals up: L0 on epochs and on signals, L1 per window, the meta choice per step."""

    def __init__(self, scenario: Scenario, config: HierarchyConfig | None = None, selector=None) -> None:
        self.scenario = scenario
        self.config = cfg = config or HierarchyConfig()
        if selector is None and cfg.meta is not None:
            selector = cfg.meta(scenario)
        self.selector = selector  # strata.adapt.Selector or None (fixed composition)
        self.plan: Plan | None = None
        self.placement: Placement = {}
        self.down: set[str] = set()
        self.epoch = 0
        self.log: list[StepLog] = []
        self.dispatch = cfg.dispatch
        self.balancing = cfg.balancing
        self.placer = cfg.placer
        self.placed_by = cfg.placer  # the placer that made the plan in force
        # The placement block the plan in force answered: ``placed_by``, or a block L0 refused in favour of SODA's
        # plan — choosing it led to that plan, so that is what the meta level learns of it.
        self.answered = cfg.placer
        self._last_full = -math.inf
        self._cooldown: dict[str, float] = {}
        self._planned_ingest: dict[str, float] = {}  # job → the observed ingest its last (re)plan used
        self._on_prior: set[str] = set()  # jobs whose last (re)plan had no observed ingest, only the spec's rate
        self._plain: set[str] = set()  # jobs whose last (re)plan ran them as plain Spark would: not observed yet
        sc = cfg.signals if cfg.coordinated else replace(cfg.signals, raise_after=1, clear_after=1)
        self._debounce = Debounce(sc.raise_after, sc.clear_after)
        self._l1 = TaskLevel(
            smoothing=cfg.smoothing if cfg.coordinated else 1.0,
            stable=2 if cfg.coordinated else 1,
            headroom=cfg.headroom,
        )
        self._margin: dict[str, float] = {}  # job → rate multiplier its last re-plan used
        self._cells: dict[str, str] | None = None  # job → cell in force (engines that run cells)
        self._cell_shares: dict[str, float] = {}
        # The one estimator of the model (costs, selectivities, offered rates); before any observation a source is
        # expected at its arrival process's long-run mean rate.
        self.estimator = ResourceLearner()
        self.task_times = TaskTimes()  # how long each job's tasks hold a core (wall): what bulk batches are sized on
        self._prior = mean_offered_rates(scenario)
        self._planned_model = scenario  # the (learned) model the plan in force was made on: what pacing reads
        self._load: dict[tuple[str, int], float] = {}  # (PE, instance) → cores it used in the last window
        self._moved: dict[tuple[str, int], float] = {}  # (PE, instance) → when L0 last moved it
        self._job_of, self._sources, self._jobs_graph = job_maps(scenario)
        self._nominal: dict[str, float] = {}  # job → Σ its first template's source rates in the spec
        for job in scenario.jobs:
            ops = job.templates[0].operators
            self._nominal[job.id] = sum(op.source.rate for op in ops if op.source is not None)
        self._evidence: set[str] = set()  # jobs observed: their costs learned from the engine's accounting
        by_job = {j: [pe for pe, owner in self._sources.items() if owner == j] for j in scenario.job}
        # plain Spark runs the triggers the Controller starts with (the runner gives Plain the same): no departure
        self._harm = HarmGuard(
            scenario, by_job, cfg.critical_latency_s, cfg.harm, plain_triggers=cfg.triggers(scenario)
        )
        self._critical = set(critical_jobs(scenario, cfg.critical_latency_s))

    # ------------------------------------------------------------------ API

    def start(self, now: float = 0.0) -> Decisions:
        """The first full epoch: admission, templates, cpu, placement of every instance; the initial dispatch."""
        self._full_plan(now, ())
        self.epoch = 1
        shares = self._pools()
        d = Decisions(
            epoch=self.epoch,
            admitted=dict(self.plan.templates),
            cpu_share=shares,
            pools=self._pool_names(shares),
            triggers=self.config.triggers(self.scenario),
            placement={pe: list(v) for pe, v in self.placement.items()},
            dispatch=self.dispatch,
            rate_limits=self._pace(None),
            replan=("*",),
            reasons=("start",),
        )
        self._place_cells(d)
        self.log.append(StepLog(now, self.epoch, (), ("*",), 0, 0, {}, self.dispatch, balancing=self.balancing))
        return self._size_batches(self._no_harm(d, now, None), None)

    def step(self, obs: Observation) -> Decisions:
        """One control window: signals, L0 re-plans (full or per component), L1 scaling and moves, meta choice."""
        if self.plan is None:
            raise RuntimeError("call start() before step()")
        cfg = self.config
        now = obs.now
        self._learn(obs)
        reasons: list[str] = []
        skipped: list[str] = []
        old_place = {pe: list(v) for pe, v in self.placement.items()}
        old_templates = dict(self.plan.templates)
        old_pools = self._pools()
        old_names = self._pool_names(old_pools)

        # Meta level: the composition for this window (dispatch now; balancing now; placer at the next plan).
        # What ran in the window that ended — the plan in force, answering whichever placer was chosen when it was
        # made — is what the learner credits, not a choice no plan has answered yet.
        meta_seconds = 0.0
        if self.selector is not None:
            t0 = time.perf_counter()
            comp = self.selector.select(obs, Composition(self.dispatch, self.balancing, self.answered))
            meta_seconds = time.perf_counter() - t0
            if comp is not None:
                self.dispatch, self.balancing, self.placer = comp.dispatch, comp.balancing, comp.placement

        signals = self._signals(obs)
        unseen = self._first_seen()
        proven = self._proven()
        held = self._harm.replan_due(self.plan.templates)  # do no harm: templates, admission held plain
        replanned: tuple[str, ...] = ()
        plan_seconds = 0.0
        if now - self._last_full >= cfg.epoch_s - 1e-9:
            self.epoch += 1
            plan_seconds = self._full_plan(now, signals)
            replanned = ("*",)
            reasons.append("epoch")
            for s in signals:
                self._debounce.reset((s.kind, s.job))
        elif signals or unseen or proven or held:
            jobs: set[str] = set()
            for j in held:
                jobs |= set(nx.node_connected_component(self._jobs_graph, j))
                reasons.append(f"held plain:{j} (do no harm)")
            # A job planned on its prior rate alone (a Python job declares none) is re-planned on its first
            # observed ingest: SODA's plan is only as good as the rates it is given.
            for j in unseen:
                jobs |= set(nx.node_connected_component(self._jobs_graph, j))
                reasons.append(f"observed:{j} (ingest {self._job_ingest(j):.0f}/s; planned on its prior)")
            # A job planned before it was observed ran as plain Spark runs it: once its costs are learned it is
            # re-planned on them, the first plan that may depart from plain for it.
            for j in proven:
                jobs |= set(nx.node_connected_component(self._jobs_graph, j))
                reasons.append(f"learned:{j} (costs over {self._samples(j)} windows; ran as plain Spark until now)")
            for s in signals:
                # A lost node is never waited out: its instances must move now.
                if cfg.coordinated and s.kind != "node-loss" and self._cooldown.get(s.job, -math.inf) > now:
                    # The cooldown keeps a re-plan from being repeated on the same evidence; a job whose demand
                    # has moved since is new evidence, and waiting would leave it on a plan for another load.
                    change = self._ingest_change(s.job)
                    if change < cfg.replan_on_change:
                        skipped.append(f"{s} (cooldown until {self._cooldown[s.job]:.1f})")
                        continue
                    reasons.append(f"ingest changed {change:.0%} since the last plan of {s.job}")
                jobs |= set(nx.node_connected_component(self._jobs_graph, s.job))
                reasons.append(str(s))
            if jobs and cfg.coordinated:
                # Jobs whose ingest moved since their plan hold capacity planned for another load (an idle job
                # its old share): they join the re-plan, so the signalling component is planned on what is free.
                for j in sorted(set(self.scenario.job) - jobs):
                    change = self._ingest_change(j)
                    if change >= cfg.replan_on_change:
                        jobs |= set(nx.node_connected_component(self._jobs_graph, j))
                        reasons.append(f"stale:{j} (ingest changed {change:.0%} since its plan)")
            if jobs:
                epoch = self.epoch
                plan_seconds = self._component_plan(now, jobs, signals)
                replanned = tuple(sorted(jobs)) if self.epoch == epoch else ("*",)
                for s in signals:
                    if s.job in jobs:
                        self._debounce.reset((s.kind, s.job))

        changed = {pe for pe, v in self.placement.items() if old_place.get(pe) != v}
        moves, scaled = self._level1(obs, changed)

        d = Decisions(
            epoch=self.epoch, moves=moves, rate_limits=self._pace(obs.window), replan=replanned, reasons=tuple(reasons)
        )
        if self.plan.templates != old_templates:
            d.admitted = dict(self.plan.templates)
        new_pools = self._pools()
        new_names = self._pool_names(new_pools)
        if new_pools != old_pools or new_names != old_names:
            d.cpu_share = new_pools
            d.pools = new_names
        if changed:
            d.placement = {pe: list(self.placement[pe]) for pe in sorted(changed)}
        if obs.dispatch != self.dispatch:
            d.dispatch = self.dispatch
        if replanned:
            self._place_cells(d)
        d = self._size_batches(self._no_harm(d, now, obs.window), obs.window)
        placement_moves = sum(
            1 for pe in changed for a, b in zip(old_place.get(pe, []), self.placement[pe], strict=False) if a[0] != b[0]
        )
        self.log.append(
            StepLog(
                now,
                self.epoch,
                tuple(str(s) for s in signals),
                replanned,
                placement_moves,
                len(moves),
                scaled,
                self.dispatch,
                tuple(skipped),
                plan_seconds,
                self.balancing,
                meta_seconds,
            )
        )
        return d

    def _no_harm(self, d: Decisions, now: float, window) -> Decisions:
        """Do no harm (:mod:`strata.control.harm`): the decisions judged on ``window`` (None: the start), the
        harmful ones reverted, bulk jobs held plain without overload, ``d``'s new decisions entered in the ledger
        with their predicted gain."""
        return self._harm.review(d, now, window, *self._harm_model())

    def _harm_model(self) -> tuple[dict, float]:
        """The jobs' models for the do-no-harm check (on the model as learned: the offered rates measured, else
        their priors) and the live cores they share."""
        cores = sum(n.cores for n in self.scenario.cluster.all_nodes if n.name not in self.down)
        return job_models(self.model()), cores

    # ------------------------------------------------------------------ observations → model

    def _learn(self, obs: Observation) -> None:
        """The window into the estimator (costs, selectivities, offered rates), instance loads and lost nodes."""
        w = obs.window
        self.estimator.observe_window(w)
        self.task_times.observe(obs.task_run)
        span = max(w.now - w.start, 1e-9)
        self._load = {(inst.pe, inst.instance): inst.busy / span for inst in w.instances}
        for node in lost_nodes(obs, self.down):
            self.down.add(node)
        self.down &= set(obs.nodes_down) | self.down

    def model(self, margin: Mapping[str, float] | None = None) -> Scenario:
        """The scenario as observed so far: learned costs and selectivities, observed offer × ``margin`` per job."""
        return self.estimator.refine(self.scenario, self._prior, margin)

    def _pace(self, window) -> dict[str, float | None] | None:
        """L0's rate caps for the plan in force (None: pacing off); never on a job not observed yet."""
        cfg = self.config
        if cfg.pacing == "off":
            return None
        opt = cfg.plan
        caps = self._worth_capping(
            pace(self._planned_model, self.plan, window, cfg.window_s, cfg.pacing, opt.batch, opt.headroom)
        )
        return {pe: None if self._job_of[pe] in self._plain else cap for pe, cap in caps.items()}

    def _size_batches(self, d: Decisions, window) -> Decisions:
        """``d`` with each bulk job's task size (``task_records``): its batches split into tasks whose longest fits
        the critical jobs' slack (:class:`~strata.control.micro_batches.BatchSizing`, when ``size_batches``), on
        its costs learned, its tasks' wall time measured (from its first batch on), or before either on its prior
        cost (from the start: the first burst comes before any batch is measured; a split is no cap and no share
        below the offer, so a job not observed yet may have one); the source's own split in cells on a job in a
        cell with no critical job. Applied after do no harm: a batch split finer reads as much as before, and the
        bound comes from the critical jobs' targets and the bulk tasks' measured length (Spark's only preemption
        is a task's end), not from overload or the rate model, so neither a calm machine nor a rate verdict lifts
        it."""
        cfg = self.config
        if not cfg.size_batches:
            return d
        cores = int(self.scenario.cluster.total_cores)
        sizing = BatchSizing(
            cores, cfg.critical_latency_s, cfg.triggers(self.scenario), cfg.task_overhead_s, cfg.split_overhead_share
        )
        ingest = window.ingest if window is not None else self._prior
        measured = self.task_times.per_record()
        sized = sizing.tasks(self.model(), self.plan.templates, self.estimator.estimates(), ingest, measured)
        # Spark orders tasks only within one application: in cells, a bulk job in a cell without a critical job
        # shares the machine's cores through the OS, which preempts; splitting its batches there only costs tasks
        beside = None if self._cells is None else {self._cells.get(j) for j in self._critical}
        d.task_records = {
            pe: sized.get(pe) if beside is None or self._cells.get(job) in beside else None
            for pe, job in sorted(self._sources.items())
            if job not in self._critical
        }
        return d

    def _worth_capping(self, caps: dict[str, float | None]) -> dict[str, float | None]:
        """The pacing's ``caps`` (source PE → records/s) less those of a job the cap is not predicted to gain
        anything for beyond noise, over all jobs (:meth:`HarmGuard.worth`: every job on the plan's template,
        uncapped, against the same with this job's sources capped): a cap costs its own job and pays only through
        the cores it leaves the others. Each job whose cap is dropped is withheld, with why."""
        if not self.config.harm.enabled:
            return caps
        models, cores = self._harm_model()
        base = {job: Setting(self.plan.templates.get(job)) for job in models}  # the plan in force, uncapped
        out = dict(caps)
        for job in sorted(self.plan.templates):
            pes = [pe for pe in caps if self._job_of.get(pe) == job and caps[pe] is not None]
            if not pes or job in self._plain:
                self._harm.withhold((job, "rate cap"), None)
                continue
            cap = sum(caps[pe] for pe in pes)
            ok, gain, margin = self._harm.worth(models, {job: replace(base[job], cap=cap)}, cores, base)
            if ok:
                self._harm.withhold((job, "rate cap"), None)
                continue
            out.update(dict.fromkeys(pes))
            self._harm.withhold(
                (job, "rate cap"),
                f"rate cap {cap:.0f} rec/s not made: predicted {gain:+.4g}/s over all jobs, not above the noise "
                f"margin {margin:.4g}/s",
            )
        return out

    # ------------------------------------------------------------------ signals

    def _signals(self, obs: Observation) -> list[Signal]:
        """The signals up this window, debounced (node loss raises at once)."""
        present = observed_signals(
            obs, self.config.signals, self.scenario, self.placement, self._job_of, self._sources, self._l1.hotspots
        )
        known = {(k, j) for k in KINDS for j in self.scenario.job}
        up = self._debounce.update(present, known)
        signals = [s for key, s in present.items() if key in up or s.kind == "node-loss"]
        return sorted(signals, key=lambda s: (KINDS.index(s.kind), s.job))

    # ------------------------------------------------------------------ L0

    def _live_cluster(self, reserved: Mapping[str, float] | None = None) -> Cluster | None:
        """The cluster without lost nodes, each node's cores minus ``reserved`` (cpu other components hold)."""
        reserved = reserved or {}
        nodes = []
        for n in self.scenario.cluster.all_nodes:
            if n.name in self.down:
                continue
            free = n.cores - reserved.get(n.name, 0.0)
            if free > 0.05:
                nodes.append(n.model_copy(update={"cores": free}) if free != n.cores else n)
        return Cluster(nodes=nodes) if nodes else None

    def _job_ingest(self, job: str) -> float:
        """The job's smoothed observed ingest; before any observation, the rate its spec promises (what L0 used)."""
        seen = [r for pe, r in self.estimator.ingest.items() if self._sources.get(pe) == job]
        return sum(seen) if seen else self._nominal[job]

    def _remember_ingest(self, jobs: set[str]) -> None:
        for j in jobs:
            self._planned_ingest[j] = self._job_ingest(j)
            if self._observed_ingest(j):
                self._on_prior.discard(j)
            else:
                self._on_prior.add(j)
            if self._observed(j):
                self._plain.discard(j)
            else:
                self._plain.add(j)

    def _observed_ingest(self, job: str) -> bool:
        return any(self._sources.get(pe) == job for pe in self.estimator.ingest)

    def _observed(self, job: str) -> bool:
        """Whether ``job`` has been observed: its offered rate seen (a job with sources) and costs learned for its
        operators from the engine's accounting (an estimate, ``estimator.min_samples`` windows with its work, for
        one of its PEs at least: an engine that runs a chain as one unit accounts them all at once). Once
        observed, a job stays so: a template it has not run yet is planned on its operators' priors, next to the
        learned ones of operators it shares with the templates it ran."""
        if job not in self._evidence:
            ingest = self._observed_ingest(job) or job not in self._sources.values()
            if ingest and any(self._job_of.get(pe) == job for pe in self.estimator.estimates()):
                self._evidence.add(job)
        return job in self._evidence

    def _first_seen(self) -> list[str]:
        """Jobs whose plan used their prior rate and whose ingest is observed for the first time, differing from
        it by ``replan_on_change`` or more. The first observation settles the prior either way: later changes
        are signals' business."""
        seen = [j for j in sorted(self._on_prior) if self._observed_ingest(j)]
        self._on_prior -= set(seen)
        return [j for j in seen if self._ingest_change(j) >= self.config.replan_on_change]

    def _samples(self, job: str) -> int:
        """Windows with the job's work its learned costs rest on (the most over its PEs)."""
        learned = self.estimator.estimates().items()
        return max((e.samples for pe, e in learned if self._job_of.get(pe) == job), default=0)

    def _proven(self) -> list[str]:
        """Jobs planned before they were observed (as plain Spark runs them) and observed now: each is re-planned
        once on its learned costs and observed rate, the first plan that may depart from plain for it."""
        seen = [j for j in sorted(self._plain) if self._observed(j)]
        self._plain -= set(seen)
        return seen

    def _ingest_change(self, job: str) -> float:
        """|now − planned| / max(now, planned, a tenth of the spec's rate): 1 for a job that woke from idle."""
        then, now = self._planned_ingest.get(job, 0.0), self._job_ingest(job)
        floor = 0.1 * self._nominal.get(job, 0.0)
        return abs(now - then) / max(now, then, floor, 1e-9)

    def _as_learned(self, cluster: Cluster, margin: Mapping[str, float]) -> Scenario:
        """The scenario the planner is given: learned costs and observed rates; a job not observed yet as plain
        Spark runs it (:meth:`HarmGuard.planning`)."""
        unseen = {j for j in self.scenario.job if not self._observed(j)}
        memory = sum(n.memory for n in cluster.all_nodes)
        jobs = self._harm.planning(self.model(margin).jobs, *self._harm_model(), unseen=unseen, memory=memory)
        return Scenario(name=self.scenario.name, cluster=cluster, jobs=jobs)

    def _run_planner(self, scenario: Scenario, previous: Plan | None, name: str) -> Plan:
        return placer(name)(scenario, previous, self.config.plan)

    def _vetted(self, make: Callable[[str], Plan], now: float) -> tuple[Plan, str]:
        """The plan of the placement block the meta level chose, if it keeps L0's objective; else SODA's.

        L0's primary objective is importance, and an upper level's objective
        binds the levels below: the meta level may hand placement to a
        baseline block only while its plan's importance is within
        ``placer_tolerance`` of SODA's on the same observed scenario. A block
        that would starve a job (round-robin onto an overloaded node) is
        refused at the plan, before its placement persists for an epoch.
        """
        if self.placer == "planner":
            return make("planner"), "planner"
        proposal, soda = make(self.placer), make("planner")
        if proposal.importance >= (1.0 - self.config.placer_tolerance) * soda.importance:
            return proposal, self.placer
        soda.notes.append(
            f"{now:.1f}: {self.placer} placement refused (importance {proposal.importance:.4g} "
            f"< {soda.importance:.4g} of SODA's plan); SODA's plan kept"
        )
        return soda, "planner"

    def _restrict(self, previous: Plan | None, jobs: set[str], nodes: set[str]) -> Plan | None:
        return restricted(previous, self.placement, self._job_of, jobs, nodes)

    def _full_plan(self, now: float, signals) -> float:
        """A full SODA epoch on the live cluster with observed rates and costs; then place every instance."""
        t0 = time.perf_counter()
        cluster = self._live_cluster()
        margin = {s.job: 1.0 + self.config.headroom for s in signals if s.kind in ("miss", "shortfall")}
        sub = self._as_learned(cluster, margin)
        previous = self._restrict(self.plan, set(self.scenario.job), {n.name for n in cluster.all_nodes})

        def attempt(placer: str) -> Plan:
            try:
                return self._run_planner(sub, previous, placer)
            except (PlanError, RuntimeError):  # RuntimeError: a solver failing beyond its fallbacks
                if previous is None:
                    raise
                # The incremental reference (stay near the last plan) may be what cannot be met; plan afresh.
                return self._run_planner(sub, None, placer)

        try:
            new, by = self._vetted(attempt, now)
        except (PlanError, RuntimeError) as e:
            if self.plan is None:
                raise
            self._note(f"full epoch at {now:.1f}: planner failed ({e}); previous plan kept until the next epoch")
            self._last_full = now
            return time.perf_counter() - t0
        had = bool(self.placement)
        self.plan = new
        self._adopt_placer(by)
        self._last_full = now
        self._planned_model = self.model()
        self._place(set(new.assignment) | set(self.placement), budgeted=had, now=now)
        self._remember_ingest(set(self.scenario.job))
        return time.perf_counter() - t0

    def _component_plan(self, now: float, jobs: set[str], signals: list[Signal]) -> float:
        """Re-plan only ``jobs``' components (``strata.plan.replan``) on the live nodes, with observed rates and costs.

        The other components keep their plan; the re-planned ones get the cpu and
        memory the rest leaves free. Then only their instances are re-placed.
        """
        t0 = time.perf_counter()
        for s in signals:
            if s.job in jobs and s.kind in ("miss", "shortfall", "hotspot"):
                self._margin[s.job] = min(self._margin.get(s.job, 1.0) * (1.0 + self.config.headroom), 3.0)
        cluster = self._live_cluster()
        if cluster is None:
            self._note(f"re-plan of {sorted(jobs)} at {now:.1f}: no live node")
            return time.perf_counter() - t0
        observed = self._as_learned(cluster, self._margin)
        previous = self._restrict(self.plan, set(self.plan.templates), {n.name for n in cluster.all_nodes})

        def attempt(placer: str) -> Plan:
            if placer == "planner":
                return replan(observed, previous, jobs, self.config.plan)
            return self._run_planner(observed, previous, placer)

        try:
            new, by = self._vetted(attempt, now)
        except (PlanError, RuntimeError) as e:  # RuntimeError: a solver failing beyond its fallbacks
            # The component does not fit next to the other components' decisions (they hold the capacity or the
            # labelled nodes it needs). Keeping its plan would leave a job signalling a miss on a plan made for
            # another load until the epoch ends; the signal escalates to a full plan now instead.
            self._note(f"re-plan of {sorted(jobs)} at {now:.1f} failed ({e}); escalated to a full plan")
            self.epoch += 1
            return time.perf_counter() - t0 + self._full_plan(now, signals)
        self.plan = new
        self._planned_model = self.model()
        self._adopt_placer(by)
        for j in jobs:
            self._cooldown[j] = now + self.config.replan_cooldown_s
        self._place(
            {pe for pe in set(new.assignment) | set(self.placement) if self._job_of[pe] in jobs}, budgeted=True, now=now
        )
        self._remember_ingest(jobs)
        return time.perf_counter() - t0

    def _adopt_placer(self, placer: str) -> None:
        """A plan by another placement block than the last is not bound by the last one's instance cooldowns.

        The cooldowns keep one placer from undoing its own recent moves; when the
        meta level hands placement to another block, that block starts from
        where the instances are, free to correct what its predecessor did.
        """
        if placer != self.placed_by:
            self._moved.clear()
        self.placed_by = placer
        self.answered = self.placer

    def _place(self, pes: set[str], budgeted: bool, now: float) -> None:
        """The multi-resource balancer under the plan (:func:`strata.plan.instances.place_instances`).

        Hysteresis (co-operative mode): an instance L0 moved less than
        ``instance_cooldown_s`` ago stays where it is unless its node is lost
        or its job's ingest changed by ``replan_on_change`` since the last plan
        (it was placed for another load), and a move must gain
        ``placement.min_gain`` of the objective.
        """
        cfg = self.config

        def pinned(pe: str, i: int, where: str) -> bool:
            return (
                cfg.coordinated
                and self._moved.get((pe, i), -math.inf) + cfg.instance_cooldown_s > now
                and self._ingest_change(self._job_of[pe]) < cfg.replan_on_change
            )

        hosts = [Host(n.name, n.cores, n.memory) for n in self.scenario.cluster.all_nodes if n.name not in self.down]
        mb = cfg.placement
        if not budgeted or not cfg.coordinated:
            mb = replace(mb, max_moves=None)
        if not cfg.coordinated:
            mb = replace(mb, min_gain=0.0)
        graph = joined_graph(self.scenario, self.plan.templates)
        placed, detail = place_instances(
            graph, self.plan, self.placement, pes, hosts, self.down, self._load, pinned, mb
        )
        for pe in pes:
            old = self.placement.get(pe)
            if pe not in placed:
                self.placement.pop(pe, None)
                continue
            self.placement[pe] = placed[pe]
            for i, (node, _) in enumerate(placed[pe]):
                if old and old[i][0] != node:
                    self._moved[pe, i] = now
        for d in detail:
            self._note(f"placement: {d}")

    def _pools(self) -> dict[str, float]:
        """Job → cpu share of the plan in force. Priors only seed the estimator: a job planned before it was
        observed gets at least what its sources offer needs (:func:`offered_demand`, at the rate observed so far
        else its prior), never a share a plan on guessed rates and costs made smaller."""
        shares = pools(self.plan, self._job_of)
        unseen = {j: t for j, t in self.plan.templates.items() if j in self._plain}
        for job, cores in (offered_demand(self.model(), unseen) if unseen else {}).items():
            shares[job] = max(shares.get(job, 0.0), cores)
        return shares

    def _pool_names(self, shares: Mapping[str, float]) -> dict[str, str]:
        """The FAIR pools that enforce ``shares`` (:func:`pool_names`), a job planned before it was observed in
        the heaviest of them: no job the plan favours on evidence outweighs it, so under contention it gets at
        least the equal share plain Spark gives it. Weights relative to the lightest (all equal: plain's w1).

        A latency-critical job runs in the weight-32 pool from the first plan on, as Spark's documentation has a
        team put it by hand (:func:`critical_pools`), whatever its share: a share is cores over a window, and a
        critical job's is the smallest, so ∝ it its pool was the lightest (issue 29: ``w1`` next to bulk ``w8``)."""
        names = pool_names(shares)
        if self.config.harm.enabled:
            weight = {job: SHARE_POOLS[name] for job, name in names.items()}
            top = max(weight.values(), default=1)
            weight.update({job: top for job in weight if job in self._plain})
            least = min(weight.values(), default=1)
            names = {job: f"w{w // least}" for job, w in weight.items()}
        return critical_pools(names, self._critical)

    def _place_cells(self, d: Decisions) -> None:
        """L0's jobs → cells and cell shares into ``d`` (when the engine runs cells), from the plan in force's cpu
        shares, kept near the placement in force (the movement limit); only what changed."""
        cfg = self.config.cells
        if cfg is None:
            return
        cells = place(self.scenario, self._pools(), self.config.critical_latency_s, cfg, self._cells)
        self._note(
            f"cells ({cells.solver}): "
            + "; ".join(f"{c} {cells.shares[c]:.2f} cores: {', '.join(j)}" for c, j in sorted(cells.cells.items()))
        )
        placed = {job: cell for cell, jobs in cells.cells.items() for job in jobs}
        if placed != self._cells:
            d.cells = placed
        if cells.shares != self._cell_shares:
            d.cell_shares = dict(cells.shares)
        self._cells, self._cell_shares = placed, dict(cells.shares)

    def _note(self, text: str) -> None:
        self.plan.notes.append(text)

    # ------------------------------------------------------------------ L1

    def _level1(self, obs: Observation, frozen: set[str]) -> tuple[list[Move], dict[str, int]]:
        """L1 inside L0's budget: the placed instances as the ceiling, the window's move budget, frozen PEs."""
        cfg = self.config
        budget = l1_budget(
            self.placement,
            obs.window.routing,
            cfg.moves_per_window if cfg.coordinated else 10**6,
            frozen=frozen if cfg.coordinated else (),
        )
        mode = BALANCING[self.balancing]
        return self._l1.step(
            obs.window,
            budget,
            mode if cfg.coordinated else uncoordinated(mode),
            scaling=cfg.scaling,
            feeds=self._feeds,
        )

    def _feeds(self, upstream: str, pe: str) -> bool:
        graph = self._graph()
        return graph.has_edge(upstream, pe)

    def _graph(self) -> nx.DiGraph:
        key = tuple(sorted(self.plan.templates.items()))
        if getattr(self, "_graph_key", None) != key:
            self._graph_key = key
            self._graph_cache = joined_graph(self.scenario, self.plan.templates)
        return self._graph_cache
