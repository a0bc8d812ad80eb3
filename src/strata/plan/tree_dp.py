"""A component's importance curve by dynamic programming on a cpu grid (SODA §4.1, NSDP).

SODA's macroQ solves the discrete RAP inside each weak component by non-serial
dynamic programming (Ibaraki & Katoh, *Resource Allocation Problems*). This is
that DP for the components whose graph is an out-tree — one source, every other
PE fed by exactly one stream: chains and fan-outs — where the non-serial
structure collapses to a recursion over the tree. Every PE's cpu is on the grid
``cpu_min + k·step``; with at most ``e`` steps above the minimum in the subtree
of PE ``v`` offered ``r`` records/s,

    F_v(r, e) = max over k ≤ min(e, k_max) of  value_v(o) + M_v(o, e − k),
    o = out_factor_v · min(r, capacity_v(cpu_min_v + k·step)),

where ``value_v(o)`` is Σ weight × value(o) over v's weighted streams and
``M_v(o, ·)`` is the max-plus convolution of the children's ``F_w(o, ·)``. The
rates a PE can be offered form a finite set — its source's rate, or some
ancestor's capacity at a grid cpu, times the selectivities in between — so the
tables are finite and the recursion is **exact on the grid** for every resource
function (tables, convex or not) and every value function (steps, non-concave
pieces): the curve's value at budget ``minimum + e·step`` is the best importance
over all grid allocations with at most ``e`` steps, the same as enumerating them.
It is not exact between grid points: every PE's cpu is a whole number of steps,
so on a coarse grid a PE short of a step threshold by a fraction of a step loses
it, where the MILP (continuous cpu) does not. macroQ therefore keeps, at each
budget, the better of this DP and the MILP at that budget
(:func:`strata.plan.curves.better_of`); components with fan-in (a PE fed by two
streams) are not trees and get the MILP alone.
"""

from __future__ import annotations

import math

import networkx as nx
import numpy as np

from strata.model import OperatorKind
from strata.plan.curves import ComponentModel, Curve


def is_out_tree(graph: nx.DiGraph, pes: tuple[str, ...]) -> bool:
    """Whether the component is an out-tree (one root, every other PE with exactly one input)."""
    return nx.is_arborescence(graph.subgraph(pes))


def dp_curve(graph: nx.DiGraph, model: ComponentModel, points: int) -> Curve:
    """The component's curve at ``points`` evenly spaced budgets from its minimum to its saturation."""
    pes = tuple(model.ops)
    sub = graph.subgraph(pes)
    order = list(nx.topological_sort(sub))
    lo, hi = model.minimum, model.saturation
    steps = max(1, points - 1) if hi > lo else 0
    step = (hi - lo) / steps if steps else 0.0
    ops = model.ops

    # Top-down: the rates each PE may be offered, and where each (offered, k) lands among its outputs.
    offered: dict[str, np.ndarray] = {}
    outputs: dict[str, np.ndarray] = {}
    land: dict[str, np.ndarray] = {}
    for v in order:
        op = ops[v]
        if v not in offered:
            offered[v] = np.array([op.source.rate if op.kind is OperatorKind.SOURCE else 0.0])
        k_max = steps if step == 0 else min(steps, math.floor((op.cpu_max - op.cpu_min) / step + 1e-9))
        caps = np.array([op.resource.capacity(op.cpu_min + k * step, op.cost_per_record) for k in range(k_max + 1)])
        processed = np.minimum.outer(offered[v], caps)
        levels = np.unique(processed)
        land[v] = np.searchsorted(levels, processed)
        outputs[v] = levels * (1.0 if op.kind is OperatorKind.SOURCE else op.selectivity)
        for w in sub.successors(v):
            offered[w] = outputs[v]

    # Bottom-up: F tables with the choices that reach them.
    table: dict[str, np.ndarray] = {}
    pick: dict[str, np.ndarray] = {}
    split: dict[str, list[tuple[str, np.ndarray]]] = {}
    width = steps + 1
    for v in reversed(order):
        outs = outputs[v]
        merged = np.zeros((len(outs), width))
        split[v] = []
        for w in sorted(sub.successors(v)):
            merged, take = _convolve(merged, table[w])
            split[v].append((w, take))
        gain = np.zeros(len(outs))
        for _, _w, d in sub.out_edges(v, data=True):
            if d["weight"]:
                gain += d["weight"] * np.array([d["stream"].value(float(o)) for o in outs])
        table[v], pick[v] = _choose(gain[land[v]], land[v], merged)

    root = order[0]
    budgets = lo + step * np.arange(width) if steps else np.array([lo])
    values = table[root][0, : len(budgets)]
    allocs = []
    for e in range(len(budgets)):
        cpu: dict[str, float] = {}
        _assign(root, 0, e, ops, step, land, pick, split, cpu)
        allocs.append(cpu)
    return Curve(
        pes,
        budgets.astype(float),
        np.asarray(values, dtype=float),
        allocs,
        exact=False,
        status="optimal",
        interpolates=False,
    )


def _convolve(acc: np.ndarray, child: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Max-plus convolution along the budget axis: best acc[·, e − a] + child[·, a], and the a taken."""
    rows, width = acc.shape
    out = np.empty_like(acc)
    take = np.empty((rows, width), dtype=int)
    for e in range(width):
        cand = acc[:, e::-1] + child[:, : e + 1]
        take[:, e] = np.argmax(cand, axis=1)
        out[:, e] = cand[np.arange(rows), take[:, e]]
    return out, take


def _choose(gain: np.ndarray, land: np.ndarray, merged: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """F[r, e] = max over k ≤ e of gain[r, k] + merged[land[r, k], e − k], and the k taken."""
    rows, ks = land.shape
    width = merged.shape[1]
    table = np.empty((rows, width))
    pick = np.empty((rows, width), dtype=int)
    for e in range(width):
        k = np.arange(min(e, ks - 1) + 1)
        cand = gain[:, k] + merged[land[:, k], e - k]
        pick[:, e] = np.argmax(cand, axis=1)
        table[:, e] = cand[np.arange(rows), pick[:, e]]
    return table, pick


def _assign(
    v: str,
    r: int,
    e: int,
    ops: dict,
    step: float,
    land: dict[str, np.ndarray],
    pick: dict[str, np.ndarray],
    split: dict[str, list[tuple[str, np.ndarray]]],
    cpu: dict[str, float],
) -> None:
    """Walk the choices down from ``v`` offered its ``r``-th rate with ``e`` steps to spend."""
    k = int(pick[v][r, e])
    cpu[v] = ops[v].cpu_min + k * step
    out = int(land[v][r, k])
    left = e - k
    for w, take in reversed(split[v]):
        a = int(take[out, left])
        _assign(w, out, a, ops, step, land, pick, split, cpu)
        left -= a
