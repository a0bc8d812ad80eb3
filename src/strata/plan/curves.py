"""Per-component importance curves over a cpu budget (SODA §4.1, macroQ's inner step).

For one weak component of the joined graph, the curve gives the best importance
for every cpu budget from the component's minimum (Σ cpu_min) to its saturation
(the cpu that processes every offered record). Two ways, as SODA's macroQ:

- **LP components** (linear resource functions, concave values): the optimum of
  a parametric LP in its right-hand side is concave and piecewise linear, so it
  is traced exactly by the sandwich method: solve at both ends, intersect the
  tangent lines given by the budget row's dual, solve there, recurse until the
  chord and the tangents agree within ``tol``. Every breakpoint carries the
  optimal allocation, which microQ's pacing constraints interpolate.
- **General components**: on a cpu grid whose resolution the caller refines
  while time allows, by :func:`grid_curve`, the MILP (λ-formulation of
  non-concave pieces) at each grid budget, made non-decreasing (unused cpu may
  stay idle). Out-trees (chains, fan-outs) also get the grid DP of
  :mod:`strata.plan.tree_dp`, exact over allocations on the grid in bounded
  time, and keep the better of the two at each budget (:func:`better_of`): the
  MILP's cpu is continuous, so it wins between grid cpu values when it finishes
  in its time limit; the DP holds every point when it does not.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import networkx as nx
import numpy as np

from strata.model import Operator, importance, propagate
from strata.plan import formulation as F
from strata.plan.lp import INF, Program


@dataclass
class Curve:
    """Importance of one component as a function of the cpu budget given to it."""

    pes: tuple[str, ...]
    budgets: np.ndarray
    values: np.ndarray
    allocs: list[dict[str, float]]
    exact: bool
    status: str = "optimal"
    # Whether a budget between two points earns the chord: true of an LP's curve (a convex combination of two
    # optimal allocations is feasible and, values being concave, worth at least the chord). A curve traced on
    # a grid (MILP per budget, the tree DP) knows only its points: between them it earns what its lower point
    # earns (the rest of the budget may stay idle); a chord there would credit half a step that no
    # allocation earns.
    interpolates: bool = True

    @property
    def minimum(self) -> float:
        return float(self.budgets[0])

    @property
    def saturation(self) -> float:
        return float(self.budgets[-1])

    @property
    def concave(self) -> bool:
        """Non-increasing slopes, up to rounding in the solver's answers."""
        if len(self.budgets) < 3:
            return True
        slopes = np.diff(self.values) / np.maximum(np.diff(self.budgets), 1e-300)
        return bool(np.all(np.diff(slopes) <= 1e-7 * np.maximum(1.0, np.abs(slopes[:-1]))))

    def value_at(self, budget: float) -> float:
        if budget < self.budgets[0] - 1e-9:
            return -math.inf
        if not self.interpolates:
            return float(self.values[self._below(budget)])
        return float(np.interp(budget, self.budgets, self.values))

    def _below(self, budget: float) -> int:
        """Index of the last point whose budget is at most ``budget`` (a relative 1e-9 over a point counts)."""
        i = int(np.searchsorted(self.budgets, budget * (1 + 1e-9) + 1e-12, side="right")) - 1
        return max(0, min(i, len(self.budgets) - 1))

    def segment(self, budget: float) -> int:
        """Index i of the segment [budgets[i], budgets[i+1]] holding ``budget``."""
        if len(self.budgets) < 2:
            return 0
        return int(np.clip(np.searchsorted(self.budgets, budget, side="right") - 1, 0, len(self.budgets) - 2))

    def alloc_at(self, budget: float) -> dict[str, float]:
        """Cpu per PE at ``budget``: interpolated between the neighbouring points (the pacing)."""
        if len(self.budgets) == 1 or budget >= self.budgets[-1]:
            return dict(self.allocs[-1])
        if not self.interpolates:
            return dict(self.allocs[self._below(budget)])
        i = self.segment(budget)
        b0, b1 = self.budgets[i], self.budgets[i + 1]
        t = 0.0 if b1 <= b0 else float(np.clip((budget - b0) / (b1 - b0), 0.0, 1.0))
        a0, a1 = self.allocs[i], self.allocs[i + 1]
        return {pe: (1 - t) * a0[pe] + t * a1[pe] for pe in self.pes}


