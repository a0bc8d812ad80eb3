"""Hotspot diminishing: which key groups to move this round (AutoFlow's centralised scheduler).

A pure function of one window's key-group loads, the current routing table
(key group → instance) and the key groups' state sizes. It is engine-agnostic:
the simulator feeds it key groups of a keyed operator, the Spark engine
partitions between micro-batches.

Reconstructed algorithm (SEEDS.md, AutoFlow): while max/mean > θ and fewer
than K moves are planned, take the hottest instance h and the coldest c and
move the key group of h whose load is closest to (L_h − L_c)/2 — the move that
lowers max(L_h, L_c) the most — as long as it leaves c below h's old load (no
new hotspot). Additions that make it safe to run every window:

- **migration cost**: among moves whose result is within ``cost_tolerance`` ×
  mean of the best, the one with the least state wins; a round ships at most
  ``max_bytes`` of state;
- **hysteresis**: a move must lower max(L_h, L_c) by at least ``min_gain`` ×
  mean, and a key group moved at time t is not moved again before
  t + ``cooldown_s`` (so nothing moves back and forth on noise);
- **irreducible hotspots**: a key group whose own load exceeds θ × mean cannot
  be balanced by any table of whole key groups; it is reported upward (split
  it, scale out) and moved only where that still lowers the maximum;
- an instance that cannot shed any load is set aside and the next hottest one
  is balanced, so one irreducible hotspot does not freeze the rest.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from strata.balance.loads import imbalance, instance_loads


@dataclass(frozen=True, slots=True)
class BalanceConfig:
    """Knobs of one hotspot-diminishing round, with their defaults."""

    threshold: float = 1.1  # θ: act while max/mean exceeds it
    max_moves: int = 8  # K: moves planned per round
    max_bytes: float = math.inf  # state shipped per round, bytes
    min_gain: float = 0.02  # least drop of max(L_h, L_c), as a fraction of the mean load
    cooldown_s: float = 10.0  # a moved key group stays put at least this long
    cost_tolerance: float = 0.02  # moves this close (× mean) to the best count as equal; least state wins

    def __post_init__(self) -> None:
        if self.threshold < 1.0:
            raise ValueError(f"threshold is a max/mean ratio, at least 1.0; got {self.threshold}")
        if self.max_moves < 0 or self.max_bytes < 0 or self.min_gain < 0 or self.cooldown_s < 0:
            raise ValueError("max_moves, max_bytes, min_gain and cooldown_s must not be negative")


@dataclass(frozen=True, slots=True)
class Transfer:
    """Move ``key_group`` from instance ``src`` to ``dst``; its window load and state size."""

    key_group: int
    src: int
    dst: int
    load: float
    state_bytes: float


@dataclass(frozen=True, slots=True)
class Hotspot:
    """A key group that no table of whole key groups can balance: its load alone exceeds θ × mean."""

    key_group: int
    instance: int
    load: float
    mean: float

    @property
    def ratio(self) -> float:
        """The key group's load over the mean instance load: the imbalance it forces on its own."""
        return self.load / self.mean


@dataclass(frozen=True, slots=True)
class RoundPlan:
    """One round's decision: the moves in order, irreducible hotspots, and the predicted effect."""

    transfers: tuple[Transfer, ...]
    irreducible: tuple[Hotspot, ...]
    imbalance_before: float
    imbalance_after: float  # if the window's loads repeat on the new table
    stop: str  # balanced | max_moves | max_bytes | stuck (no admissible move left, or only non-sources are hot)
    table: dict[int, int] = field(default_factory=dict)  # the table after the moves

    @property
    def moved_bytes(self) -> float:
        return sum(t.state_bytes for t in self.transfers)


