"""miniW: local search over candidate-node assignments (SODA §4.2).

Phases as in the paper. Initialisation gives two feasible starts — greedy by
traffic (heaviest streams first, both ends on the node with most room) and
round-robin with previous (groups keep their previous nodes; the rest go
round-robin to the node with fewest PEs) — and keeps the better (or a start
handed in, e.g. the MILP's). Local improvement tries, in order of decreasing
traffic and cpu: moving a shard to another node (1-opt), swapping two shards
(2-opt), pulling a stream's two ends onto one node, and swapping the contents of
two nodes. At a local minimum a perturbation makes random feasible moves
regardless of cost, and the search goes on until its deadline or ``rounds``
perturbations; the best solution seen is returned. The objective is the
weighted sum of SODA's six metrics, kept up to date incrementally.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from strata.plan import partition
from strata.plan.occupancy import Occupancy, nodes_by, place_first_fitting
from strata.plan.placement import PlacementProblem
from strata.plan.plan import PlanError


@dataclass
class Result:
    where: list[list[int]]
    objective: float
    start: str
    rounds: int
    moves: int
    complete: bool  # stopped at a local minimum after its rounds, not at the deadline
    partitioner: str = ""  # how the METIS start fared (or why there was none)


def _greedy_start(p: PlacementProblem, clusters: bool) -> list[list[int]]:
    """Streams by decreasing traffic — in one global order, or (``clusters``) growing each placed
    cluster along its heaviest streams first. Each group goes to the node that holds most of its
    placed neighbours' traffic and has room for it, else to the node with the most room."""
    st = Occupancy(p, [[] for _ in p.groups])
    placed = [False] * len(p.groups)

    def room(n: int) -> float:
        return p.cores[n] - st.load[n]

    def place(g: int, prefer: list[int]) -> None:
        grp = p.groups[g]
        need = grp.shards
        # Most room first, cpu fit required; then anything feasible; the full node list only as a last resort.
        place_first_fitting(
            st,
            g,
            need,
            (
                ([*prefer, *nodes_by(st.elig_arr[g], st.load - p.cores, need + 8, full)], not strict)
                for strict, full in ((True, False), (False, False), (False, True))
            ),
        )
        placed[g] = True

    def near(g: int) -> list[int]:
        """Nodes holding g's placed neighbours, by the traffic g would keep there, if they have room."""
        score: dict[int, float] = {}
        for h, t in p.neighbours[g]:
            if placed[h]:
                for n in st.where[h]:
                    score[n] = score.get(n, 0.0) + t / len(st.where[h])
        size = p.groups[g].goal / p.groups[g].shards
        return [n for n in sorted(score, key=lambda n: (-score[n], n)) if room(n) >= size]

    if clusters:
        # Grow placed clusters along their heaviest streams (Prim-like); start a new cluster from the
        # heaviest stream left when the frontier runs dry.
        frontier: list[tuple[float, int, int]] = []
        pending = sorted(range(len(p.streams)), key=lambda e: (-p.streams[e][2], e), reverse=True)
        while pending or frontier:
            if frontier:
                _, g, _ = heapq.heappop(frontier)
                todo = [] if placed[g] else [g]
            else:
                a, b, _ = p.streams[pending.pop()]
                todo = [x for x in (a, b) if not placed[x]]
            for g in todo:
                place(g, near(g))
                for h, t in p.neighbours[g]:
                    if not placed[h]:
                        heapq.heappush(frontier, (-t, h, g))
    else:
        for a, b, _ in sorted(p.streams, key=lambda s: -s[2]):
            for g in (a, b):
                if not placed[g]:
                    place(g, near(g))
    for g in sorted(range(len(p.groups)), key=lambda g: -p.groups[g].goal):
        if not placed[g]:
            place(g, [])
    return st.where


def _round_robin_start(p: PlacementProblem) -> list[list[int]]:
    """Previous nodes first; the rest round-robin to the node with fewest PEs."""
    st = Occupancy(p, [[] for _ in p.groups])
    for g, grp in enumerate(p.groups):
        if grp.prev is not None:
            keep = [n for n in sorted(grp.prev) if n in st.eligible[g]][: grp.shards]
            if keep:
                st.where[g] = keep
                for n in keep:
                    st.occupy(g, n, +1)
    for g, grp in enumerate(p.groups):
        if st.where[g]:
            continue
        place_first_fitting(
            st,
            g,
            grp.shards,
            ((nodes_by(st.elig_arr[g], st.count.astype(float), grp.shards + 8, full), True) for full in (False, True)),
        )
    return st.where


