"""A multilevel graph partitioner's start for miniW: METIS via ``pymetis`` (SODA §4.2, "miniW").

miniW's own starts (greedy by traffic, spread parts) are local: on graphs whose good cuts are
global — two dense halves joined by a few streams — they cut several times more traffic than
needed, and local search does not recover. METIS (Karypis & Kumar's multilevel k-way
partitioning: coarsen by heavy-edge matching, partition the coarsest graph, refine while
uncoarsening) finds such cuts in near-linear time. Here it partitions macroW's groups (colocated
PEs already merged) into one part per node:

- vertex weight = the group's cpu goal, edge weight = the bytes/s of the streams between two
  groups (both scaled to integers), target part weights ``tpwgts`` = node cores / total cores;
- SODA's constraints are then applied by post-fixing, group by group in decreasing cpu goal:
  a group goes to its part's node when that node is eligible for it (labels, fixed node,
  memory), holds none of its exlocated groups, keeps its cpu_min within the cores, its PEs within
  ``max_pes_per_node`` and the move limit; a group that needs several shards (or whose node is
  not allowed) takes its part's node when allowed and then the nodes with most room, as miniW's
  greedy start does. Node cpu beyond cpu_min is soft in macroW, as in miniW.

miniW then refines the result under SODA's six metrics. :func:`metis_start` returns ``None``
and the reason when ``pymetis`` is missing or fails; miniW's own starts stand and the phase
detail says so.
"""

from __future__ import annotations

import numpy as np

from strata.plan.occupancy import Occupancy, fits_new_shard, nodes_by, place_first_fitting
from strata.plan.placement import PlacementProblem

SCALE = 1_000_000  # integer resolution of METIS's vertex and edge weights
LIMIT = 1_000_000_000  # most any sum of them may reach


def metis_parts(p: PlacementProblem, seed: int = 0) -> tuple[list[int] | None, str]:
    """A node index per group by METIS k-way partitioning; ``(None, reason)`` if it cannot run."""
    n_groups, n_nodes = len(p.groups), len(p.names)
    if n_groups == 0:
        return [], "no groups"
    if n_nodes == 1:
        return [0] * n_groups, "one node"
    # METIS cannot cut a graph into more parts than it has vertices (it prints an error and returns
    # nonsense); with few groups, partition onto the nodes with most cores, at most one per 2 groups.
    parts_n = min(n_nodes, n_groups // 2)
    if parts_n < 2:
        return None, f"{n_groups} groups are too few to partition"
    nodes = sorted(range(n_nodes), key=lambda n: (-p.cores[n], n))[:parts_n]
    try:
        import pymetis
    except ImportError as e:  # an optional dependency: miniW's own starts stand
        return None, f"pymetis unavailable ({e})"
    adj: list[dict[int, float]] = [{} for _ in range(n_groups)]
    for a, b, t in p.streams:
        if a != b and t > 0:
            adj[a][b] = adj[a].get(b, 0.0) + t
            adj[b][a] = adj[b].get(a, 0.0) + t
    # Integer weights, the largest at SCALE, every total within METIS's 32-bit integers.
    top = max((t for row in adj for t in row.values()), default=1.0)
    degree = sum(len(row) for row in adj)
    e_scale = max(1, min(SCALE, LIMIT // max(1, degree)))
    xadj, adjncy, eweights = [0], [], []
    for row in adj:
        for h in sorted(row):
            adjncy.append(h)
            eweights.append(max(1, round(e_scale * row[h] / top)))
        xadj.append(len(adjncy))
    goals = np.array([max(g.goal, 0.0) for g in p.groups])
    gtop = float(goals.max()) if goals.max() > 0 else 1.0
    v_scale = max(1, min(SCALE, LIMIT // n_groups))
    vweights = [max(1, round(v_scale * g / gtop)) for g in goals]
    cores = p.cores[nodes]
    tpwgts = (cores / cores.sum()).tolist()
    tpwgts[-1] = max(0.0, 1.0 - sum(tpwgts[:-1]))  # Σ exactly 1
    try:
        opts = pymetis.Options(seed=seed)
        _cut, parts = pymetis.part_graph(
            parts_n,
            pymetis.CSRAdjacency(xadj, adjncy),
            vweights=vweights,
            eweights=eweights if adjncy else None,
            tpwgts=tpwgts,
            options=opts,
        )
    except Exception as e:  # a library failure must not cost the epoch its plan
        return None, f"METIS failed ({type(e).__name__}: {e})"
    parts = [int(x) for x in parts]
    if len(parts) != n_groups or any(not 0 <= x < parts_n for x in parts):
        return None, "METIS returned a malformed partition"
    return [nodes[x] for x in parts], "ok"


def metis_start(p: PlacementProblem, seed: int = 0) -> tuple[list[list[int]] | None, str]:
    """METIS's partition made feasible for SODA's constraints (see the module doc); or ``(None, why)``."""
    parts, why = metis_parts(p, seed)
    if parts is None:
        return None, why
    st = Occupancy(p, [[] for _ in p.groups])
    moved = 0
    for g in sorted(range(len(p.groups)), key=lambda g: (-p.groups[g].goal, g)):
        grp = p.groups[g]
        target = parts[g]
        if grp.shards == 1 and fits_new_shard(st, g, target, ignore_cpu=True):
            st.where[g] = [target]
            st.occupy(g, target, +1)
            continue
        moved += 1
        place_first_fitting(
            st,
            g,
            grp.shards,
            (
                ([target, *nodes_by(st.elig_arr[g], st.load - p.cores, grp.shards + 8, full)], not strict)
                for strict, full in ((True, False), (False, False), (False, True))
            ),
        )
    return st.where, f"{moved} of {len(p.groups)} groups moved off their METIS part by SODA's constraints"
