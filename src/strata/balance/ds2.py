"""Instances per keyed operator from observed true processing rates (DS2, Kalavri et al., OSDI'18), under L0.

DS2 measures each operator's *true* processing rate — records processed per
unit of useful (busy) time, not per wall-clock second, so waiting does not
disguise capacity — and sets the parallelism to what the target input rate
needs: ``p = ceil(λ_in × (1 + headroom) / (true rate × cpu per instance))``.
Here L0 owns how many instances exist and where (the placement) and the cpu
each gets; L1 only decides how many of them are *active* (own key groups),
between 1 and the instances L0 placed. Scale-in empties the surplus
instances by moving their key groups (largest first) to the least-loaded
active instances; scale-out moves key groups from the most- to the
least-loaded active instance while that lowers the maximum, so the new
instances take their share at once (DS2 redeploys with the new parallelism)
rather than waiting for the balancer's threshold. A change must be asked for
``stable`` windows in a row (hysteresis), so a single bursty window neither
scales out nor in; the count it starts from is the one the routing shows,
never a remembered one (another level may have changed it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field


def ds2_parallelism(
    input_rate: float, records: int, busy: float, cpu_per_instance: float, ceiling: int, headroom: float = 0.2
) -> int | None:
    """DS2's optimal instance count, clamped to [1, ceiling]; None without a measurement of the true rate."""
    if records <= 0 or busy <= 0 or cpu_per_instance <= 0:
        return None
    true_rate = records / busy  # records per core-second of useful time
    need = input_rate * (1.0 + headroom) / (true_rate * cpu_per_instance)
    return max(1, min(ceiling, math.ceil(need - 1e-9)))


def consolidate(loads: Mapping[int, float], table: Mapping[int, int], active: int) -> dict[int, int]:
    """Key group → new instance for every group routed to an instance ≥ ``active`` (scale-in moves).

    Largest group first onto the currently least-loaded active instance
    (Graham's LPT step), ties to the lowest index; groups already on active
    instances stay where they are.
    """
    per = [0.0] * active
    for g, i in table.items():
        if i < active:
            per[i] += loads.get(g, 0.0)
    out: dict[int, int] = {}
    for g in sorted((g for g, i in table.items() if i >= active), key=lambda g: (-loads.get(g, 0.0), g)):
        dst = min(range(active), key=lambda i: (per[i], i))
        per[dst] += loads.get(g, 0.0)
        out[g] = dst
    return out


def spread(loads: Mapping[int, float], table: Mapping[int, int], active: int, limit: int) -> dict[int, int]:
    """Key group → new instance: at most ``limit`` moves onto ``active`` instances, each lowering the maximum.

    Each move takes the largest group on the most-loaded instance that is
    lighter than the gap to the least-loaded one (so the pair's maximum
    falls), ties to the lowest index; stops when no such group exists.
    """
    where = dict(table)
    per = [0.0] * active
    for g, i in where.items():
        if i < active:
            per[i] += loads.get(g, 0.0)
    out: dict[int, int] = {}
    for _ in range(limit):
        src = max(range(active), key=lambda i: (per[i], -i))
        dst = min(range(active), key=lambda i: (per[i], i))
        gap = per[src] - per[dst]
        fits = [g for g, i in where.items() if i == src and 0 < loads.get(g, 0.0) < gap - 1e-12]
        if not fits:
            break
        g = max(fits, key=lambda g: (loads[g], -g))
        where[g] = out[g] = dst
        per[src] -= loads[g]
        per[dst] += loads[g]
    return out


@dataclass
class Scaler:
    """Per keyed PE: the active instance count, changed only after ``stable`` consistent windows."""

    headroom: float = 0.2
    stable: int = 2
    _pending: dict[str, tuple[int, int]] = field(default_factory=dict)  # PE → (proposed count, windows seen)

    def update(self, pe: str, proposal: int | None, ceiling: int, current: int) -> int:
        """Feed one window's DS2 proposal; returns the active count to use now."""
        now = min(current, ceiling)
        if proposal is None or proposal == now:
            self._pending.pop(pe, None)
            return now
        seen = self._pending.get(pe)
        count = seen[1] + 1 if seen and seen[0] == proposal else 1
        if count >= self.stable:
            self._pending.pop(pe, None)
            now = proposal
        else:
            self._pending[pe] = (proposal, count)
        return now