def _traffic_parts(p: PlacementProblem, most: float) -> list[list[int]]:
    """Groups joined by traffic, cut into parts of at most ``most`` cpu along their heaviest streams.

    Each connected set of groups is walked Prim-like from its heaviest stream (heaviest frontier
    stream next), and the walk is cut whenever the next group would take the part past ``most``;
    so a part is a connected run of heavy streams and only light streams cross between parts.
    """
    seen = [False] * len(p.groups)
    parts: list[list[int]] = []
    for a, _b, _ in sorted(p.streams, key=lambda s: -s[2]):
        if seen[a]:
            continue
        frontier: list[tuple[float, int]] = [(0.0, a)]
        part: list[int] = []
        size = 0.0
        while frontier:
            _, g = heapq.heappop(frontier)
            if seen[g]:
                continue
            goal = p.groups[g].goal
            if part and size + goal > most:
                parts.append(part)
                part, size = [], 0.0
            seen[g] = True
            part.append(g)
            size += goal
            for h, t in p.neighbours[g]:
                if not seen[h]:
                    heapq.heappush(frontier, (-t, h))
        parts.append(part)
    parts += [[g] for g in range(len(p.groups)) if not seen[g]]
    return parts


def _spread_start(p: PlacementProblem) -> list[list[int]]:
    """Whole traffic parts spread alike over a few nodes, largest part first.

    A part spread in equal shares over the same k nodes keeps all its streams local and puts
    1/k of its cpu on each node. For every part the fewest nodes (k from the most shards any of
    its groups needs up to the fewest candidates any may have) whose room holds a 1/k slice are
    taken, tightest first (best fit); a part that fits nowhere that way, and every group the
    shared nodes do not suit, is placed on its own on the nodes with most room.
    """
    st = Occupancy(p, [[] for _ in p.groups])
    most = float(p.cores.max()) * min(g.limit for g in p.groups)
    parts = sorted(_traffic_parts(p, most), key=lambda part: -sum(p.groups[g].goal for g in part))
    for part in parts:
        goal = sum(p.groups[g].goal for g in part)
        low = max(p.groups[g].shards for g in part)
        high = min(p.groups[g].limit for g in part)
        common = set.intersection(*(st.eligible[g] for g in part))
        nodes = np.fromiter(sorted(common), dtype=int)
        chosen: list[int] = []
        for k in range(low, high + 1):
            if len(nodes) < k:
                break
            room = p.cores[nodes] - st.load[nodes]
            fit = nodes[room >= goal / k - 1e-9]
            if len(fit) >= k:
                tight = fit[np.argsort(p.cores[fit] - st.load[fit], kind="stable")]
                chosen = [int(n) for n in tight[:k]]
                break
        for g in part:
            if chosen and st.can_spread(g, chosen):
                st.spread(g, chosen)
            else:
                place_first_fitting(
                    st,
                    g,
                    p.groups[g].shards,
                    (
                        (nodes_by(st.elig_arr[g], st.load - p.cores, p.groups[g].shards + 8, full), not strict)
                        for strict, full in ((True, False), (False, False), (False, True))
                    ),
                )
    return st.where


