"""The AutoFlow controller: one hotspot-diminishing round per load window, per keyed operator.

AutoFlow's centralised scheduler (Lu et al., §scheduler): every window it
reads the key-group loads the engine measured, decides migrations with the
hotspot-diminishing algorithm and hands them to the engine, which runs the
marker protocol. The controller only keeps what the algorithm's hysteresis
needs between rounds (smoothed loads, when each key group last moved) and a
log of its rounds; it never touches an engine.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from strata.balance.hotspot import BalanceConfig, Hotspot, Plan, diminish_hotspots
from strata.balance.loads import LoadRecord, Metric, SmoothedLoads, imbalance, instance_loads, window_loads
from strata.sim.hooks import Move

if TYPE_CHECKING:
    from strata.sim.observe import Observation


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


@dataclass
class AutoFlow:
    """Per-window rebalancing of every keyed operator (AutoFlow's scheduler loop).

    ``mode`` is what the engine should run: ``live`` (AutoFlow's markers) or
    ``stop`` (the stop-the-world baseline); the decisions are the same.
    ``smoothing`` is the weight of the newest window in the loads the
    algorithm sees (1.0 = the window as measured). ``pes`` limits the
    operators balanced (None: every operator that reports key-group loads).
    """

    config: BalanceConfig = field(default_factory=BalanceConfig)
    mode: str = "live"
    metric: Metric = "busy"
    smoothing: float = 1.0
    pes: Collection[str] | None = None
    rounds: list[Round] = field(default_factory=list)
    _smoothed: dict[str, SmoothedLoads] = field(default_factory=dict)
    _moved_at: dict[str, dict[int, float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.mode not in ("live", "stop"):
            raise ValueError(f"mode is 'live' or 'stop', not {self.mode!r}")
        if not 0.0 < self.smoothing <= 1.0:
            raise ValueError(f"smoothing is a weight in (0, 1]; got {self.smoothing}")

    def rebalance(self, now: float, records: Iterable[LoadRecord], tables: Mapping[str, Mapping[int, int]],
                  instances: Mapping[str, int], migrating: Mapping[str, Collection[int]] | None = None,
                  ) -> list[Move]:
        """One round over all operators: the moves to make now.

        ``tables``: per PE, key group → instance as routed now; ``instances``:
        per PE, the instance count; ``migrating``: per PE, key groups whose
        migration has not finished (they are not planned again).
        """
        moves: list[Move] = []
        busy = migrating or {}
        for pe, window in sorted(window_loads(records, self.metric).items()):
            if pe not in tables or (self.pes is not None and pe not in self.pes):
                continue
            smoothed = self._smoothed.setdefault(pe, SmoothedLoads(self.smoothing)).update(window.load)
            moved_at = self._moved_at.setdefault(pe, {})
            blocked = {**moved_at, **dict.fromkeys(busy.get(pe, ()), math.inf)}
            table = tables[pe]
            plan: Plan = diminish_hotspots(smoothed, table, instances[pe], window.state_bytes, self.config,
                                           blocked, now)
            for t in plan.transfers:
                moved_at[t.key_group] = now
                moves.append(Move(pe, t.key_group, t.dst, self.mode))
            self.rounds.append(Round(now, pe, imbalance(instance_loads(window.load, table, instances[pe])),
                                     plan.imbalance_after, len(plan.transfers), plan.moved_bytes,
                                     plan.irreducible, plan.stop))
        return moves

    def __call__(self, obs: Observation) -> list[Move]:
        """The simulator's periodic controller: ``Simulation(..., controllers=[(window_s, AutoFlow())])``."""
        tables = {pe: dict(enumerate(route)) for pe, route in obs.routing.items()}
        instances = {pe: len(obs.placement[pe]) for pe in obs.routing}
        migrating: dict[str, list[int]] = {}
        for pe, group in obs.migrating:
            migrating.setdefault(pe, []).append(group)
        return self.rebalance(obs.now, obs.key_groups, tables, instances, migrating)

    @property
    def hotspots(self) -> dict[str, tuple[Hotspot, ...]]:
        """The latest irreducible hotspots per operator: the signal AutoFlow raises to the level above."""
        latest: dict[str, tuple[Hotspot, ...]] = {}
        for r in self.rounds:
            latest[r.pe] = r.irreducible
        return latest
