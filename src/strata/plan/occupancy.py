"""Which nodes each placement group occupies, with every node's totals kept up to date (SODA §4.2).

miniW's local search and the METIS start (:mod:`strata.plan.partition`) both build placements on
:class:`Occupancy`: it keeps each node's cpu goal, cpu_min, memory, PE count and NIC totals, each
rack's uplink totals, the cross-node traffic and the count of moved groups current under every move,
so SODA's six metrics (:meth:`Occupancy.objective`) and the feasibility checks cost no recount. The
greedy step both starts share — a group onto the first of some candidate nodes that fit it — is
:func:`place_first_fitting` over :func:`nodes_by` orders, checked by :func:`fits_new_shard`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np

from strata.plan.placement import PlacementProblem
from strata.plan.plan import PlanError


class Occupancy:
    """A placement with incrementally maintained load, NIC and link totals."""

    def __init__(self, p: PlacementProblem, where: list[list[int]]):
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


def place_first_fitting(st: Occupancy, g: int, need: int, passes: Iterable[tuple[Iterable[int], bool]]) -> list[int]:
    """Put group ``g`` on up to ``need`` nodes, trying each (candidates, ignore_cpu) pass until enough fit.

    ``passes`` is consumed lazily, so a costlier candidate list is only built when earlier ones fall short.
    """
    chosen: list[int] = []
    for candidates, ignore_cpu in passes:
        for n in candidates:
            if len(chosen) == need:
                break
            if n not in chosen and fits_new_shard(st, g, n, ignore_cpu=ignore_cpu):
                chosen.append(n)
        if len(chosen) == need:
            break
    if not chosen:
        raise _fits_nowhere(st.p.groups[g].pes[0])
    st.where[g] = chosen
    for n in chosen:
        st.occupy(g, n, +1)
    return chosen


def nodes_by(elig: np.ndarray, key: np.ndarray, first: int, full: bool) -> Iterator[int]:
    """Eligible nodes in increasing ``key`` (ties by index): the ``first`` few, then (if ``full``) all."""
    if len(elig) > first:
        top = elig[np.argpartition(key[elig], first)[:first]]
        yield from sorted(top.tolist(), key=lambda n: (key[n], n))
        if not full:
            return
    yield from sorted(elig.tolist(), key=lambda n: (key[n], n))


def fits_new_shard(st: Occupancy, g: int, n: int, ignore_cpu: bool = False) -> bool:
    """Whether one more of ``g``'s ``shards`` may go to ``n`` beside what is placed (a group with previous nodes
    only to one of them); its cpu goal must fit too unless ``ignore_cpu``."""
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