def search(
    p: PlacementProblem,
    deadline: float,
    clock: Callable[[], float] = time.perf_counter,
    seed: int = 0,
    rounds: int = 30,
    starts: dict[str, list[list[int]]] | None = None,
    partitioner: bool = True,
) -> Result:
    """Local search from the best start until ``deadline`` (a ``clock`` value) or ``rounds`` perturbations.

    The starts: those handed in (e.g. the MILP's), miniW's own, and METIS's partition made feasible
    (:mod:`strata.plan.partition`; ``partitioner=False`` leaves it out).
    """
    if not p.groups:
        return Result([], 0.0, "empty", 0, 0, True)
    candidates = dict(starts or {})
    candidates["greedy-by-traffic"] = _greedy_start(p, clusters=False)
    candidates["greedy-by-traffic-clusters"] = _greedy_start(p, clusters=True)
    candidates["round-robin-with-previous"] = _round_robin_start(p)
    candidates["spread-parts"] = _spread_start(p)
    if partitioner:
        try:
            metis, why = partition.metis_start(p, seed)
        except PlanError as e:  # post-fixing found a group that fits nowhere: the other starts stand
            metis, why = None, f"METIS start infeasible ({e})"
        if metis is not None:
            candidates["METIS"] = metis
            partitioner_note = f"METIS start objective {Occupancy(p, metis).objective():.4g} ({why})"
        else:
            partitioner_note = f"no METIS start: {why}; miniW's own starts stand"
    else:
        partitioner_note = "METIS start not asked for"
    scored = sorted(((Occupancy(p, w).objective(), name, w) for name, w in candidates.items()), key=lambda s: s[:2])
    _obj, start, where = scored[0]
    st = Occupancy(p, where)
    rng = np.random.default_rng(seed)
    best_obj, best_where = st.objective(), [list(w) for w in st.where]
    # A group with no cpu goal and no traffic changes no metric wherever it goes: not worth a look.
    active = [g for g in range(len(p.groups)) if p.groups[g].goal > 0 or p.neighbours[g]]
    order = sorted(active, key=lambda g: -(sum(t for _, t in p.neighbours[g]) * 1e-9 + p.groups[g].goal))
    moves = done_rounds = 0
    complete = False
    while clock() < deadline:
        improved, n_moves = _improve(st, order, deadline, clock)
        moves += n_moves
        cur = st.objective()
        if cur < best_obj - 1e-12:
            best_obj, best_where = cur, [list(w) for w in st.where]
        if improved:
            continue
        if done_rounds >= rounds:
            complete = True
            break
        done_rounds += 1
        st = Occupancy(p, best_where)
        _perturb(st, rng, max(1, len(p.groups) // 20))
    return Result(best_where, best_obj, start, done_rounds, moves, complete, partitioner_note)


def _targets(st: Occupancy, g: int) -> list[int]:
    p = st.p
    near = [n for h, _ in sorted(p.neighbours[g], key=lambda x: -x[1])[:6] for n in st.where[h]]
    elig = st.elig_arr[g]
    if len(elig) > 8:
        util = st.load[elig] * st.inv_cores[elig]
        light = elig[np.argpartition(util, 3)[:3]].tolist()
    else:
        light = elig.tolist()
    seen, out = set(st.where[g]), []
    for n in near + light:
        if n not in seen:
            seen.add(n)
            out.append(n)
    return out


def _improve(st: Occupancy, order: list[int], deadline: float, clock: Callable[[], float]) -> tuple[bool, int]:
    """One pass of pulls, then 1-opt moves and 2-opt swaps (first improvement per shard), then node swaps.

    Pulls come first: they are the moves that win traffic, and a pass may not finish by the deadline.
    """
    improved, moves = _pull_together(st, st.objective(), deadline, clock)
    if clock() < deadline:
        gained, n = _move_blocks(st, deadline, clock)
        improved |= gained
        moves += n
    cur = st.objective()
    groups = st.p.groups
    for i, g in enumerate(order):
        if i % 4 == 0 and clock() >= deadline:
            break
        size = groups[g].goal / max(1, len(st.where[g]))
        for src in list(st.where[g]):
            for dst in _targets(st, g):
                if st.can_host(g, dst, leaving=src):
                    st.relocate(g, src, dst)
                    val = st.objective()
                    if val < cur - 1e-12:
                        cur, improved, moves = val, True, moves + 1
                        break
                    st.relocate(g, dst, src)
                # Swap partners: the two PEs on dst closest in size, so loads barely change.
                partners = heapq.nsmallest(
                    2,
                    (h for h in st.occ[dst] if h != g and src not in st.where[h]),
                    key=lambda h: (abs(groups[h].goal / len(st.where[h]) - size), h),
                )
                done = False
                for h in partners:
                    if st.can_host(g, dst, swap_out=h) and st.can_host(h, src, swap_out=g):
                        st.relocate(g, src, dst)
                        st.relocate(h, dst, src)
                        val = st.objective()
                        if val < cur - 1e-12:
                            cur, improved, moves, done = val, True, moves + 1, True
                            break
                        st.relocate(h, src, dst)
                        st.relocate(g, dst, src)
                if done:
                    break
    if clock() < deadline:
        gained, n = _swap_nodes(st)
        improved |= gained
        moves += n
    return improved, moves


def _pull_together(st: Occupancy, cur: float, deadline: float, clock: Callable[[], float]) -> tuple[bool, int]:
    """Heaviest streams first: bring a stream's two ends onto the same nodes.

    Three ways, first improvement wins: a one-shard end moves onto a node of the other end; one end
    takes the other end's node set; both ends spread over the union of their nodes. Under the
    traffic model a stream whose ends are spread alike over the same nodes stays wholly local, so
    spreading a heavy pair over two nodes keeps their traffic off the network while the load of
    each node changes little — the move that makes large chained PEs fit beside each other.
    """
    improved, moves = False, 0
    for i, (a, b, _) in enumerate(sorted(st.p.streams, key=lambda s: -s[2])[:200]):
        if i % 16 == 0 and clock() >= deadline:
            break
        if _pull_pair(st, a, b, cur):
            cur, improved, moves = st.objective(), True, moves + 1
    return improved, moves


def _pull_pair(st: Occupancy, a: int, b: int, cur: float) -> bool:
    """Try the pulls of :func:`_pull_together` on stream ``a → b``; keep the first that improves."""
    wa, wb = st.where[a], st.where[b]
    if set(wa) == set(wb):
        return False
    for mover, other in ((a, b), (b, a)):
        if len(st.where[mover]) == 1:
            src = st.where[mover][0]
            for dst in st.where[other]:
                if dst != src and st.can_host(mover, dst, leaving=src):
                    st.relocate(mover, src, dst)
                    if st.objective() < cur - 1e-12:
                        return True
                    st.relocate(mover, dst, src)
    union = sorted(set(wa) | set(wb))
    layouts = [{a: list(wb)}, {b: list(wa)}, {a: union, b: union}]
    for layout in layouts:
        before = {g: list(st.where[g]) for g in layout}
        done = []
        for g, nodes in layout.items():
            if not st.can_spread(g, nodes):
                break
            st.spread(g, nodes)
            done.append(g)
        if len(done) == len(layout) and st.objective() < cur - 1e-12:
            return True
        for g in reversed(done):
            st.spread(g, before[g])
    return False


def _move_blocks(st: Occupancy, deadline: float, clock: Callable[[], float]) -> tuple[bool, int]:
    """Move groups spread alike over the same nodes (a block) together, keeping their streams local.

    Largest block first: widen it onto the eligible node with most room, or trade its busiest node
    for that node; the first change that improves is kept.
    """
    p = st.p
    blocks: dict[tuple[int, ...], list[int]] = {}
    for g, nodes in enumerate(st.where):
        if p.groups[g].goal > 0:
            blocks.setdefault(tuple(sorted(nodes)), []).append(g)
    cur = st.objective()
    improved, moves = False, 0
    for nodes, members in sorted(blocks.items(), key=lambda b: (-sum(p.groups[g].goal for g in b[1]), b[0])):
        if clock() >= deadline:
            break
        common = np.fromiter(set.intersection(*(st.eligible[g] for g in members)) - set(nodes), dtype=int)
        if not len(common):
            continue
        free = int(common[np.argmax(p.cores[common] - st.load[common])])
        busiest = max(nodes, key=lambda n: (st.load[n] / p.cores[n], n))
        for layout in (sorted([*nodes, free]), sorted([free, *(n for n in nodes if n != busiest)])):
            done = []
            for g in members:
                if not st.can_spread(g, layout):
                    break
                st.spread(g, layout)
                done.append(g)
            if len(done) == len(members) and st.objective() < cur - 1e-12:
                cur, improved, moves = st.objective(), True, moves + 1
                break
            for g in reversed(done):
                st.spread(g, list(nodes))
    return improved, moves


def _swap_nodes(st: Occupancy) -> tuple[bool, int]:
    """Swap everything on the most loaded node with another node's, if allowed and better."""
    p = st.p
    util = st.load * st.inv_cores
    hot = int(np.argmax(util))
    cur = st.objective()
    for cold in np.argsort(util)[:3]:
        cold = int(cold)
        if cold == hot:
            continue
        a, b = sorted(st.occ[hot]), sorted(st.occ[cold])
        if any(cold in st.where[g] for g in a) or any(hot in st.where[g] for g in b):
            continue
        if not all(cold in st.eligible[g] for g in a) or not all(hot in st.eligible[g] for g in b):
            continue
        if (
            sum(p.groups[g].memory for g in a) > p.memory[cold]
            or sum(p.groups[g].memory for g in b) > p.memory[hot]
            or sum(p.groups[g].cpu_min / len(st.where[g]) for g in a) > p.cores[cold] + 1e-9
            or sum(p.groups[g].cpu_min / len(st.where[g]) for g in b) > p.cores[hot] + 1e-9
        ):
            continue
        for g in a:
            st.relocate(g, hot, cold)
        for g in b:
            st.relocate(g, cold, hot)
        if st.objective() < cur - 1e-12 and st.moved <= (p.move_limit if p.move_limit is not None else 1 << 30):
            return True, 1
        for g in b:
            st.relocate(g, hot, cold)
        for g in a:
            st.relocate(g, cold, hot)
    return False, 0


def _perturb(st: Occupancy, rng: np.random.Generator, count: int) -> None:
    """Random feasible 1-opt moves, ignoring the objective, to leave a local minimum."""
    groups = len(st.p.groups)
    for _ in range(count):
        g = int(rng.integers(groups))
        src = st.where[g][int(rng.integers(len(st.where[g])))]
        elig = st.p.groups[g].eligible
        dst = elig[int(rng.integers(len(elig)))]
        if dst != src and st.can_host(g, dst, leaving=src):
            st.relocate(g, src, dst)
