"""AutoFlow in the simulator: the experimental setting and what is measured (not a policy).

The setting follows AutoFlow's evaluation on Ray: a keyed aggregation whose
instances are single-threaded actors, so an instance's load is its node's
load and a hot instance backs up (backpressure) while the others idle. Built
from the ``skewed`` generator (Zipf keys, optional hot-key drift): every
instance of the keyed operator gets its own one-core node, and the source and
the sink share an extra ``io`` node.

``run`` drives one simulation under the control loop with one routing policy — ``static`` (hash
routing, never changed), ``live`` (AutoFlow with the marker protocol),
``precopy`` (the same, with the state pre-copied), ``handover`` (precopy,
the group's queued records shipped with the state) or ``stop`` (the same
decisions, enforced stop-the-world) — records the
instances' imbalance every window, and reduces the simulator's tables to the
figures the benchmarks report. Every run ends with a drain and checks exactly
once: per-key sink aggregates against the offline reference, and conservation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from strata.balance.autoflow import AutoFlow
from strata.balance.hotspot import BalanceConfig
from strata.balance.loads import imbalance, window_loads
from strata.balance.lpt import best_imbalance_bounds
from strata.control import loop
from strata.generators import skewed
from strata.model import Scenario
from strata.protocol.engine import Decisions, KeyGroupLoad, Observation, WindowStats
from strata.protocol.units import Message, NodeView
from strata.sim import FifoDispatch, Move, SimOptions, Simulation
from strata.sim.adapter import SimEngine
from strata.sim.reference import sink_totals
from strata.sim.semantics import key_group

PE = "skewed0.agg"
POLICIES = ("static", "live", "precopy", "handover", "stop")


def actor_scenario(
    zipf_s: float,
    drift_period_s: float | None = None,
    instances: int = 8,
    rate: float = 4000.0,
    load: float = 0.7,
    keys: int = 10000,
    key_groups: int = 128,
    state_bytes_per_key: int = 1024,
    seed: int = 1,
) -> tuple[Scenario, dict[str, Any]]:
    """One keyed aggregation over Zipf(``zipf_s``) keys; instance i of it alone on one-core node n<i>.

    ``load`` is the mean utilisation of the aggregation's instances at the
    nominal rate. Returns the scenario and the placement.
    """
    doc = skewed(
        seed=seed,
        zipf_s=zipf_s,
        keys=keys,
        drift_period_s=drift_period_s,
        instances=instances,
        key_groups=key_groups,
        rate=rate,
        nodes=instances,
        cores=1,
        load=load,
        state_bytes_per_key=state_bytes_per_key,
    )
    doc["cluster"]["nodes"] = [{"name": "io", "cores": 2}]
    placement = {"skewed0.src": "io", "skewed0.out": "io", PE: [f"n{i}" for i in range(instances)]}
    return Scenario.model_validate(doc), placement


def expected_group_loads(zipf_s: float, keys: int = 10000, groups: int = 128, shift: int = 0) -> dict[int, float]:
    """Share of records each key group receives under Zipf(``zipf_s``) keys (``shift``: drift steps so far).

    The simulator draws rank r with probability ∝ 1/(r+1)^s and emits key
    (r + shift) mod ``keys``; key → group is the simulator's own hash.
    """
    weights = 1.0 / np.arange(1, keys + 1, dtype=float) ** zipf_s
    weights /= weights.sum()
    out = dict.fromkeys(range(groups), 0.0)
    for rank, w in enumerate(weights.tolist()):
        out[key_group((rank + shift) % keys, groups)] += w
    return out


@dataclass
class Window:
    """One control window of the keyed operator, as observed."""

    time: float
    imbalance: float  # max / mean busy time of the instances in the window
    best_low: float  # bounds on the best imbalance any table reaches with this window's key-group loads
    best_lpt: float
    migrating: int  # key groups moving at the end of the window


@dataclass
class Recorder:
    """The instances' imbalance per ``window_s`` window, next to the best achievable (LPT), until ``until``.

    Fed every control step (:meth:`add`); when the loop observes more often than ``window_s`` (AutoFlow's
    tick), the steps' busy times and key-group loads add up to the window's.
    """

    pe: str = PE
    until: float = math.inf
    window_s: float = 0.0  # 0: every step is a window
    windows: list[Window] = field(default_factory=list)
    _start: float | None = None
    _busy: list[float] = field(default_factory=list)
    _groups: list[KeyGroupLoad] = field(default_factory=list)

    def add(self, obs: WindowStats) -> None:
        if obs.now > self.until:
            return
        if self._start is None:
            self._start = obs.start
        busy = [i.busy for i in obs.instances if i.pe == self.pe]
        self._busy = [a + b for a, b in zip(self._busy, busy, strict=True)] if self._busy else busy
        self._groups.extend(obs.key_groups)
        # 1e-9: ticks add up in floating point, and a window of 8 × 0.25 s must count as 2 s
        if obs.now - self._start < self.window_s - 1e-9:
            return
        groups = window_loads(self._groups).get(self.pe)
        low, lpt_imb = best_imbalance_bounds(groups.load, len(self._busy)) if groups else (1.0, 1.0)
        moving = sum(1 for pe, _ in obs.migrating if pe == self.pe)
        self.windows.append(Window(obs.now, imbalance(self._busy), low, lpt_imb, moving))
        self._start, self._busy, self._groups = None, [], []


@dataclass
class Balancing:
    """The control loop's policy in these experiments: the recorder every step, AutoFlow (None: static routing)
    while the sources run (``until``; the drain's windows are not a workload)."""

    recorder: Recorder
    balancer: AutoFlow | None
    until: float

    def start(self, now: float) -> Decisions:
        return Decisions(0)

    def step(self, obs: Observation) -> Decisions:
        self.recorder.add(obs.window)
        if self.balancer is None or obs.now > self.until:
            return Decisions(0)
        return self.balancer.step(obs)


class TracedFifo(FifoDispatch):
    """FIFO dispatch (the default order) that logs every message of ``pe`` it runs, for latency attribution.

    Per message: (popped = started, instance, key group, event time, arrived
    at the instance, pushed to dispatch, service). A record buffered at a new
    owner until its group's state arrived was pushed when the state was
    installed, so pushed − arrived is its wait for the migration and popped −
    pushed its wait in the queue. The order is FIFO's, so the run is the same
    as without the trace.
    """

    def __init__(self, view: NodeView, pe: str, log: list[tuple[float, ...]]) -> None:
        super().__init__(view)
        self.pe = pe
        self.log = log
        self.pushed: dict[int, float] = {}

    def push(self, msg: Message, now: float) -> None:
        if msg.pe == self.pe:
            self.pushed[msg.seq] = now
        super().push(msg, now)

    def pop(self, now: float) -> Message | None:
        msg = super().pop(now)
        if msg is not None and msg.pe == self.pe:
            pushed = self.pushed.pop(msg.seq)
            self.log.append((now, msg.instance, msg.key_group, msg.event_time, msg.created, pushed, msg.cost))
        return msg


@dataclass
class Run:
    """One simulation's outcome."""

    policy: str
    sim: Simulation
    windows: list[Window]
    balancer: AutoFlow | None
    duration: float
    output_time: np.ndarray  # completion time of every sink output (to the bin), in output order
    latency: np.ndarray  # its end-to-end latency, s
    records: np.ndarray  # records it stands for
    exactly_once: bool
    conserved: bool

    def migration_intervals(self, settle_s: float) -> list[tuple[float, float]]:
        """[requested, installed + settle_s] of every move that changed an owner."""
        mig = self.sim.metrics.migrations()
        mig = mig[mig.src != mig.dst]
        return [(float(r), float(i) + settle_s) for r, i in zip(mig.requested, mig.installed, strict=True)]

    def during(self, intervals: Sequence[tuple[float, float]]) -> np.ndarray:
        """Which outputs complete inside any of ``intervals``."""
        t = self.output_time
        mask = np.zeros(len(t), dtype=bool)
        for a, b in intervals:
            mask |= (t >= a) & (t <= b)
        return mask

    def percentiles(self, mask: np.ndarray) -> dict[str, float]:
        """Records-weighted p50/p99 latency of the outputs selected by ``mask`` (nan when empty)."""
        lat, n = self.latency[mask], self.records[mask]
        if n.sum() == 0:
            return {"records": 0, "p50": math.nan, "p99": math.nan}
        order = np.argsort(lat, kind="stable")
        lat, cum = lat[order], np.cumsum(n[order])
        q = {p: float(lat[np.searchsorted(cum, p * cum[-1], side="left")]) for p in (0.5, 0.99)}
        return {"records": int(cum[-1]), "p50": q[0.5], "p99": q[0.99]}

    def summary(self, warmup: float, settle_s: float = 1.0) -> dict[str, Any]:
        """Headline figures: throughput, imbalance, latency by phase, migrations, exactly once.

        An output is "during migration" when it completes while a move is in
        progress or within ``settle_s`` after it ends. Phases: ``converging``
        (before ``warmup``: the first rounds, from the hash table), then after
        ``warmup`` and before the sources stop, ``during_migration`` and
        ``steady`` (every other output).
        """
        t = self.output_time
        in_run = t < self.duration
        during = self.during(self.migration_intervals(settle_s))
        late = in_run & (t >= warmup)
        mig = self.sim.metrics.migrations()
        moved = mig[mig.src != mig.dst]
        took = (moved.installed - moved.requested).to_numpy()
        windows = [w for w in self.windows if w.time <= self.duration]
        after = [w for w in windows if w.time > warmup]
        return {
            "policy": self.policy,
            "throughput": float(self.records[in_run].sum() / self.duration),
            "overall": self.percentiles(in_run),
            "converging": self.percentiles(in_run & (t < warmup)),
            "during_migration": self.percentiles(late & during),
            "steady": self.percentiles(late & ~during),
            "imbalance_after_warmup": float(np.mean([w.imbalance for w in after])) if after else math.nan,
            "best_lpt_after_warmup": float(np.mean([w.best_lpt for w in after])) if after else math.nan,
            "migrations": len(moved),
            "migration_s_p50": float(np.median(took)) if len(took) else math.nan,
            "migration_s_max": float(took.max()) if len(took) else math.nan,
            "moved_bytes": float(moved.bytes.sum()),
            "exactly_once": self.exactly_once,
            "conserved": self.conserved,
        }


def run(
    policy: str,
    scenario: Scenario,
    placement: dict[str, Any],
    duration: float,
    window_s: float = 2.0,
    config: BalanceConfig | None = None,
    smoothing: float = 1.0,
    seed: int = 1,
    drain: float = 120.0,
    bin_s: float = 0.05,
    moves: Sequence[tuple[float, Move]] = (),
    tick_s: float | None = None,
    demand: bool = True,
    trace: list[tuple[float, ...]] | None = None,
) -> Run:
    """Simulate ``duration`` seconds under ``policy``, then drain and check exactly once.

    One control loop (:func:`strata.control.loop.run`) drives the simulator's engine adapter every ``tick_s``
    (or ``window_s``) under :class:`Balancing`; the balancer and the recorder act only while the sources run
    (the drain's windows are not a workload); the recorder's windows are ``window_s`` long.
    ``tick_s``: observe the operator this often and let AutoFlow round early
    on overload (None: one round per ``window_s``, nothing in between).
    ``demand``: AutoFlow's load is demand (arrived records), not processed
    work. ``moves``: extra (time, move) to force. Output times are known to ``bin_s``.
    ``trace``: a list to fill with every message the keyed operator runs (``TracedFifo``).
    """
    if policy not in POLICIES:
        raise ValueError(f"policy: expected one of {POLICIES}; found {policy!r}")
    period = tick_s or window_s
    recorder = Recorder(until=duration, window_s=window_s)
    balancer = (
        None
        if policy == "static"
        else AutoFlow(
            config or BalanceConfig(),
            mode=policy,
            smoothing=smoothing,
            demand=demand,
            window_s=None if tick_s is None else window_s,
        )
    )
    dispatch = None if trace is None else (lambda view: TracedFifo(view, PE, trace))
    options = SimOptions(seed=seed, placement=placement, record_inputs=True, bin_s=bin_s, dispatch=dispatch)
    engine = SimEngine(scenario, options)
    control = Balancing(recorder, balancer, duration)
    engine.apply(control.start(engine.now()))
    sim = engine.sim
    for at, move in moves:
        sim.apply(Decisions(0, moves=[move]), at=at)
    loop.run(engine, control, window_s=period, until=duration, start=False)
    sim.run(duration, drain=drain)
    job = next(iter(sim.metrics.lat))
    latency = np.frombuffer(sim.metrics.lat[job], dtype=float).copy()
    records = np.frombuffer(sim.metrics.lat_n[job], dtype=np.int64).copy()
    # Outputs are appended in completion order, as are the per-bin output counts: align the two.
    per_bin = np.cumsum(np.asarray(sim.metrics.out_bins[job]))
    output_time = np.searchsorted(per_bin, np.cumsum(records), side="left") * bin_s
    conserved = bool(sim.metrics.conservation().balanced.all())
    return Run(
        policy,
        sim,
        recorder.windows,
        balancer,
        duration,
        output_time,
        latency,
        records,
        sink_totals(sim) == sim.metrics.sink_totals(),
        conserved,
    )


def replay(
    r: Run,
    scenario: Scenario,
    placement: dict[str, Any],
    window_s: float = 2.0,
    seed: int = 1,
    drain: float = 120.0,
    bin_s: float = 0.05,
) -> Run:
    """``r``'s moves again, each at the time it was requested, on ``scenario`` and without a balancer.

    With the same input and a scenario whose state is negligible, this is the
    counterfactual that separates what the migrations cost from the load
    change that made them necessary: same routing decisions at the same
    times, but (almost) nothing to ship, so a stop-the-world pause is only
    the drain of running records and a live move only waits for its markers.
    """
    mig = r.sim.metrics.migrations()
    moves = [(float(m.requested), Move(m.pe, int(m.key_group), int(m.dst), m.mode)) for m in mig.itertuples()]
    return run(
        "static", scenario, placement, r.duration, window_s=window_s, seed=seed, drain=drain, bin_s=bin_s, moves=moves
    )
