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
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from strata.plan import partition
from strata.plan.placement import Problem
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


class State:
    """A placement with incrementally maintained load, NIC and link totals."""

    def __init__(self, p: Problem, where: list[list[int]]):
        self.p = p
        n = len(p.names)
        self.where = [list(w) for w in where]
        self.load = np.zeros(n)
        self.minload = np.zeros(n)
        self.mem = np.zeros(n)
        self.count = np.zeros(n, dtype=int)
        self.occ: list[set[int]] = [set() for _ in range(n)]
        self.out = np.zeros(n)
        self.inn = np.zeros(n)
        nr = len(p.uplink)
        self.up_out = np.zeros(nr)
        self.up_in = np.zeros(nr)
        self.cross = 0.0
        self.total_nic = float(p.nic.sum())
        self.inv_cores = 1.0 / p.cores
        self.inv_nic = 1.0 / p.nic
        self.incident: list[list[int]] = [[] for _ in p.groups]
        for e, (a, b, _) in enumerate(p.streams):
            self.incident[a].append(e)
            if b != a:
                self.incident[b].append(e)
        self.eligible = p.eligible_sets
        self.elig_arr = p.eligible_arrays
        for g, nodes in enumerate(self.where):
            for node in nodes:
                self.occupy(g, node, +1)
        for e in range(len(p.streams)):
            self._stream(e, +1)
        self.moved = sum(self._is_moved(g) for g in range(len(p.groups)))

    # ------------------------------------------------------------ bookkeeping

    def occupy(self, g: int, node: int, sign: int) -> None:
        grp = self.p.groups[g]
        k = len(self.where[g]) or 1
        self.load[node] += sign * grp.goal / k
        self.minload[node] += sign * grp.cpu_min / k
        self.mem[node] += sign * grp.memory
        self.count[node] += sign * len(grp.pes)
        if sign > 0:
            self.occ[node].add(g)
        else:
            self.occ[node].discard(g)

    def _stream(self, e: int, sign: int) -> None:
        a, b, t = self.p.streams[e]
        wa, wb = self.where[a], self.where[b]
        if not wa or not wb:
            return
        if len(wa) == 1 and len(wb) == 1 and not len(self.p.uplink):
            # The common case, kept cheap: one node each end, no racks.
            na, nb = wa[0], wb[0]
            if na != nb:
                self.out[na] += sign * t
                self.inn[nb] += sign * t
                self.cross += sign * t
            return
        fa, fb = 1.0 / len(wa), 1.0 / len(wb)
        keyed = bool(self.p.keyed) and self.p.keyed[e]
        # Equal shards: on a node holding both ends, min(fa, fb) of the stream stays local (locality-first
        # routing), or fa · fb of it when the consumer is keyed (records go to their key group's owner).
        m = fa * fb if keyed else min(fa, fb)
        common = set(wa).intersection(wb)
        for n in wa:
            self.out[n] += sign * t * (fa - m if n in common else fa)
        for n in wb:
            self.inn[n] += sign * t * (fb - m if n in common else fb)
        self.cross += sign * t * (1.0 - m * len(common))
        if len(self.p.uplink):
            ra: dict[int, float] = {}
            rb: dict[int, float] = {}
            for n in wa:
                ra[self.p.rack[n]] = ra.get(self.p.rack[n], 0.0) + fa
            for n in wb:
                rb[self.p.rack[n]] = rb.get(self.p.rack[n], 0.0) + fb
            for r in set(ra) | set(rb):
                if r < 0:
                    continue
                x, y = ra.get(r, 0.0), rb.get(r, 0.0)
                m = x * y if keyed else min(x, y)
                self.up_out[r] += sign * t * (ra.get(r, 0.0) - m)
                self.up_in[r] += sign * t * (rb.get(r, 0.0) - m)

    def _is_moved(self, g: int) -> bool:
        prev = self.p.groups[g].prev
        return prev is not None and any(n not in prev for n in self.where[g])

    def objective(self) -> float:
        w = self.p.weights
        util = self.load * self.inv_cores
        total = w.max_cpu * float(util.max()) + w.avg_cpu * float(util.mean())
        if w.max_nic:
            total += w.max_nic * float((np.maximum(self.out, self.inn) * self.inv_nic).max())
        if w.avg_nic:
            total += w.avg_nic * float(((self.out + self.inn) * self.inv_nic).mean()) / 2
        if len(self.p.uplink):
            total += w.max_link * float((np.maximum(self.up_out, self.up_in) / self.p.uplink).max())
            total += w.avg_link * float(((self.up_out + self.up_in) / self.p.uplink).mean()) / 2
        else:
            total += (w.avg_link + w.max_link) * self.cross / self.total_nic
        return total

    # ------------------------------------------------------------ moves

    def can_host(self, g: int, node: int, leaving: int = -1, swap_out: int = -1) -> bool:
        """Whether a shard of ``g`` may go to ``node`` (optionally after ``swap_out`` leaves it)."""
        p, grp = self.p, self.p.groups[g]
        if node not in self.eligible[g] or (node in self.where[g] and node != leaving):
            return False
        others = self.occ[node] - {swap_out}
        if p.exclude[g] & others:
            return False
        k = len(self.where[g])
        mem, minload, count = self.mem[node], self.minload[node], self.count[node]
        if swap_out >= 0:
            h = p.groups[swap_out]
            kh = len(self.where[swap_out])
            mem, minload, count = mem - h.memory, minload - h.cpu_min / kh, count - len(h.pes)
        if mem + grp.memory > p.memory[node] + 1e-6:
            return False
        if minload + grp.cpu_min / k > p.cores[node] + 1e-9:
            return False
        if p.max_pes_per_node is not None and count + len(grp.pes) > p.max_pes_per_node:
            return False
        if grp.prev is not None and p.move_limit is not None and node not in grp.prev and not self._is_moved(g):
            return self.moved + 1 <= p.move_limit
        return True

    def can_spread(self, g: int, nodes: list[int]) -> bool:
        """Whether ``g`` may occupy exactly ``nodes`` (distinct, equal shards) in place of its current nodes.

        Memory per shard is charged at the group's fewest shards, which never undercounts a wider spread.
        """
        p, grp = self.p, self.p.groups[g]
        if not grp.shards <= len(nodes) <= grp.limit or len(set(nodes)) != len(nodes):
            return False
        mine = set(self.where[g])
        k_old, k_new = len(mine) or 1, len(nodes)
        for n in nodes:
            if n not in self.eligible[g] or p.exclude[g] & self.occ[n]:
                return False
            here = n in mine
            if self.mem[n] - here * grp.memory + grp.memory > p.memory[n] + 1e-6:
                return False
            if self.minload[n] - here * grp.cpu_min / k_old + grp.cpu_min / k_new > p.cores[n] + 1e-9:
                return False
            if p.max_pes_per_node is not None and self.count[n] + (not here) * len(grp.pes) > p.max_pes_per_node:
                return False
        if grp.prev is not None and p.move_limit is not None:
            moved = self.moved - self._is_moved(g) + any(n not in grp.prev for n in nodes)
            return moved <= p.move_limit
        return True

    def spread(self, g: int, nodes: list[int]) -> None:
        """Put ``g`` on exactly ``nodes`` (equal shards), whatever its shard count was."""
        for e in self.incident[g]:
            self._stream(e, -1)
        was = self._is_moved(g)
        for n in self.where[g]:
            self.occupy(g, n, -1)
        self.where[g] = list(nodes)
        for n in nodes:
            self.occupy(g, n, +1)
        self.moved += int(self._is_moved(g)) - int(was)
        for e in self.incident[g]:
            self._stream(e, +1)

    def relocate(self, g: int, src: int, dst: int) -> None:
        for e in self.incident[g]:
            self._stream(e, -1)
        was = self._is_moved(g)
        self.occupy(g, src, -1)
        self.where[g][self.where[g].index(src)] = dst
        self.occupy(g, dst, +1)
        self.moved += int(self._is_moved(g)) - int(was)
        for e in self.incident[g]:
            self._stream(e, +1)


