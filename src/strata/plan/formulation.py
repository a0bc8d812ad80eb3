"""Importance as a mathematical program over processed rates (SODA §3, §4.1).

For every PE the program has its processed input rate ``x`` (records/s) and its
cpu ``c`` (cores). A PE outputs ``selectivity × x`` (a source outputs ``x``), it
processes at most what its inputs deliver and what its cpu buys, and each
weighted stream is worth ``weight × value(producer output)``. With linear (or
concave tabulated) resource functions and concave, non-decreasing value
functions this is an LP whose optimum is exactly what
:func:`strata.model.propagate` yields when each PE gets ``max(cpu_min, c)``
cores, because a PE given just the cpu for ``x`` processes exactly ``x``.
Non-concave pieces (step values, convex tables) get the standard λ-formulation
with one binary per segment, which turns the model into a MILP.

PEs are keyed by arbitrary strings so the exact baseline can hold one copy of a
PE per template; ``gate`` ties a copy's rates and cpu to an admission binary.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import networkx as nx

from strata.model import (
    IdentityValue,
    LinearCapacity,
    LinearValue,
    Operator,
    OperatorKind,
    PiecewiseLinearCapacity,
    PiecewiseLinearValue,
    StepValue,
)
from strata.plan.lp import INF, Program

STEP_MARGIN = 1e-6  # relative margin by which a rate must clear a step threshold in the MILP


@dataclass(frozen=True)
class ValueTerm:
    """``weight × value(output of producers)``; several producers are template copies of one PE."""

    producers: tuple[str, ...]
    weight: float
    value: object


@dataclass
class Columns:
    """Column indices of the importance model's variables."""

    x: dict[str, int] = field(default_factory=dict)
    cpu: dict[str, int] = field(default_factory=dict)
    value: list[int] = field(default_factory=list)
    budget_row: int = -1


def template_copy(job: str, op: str, template: str) -> str:
    """The column key of operator ``op`` of ``job``'s ``template`` when every template has its own copy."""
    return f"{job}.{op}#{template}"


def chosen_cpu(scenario, chosen, x, cols: Columns) -> dict[str, float]:
    """PE → cores the solution ``x`` gives each operator of the chosen ``(job, template)`` copies.

    A copy's cpu column may exceed what its rate needs when cpu is free in the model; the allocation is the
    smaller of the two, and never below the operator's ``cpu_min``.
    """
    cpu: dict[str, float] = {}
    for job, template in chosen:
        for op in scenario.job[job].template(template).operators:
            key = template_copy(job, op.name, template)
            cpu[f"{job}.{op.name}"] = used_cpu(op, float(x[cols.x[key]]), float(x[cols.cpu[key]]))
    return cpu


def used_cpu(op: Operator, rate: float, cpu: float) -> float:
    """Cores an operator uses at ``rate`` out of a solution's ``cpu`` column: what the rate needs, at least
    ``cpu_min`` (a cpu column may exceed the need where cpu is free in the model)."""
    return max(op.cpu_min, min(cpu, op.resource.cpu_for(max(0.0, rate), op.cost_per_record)))


def needs_integers(op: Operator) -> bool:
    """A tabulated resource function that is not concave on [0, ∞) needs the λ-formulation."""
    res = op.resource
    return isinstance(res, PiecewiseLinearCapacity) and not (res.concave and res.points[0][0] <= 0)


def value_needs_integers(value: object) -> bool:
    """Whether a value function is non-concave on [0, ∞) and so needs the λ-formulation."""
    if isinstance(value, IdentityValue):
        return False
    if isinstance(value, LinearValue):
        return value.intercept < 0 and value.slope > 0  # max(0, line) bends upwards at its root
    if isinstance(value, PiecewiseLinearValue):
        return not (value.concave and value.points[0][0] <= 0)
    return True


def value_cap(value: object, top: float) -> float:
    """An upper bound on value(r) for 0 ≤ r ≤ top (value functions are non-decreasing past their points): the
    big-M that gates a value term by its template's choice."""
    if isinstance(value, IdentityValue):
        return max(0.0, top)
    if isinstance(value, LinearValue):
        return max(0.0, value.intercept, value.slope * top + value.intercept)
    if isinstance(value, PiecewiseLinearValue):
        return max([0.0, value(top), *(y for _, y in value.points)])
    if isinstance(value, StepValue):
        return max([0.0, *(y for _, y in value.steps)])
    return INF


