"""Exact macroQ on its multiple-choice structure: admission and template choice as one MILP.

SODA's macroQ (§4.1) chooses, for every job, whether it runs and which template; given those
choices the joined graph splits into weak components, each with its importance curve over a cpu
budget. The choices are a multiple-choice problem over *options*: jobs linked by a shared stream
(in any template) form a cluster, and an option of a cluster is one admitted subset of its jobs
with one template each (a job alone: one option per template). The MILP:

- a binary ``y_o`` per option, ``Σ_o y_o ≤ 1`` per cluster; job j is admitted when
  ``a_j = Σ_{o ∋ j} y_o`` is 1: ``a_j = 1`` for required jobs, ``a_k ≤ a_i`` whenever
  rank_i < rank_k, both not required (rank-legal admission);
- per component of an option whose importance is an LP (linear resource functions, concave
  values), its exact concave curve (:func:`strata.plan.curves.lp_curve`) as tangent rows
  ``v ≤ f_i y_o + s_i (b − B_i y_o)`` over a budget column ``min y_o ≤ b ≤ saturation y_o``;
- per component whose importance is not an LP (step values, convex tables, a linear value with a
  negative intercept), its importance program itself (:mod:`strata.plan.formulation`, the
  λ-formulation) gated by ``y_o`` — exact at every cpu, not on a grid;
- Σ of all budgets and gated cpu ≤ the cluster's cores; Σ template memory ≤ its memory.

Solved by HiGHS. When it proves optimality and every LP curve is exact, the answer is the exact
optimum of macroQ (the same optimum as :func:`strata.plan.exact.exact_macro_q`, which gates a
copy of every template's program instead of using the curves). :func:`solve` returns ``None``
with a reason when the instance is too large for it (options or gated PEs beyond the limits
below); macroQ then runs its heuristic search and says so.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import networkx as nx
import numpy as np

from strata.model import Scenario, importance, joined_graph, propagate, resolve
from strata.plan import formulation as F
from strata.plan.curves import Curve, component_parts
from strata.plan.lp import INF, Program

MAX_CLUSTER_OPTIONS = 256  # options of one cluster of linked jobs (admitted subsets × templates)
MAX_OPTIONS = 4096  # options in all
MAX_GATED_PES = 4000  # PEs whose program is copied into the MILP (non-LP components)
CROSS_CHECK = 0.1  # re-solve without presolve when the first solve took less than this share of the limit
SHRINK = 1e-3  # the point below the MILP's allocation in a non-LP component's curve (see _point_curve)


@dataclass
class TemplateChoice:
    """The MILP's answer: templates of the admitted jobs, components, their curves and budgets."""

    templates: dict[str, str]
    components: list[tuple[str, ...]]
    curves: list[Curve]
    budgets: list[float]
    goals: dict[str, float]
    objective: float
    status: str  # the MILP's: "optimal" or "time-limit"
    gap: float
    exact: bool  # proven optimal and every curve used exact
    options: int
    binaries: int
    form: str = ""  # how the templates entered the MILP


def clusters(scenario: Scenario) -> list[list[str]]:
    """Jobs linked by a shared stream in any of their templates, best rank first within each."""
    g = nx.Graph()
    g.add_nodes_from(j.id for j in scenario.jobs)
    for job in scenario.jobs:
        for tpl in job.templates:
            for st in tpl.streams:
                if st.is_external:
                    other = resolve(job.id, st.src).split(".", 1)[0]
                    if other in g and other != job.id:
                        g.add_edge(job.id, other)
    order = {j.id: (j.rank, k) for k, j in enumerate(scenario.jobs)}
    return sorted((sorted(c, key=order.__getitem__) for c in nx.connected_components(g)), key=lambda c: order[c[0]])


def _options(scenario: Scenario, cluster: list[str]) -> list[dict[str, str]]:
    out: list[dict[str, str]] = []
    for k in range(1, len(cluster) + 1):
        for subset in itertools.combinations(cluster, k):
            names = [[t.name for t in scenario.job[j].templates] for j in subset]
            if math.prod(len(n) for n in names) + len(out) > MAX_CLUSTER_OPTIONS:
                return []
            out += [dict(zip(subset, combo, strict=True)) for combo in itertools.product(*names)]
    return out