@dataclass
class ComponentModel:
    """The importance program of one component, with its budget row."""

    ops: dict[str, Operator]
    prog: Program
    cols: F.Columns
    linear: bool
    saturation: float
    minimum: float
    graph: nx.DiGraph  # the component's subgraph, to evaluate an allocation by propagation


@dataclass
class ComponentParts:
    """The pieces of one component's importance program (:func:`strata.plan.formulation.build`'s inputs)."""

    ops: dict[str, Operator]
    inputs: dict[str, list[str]]
    values: list[F.ValueTerm]
    bound: dict[str, float]
    saturation: float
    minimum: float
    need: dict[str, float]  # per PE: the cpu its bound rate needs, within its [cpu_min, cpu_max]


def component_parts(graph: nx.DiGraph, pes: Iterable[str], unlimited: dict[str, float] | None = None) -> ComponentParts:
    """Operators, inputs, value terms, rate bounds, saturation and minimum cpu of the PEs ``pes``."""
    pes = sorted(pes)
    members = set(pes)
    sub = graph.subgraph(members)
    if unlimited is None:
        unlimited = propagate(sub)
    ops = {pe: graph.nodes[pe]["op"] for pe in pes}
    inputs = {pe: [u for u in graph.predecessors(pe) if u in members] for pe in pes}
    values = [
        F.ValueTerm((u,), d["weight"], d["stream"].value)
        for u, v, d in sorted(sub.edges(data=True), key=lambda e: (e[0], e[1]))
        if d["weight"] > 0
    ]
    bound = {}
    for pe, op in ops.items():
        offered = op.source.rate if op.source else sum(unlimited[u] for u in inputs[pe])
        bound[pe] = F.output_bound(op, offered)
    need = {
        pe: max(op.cpu_min, min(op.cpu_max, op.resource.cpu_for(bound[pe], op.cost_per_record)))
        for pe, op in ops.items()
    }
    minimum = sum(op.cpu_min for op in ops.values())
    return ComponentParts(ops, inputs, values, bound, max(sum(need.values()), minimum), minimum, need)


def component_model(graph: nx.DiGraph, pes: Iterable[str], unlimited: dict[str, float] | None = None) -> ComponentModel:
    """Build the importance program of the PEs ``pes`` of ``graph`` (a weak component)."""
    parts = component_parts(graph, pes, unlimited)
    prog = Program(maximize=True)
    cols = F.build(prog, parts.ops, parts.inputs, parts.values, parts.bound, budget=parts.saturation)
    linear = F.is_linear(parts.ops, parts.values)
    return ComponentModel(
        parts.ops, prog, cols, linear, parts.saturation, parts.minimum, graph.subgraph(set(parts.ops))
    )


def _trim(model: ComponentModel, x: np.ndarray) -> dict[str, float]:
    """Cpu each PE needs for its processed rate (never below cpu_min, never above what the LP gave)."""
    out = {}
    for pe, op in model.ops.items():
        rate = max(0.0, float(x[model.cols.x[pe]]))
        need = op.resource.cpu_for(rate, op.cost_per_record)
        out[pe] = max(op.cpu_min, min(float(x[model.cols.cpu[pe]]), need))
    return out


def _solve_at(model: ComponentModel, budget: float, time_limit: float | None) -> tuple[float, float, dict, str]:
    model.prog.set_row_bounds(model.cols.budget_row, -INF, budget)
    sol = model.prog.solve(time_limit=time_limit)
    if not sol.usable:
        return -math.inf, 0.0, {}, sol.status
    return sol.objective, float(sol.row_dual[model.cols.budget_row]), _trim(model, sol.x), sol.status


