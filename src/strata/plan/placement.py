"""The placement problem macroW solves, after miniW's preprocessing (SODA §4.2).

PEs that must share a node (colocation) are merged into one group; a group too
big for one node is cut into ``shards`` equal parts that go to distinct nodes,
so its candidate nodes are the nodes of its shards. Each group knows the nodes
it may use (labels, memory, fixed node), the groups it may not share a node
with (exlocation) and its previous candidate nodes (incremental movement).
Streams between groups are aggregated into bytes/s.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property

import networkx as nx
import numpy as np

from strata.model import Cluster, resolve
from strata.plan.plan import PlanError
from strata.plan.quality import Weights, flows


@dataclass
class Group:
    pes: tuple[str, ...]
    goal: float
    cpu_min: float
    memory: float  # bytes per shard
    eligible: list[int]
    shards: int
    limit: int  # most candidate nodes
    prev: frozenset[int] | None = None


@dataclass
class PlacementProblem:
    """Everything macroW needs, with nodes as indices into ``names``."""

    cluster: Cluster
    names: list[str]
    cores: np.ndarray
    memory: np.ndarray
    nic: np.ndarray
    rack: np.ndarray  # rack index per node, -1 without a rack
    uplink: np.ndarray
    groups: list[Group]
    group_of: dict[str, int]
    streams: list[tuple[int, int, float]]
    exclude: list[set[int]]
    weights: Weights
    max_pes_per_node: int | None = None
    move_limit: int | None = None
    neighbours: list[list[tuple[int, float]]] = field(default_factory=list)
    # Per stream: its consumer is keyed, so the engines route it by key group (strata.model.traffic); the
    # search's objective counts it so (strata.plan.occupancy), the MILP keeps min(Φ_u,n, Φ_v,n) as its linear surrogate.
    keyed: list[bool] = field(default_factory=list)

    @cached_property
    def eligible_sets(self) -> list[set[int]]:
        """Each group's eligible nodes as a set; groups with the same list share one object."""
        shared: dict[int, set[int]] = {}
        return [shared.setdefault(id(g.eligible), set(g.eligible)) for g in self.groups]

    @cached_property
    def eligible_arrays(self) -> list[np.ndarray]:
        shared: dict[int, np.ndarray] = {}
        return [shared.setdefault(id(g.eligible), np.asarray(g.eligible, dtype=int)) for g in self.groups]


def _union_find(items: list[str], pairs: list[tuple[str, str]]) -> dict[str, str]:
    parent = {i: i for i in items}

    def find(a: str) -> str:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    for a, b in pairs:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    return {i: find(i) for i in items}


