"""L1 of the hierarchy, one load window: DS2 scaling and hotspot diminishing for every keyed PE, inside a budget.

The level below L0 (DESIGN.md rule 3; Dangwal et al.: budgets down, signals
up). L0 decides where each keyed PE's instances run and their cpu; L1 decides
how many of them are active (DS2, Kalavri et al., within the instances L0
placed) and which active instance owns each key group (AutoFlow's hotspot
diminishing, Lu et al.). It never moves what L0 is moving in the same step
(``budget.frozen``), never exceeds the window's move budget, and raises the
hotspots it cannot reduce (:attr:`TaskLevel.hotspots`) for L0 to re-plan.

Pure policy: a function of the window's measurements and the budget; time comes
in the window.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from strata.balance.autoflow import AutoFlow
from strata.balance.ds2 import Scaler, consolidate, ds2_parallelism, spread
from strata.balance.hotspot import BalanceConfig, Hotspot
from strata.balance.loads import window_loads
from strata.protocol.units import Move
from strata.protocol.window import WindowStats


@dataclass(frozen=True)
class L1Budget:
    """What L1 (key-group balancing and DS2 scaling) may do in one load window.

    ``max_instances``: keyed PE → instances L0 placed (the scale-out ceiling;
    instances beyond the active count own no key group). ``moves`` and
    ``bytes``: key-group moves and state bytes for the whole window, over all
    PEs. ``frozen``: PEs being re-placed by L0 now; L1 leaves them alone.
    ``cores``: keyed PE → cores of one instance (DS2's unit of capacity).
    """

    max_instances: Mapping[str, int]
    moves: int
    bytes: float = math.inf
    frozen: frozenset[str] = frozenset()
    cores: Mapping[str, float] | None = None


class TaskLevel:
    """L1 across windows: the AutoFlow balancer's memory (smoothed loads, cooldowns) and DS2's stability counter.

    ``smoothing``: weight of the newest window in the loads the balancer sees;
    ``stable``: windows a DS2 proposal must persist before the active count
    changes; ``headroom``: DS2's target utilisation margin.
    """

    def __init__(self, smoothing: float = 0.5, stable: int = 2, headroom: float = 0.2) -> None:
        self._balancer = AutoFlow(smoothing=smoothing)
        self._scaler = Scaler(headroom, stable=stable)
        self.headroom = headroom

    @property
    def hotspots(self) -> dict[str, tuple[Hotspot, ...]]:
        """The latest irreducible hotspots per keyed PE: L1's signal up."""
        return self._balancer.hotspots

    def step(
        self,
        window: WindowStats,
        budget: L1Budget,
        mode: BalanceConfig | None,
        *,
        scaling: bool = True,
        feeds: Callable[[str, str], bool] = lambda upstream, pe: False,
    ) -> tuple[list[Move], dict[str, int]]:
        """One window: ``(moves, scaled)`` for every keyed PE in ``budget.max_instances`` not frozen.

        ``mode``: the balancing block's configuration (None: balancing off, no
        scaling either); ``feeds(u, pe)``: whether PE ``u`` sends to ``pe`` (DS2
        reads the rate arriving at a PE from its producers' output rates).
        ``scaled``: PE → new active instance count, for the PEs whose count changed.
        """
        w = window
        keyed = [pe for pe in w.routing if pe in budget.max_instances]
        loads = window_loads(w.key_groups)
        migrating: dict[str, list[int]] = {}
        for pe, g in w.migrating:
            migrating.setdefault(pe, []).append(g)
        moves: list[Move] = []
        scaled: dict[str, int] = {}
        tables: dict[str, dict[int, int]] = {}
        active: dict[str, int] = {}
        for pe in keyed:
            if pe in budget.frozen:
                continue
            table = dict(enumerate(w.routing[pe]))
            ceiling = budget.max_instances[pe]
            n = max(table.values()) + 1
            if scaling and mode is not None:
                recs = sum(i.records for i in w.instances if i.pe == pe)
                busy = sum(i.busy for i in w.instances if i.pe == pe)
                arriving = sum(r for u, r in w.rates.items() if feeds(u, pe))
                per = (budget.cores or {}).get(pe) or 1.0
                proposal = ds2_parallelism(arriving, recs, busy, per, ceiling, self.headroom)
                n = self._scaler.update(pe, proposal, ceiling, max(table.values()) + 1)
                if n != max(table.values()) + 1:
                    scaled[pe] = n
            group_load = loads[pe].load if pe in loads else {}
            busy_groups = set(migrating.get(pe, ()))
            movable = {g: i for g, i in table.items() if g not in busy_groups}
            if n <= max(table.values()):
                step = consolidate(group_load, movable, n)
            elif pe in scaled:
                step = spread(group_load, movable, n, max(budget.moves - len(moves), 0))
            else:
                step = {}
            for g, dst in step.items():
                moves.append(Move(pe, g, dst))
                table[g] = dst
            tables[pe] = table
            active[pe] = max(n, max(table.values()) + 1)
        if mode is not None and tables:
            self._balancer.config = mode
            self._balancer.pes = set(tables)
            records = [kg for kg in w.key_groups if kg.pe in tables]
            moves += self._balancer.rebalance(w.now, records, tables, active, migrating)
        elif mode is None:
            self._balancer.rounds.clear()
        return moves[: budget.moves], scaled


def uncoordinated(mode: BalanceConfig | None) -> BalanceConfig | None:
    """The balancing block as a level acting alone uses it: no cooldown between moves of a key group."""
    return None if mode is None else replace(mode, cooldown_s=0.0)