def _fits_nowhere(pe: str) -> PlanError:
    """A PE no node can take beside those already placed (a PlanError, so callers report it, not crash)."""
    return PlanError(
        [
            f"PE {pe} fits no node next to the PEs already placed "
            "(binding: node memory, required labels, exlocation or PEs per node)"
        ]
    )


def _take(st: State, g: int, need: int, passes: Iterable[tuple[Iterable[int], bool]]) -> list[int]:
    """Put group ``g`` on up to ``need`` nodes, trying each (candidates, ignore_cpu) pass until enough fit.

    ``passes`` is consumed lazily, so a costlier candidate list is only built when earlier ones fall short.
    """
    chosen: list[int] = []
    for candidates, ignore_cpu in passes:
        for n in candidates:
            if len(chosen) == need:
                break
            if n not in chosen and _fits_new(st, g, n, chosen, ignore_cpu=ignore_cpu):
                chosen.append(n)
        if len(chosen) == need:
            break
    if not chosen:
        raise _fits_nowhere(st.p.groups[g].pes[0])
    st.where[g] = chosen
    for n in chosen:
        st.occupy(g, n, +1)
    return chosen


def _by_key(elig: np.ndarray, key: np.ndarray, first: int, full: bool):
    """Eligible nodes in increasing ``key`` (ties by index): the ``first`` few, then (if ``full``) all."""
    if len(elig) > first:
        top = elig[np.argpartition(key[elig], first)[:first]]
        yield from sorted(top.tolist(), key=lambda n: (key[n], n))
        if not full:
            return
    yield from sorted(elig.tolist(), key=lambda n: (key[n], n))