def output_bound(op: Operator, offered: float) -> float:
    """The most records/s the PE can process: its offered rate and what cpu_max buys."""
    cap = op.resource.capacity(op.cpu_max, op.cost_per_record)
    return max(0.0, min(offered, cap))


def rate_bounds(
    ops: Mapping[str, Operator], inputs: Mapping[str, Sequence[str]], copies_of: Mapping[str, Sequence[str]]
) -> dict[str, float]:
    """An upper bound on every template copy's processed rate, whichever templates run (``copies_of``: PE → its
    copies; a copy's input from several copies of one PE counts the largest, as only one template runs)."""
    graph = nx.DiGraph()
    graph.add_nodes_from(ops)
    for dst, srcs in inputs.items():
        graph.add_edges_from((s, dst) for s in srcs)
    group = {c: pe for pe, cs in copies_of.items() for c in cs}
    out: dict[str, float] = {}
    bound: dict[str, float] = {}
    for key in nx.topological_sort(graph):
        op = ops[key]
        if op.kind is OperatorKind.SOURCE:
            offered = op.source.rate
        else:
            best: dict[str, float] = {}
            for s in inputs.get(key, []):
                best[group[s]] = max(best.get(group[s], 0.0), out[s])
            offered = sum(best.values())
        bound[key] = output_bound(op, offered)
        out[key] = bound[key] * (1.0 if op.kind is OperatorKind.SOURCE else op.selectivity)
    return bound


def build(
    prog: Program,
    ops: Mapping[str, Operator],
    inputs: Mapping[str, Sequence[str]],
    values: Sequence[ValueTerm],
    bound: Mapping[str, float],
    gate: Mapping[str, int] | None = None,
    budget: float | None = None,
) -> Columns:
    """Add the importance model for ``ops`` to ``prog`` (maximising) and return its columns.

    ``inputs[pe]``: keys of the PEs whose outputs feed ``pe``; ``bound[pe]``: an
    upper bound on its processed rate (records/s) used as big-M under a gate.
    ``budget`` adds Σ cpu ≤ budget and records its row (the row macroQ moves).
    """
    gate = gate or {}
    cols = Columns()
    for pe, op in ops.items():
        g = gate.get(pe)
        m = bound[pe]
        cols.x[pe] = prog.var(0.0, m if g is None else INF)
        cols.cpu[pe] = prog.var(op.cpu_min if g is None else 0.0, op.cpu_max if g is None else INF)
        if g is not None:
            prog.row({cols.x[pe]: 1.0, g: -m}, upper=0.0)
            prog.row({cols.cpu[pe]: 1.0, g: -op.cpu_min}, lower=0.0)
            prog.row({cols.cpu[pe]: 1.0, g: -op.cpu_max}, upper=0.0)
    for pe, op in ops.items():
        x, c = cols.x[pe], cols.cpu[pe]
        if op.kind is not OperatorKind.SOURCE:
            row = {x: 1.0}
            for u in inputs.get(pe, ()):
                row[cols.x[u]] = row.get(cols.x[u], 0.0) - _out_factor(ops[u])
            prog.row(row, upper=0.0)
        _capacity(prog, op, x, c, bound[pe])
    for term in values:
        out = {cols.x[u]: _out_factor(ops[u]) for u in term.producers}
        top = sum(bound[u] * _out_factor(ops[u]) for u in term.producers)
        v = prog.var(0.0, INF, cost=term.weight)
        cols.value.append(v)
        _value(prog, term.value, out, v, top)
    if budget is not None:
        cols.budget_row = prog.row(dict.fromkeys(cols.cpu.values(), 1.0), upper=budget)
    return cols


def _out_factor(op: Operator) -> float:
    return 1.0 if op.kind is OperatorKind.SOURCE else op.selectivity


def _capacity(prog: Program, op: Operator, x: int, c: int, top: float) -> None:
    res = op.resource
    if isinstance(res, LinearCapacity):
        if op.cost_per_record > 0:
            prog.row({x: op.cost_per_record, c: -1.0}, upper=0.0)
        return
    assert isinstance(res, PiecewiseLinearCapacity)
    pts = list(res.points)
    if res.concave:
        # x ≤ every segment's line, and ≤ the plateau beyond the last point.
        for (x0, y0), (x1, y1) in itertools.pairwise(pts):
            slope = (y1 - y0) / (x1 - x0)
            prog.row({x: 1.0, c: -slope}, upper=y0 - slope * x0)
        prog.row({x: 1.0}, upper=pts[-1][1])
        return
    _lambda_form(prog, pts, {c: 1.0}, {x: 1.0}, hi_x=max(op.cpu_max, pts[-1][0]) + 1.0)


