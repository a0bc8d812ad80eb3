"""The AutoFlow controller: one hotspot-diminishing round per load window, per keyed operator.

AutoFlow's centralised scheduler (Lu et al., §scheduler): every window it
reads the key-group loads the engine measured, decides migrations with the
hotspot-diminishing algorithm and hands them to the engine, which runs the
marker protocol. The controller only keeps what the algorithm's hysteresis
needs between rounds (smoothed loads, when each key group last moved), what
turns processed work into demand (each instance's queue at the previous
observation) and a log of its rounds; it never touches an engine.

Two refinements over a fixed window, both read from the observation only:

- **load is demand**: an overloaded instance's busy time saturates at the
  window length while the excess waits in its queue, so each instance's
  key-group loads are scaled by records arrived / records processed
  (``loads.demand_factors``) — otherwise the first round after a load change
  plans on the capped figure and leaves the hot instance overloaded;
- **early round on overload** (``window_s`` set): observed every tick, a
  round runs every ``window_s`` or as soon as an instance falls behind — its
  node was busy at least ``saturation`` of the tick and its queue grew — on
  that tick's loads alone (a window that straddles a load change blends the
  old and new loads, and the round after it plans on the blend), shedding
  load from the instances that fell behind only.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from strata.balance.hotspot import BalanceConfig, Hotspot, RoundPlan, diminish_hotspots
from strata.balance.loads import (
    LoadRecord,
    Metric,
    SmoothedLoads,
    demand_factors,
    imbalance,
    instance_loads,
    scale_by_instance,
    window_loads,
)
from strata.protocol.engine import Decisions, Observation, WindowStats
from strata.protocol.units import MIGRATION_MODES as MODES
from strata.protocol.units import Move


@dataclass(frozen=True, slots=True)
class Round:
    """What one round saw and decided for one operator (the benchmark's imbalance-over-time series)."""

    time: float
    pe: str
    imbalance: float  # measured: this window's loads on the table the window ran with
    planned: float  # predicted after this round's moves
    moves: int
    moved_bytes: float
    irreducible: tuple[Hotspot, ...]
    stop: str
    trigger: str = "window"  # window: the regular round; overload: early, on a growing backlog


@dataclass
class _Window:
    """What the controller observed of one operator since its last round."""

    start: float
    queued: list[float]  # per instance, records waiting when the window began
    processed: list[float]  # per instance, records processed since
    records: list[LoadRecord] = field(default_factory=list)


def fell_behind(
    utilisation: Sequence[float], queued_before: Sequence[float], queued_after: Sequence[float], saturation: float
) -> list[int]:
    """The instances that fell behind over a tick: node busy ≥ ``saturation`` and a queue that grew.

    Saturation alone is a busy instance, a growing queue alone is noise; both
    together mean arrivals exceed what the instance can get processed.
    """
    return [
        i
        for i, (u, q0, q1) in enumerate(zip(utilisation, queued_before, queued_after, strict=True))
        if u >= saturation and q1 > q0
    ]


@dataclass
class AutoFlow:
    """Per-window rebalancing of every keyed operator (AutoFlow's scheduler loop).

    ``mode`` is what the engine should run: ``live`` (AutoFlow's markers),
    ``precopy`` (the markers after a snapshot of the state was copied, so
    records wait for the changes only), ``handover`` (precopy, and the old
    owner ships the group's queued records with the changes instead of
    running them first) or ``stop`` (the stop-the-world baseline); the
    decisions are the same.
    ``smoothing`` is the weight of the newest window in the loads the
    algorithm sees (1.0 = the window as measured). ``pes`` limits the
    operators balanced (None: every operator that reports key-group loads).
    ``demand``: scale processed load by arrivals / processed per instance (see
    the module docstring). ``window_s``: None — every call is a round over
    the observation's window; set — the loop observes more often (the tick):
    a round runs every ``window_s``, or early when an instance's node was
    busy at least ``saturation`` of a tick in which its queue grew.
    """

    config: BalanceConfig = field(default_factory=BalanceConfig)
    mode: str = "live"
    metric: Metric = "busy"
    smoothing: float = 1.0
    pes: Collection[str] | None = None
    demand: bool = True
    window_s: float | None = None
    saturation: float = 0.95
    rounds: list[Round] = field(default_factory=list)
    _smoothed: dict[str, SmoothedLoads] = field(default_factory=dict)
    _moved_at: dict[str, dict[int, float]] = field(default_factory=dict)
    _queued: dict[str, list[float]] = field(default_factory=dict)  # per PE, per instance: queue at the last call
    _window: dict[str, _Window] = field(default_factory=dict)  # per PE: what was observed since its last round

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode is one of {MODES}, not {self.mode!r}")
        if not 0.0 < self.smoothing <= 1.0:
            raise ValueError(f"smoothing is a weight in (0, 1]; got {self.smoothing}")
        if self.window_s is not None and self.window_s <= 0:
            raise ValueError(f"window_s is a positive number of seconds or None; got {self.window_s}")
        if not 0.0 < self.saturation <= 1.0:
            raise ValueError(f"saturation is a utilisation in (0, 1]; got {self.saturation}")

    def rebalance(
        self,
        now: float,
        records: Iterable[LoadRecord],
        tables: Mapping[str, Mapping[int, int]],
        instances: Mapping[str, int],
        migrating: Mapping[str, Collection[int]] | None = None,
        demand: Mapping[str, Sequence[float]] | None = None,
        trigger: str = "window",
        sources: Mapping[str, Collection[int]] | None = None,
    ) -> list[Move]:
        """One round over all operators: the moves to make now.

        ``tables``: per PE, key group → instance as routed now; ``instances``:
        per PE, the instance count; ``migrating``: per PE, key groups whose
        migration has not finished (they are not planned again); ``demand``:
        per PE, per instance, the factor that turns processed load into demand
        (``loads.demand_factors``; absent: 1); ``sources``: per PE, the only
        instances that may shed load (absent: any). ``trigger`` is logged.
        """
        moves: list[Move] = []
        busy = migrating or {}
        factors = demand or {}
        for pe, window in sorted(window_loads(records, self.metric).items()):
            if pe not in tables or (self.pes is not None and pe not in self.pes):
                continue
            load = scale_by_instance(window.load, tables[pe], factors[pe]) if pe in factors else window.load
            smoothed = self._smoothed.setdefault(pe, SmoothedLoads(self.smoothing)).update(load)
            moved_at = self._moved_at.setdefault(pe, {})
            blocked = {**moved_at, **dict.fromkeys(busy.get(pe, ()), math.inf)}
            table = tables[pe]
            plan: RoundPlan = diminish_hotspots(
                smoothed, table, instances[pe], window.state_bytes, self.config, blocked, now, (sources or {}).get(pe)
            )
            for t in plan.transfers:
                moved_at[t.key_group] = now
                moves.append(Move(pe, t.key_group, t.dst, self.mode))
            self.rounds.append(
                Round(
                    now,
                    pe,
                    imbalance(instance_loads(window.load, table, instances[pe])),
                    plan.imbalance_after,
                    len(plan.transfers),
                    plan.moved_bytes,
                    plan.irreducible,
                    plan.stop,
                    trigger,
                )
            )
        return moves

    def start(self, now: float) -> Decisions:
        """Nothing to decide before the first window (the control loop's first call)."""
        return Decisions(0)

    def step(self, obs: Observation) -> Decisions:
        """The control loop's call every window: this window's moves (:meth:`decide`).

        ``loop.run(engine, AutoFlow(), window_s=2.0, ...)``: a round every 2 s;
        ``loop.run(engine, AutoFlow(window_s=2.0), window_s=0.5, ...)``: a round every 2 s, or after any 0.5 s
        tick in which an instance fell behind.
        """
        return Decisions(len(self.rounds), moves=self.decide(obs.window))

    def decide(self, obs: WindowStats) -> list[Move]:
        """The moves to make after the window ``obs``: a round per operator when its window is complete, or early
        on overload (``window_s`` set; see the class docstring)."""
        migrating: dict[str, list[int]] = {}
        for pe, group in obs.migrating:
            migrating.setdefault(pe, []).append(group)
        per_pe: dict[str, list[LoadRecord]] = {}
        for r in obs.key_groups:
            per_pe.setdefault(r.pe, []).append(r)
        moves: list[Move] = []
        for pe, records in sorted(per_pe.items()):
            if pe not in obs.routing or (self.pes is not None and pe not in self.pes):
                continue
            n = len(obs.placement[pe])
            done = [0.0] * n
            queued = [0.0] * n
            for i in obs.instances:
                if i.pe == pe:
                    done[i.instance], queued[i.instance] = float(i.records), float(i.queued)
            util = [obs.node_utilisation.get(node, 0.0) for node in obs.placement[pe]]
            before = self._queued.get(pe, [0.0] * n)
            if len(before) != n:  # instances added or removed: no queue growth known, start a new window
                before = queued
                self._window.pop(pe, None)
            self._queued[pe] = queued
            acc = self._window.setdefault(pe, _Window(obs.start, list(before), [0.0] * n))
            acc.records.extend(records)
            acc.processed = [a + b for a, b in zip(acc.processed, done, strict=True)]
            table = {pe: dict(enumerate(obs.routing[pe]))}
            behind = [] if pe in migrating else fell_behind(util, before, queued, self.saturation)
            # 1e-9: ticks add up in floating point, and a window of 8 × 0.25 s must count as 2 s
            if self.window_s is None or obs.now - acc.start >= self.window_s - 1e-9:
                rnd, trigger, shed = acc.records, "window", None
                factors = demand_factors(acc.processed, acc.queued, queued)
            elif behind:
                rnd, trigger, shed = records, "overload", {pe: behind}
                factors = demand_factors(done, before, queued)
            else:
                continue
            del self._window[pe]
            moves += self.rebalance(
                obs.now, rnd, table, {pe: n}, migrating, {pe: factors} if self.demand else None, trigger, shed
            )
        return moves

    @property
    def hotspots(self) -> dict[str, tuple[Hotspot, ...]]:
        """The latest irreducible hotspots per operator: the signal AutoFlow raises to the level above."""
        latest: dict[str, tuple[Hotspot, ...]] = {}
        for r in self.rounds:
            latest[r.pe] = r.irreducible
        return latest