def solve(
    scenario: Scenario,
    capacity: float,
    memory: float,
    curve_of: Callable[[nx.DiGraph, tuple[str, ...], Mapping[str, str]], Curve],
    time_limit: Callable[[], float],
) -> tuple[TemplateChoice | None, str]:
    """The multiple-choice MILP; ``(None, reason)`` when the instance is beyond its limits or it fails.

    ``curve_of(graph, pes, templates)`` gives an LP component's curve (macroQ's cache);
    ``time_limit()`` the seconds the solve may take, read once the model is built.
    """
    groups = clusters(scenario)
    options: list[tuple[int, dict[str, str]]] = []
    big: list[list[str]] = []  # clusters as gated template copies
    every = sum(len(t.operators) for j in scenario.jobs for t in j.templates)
    if every <= MAX_GATED_PES:
        # Small enough to copy every template's program: HiGHS solves that faster than the options
        # with their curves (measured on lsd at 30 nodes and on the mc instances), and no curve is
        # needed before the solve.
        big, groups = groups, []
    for k, cluster in enumerate(groups):
        opts = _options(scenario, cluster)
        if not opts:
            big.append(cluster)
        options += [(k, o) for o in opts]
    if len(options) > MAX_OPTIONS:
        return None, f"{len(options)} template options > {MAX_OPTIONS}"
    copies = sum(len(t.operators) for c in big for j in c for t in scenario.job[j].templates)
    if copies > MAX_GATED_PES:
        return None, (
            f"clusters of linked jobs with more than {MAX_CLUSTER_OPTIONS} options hold {copies} template PEs "
            f"> {MAX_GATED_PES}"
        )
    prog = Program(maximize=True)
    budget_row: dict[int, float] = {}
    memory_row: dict[int, float] = {}
    per_cluster: dict[int, dict[int, float]] = {}
    # A job's admission is Σ of its options' binaries (no column of its own: with one, and the
    # equality tying it to its options, HiGHS 1.14's presolve once returned a worse answer as optimal).
    per_job: dict[str, dict[int, float]] = {j.id: {} for j in scenario.jobs}
    # Per option: [(pes, graph, curve or None, budget column or gated cpu columns, x columns)]
    built: list[tuple[int, dict[str, str], nx.DiGraph, list[tuple]]] = []
    gated_pes = 0
    for k, templates in options:
        if time_limit() <= 0:
            return None, f"the deadline came while building the multiple-choice MILP ({len(built)} options built)"
        y = prog.binary()
        per_cluster.setdefault(k, {})[y] = 1.0
        for j, t in templates.items():
            per_job[j][y] = 1.0
            memory_row[y] = memory_row.get(y, 0.0) + scenario.job[j].template(t).memory
        graph = joined_graph(scenario, templates)
        comps = []
        for comp in sorted(tuple(sorted(c)) for c in nx.weakly_connected_components(graph)):
            parts = component_parts(graph, comp)
            curve = curve_of(graph, comp, templates) if F.is_linear(parts.ops, parts.values) else None
            if curve is not None and curve.concave and len(curve.budgets) >= 1:
                b = prog.var(0.0, curve.saturation)
                v = prog.var(0.0, INF, cost=1.0)
                prog.row({b: 1.0, y: -curve.minimum}, lower=0.0)
                prog.row({b: 1.0, y: -curve.saturation}, upper=0.0)
                bs, fs = curve.budgets, curve.values
                tiny = 1e-9 * max(1.0, float(np.abs(fs).max()))
                for i in range(len(bs) - 1):
                    s = float((fs[i + 1] - fs[i]) / max(bs[i + 1] - bs[i], 1e-300))
                    c = float(fs[i]) - s * float(bs[i])
                    # Rounding residue (1e-13 where 0 is meant) once made HiGHS's presolve return a
                    # worse answer as "optimal": coefficients that small are zero.
                    prog.row(
                        {v: 1.0, b: -s if abs(s) * curve.saturation > tiny else 0.0, y: -c if abs(c) > tiny else 0.0},
                        upper=0.0,
                    )
                prog.row({v: 1.0, y: -float(fs[-1])}, upper=0.0)
                budget_row[b] = 1.0
                comps.append((comp, curve, b, None))
                continue
            gated_pes += len(comp)
            if gated_pes > MAX_GATED_PES:
                return None, f"more than {MAX_GATED_PES} PEs in non-LP components across the options"
            key = {pe: f"{len(built)}|{pe}" for pe in comp}
            cols = F.build(
                prog,
                {key[pe]: op for pe, op in parts.ops.items()},
                {key[pe]: [key[u] for u in us] for pe, us in parts.inputs.items()},
                [F.ValueTerm(tuple(key[u] for u in t.producers), t.weight, t.value) for t in parts.values],
                {key[pe]: m for pe, m in parts.bound.items()},
                gate=dict.fromkeys(key.values(), y),
            )
            # A stream of an option not chosen is worth nothing, even where value(0) > 0.
            for t, v in zip(parts.values, cols.value, strict=True):
                top = sum(parts.bound[u] for u in t.producers)
                cap = F.value_cap(t.value, top)
                if cap < INF:
                    prog.row({v: 1.0, y: -cap}, upper=0.0)
            for pe in comp:
                budget_row[cols.cpu[key[pe]]] = 1.0
            comps.append((comp, None, {pe: (cols.x[key[pe]], cols.cpu[key[pe]]) for pe in comp}, parts))
        built.append((y, templates, graph, comps))
    gated = [_gated_cluster(prog, scenario, c, per_job, memory_row, budget_row) for c in big]
    gated_pes += copies
    if gated_pes > MAX_GATED_PES:
        return None, f"more than {MAX_GATED_PES} PEs in non-LP components and linked clusters"
    for row in per_cluster.values():
        prog.row(row, upper=1.0)
    for job in scenario.jobs:
        if job.required:
            prog.row(per_job[job.id], lower=1.0, upper=1.0)
    free = [j for j in scenario.jobs if not j.required]
    for a in free:
        for b in free:
            if a.rank < b.rank:  # rank-legal: b in only if a is
                prog.row({**per_job[b.id], **{c: -1.0 for c in per_job[a.id]}}, upper=0.0)
    prog.row(budget_row, upper=capacity)
    # Normalised: bytes (≈ 1e8–1e11) beside cores and records/s upset HiGHS's scaling (it once
    # returned a worse answer as "optimal").
    if memory > 0:
        prog.row({c: m / memory for c, m in memory_row.items()}, upper=1.0)
    binaries = sum(prog.integer)
    limit = time_limit()
    if limit <= 0:
        return None, "no time left for the multiple-choice MILP"
    began = time.perf_counter()
    sol = prog.solve(time_limit=limit, mip_gap=1e-9)
    if not sol.usable:
        return None, f"multiple-choice MILP {sol.status}"
    took = time.perf_counter() - began
    if took < CROSS_CHECK * limit:
        # Cheap enough to solve again without presolve, as a guard against presolve bugs; the better kept.
        again = prog.solve(time_limit=max(1e-3, limit - took), mip_gap=1e-9, presolve=False)
        if again.usable and again.objective > sol.objective + 1e-7 * max(1.0, abs(sol.objective)):
            sol = again
    templates: dict[str, str] = {}
    components, curves, budgets, goals = [], [], [], {}
    exact = sol.status == "optimal"

    def settle(graph: nx.DiGraph, comp: tuple[str, ...], curve: Curve | None, budget: float, alloc: dict) -> None:
        """A component's curve and budget: its exact LP curve at ``budget``, or (not LP) the allocation itself."""
        nonlocal exact
        if curve is not None:
            budget = float(np.clip(budget, curve.minimum, curve.saturation))
            alloc = curve.alloc_at(budget)
            exact &= curve.exact
        else:
            curve, budget = _point_curve(graph, comp, alloc), float(sum(alloc.values()))
        components.append(comp)
        curves.append(curve)
        budgets.append(budget)
        goals.update(alloc)

    for y, tpls, graph, comps in built:
        if sol.x[y] <= 0.5:
            continue
        templates.update(tpls)
        for comp, curve, cols, parts in comps:
            if curve is not None:
                settle(graph, comp, curve, float(sol.x[cols]), {})
            else:
                alloc = {
                    pe: F.used_cpu(parts.ops[pe], float(sol.x[cols[pe][0]]), float(sol.x[cols[pe][1]])) for pe in comp
                }
                settle(graph, comp, None, 0.0, alloc)
    for choose, cols, _ops in gated:
        tpls = {j: t for (j, t), y in choose.items() if sol.x[y] > 0.5}
        if not tpls:
            continue
        templates.update(tpls)
        alloc = F.chosen_cpu(scenario, [(j, t) for j, t in choose if tpls.get(j) == t], sol.x, cols)
        graph = joined_graph(scenario, tpls)
        for comp in sorted(tuple(sorted(c)) for c in nx.weakly_connected_components(graph)):
            parts = component_parts(graph, comp)
            mine = {pe: alloc[pe] for pe in comp}
            curve = curve_of(graph, comp, tpls) if F.is_linear(parts.ops, parts.values) else None
            settle(graph, comp, curve, sum(mine.values()), mine)
    order = sorted(range(len(components)), key=lambda i: components[i])
    choice = TemplateChoice(
        templates,
        [components[i] for i in order],
        [curves[i] for i in order],
        [budgets[i] for i in order],
        goals,
        float(sol.objective),
        sol.status,
        float(sol.mip_gap),
        exact,
        len(options) + sum(len(choose) for choose, _, _ in gated),
        binaries,
        _form(len(options), len(gated)),
    )
    return choice, ""