def build_problem(
    cluster: Cluster,
    graph: nx.DiGraph,
    goals: Mapping[str, float],
    rates: Mapping[str, float],
    weights: Weights,
    max_candidates: int = 4,
    max_pes_per_node: int | None = None,
    previous: Mapping[str, list[str]] | None = None,
    move_limit: int | None = None,
) -> PlacementProblem:
    """Preprocess the admitted PEs into groups; PlanError names any PE that fits no node."""
    nodes = list(cluster.all_nodes)
    index = {n.name: i for i, n in enumerate(nodes)}
    racks = {r.name: k for k, r in enumerate(cluster.racks)}
    pes = sorted(graph.nodes)
    job = {pe: graph.nodes[pe]["job"] for pe in pes}
    pairs, excl = [], []
    for pe in pes:
        c = graph.nodes[pe]["op"].constraints
        pairs += [(pe, q) for q in (resolve(job[pe], r) for r in c.colocate_with) if q in graph]
        excl += [(pe, q) for q in (resolve(job[pe], r) for r in c.exlocate_from) if q in graph]
    root = _union_find(pes, pairs)
    members: dict[str, list[str]] = {}
    for pe in pes:
        members.setdefault(root[pe], []).append(pe)
    largest = max(n.cores for n in nodes)
    node_memory = np.array([n.memory for n in nodes], dtype=float)
    everyone = frozenset(range(len(nodes)))
    by_labels: dict[frozenset[str], frozenset[int]] = {}
    fitting: dict[tuple[frozenset[int], float], list[int]] = {}
    most_cores: dict[int, float] = {}
    groups, group_of, problems = [], {}, []
    for key in sorted(members):
        ms = members[key]
        ops = [graph.nodes[p]["op"] for p in ms]
        ok = everyone
        why = []
        for p, op in zip(ms, ops, strict=True):
            c = op.constraints
            if c.required_labels:
                if c.required_labels not in by_labels:
                    by_labels[c.required_labels] = frozenset(
                        i for i, n in enumerate(nodes) if c.required_labels <= n.labels
                    )
                ok &= by_labels[c.required_labels]
                if not ok:
                    why.append(f"{p} requires labels {sorted(c.required_labels)}")
            if c.fixed_node is not None:
                ok &= {index[c.fixed_node]} if c.fixed_node in index else frozenset()
                if not ok:
                    why.append(f"{p} is fixed to node {c.fixed_node!r}")
        goal = sum(goals.get(p, 0.0) for p in ms)
        cap = min([op.constraints.max_instances or max_candidates for op in ops] + [max_candidates])
        shards = max(1, min(cap, math.ceil(goal / largest - 1e-9), len(ok) or 1))
        mem = sum(op.memory + op.state_bytes / shards for op in ops)
        if (ok, mem) not in fitting:
            fits = sorted(i for i in ok if node_memory[i] >= mem)
            fitting[(ok, mem)] = fits
            most_cores[id(fits)] = max((nodes[i].cores for i in fits), default=0.0)
        fits = fitting[(ok, mem)]
        if ok and not fits:
            why.append(
                f"memory {mem / 2**30:.3g} GiB per node exceeds every eligible node "
                f"(largest {max(nodes[i].memory for i in ok) / 2**30:.3g} GiB)"
            )
        cpu_min = sum(op.cpu_min for op in ops)
        if fits and cpu_min > shards * most_cores[id(fits)] + 1e-9:
            why.append(f"cpu_min {cpu_min:g} cores exceeds {shards} node(s) of at most {most_cores[id(fits)]:g} cores")
        if not fits or why:
            label = ms[0] if len(ms) == 1 else f"{ms[0]} (colocated with {', '.join(ms[1:])})"
            problems.append(f"PE {label} fits no node: " + "; ".join(why or ["no eligible node"]))
            continue
        prev = None
        if previous is not None:
            old = {index[n] for p in ms for n in previous.get(p, []) if n in index}
            prev = frozenset(old) if old else None
        gi = len(groups)
        groups.append(Group(tuple(ms), goal, cpu_min, mem, fits, min(shards, len(fits)), min(cap, len(fits)), prev))
        for p in ms:
            group_of[p] = gi
    if problems:
        raise PlanError(problems)
    for a, b in excl:
        if group_of[a] == group_of[b]:
            raise PlanError([f"PE {a} must be both colocated with and exlocated from {b} (binding: colocation)"])
    exclude: list[set[int]] = [set() for _ in groups]
    for a, b in excl:
        exclude[group_of[a]].add(group_of[b])
        exclude[group_of[b]].add(group_of[a])
    agg: dict[tuple[int, int, bool], float] = {}
    for u, v, t in flows(graph, rates, goals):
        gu, gv = group_of[u], group_of[v]
        if gu != gv:
            k = (gu, gv, bool(graph.nodes[v]["op"].keyed))
            agg[k] = agg.get(k, 0.0) + t
    streams = [(a, b, t) for (a, b, _), t in sorted(agg.items())]
    keyed = [k for (_, _, k), _ in sorted(agg.items())]
    neighbours: list[list[tuple[int, float]]] = [[] for _ in groups]
    for a, b, t in streams:
        neighbours[a].append((b, t))
        neighbours[b].append((a, t))
    return PlacementProblem(
        cluster=cluster,
        names=[n.name for n in nodes],
        cores=np.array([n.cores for n in nodes], dtype=float),
        memory=np.array([n.memory for n in nodes], dtype=float),
        nic=np.array([n.nic for n in nodes], dtype=float),
        rack=np.array([racks.get(n.rack, -1) if n.rack else -1 for n in nodes], dtype=int),
        uplink=np.array([r.uplink for r in cluster.racks], dtype=float),
        groups=groups,
        group_of=group_of,
        streams=streams,
        exclude=exclude,
        weights=weights,
        max_pes_per_node=max_pes_per_node,
        move_limit=move_limit,
        neighbours=neighbours,
        keyed=keyed,
    )


def assignment_of(
    problem: PlacementProblem, nodes_of: list[list[int]] | list[dict[int, float]], goals: Mapping[str, float]
) -> dict[str, dict[str, float]]:
    """PE → {node: cpu} from each group's nodes (equal shards) or node → share."""
    out: dict[str, dict[str, float]] = {}
    for g, grp in enumerate(problem.groups):
        where = nodes_of[g]
        share = where if isinstance(where, dict) else {n: 1.0 / len(where) for n in where}
        for pe in grp.pes:
            out[pe] = {problem.names[n]: goals.get(pe, 0.0) * s for n, s in share.items()}
    return out