def lp_curve(
    model: ComponentModel, tol: float = 1e-7, deadline: float | None = None, clock: Callable[[], float] | None = None
) -> Curve:
    """The exact concave curve of an LP component by the sandwich method (see module doc).

    Anytime: past ``deadline`` (a ``clock`` value) refinement stops. The chords between
    the points found are still achievable (a convex combination of optimal allocations is
    feasible), so the curve is a valid lower bound, marked inexact.
    """
    lo, hi = model.minimum, model.saturation
    pts: dict[float, tuple[float, float, dict]] = {}
    for b in {lo, hi}:
        f, g, a, status = _solve_at(model, b, None)
        if status not in ("optimal",):
            raise RuntimeError(f"component LP {status} at budget {b:g}")
        pts[b] = (f, g, a)
    scale = max(1.0, abs(pts[hi][0]))
    stack = [(lo, hi)] if hi > lo + 1e-12 else []
    exact = True
    while stack:
        if deadline is not None and clock is not None and clock() > deadline:
            exact = False
            break
        a, b = stack.pop()
        fa, ga, _ = pts[a]
        fb, gb, _ = pts[b]
        if ga - gb <= tol * scale / max(b - a, 1e-12):
            continue
        s = (fb - fa + ga * a - gb * b) / (ga - gb)
        s = min(max(s, a), b)
        upper = fa + ga * (s - a)
        chord = fa + (fb - fa) * (s - a) / (b - a)
        if upper - chord <= tol * scale or s - a <= 1e-9 * (1 + b) or b - s <= 1e-9 * (1 + b):
            continue
        f, g, alloc, status = _solve_at(model, s, None)
        if status != "optimal":
            raise RuntimeError(f"component LP {status} at budget {s:g}")
        pts[s] = (f, g, alloc)
        stack += [(a, s), (s, b)]
    keys = sorted(pts)
    return Curve(
        tuple(model.ops),
        np.array(keys),
        np.array([pts[k][0] for k in keys]),
        [pts[k][2] for k in keys],
        exact=exact,
        status="optimal" if exact else "time-limit",
    )


def grid_curve(model: ComponentModel, points: int, time_left: Callable[[], float]) -> Curve:
    """A general component's curve on ``points`` evenly spaced budgets (MILP at each)."""
    lo, hi = model.minimum, model.saturation
    budgets = np.unique(np.linspace(lo, hi, max(2, points))) if hi > lo else np.array([lo])
    values, allocs, status = [], [], "optimal"
    best, best_alloc = -math.inf, {pe: op.cpu_min for pe, op in model.ops.items()}
    for b in budgets:
        remaining = time_left()
        f, _, alloc, st = _solve_at(model, float(b), max(1e-3, remaining / max(1, len(budgets) - len(values))))
        if st != "optimal":
            status = "time-limit" if st == "time-limit" else "feasible"
        if alloc:
            # What the allocation is worth when propagated: a rate the solver's tolerances leave a hair
            # under a step threshold does not earn the step, whatever the MILP's objective says.
            f = importance(model.graph, propagate(model.graph, alloc))
        if alloc and f > best:
            best, best_alloc = f, alloc
        values.append(best if best > -math.inf else 0.0)
        allocs.append(best_alloc)
    return Curve(
        tuple(model.ops),
        budgets.astype(float),
        np.array(values),
        allocs,
        exact=False,
        status=status,
        interpolates=False,
    )


def better_of(a: Curve, b: Curve) -> Curve:
    """Two curves on the same budgets, keeping at each budget the higher value and its allocation."""
    if len(a.budgets) != len(b.budgets) or not np.allclose(a.budgets, b.budgets):
        raise ValueError("curves on different budgets")
    take_b = b.values > a.values
    values = np.where(take_b, b.values, a.values)
    allocs = [bb if t else aa for aa, bb, t in zip(a.allocs, b.allocs, take_b, strict=True)]
    status = a.status if a.status == b.status else "feasible"
    return Curve(
        a.pes, a.budgets, values, allocs, a.exact and b.exact, status, interpolates=a.interpolates and b.interpolates
    )