def diminish_hotspots(
    loads: Mapping[int, float],
    table: Mapping[int, int],
    instances: int,
    state_bytes: Mapping[int, float] | None = None,
    config: BalanceConfig | None = None,
    moved_at: Mapping[int, float] | None = None,
    now: float = 0.0,
    sources: Collection[int] | None = None,
) -> RoundPlan:
    """Plan one round of moves for one operator (AutoFlow's hotspot-diminishing algorithm).

    ``loads``: key group → load in the window (any additive unit); missing = 0.
    ``table``: key group → instance in 0..instances-1 (instances may own none).
    ``state_bytes``: key group → state size, the cost of moving it.
    ``moved_at``: key group → time of its last move, for the cooldown; ``now`` is the view's time.
    ``sources``: the instances that may shed load this round (None: any) — a
    round triggered by one instance falling behind relieves that instance
    only, since a short window's loads are too noisy to rebalance the rest.
    """
    cfg = config or BalanceConfig()
    size = state_bytes or {}
    last = moved_at or {}
    for group, inst in table.items():
        if not 0 <= inst < instances:
            raise ValueError(f"key group {group} routed to instance {inst}, outside 0..{instances - 1}")
    new_table = dict(table)
    per_inst = instance_loads(loads, table, instances)
    owned: list[set[int]] = [set() for _ in range(instances)]
    for group, inst in table.items():
        owned[inst].add(group)
    before = imbalance(per_inst)
    total = sum(per_inst)
    if total <= 0:
        return RoundPlan((), (), before, before, "balanced", new_table)
    mean = total / instances
    irreducible = tuple(
        Hotspot(g, table[g], loads[g], mean)
        for g in sorted(table, key=lambda g: (-loads.get(g, 0.0), g))
        if loads.get(g, 0.0) > cfg.threshold * mean
    )

    transfers: list[Transfer] = []
    shipped = 0.0
    moved: set[int] = set()  # each key group moves at most once per round, which also bounds the loop
    stuck: set[int] = set()
    stop = "balanced"
    while True:
        free = [i for i in range(instances) if i not in stuck and (sources is None or i in sources)]
        if not free:
            stop = "stuck"
            break
        h = max(free, key=lambda i: (per_inst[i], -i))
        if per_inst[h] <= cfg.threshold * mean:
            # "balanced" only if every instance is within θ, not just those allowed to shed load
            stop = "stuck" if stuck or max(per_inst) > cfg.threshold * mean else "balanced"
            break
        if len(transfers) >= cfg.max_moves:
            stop = "max_moves"
            break
        c = min(range(instances), key=lambda i: (per_inst[i], i))
        gap = per_inst[h] - per_inst[c]
        candidates: list[tuple[float, float, int]] = []  # (max(L_h, L_c) after, state bytes, key group)
        over_budget = False
        for group in owned[h]:
            load = loads.get(group, 0.0)
            # load >= gap would make c at least as hot as h was: a new hotspot, not a diminished one.
            if load <= 0 or load >= gap or group in moved or last.get(group, -math.inf) + cfg.cooldown_s > now:
                continue
            after = max(per_inst[h] - load, per_inst[c] + load)
            gain = per_inst[h] - after
            if gain <= 0 or gain < cfg.min_gain * mean:  # gain can round to 0 for a negligible key group
                continue
            if shipped + size.get(group, 0.0) > cfg.max_bytes:
                over_budget = True
                continue
            candidates.append((after, size.get(group, 0.0), group))
        if not candidates:
            if over_budget:
                stop = "max_bytes"
                break
            stuck.add(h)
            continue
        best = min(after for after, _, _ in candidates)
        after, nbytes, group = min(
            (cand for cand in candidates if cand[0] <= best + cfg.cost_tolerance * mean),
            key=lambda cand: (cand[1], cand[0], cand[2]),
        )
        load = loads[group]
        transfers.append(Transfer(group, h, c, load, nbytes))
        shipped += nbytes
        per_inst[h] -= load
        per_inst[c] += load
        owned[h].discard(group)
        owned[c].add(group)
        new_table[group] = c
        moved.add(group)
    return RoundPlan(tuple(transfers), irreducible, before, imbalance(per_inst), stop, new_table)