def _form(options: int, gated: int) -> str:
    if not options:
        return "every template's importance program gated by its choice"
    if not gated:
        return "options: LP components by their exact curves, others by their own gated program"
    return (
        f"{options} options (LP components by their exact curves, others by their own gated program) "
        f"and {gated} clusters of linked jobs by every template's gated program"
    )


def _gated_cluster(
    prog: Program,
    scenario: Scenario,
    cluster: list[str],
    per_job: dict[str, dict[int, float]],
    memory_row: dict[int, float],
    budget_row: dict[int, float],
) -> tuple[dict[tuple[str, str], int], F.Columns, dict[str, object]]:
    """A cluster with too many options, as in :mod:`strata.plan.exact`: a binary per (job, template),
    at most one per job, and a copy of every template's importance program gated by it; a shared
    stream feeds its consumers from whichever copy of the producer runs."""
    ops, inputs, copies_of, values, value_gate = {}, {}, {}, [], []
    choose: dict[tuple[str, str], int] = {}
    gate: dict[str, int] = {}
    for j in cluster:
        row = {}
        for tpl in scenario.job[j].templates:
            y = prog.binary()
            choose[(j, tpl.name)] = y
            row[y] = 1.0
            per_job[j][y] = 1.0
            memory_row[y] = tpl.memory
            for op in tpl.operators:
                key = F.template_copy(j, op.name, tpl.name)
                ops[key], gate[key] = op, y
                copies_of.setdefault(f"{j}.{op.name}", []).append(key)
        prog.row(row, upper=1.0)
    for j in cluster:
        for tpl in scenario.job[j].templates:
            for st in tpl.streams:
                dst = F.template_copy(j, st.dst, tpl.name)
                src = resolve(j, st.src)
                producers = copies_of.get(src, []) if st.is_external else [F.template_copy(j, st.src, tpl.name)]
                inputs.setdefault(dst, []).extend(producers)
                w = tpl.weight_of(st)
                if w > 0 and producers:
                    values.append(F.ValueTerm(tuple(producers), w, st.value))
                    value_gate.append(choose[(j, tpl.name)])
    bound = F.rate_bounds(ops, inputs, copies_of)
    cols = F.build(prog, ops, inputs, values, bound, gate=gate)
    for t, v, y in zip(values, cols.value, value_gate, strict=True):
        cap = F.value_cap(t.value, sum(bound[u] * max(1.0, ops[u].selectivity) for u in t.producers))
        if cap < INF:
            prog.row({v: 1.0, y: -cap}, upper=0.0)
    for c in cols.cpu.values():
        budget_row[c] = 1.0
    return choose, cols, ops