def _value(prog: Program, value: object, out: dict[int, float], v: int, top: float) -> None:
    if isinstance(value, IdentityValue):
        prog.row({v: 1.0, **{k: -a for k, a in out.items()}}, upper=0.0)
    elif isinstance(value, LinearValue) and value_needs_integers(value):
        root = -value.intercept / value.slope
        end = max(top, root) + 1.0
        _lambda_form(
            prog, [(0.0, 0.0), (root, 0.0), (end, value.slope * end + value.intercept)], out, {v: 1.0}, hi_x=end
        )
    elif isinstance(value, LinearValue):
        prog.row({v: 1.0, **{k: -a * value.slope for k, a in out.items()}}, upper=max(0.0, value.intercept))
    elif isinstance(value, PiecewiseLinearValue) and not value_needs_integers(value):
        pts = list(value.points)
        for (x0, y0), (x1, y1) in itertools.pairwise(pts):
            slope = (y1 - y0) / (x1 - x0)
            prog.row({v: 1.0, **{k: -a * slope for k, a in out.items()}}, upper=y0 - slope * x0)
        prog.row({v: 1.0}, upper=pts[-1][1])
    elif isinstance(value, PiecewiseLinearValue):
        _lambda_form(prog, list(value.points), out, {v: 1.0}, hi_x=max(top, value.points[-1][0]) + 1.0)
    elif isinstance(value, StepValue):
        _step(prog, value, out, v, top)
    else:
        raise TypeError(f"no formulation for value function {type(value).__name__}")


def _lambda_form(
    prog: Program, pts: list[tuple[float, float]], arg: dict[int, float], res: dict[int, float], hi_x: float
) -> None:
    """res ≤ f(arg) for a piecewise-linear f that is flat outside its points (one binary per segment)."""
    if pts[0][0] > 0:
        pts = [(0.0, pts[0][1]), *pts]
    if hi_x > pts[-1][0]:
        pts = [*pts, (hi_x, pts[-1][1])]
    lam = [prog.var(0.0, 1.0) for _ in pts]
    seg = [prog.binary() for _ in range(len(pts) - 1)]
    prog.row(dict.fromkeys(lam, 1.0), lower=1.0, upper=1.0)
    prog.row(dict.fromkeys(seg, 1.0), lower=1.0, upper=1.0)
    for i, li in enumerate(lam):
        adj = {s: -1.0 for s in seg[max(0, i - 1) : i + 1]}
        prog.row({li: 1.0, **adj}, upper=0.0)
    prog.row({**arg, **{li: -p[0] for li, p in zip(lam, pts, strict=True)}}, lower=0.0, upper=0.0)
    prog.row({**res, **{li: -p[1] for li, p in zip(lam, pts, strict=True)}}, upper=0.0)


def _step(prog: Program, value: StepValue, out: dict[int, float], v: int, top: float) -> None:
    """v ≤ value of the interval the rate lies in; one binary per interval [0, t1), [t1, t2), …"""
    thresholds = [s[0] for s in value.steps]
    levels = [0.0] + [s[1] for s in value.steps]
    lows = [0.0, *thresholds]
    z = [prog.binary() for _ in levels]
    prog.row(dict.fromkeys(z, 1.0), lower=1.0, upper=1.0)
    prog.row({v: 1.0, **{zi: -lvl for zi, lvl in zip(z, levels, strict=True)}}, upper=0.0)
    # out ≥ Σ low_k z_k: choosing interval k ≥ 1 needs the rate to reach its threshold — by a margin
    # above the solver's feasibility tolerance, or a rate that only reaches it within tolerance is
    # credited a step that propagating its allocation does not earn. The first interval [0, t1) needs
    # nothing (a margin there would demand a positive rate from a template that is not chosen).
    need = [0.0] + [lo + STEP_MARGIN * (1 + lo) for lo in lows[1:]]
    prog.row({**out, **{zi: -n for zi, n in zip(z, need, strict=True)}}, lower=0.0)


def is_linear(ops: Mapping[str, Operator], values: Sequence[ValueTerm]) -> bool:
    """Whether the model is an LP (no binaries): SODA's 'exact LP' case."""
    return not any(needs_integers(op) for op in ops.values()) and not any(value_needs_integers(t.value) for t in values)
