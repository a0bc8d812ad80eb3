"""Multi-resource placement balancer under the planner (Dangwal et al., Meta's new load balancer).

The Meta paper's balancer spreads tasks over hosts weighing several
resources at once — cpu, memory and task count per host — and combines a
fast local search with an optimal search, taking the upper level's decisions
as constraints. Here the "tasks" are operator instances and the upper level
is the L0 planner: each instance may only go to its PE's candidate nodes
(SODA's macroW) and brings the cpu the plan gave its PE (macroQ/microQ).

Objective (minimised): Σ_r w_r · max_h u_r(h) over resources r ∈ {cpu,
memory, instances}, with u_cpu = cpu / cores, u_mem = memory / node memory
and u_count = instances / (instances per node on average) — Turbine keeps
task counts near the tier average. Ties are broken by Σ_h Σ_r w_r u_r(h)²
(the smoother spread) and then by fewer moves. Capacity enters through the
objective: an answer with u > 1 is reported as overloaded, not refused.

Search: (1) start from the current host of every instance still allowed,
placing the rest greedily, largest cpu first; (2) local search: best
improving single move from the hottest host, repeated; (3) exact solve (a
MILP by HiGHS through :class:`strata.plan.lp.Program`) on a small neighbourhood — the ``neighbourhood`` // 2 hottest and
coldest hosts and the instances on them, everything else fixed — then local
search again, for up to ``rounds`` rounds while it improves. ``max_moves``
caps how many instances may leave their current host (incremental movement,
as SODA's macroW and Turbine's shard moves). If the MILP fails or times out
without a solution, the local-search answer stands and ``status`` says so.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field

import networkx as nx

from strata.plan.lp import INF, Program
from strata.plan.plan import Plan

RESOURCES = ("cpu", "memory", "instances")
_MOVE_COST = 1e-6  # objective cost of one move in the exact solve: a tie-break, never worth load


@dataclass(frozen=True, slots=True)
class Item:
    """One operator instance to place: its demand, the nodes L0 allows, and where it runs now (None: new)."""

    name: str
    cpu: float
    memory: float
    candidates: tuple[str, ...]
    current: str | None = None


@dataclass(frozen=True, slots=True)
class Host:
    name: str
    cores: float
    memory: float


@dataclass(frozen=True)
class MultiBalanceConfig:
    """Knobs of the balancer, with their defaults."""

    weights: tuple[float, float, float] = (1.0, 0.5, 0.25)  # cpu, memory, instance count
    max_moves: int | None = None  # instances that may leave their current host (None: no limit)
    neighbourhood: int = 4  # hosts per exact solve
    rounds: int = 3  # exact solves at most
    time_limit_s: float = 1.0  # per exact solve
    min_gain: float = 0.0  # hysteresis: moving a placed instance must lower the objective by more than this
    seed: int = 0


@dataclass
class Balanced:
    """The placement found: item → host, its objective, moves made, and how it was found."""

    assignment: dict[str, str]
    objective: float
    utilisation: dict[str, tuple[float, float, float]]  # host → (cpu, memory, count) utilisation
    moves: int
    status: str  # "local+exact" | "local" (exact solve unavailable or no better) and why in ``detail``
    detail: list[str] = field(default_factory=list)

    @property
    def overloaded(self) -> bool:
        return any(u > 1.0 + 1e-9 for us in self.utilisation.values() for u in us[:2])


class _Loads:
    """Per-host loads and the objective, updated incrementally."""

    def __init__(self, items: Sequence[Item], hosts: Sequence[Host], weights: Sequence[float]):
        self.items = {it.name: it for it in items}
        self.w = tuple(weights)
        mean_count = max(len(items) / max(len(hosts), 1), 1e-9)
        self.cap = {h.name: (max(h.cores, 1e-9), max(h.memory, 1e-9), mean_count) for h in hosts}
        self.load = {h.name: [0.0, 0.0, 0.0] for h in hosts}

    def add(self, item: Item, host: str, sign: float = 1.0) -> None:
        lo = self.load[host]
        lo[0] += sign * item.cpu
        lo[1] += sign * item.memory
        lo[2] += sign

    def util(self, host: str) -> tuple[float, float, float]:
        lo, cap = self.load[host], self.cap[host]
        return lo[0] / cap[0], lo[1] / cap[1], lo[2] / cap[2]

    def score(self) -> tuple[float, float]:
        maxima = [0.0, 0.0, 0.0]
        smooth = 0.0
        for h in self.load:
            u = self.util(h)
            for r in range(3):
                maxima[r] = max(maxima[r], u[r])
                smooth += self.w[r] * u[r] * u[r]
        return sum(w * m for w, m in zip(self.w, maxima, strict=True)), smooth

    def heat(self, host: str) -> float:
        return sum(w * u for w, u in zip(self.w, self.util(host), strict=True))


def _better(a: tuple[float, float], b: tuple[float, float], gain: float = 0.0) -> bool:
    """``a`` beats ``b``: a lower objective (by more than ``gain``); with ``gain`` 0, ties go to the smoother spread."""
    if a[0] < b[0] - max(gain, 1e-12):
        return True
    return gain <= 0 and abs(a[0] - b[0]) <= 1e-12 and a[1] < b[1] - 1e-12


def balance(items: Sequence[Item], hosts: Sequence[Host], config: MultiBalanceConfig | None = None) -> Balanced:
    """Place ``items`` on ``hosts`` (only on their candidates) minimising the weighted max utilisation."""
    cfg = config or MultiBalanceConfig()
    names = {h.name for h in hosts}
    allowed = {it.name: tuple(c for c in it.candidates if c in names) for it in items}
    empty = sorted(n for n, c in allowed.items() if not c)
    if empty:
        raise ValueError(f"instances with no live candidate node (re-plan their PE first): {empty}")
    loads = _Loads(items, hosts, cfg.weights)
    budget = math.inf if cfg.max_moves is None else cfg.max_moves
    assign: dict[str, str] = {}
    for it in items:
        if it.current in allowed[it.name]:
            assign[it.name] = it.current
            loads.add(it, it.current)
    for it in sorted((i for i in items if i.name not in assign), key=lambda i: (-i.cpu, i.name)):
        best = None
        for h in allowed[it.name]:
            loads.add(it, h)
            s = loads.score()
            loads.add(it, h, -1.0)
            if best is None or _better(s, best[0]):
                best = (s, h)
        assign[it.name] = best[1]
        loads.add(it, best[1])
    # An instance whose current host is gone or disallowed must move; that is forced, not budgeted.
    forced = {it.name for it in items if it.current is not None and it.current not in allowed[it.name]}
    detail: list[str] = []
    if forced:
        detail.append(f"{len(forced)} instances forced off disallowed/lost hosts")

    def moved() -> int:
        return sum(
            1 for it in items if it.name not in forced and it.current is not None and assign[it.name] != it.current
        )

    _local_search(items, allowed, assign, loads, budget, moved, cfg.min_gain)
    status = "local"
    for _ in range(cfg.rounds):
        before = loads.score()
        solved = _exact_neighbourhood(items, allowed, assign, loads, cfg, budget, forced)
        if solved is None:
            detail.append("exact solve: no solution within the time limit; local-search answer kept")
            break
        _local_search(items, allowed, assign, loads, budget, moved, cfg.min_gain)
        if not _better(loads.score(), before):
            break
        status = "local+exact"
    return Balanced(dict(assign), loads.score()[0], {h: loads.util(h) for h in loads.load}, moved(), status, detail)


def _local_search(
    items: Sequence[Item],
    allowed: Mapping[str, tuple[str, ...]],
    assign: dict[str, str],
    loads: _Loads,
    budget: float,
    moved,
    min_gain: float = 0.0,
) -> None:
    """Best improving single move of an instance off the hottest hosts, until none improves."""
    by_name = {it.name: it for it in items}
    for _ in range(10 * len(items) + 10):
        current = loads.score()
        used = moved()
        best = None
        hot = sorted(loads.load, key=lambda h: -loads.heat(h))[:3]
        for name, host in assign.items():
            if host not in hot:
                continue
            it = by_name[name]
            for dst in allowed[name]:
                if dst == host:
                    continue
                delta = (dst != it.current) - (host != it.current) if it.current is not None else 0
                if used + delta > budget:
                    continue
                loads.add(it, host, -1.0)
                loads.add(it, dst)
                s = loads.score()
                loads.add(it, dst, -1.0)
                loads.add(it, host)
                gain = min_gain if it.current is not None and host == it.current else 0.0
                if _better(s, current, gain) and (best is None or _better(s, best[0])):
                    best = (s, name, dst)
        if best is None:
            return
        _, name, dst = best
        loads.add(by_name[name], assign[name], -1.0)
        loads.add(by_name[name], dst)
        assign[name] = dst


def _exact_neighbourhood(
    items: Sequence[Item],
    allowed: Mapping[str, tuple[str, ...]],
    assign: dict[str, str],
    loads: _Loads,
    cfg: MultiBalanceConfig,
    budget: float,
    forced: set[str],
) -> bool | None:
    """MILP over the hottest and coldest hosts and their instances; applies the answer if it is better.

    Returns True if a solution was found (applied only when it improves the
    objective), None if the solver found none.
    """
    order = sorted(loads.load, key=lambda h: -loads.heat(h))
    k = max(2, cfg.neighbourhood)
    hood = order if len(order) <= k else order[: k // 2] + order[-(k - k // 2) :]
    hood_set = set(hood)
    free = [it for it in items if assign[it.name] in hood_set and sum(h in hood_set for h in allowed[it.name]) > 1]
    if not free:
        return True
    free_names = {it.name for it in free}
    outside = [h for h in loads.load if h not in hood_set]
    base = {h: list(loads.load[h]) for h in hood}
    for it in free:
        b = base[assign[it.name]]
        b[0] -= it.cpu
        b[1] -= it.memory
        b[2] -= 1
    prog = Program(maximize=False)
    cols: dict[tuple[str, str], int] = {}  # (instance, host) → binary column: the instance runs there
    for it in free:
        row = {}
        for h in allowed[it.name]:
            if h in hood_set:
                moved = it.current is not None and h != it.current and it.name not in forced
                cols[it.name, h] = col = prog.binary(_MOVE_COST if moved else 0.0)
                row[col] = 1.0
        prog.row(row, 1.0, 1.0)
    for r in range(3):
        floor = max((loads.util(h)[r] for h in outside), default=0.0)  # fixed hosts bound the maximum below
        u = prog.var(floor, INF, cfg.weights[r])
        for h in hood:
            coefs = {cols[it.name, h]: (it.cpu, it.memory, 1.0)[r] for it in free if (it.name, h) in cols}
            coefs[u] = -loads.cap[h][r]
            prog.row(coefs, -INF, -base[h][r])
    if budget < math.inf:
        moved_elsewhere = sum(
            1
            for it in items
            if it.name not in free_names
            and it.name not in forced
            and it.current is not None
            and assign[it.name] != it.current
        )
        prog.row(
            {
                cols[it.name, h]: 1.0
                for it in free
                for h in allowed[it.name]
                if (it.name, h) in cols and it.current is not None and h != it.current and it.name not in forced
            },
            -INF,
            float(budget - moved_elsewhere),
        )
    sol = prog.solve(time_limit=cfg.time_limit_s, mip_gap=1e-9)
    if not sol.usable:
        return None
    before = loads.score()
    old = {it.name: assign[it.name] for it in free}
    by_name = {it.name: it for it in free}
    for it in free:
        dst = next(h for h in allowed[it.name] if (it.name, h) in cols and sol.x[cols[it.name, h]] > 0.5)
        loads.add(it, assign[it.name], -1.0)
        loads.add(it, dst)
        assign[it.name] = dst
    if not _better(loads.score(), before, cfg.min_gain if any(assign[n] != h for n, h in old.items()) else 0.0):
        for name, host in old.items():
            loads.add(by_name[name], assign[name], -1.0)
            loads.add(by_name[name], host)
            assign[name] = host
    return True


Placement = dict[str, list[tuple[str, float]]]


def place_instances(
    graph: nx.DiGraph,
    plan: Plan,
    placement: Mapping[str, list[tuple[str, float]]],
    pes: Collection[str],
    hosts: Sequence[Host],
    down: Collection[str],
    load: Mapping[tuple[str, int], float],
    pinned: Callable[[str, int, str], bool],
    config: MultiBalanceConfig,
) -> tuple[Placement, list[str]]:
    """Every instance of ``pes`` on one of its PE's candidate nodes of ``plan``; the other PEs' instances stay.

    ``graph``: the admitted templates' joined graph (its PEs are what runs);
    ``placement``: PE → [(node, cpu)] per instance now (a PE not yet placed
    gets its operator's instance count); ``load``: (PE, instance) → cores it
    was measured to use (an instance needs the plan's share or that, if more:
    a hot key group); ``pinned(pe, i, node)``: the instance must stay on
    ``node`` (hysteresis), unless the node is ``down``. A planner that lists
    no candidates for a PE (a baseline, for a cpu-free PE) allows its assigned
    nodes, else every host. Returns the new placement of the ``pes`` still in
    the graph, each instance with the plan's cpu split evenly, and the
    balancer's notes.
    """
    cpu = plan.cpu()
    items: list[Item] = []
    for pe in graph:
        op = graph.nodes[pe]["op"]
        current = placement.get(pe)
        count = len(current) if current else op.instances
        if pe in pes:
            allowed = plan.candidates.get(pe) or list(plan.assignment.get(pe, {})) or [h.name for h in hosts]
            cand = tuple(n for n in allowed if n not in down)
            for i in range(count):
                need = max(cpu.get(pe, 0.0) / count, load.get((pe, i), 0.0))
                where = current[i][0] if current else None
                stay = where is not None and where not in down and pinned(pe, i, where)
                items.append(
                    Item(f"{pe}#{i}", need, (op.memory + op.state_bytes) / count, (where,) if stay else cand, where)
                )
        elif current:
            for i, (node, c) in enumerate(current):
                if node not in down:
                    need = max(c, load.get((pe, i), 0.0))
                    items.append(Item(f"{pe}#{i}", need, (op.memory + op.state_bytes) / count, (node,), node))
    result = balance(items, hosts, config)
    out: Placement = {}
    for pe in pes:
        if pe not in graph:
            continue
        old = placement.get(pe)
        count = len(old) if old else graph.nodes[pe]["op"].instances
        out[pe] = [(result.assignment[f"{pe}#{i}"], cpu.get(pe, 0.0) / count) for i in range(count)]
    return out, list(result.detail)