def _point_curve(graph: nx.DiGraph, comp: tuple[str, ...], alloc: dict[str, float]) -> Curve:
    """A non-LP component's curve for microQ's pacing: its minimum, the MILP's allocation, and
    that allocation shrunk by ``SHRINK`` just below it.

    microQ interpolates between neighbouring points; between the minimum and the MILP's point the
    chord of a step curve is not achievable (the rates fall below the step), so the shrunk point,
    valued by propagation, makes the last segment steep: microQ keeps the MILP's allocation unless
    the nodes cannot hold it.
    """
    sub = graph.subgraph(comp)
    low = {pe: graph.nodes[pe]["op"].cpu_min for pe in comp}
    pts = [(sum(low.values()), low)]
    total = sum(alloc.values())
    if total > pts[0][0] + 1e-12:
        shrunk = {pe: max(low[pe], (1 - SHRINK) * c) for pe, c in alloc.items()}
        if pts[0][0] + 1e-12 < sum(shrunk.values()) < total - 1e-12:
            pts.append((sum(shrunk.values()), shrunk))
        pts.append((total, alloc))
    values = [importance(sub, propagate(sub, a)) for _, a in pts]
    values = list(np.maximum.accumulate(values))
    return Curve(
        tuple(comp),
        np.array([b for b, _ in pts], dtype=float),
        np.array(values, dtype=float),
        [dict(a) for _, a in pts],
        exact=False,
        status="optimal",
        interpolates=False,
    )


def realised(scenario: Scenario, choice: TemplateChoice) -> float:
    """Importance of the MILP's answer by propagation over the joined graph."""
    graph = joined_graph(scenario, choice.templates)
    return importance(graph, propagate(graph, choice.goals))