def _greedy_start(p: Problem, clusters: bool) -> list[list[int]]:
    """Streams by decreasing traffic — in one global order, or (``clusters``) growing each placed
    cluster along its heaviest streams first. Each group goes to the node that holds most of its
    placed neighbours' traffic and has room for it, else to the node with the most room."""
    st = State(p, [[] for _ in p.groups])
    placed = [False] * len(p.groups)

    def room(n: int) -> float:
        return p.cores[n] - st.load[n]

    def place(g: int, prefer: list[int]) -> None:
        grp = p.groups[g]
        need = grp.shards
        # Most room first, cpu fit required; then anything feasible; the full node list only as a last resort.
        _take(
            st,
            g,
            need,
            (
                ([*prefer, *_by_key(st.elig_arr[g], st.load - p.cores, need + 8, full)], not strict)
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


def _fits_new(st: State, g: int, n: int, chosen: list[int], ignore_cpu: bool = False) -> bool:
    p, grp = st.p, st.p.groups[g]
    k = grp.shards
    if n not in st.eligible[g] or p.exclude[g] & st.occ[n]:
        return False
    if st.mem[n] + grp.memory > p.memory[n] + 1e-6 or st.minload[n] + grp.cpu_min / k > p.cores[n] + 1e-9:
        return False
    if p.max_pes_per_node is not None and st.count[n] + len(grp.pes) > p.max_pes_per_node:
        return False
    if grp.prev is not None and p.move_limit is not None and n not in grp.prev:
        return False
    return ignore_cpu or st.load[n] + grp.goal / k <= p.cores[n] + 1e-9


def _round_robin_start(p: Problem) -> list[list[int]]:
    """Previous nodes first; the rest round-robin to the node with fewest PEs."""
    st = State(p, [[] for _ in p.groups])
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
        _take(
            st,
            g,
            grp.shards,
            ((_by_key(st.elig_arr[g], st.count.astype(float), grp.shards + 8, full), True) for full in (False, True)),
        )
    return st.where


def _traffic_parts(p: Problem, most: float) -> list[list[int]]:
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


def _spread_start(p: Problem) -> list[list[int]]:
    """Whole traffic parts spread alike over a few nodes, largest part first.

    A part spread in equal shares over the same k nodes keeps all its streams local and puts
    1/k of its cpu on each node. For every part the fewest nodes (k from the most shards any of
    its groups needs up to the fewest candidates any may have) whose room holds a 1/k slice are
    taken, tightest first (best fit); a part that fits nowhere that way, and every group the
    shared nodes do not suit, is placed on its own on the nodes with most room.
    """
    st = State(p, [[] for _ in p.groups])
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
                _take(
                    st,
                    g,
                    p.groups[g].shards,
                    (
                        (_by_key(st.elig_arr[g], st.load - p.cores, p.groups[g].shards + 8, full), not strict)
                        for strict, full in ((True, False), (False, False), (False, True))
                    ),
                )
    return st.where


def search(
    p: Problem,
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
            partitioner_note = f"METIS start objective {State(p, metis).objective():.4g} ({why})"
        else:
            partitioner_note = f"no METIS start: {why}; miniW's own starts stand"
    else:
        partitioner_note = "METIS start not asked for"
    scored = sorted(((State(p, w).objective(), name, w) for name, w in candidates.items()), key=lambda s: s[:2])
    _obj, start, where = scored[0]
    st = State(p, where)
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
        st = State(p, best_where)
        _perturb(st, rng, max(1, len(p.groups) // 20))
    return Result(best_where, best_obj, start, done_rounds, moves, complete, partitioner_note)


def _targets(st: State, g: int) -> list[int]:
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


def _improve(st: State, order: list[int], deadline: float, clock: Callable[[], float]) -> tuple[bool, int]:
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


def _pull_together(st: State, cur: float, deadline: float, clock: Callable[[], float]) -> tuple[bool, int]:
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


def _pull_pair(st: State, a: int, b: int, cur: float) -> bool:
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


def _move_blocks(st: State, deadline: float, clock: Callable[[], float]) -> tuple[bool, int]:
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


def _swap_nodes(st: State) -> tuple[bool, int]:
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


def _perturb(st: State, rng: np.random.Generator, count: int) -> None:
    """Random feasible 1-opt moves, ignoring the objective, to leave a local minimum."""
    groups = len(st.p.groups)
    for _ in range(count):
        g = int(rng.integers(groups))
        src = st.where[g][int(rng.integers(len(st.where[g])))]
        elig = st.p.groups[g].eligible
        dst = elig[int(rng.integers(len(elig)))]
        if dst != src and st.can_host(g, dst, leaving=src):
            st.relocate(g, src, dst)
