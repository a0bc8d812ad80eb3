"""macroQ: admission, template choice and a cpu goal per PE (SODA §4.1).

Three nested loops, as in the paper. Inner: for one admitted set and template
choice, split the joined graph into weak components, take each component's
importance curve, cached by the jobs, templates and PEs it holds (exact by the
sandwich method when it is an LP, :mod:`strata.plan.curves`; otherwise on a cpu
grid by the MILP at each grid budget, and for out-trees also by dynamic
programming, :mod:`strata.plan.tree_dp`, the better kept) and solve the separable
RAP across components (:mod:`strata.plan.rap`: Fox's greedy when every curve is
concave, DP on a cpu grid otherwise). Middle:
template choices — exhaustive when there are few combinations, otherwise
coordinate ascent from the previous epoch's choice. Outer: rank-legal admission
sets (a cut-off rank r*: every job ranked better is in, every job ranked worse
is out, required jobs always in) and, for non-concave curves, successively
finer cpu grids while the deadline allows.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import networkx as nx
import numpy as np

from strata.model import Job, Scenario, importance, joined_graph, propagate
from strata.plan import choice as mc
from strata.plan import rap
from strata.plan.curves import Curve, better_of, component_model, component_parts, grid_curve, lp_curve
from strata.plan.plan import PlanError
from strata.plan.tree_dp import dp_curve, is_out_tree

EXHAUSTIVE = 64  # at most this many subsets / template combinations are enumerated outright
GRID_POINTS = (9, 33, 129)  # cpu grid of general curves, refined while time allows


@dataclass
class Allocation:
    """The RAP answer for one admitted set and template choice."""

    templates: dict[str, str]
    value: float
    components: list[tuple[str, ...]]
    curves: list[Curve]
    budgets: list[float]
    concave: bool


@dataclass
class MacroQ:
    admitted: list[str]
    rejected: dict[str, str]
    templates: dict[str, str]
    goals: dict[str, float]
    components: list[tuple[str, ...]]
    curves: list[Curve]
    budgets: list[float]
    importance: float
    rates: dict[str, float]
    status: str
    detail: str
    evaluations: int = 0
    cut_rank: int | None = None
    notes: list[str] = field(default_factory=list)


def _cheapest(job: Job) -> tuple[float, float]:
    return min(t.cpu_min for t in job.templates), min(t.memory for t in job.templates)


def check_required(scenario: Scenario, capacity: float, memory: float) -> None:
    """Raise PlanError when the required jobs together cannot fit, naming the binding constraint."""
    req = [j for j in scenario.jobs if j.required]
    cpu = sum(_cheapest(j)[0] for j in req)
    mem = sum(_cheapest(j)[1] for j in req)
    names = ", ".join(j.id for j in req)
    problems = []
    if cpu > capacity + 1e-9:
        problems.append(
            f"required jobs ({names}) need Σ cpu_min = {cpu:g} cores in their cheapest templates; "
            f"the cluster has {capacity:g} cores (binding constraint: total cpu)"
        )
    if mem > memory:
        problems.append(
            f"required jobs ({names}) need {mem / 2**30:.3g} GiB of memory in their cheapest "
            f"templates; the cluster has {memory / 2**30:.3g} GiB (binding constraint: total memory)"
        )
    if problems:
        raise PlanError(problems)


class _OutOfTime(Exception):
    """The phase deadline passed in the middle of an evaluation that an earlier answer can replace."""


class _Evaluator:
    """Scores (admitted set, templates) with cached component curves.

    The deadline is hard: once any answer exists, an evaluation still running when the deadline
    (less the reserve for the final bookkeeping) passes is abandoned between component curves.
    """

    def __init__(self, scenario: Scenario, capacity: float, memory: float, deadline: float, clock: Callable[[], float]):
        self.scenario, self.capacity, self.memory = scenario, capacity, memory
        self.deadline, self.clock = deadline, clock
        self.cache: dict[tuple, Curve] = {}
        self.points = GRID_POINTS[0]
        self.evaluations = 0
        self.timed_out = False
        self.last = 0.0  # seconds the last full evaluation took
        self.last_step = 0.0  # seconds the last one-job (incremental) evaluation took
        # Seconds kept for the final bookkeeping: at least 5% of the phase, more if evaluations are slow.
        self.reserve = 0.05 * max(0.0, deadline - clock())
        self.answered = False
        self.chords = 0  # components planned on their chord (chord_curve): the first evaluation ran out of time
        self.needs = {(j.id, t.name): (t.cpu_min, t.memory) for j in scenario.jobs for t in j.templates}
        self.producers: dict[tuple[str, str], set[str]] = {}
        self.consumers: dict[str, set[str]] = {}
        for j in scenario.jobs:
            for t in j.templates:
                src = {st.src.split(".", 1)[0] for st in t.streams if st.is_external}
                self.producers[(j.id, t.name)] = src
                for other in src:
                    self.consumers.setdefault(other, set()).add(j.id)

    def left(self, step: bool = False) -> float:
        """Seconds left, less one more evaluation (a full one, or a one-job ``step``) and the bookkeeping."""
        return self.deadline - self.clock() - (self.last_step if step else self.last) - self.reserve

    def feasible(self, templates: Mapping[str, str]) -> str | None:
        """None if the minimum cpu and memory fit, else the binding constraint."""
        cpu = sum(self.needs[jt][0] for jt in templates.items())
        mem = sum(self.needs[jt][1] for jt in templates.items())
        if cpu > self.capacity + 1e-9:
            return f"Σ cpu_min {cpu:g} > {self.capacity:g} cores"
        if mem > self.memory:
            return f"memory {mem / 2**30:.3g} GiB > {self.memory / 2**30:.3g} GiB"
        return None

    def stop(self) -> float:
        """The clock value at which the search must stop (the deadline less the reserve)."""
        return self.deadline - self.reserve

    def curve(self, graph: nx.DiGraph, pes: tuple[str, ...], templates: Mapping[str, str]) -> Curve:
        if self.answered and self.clock() > self.stop():
            raise _OutOfTime
        jobs = sorted({graph.nodes[p]["job"] for p in pes})
        # The PEs are part of the key: one job's template may hold several weak components.
        key = ((tuple((j, templates[j]) for j in jobs), tuple(pes)), self.points)
        hit = self.cache.get(key) or self.cache.get((key[0], None))
        if hit is not None:
            return hit
        if self.clock() > self.stop():
            # Out of time before the first answer: the component is planned on its chord (not cached).
            self.chords += 1
            self.timed_out = True
            return chord_curve(graph, pes)
        model = component_model(graph, pes)
        if model.linear:
            curve = lp_curve(model, deadline=self.stop(), clock=self.clock)
            if curve.exact:  # a curve cut short by the deadline is not kept for later evaluations
                self.cache[(key[0], None)] = curve
        else:
            curve = grid_curve(model, self.points, self.left)
            if is_out_tree(graph, pes):  # the DP is exact on the grid whatever the MILP's time limits did
                curve = better_of(curve, dp_curve(graph, model, self.points))
            self.cache[key] = curve
        return curve

    def allocate(
        self, templates: Mapping[str, str], base: Allocation | None = None, changed: str | None = None
    ) -> Allocation | None:
        """The RAP answer for ``templates``; None if their minimum cpu or memory does not fit.

        With ``base`` (an answer for the same jobs) and the one job whose template ``changed``,
        only the components that job touches are rebuilt; the other curves are reused.
        """
        if self.feasible(templates) is not None:
            return None
        self.evaluations += 1
        began = self.clock()
        try:
            if base is None or changed is None:
                graph = joined_graph(self.scenario, dict(templates))
                comps = sorted(tuple(sorted(c)) for c in nx.weakly_connected_components(graph))
                curves = [self.curve(graph, c, templates) for c in comps]
            else:
                comps, curves = self._rebuild(templates, base, changed)
        except _OutOfTime:
            self.timed_out = True
            return None
        concave = all(c.concave for c in curves)
        if concave:
            budgets = rap.greedy(curves, self.capacity)
        else:
            budgets = rap.dynamic(curves, self.capacity, self.step(curves))
        took = self.clock() - began
        if base is None:
            self.last = took
            self.reserve = max(self.reserve, 0.3 * took)
        else:
            self.last_step = took
        self.answered = True
        return Allocation(dict(templates), rap.total(curves, budgets), comps, curves, budgets, concave)

    def _rebuild(
        self, templates: Mapping[str, str], base: Allocation, changed: str
    ) -> tuple[list[tuple[str, ...]], list[Curve]]:
        job_of = {}
        for k, comp in enumerate(base.components):
            for pe in comp:
                job_of[pe.split(".", 1)[0]] = k
        # Jobs linked to the changed one through a shared stream, in either template, either direction.
        linked = {changed} | self.consumers.get(changed, set())
        for name in (base.templates[changed], templates[changed]):
            linked |= self.producers[(changed, name)]
        hit = {job_of[j] for j in linked if j in job_of}
        jobs = {pe.split(".", 1)[0] for k in hit for pe in base.components[k]} | {changed}
        graph = joined_graph(self.scenario, {j: templates[j] for j in sorted(jobs) if j in templates})
        fresh = [tuple(sorted(c)) for c in nx.weakly_connected_components(graph)]
        keep = [(c, cv) for k, (c, cv) in enumerate(zip(base.components, base.curves, strict=True)) if k not in hit]
        new = [(c, self.curve(graph, c, templates)) for c in fresh]
        merged = sorted(keep + new, key=lambda cc: cc[0])
        return [c for c, _ in merged], [cv for _, cv in merged]

    def step(self, curves: list[Curve]) -> float:
        spare = self.capacity - sum(c.minimum for c in curves)
        return max(spare, 1e-9) / (4 * self.points)


def _template_choices(ev: _Evaluator, admitted: list[Job], start: Mapping[str, str]) -> tuple[Allocation | None, bool]:
    """Best templates for ``admitted``; the flag says whether the search was exhaustive."""
    multi = [j for j in admitted if len(j.templates) > 1]
    base = {j.id: start.get(j.id, j.templates[0].name) for j in admitted}
    combos = math.prod(len(j.templates) for j in multi)
    best: Allocation | None = None
    if combos <= EXHAUSTIVE:
        for names in itertools.product(*[[t.name for t in j.templates] for j in multi]):
            cand = {**base, **{j.id: n for j, n in zip(multi, names, strict=True)}}
            a = ev.allocate(cand)
            if a is not None and (best is None or a.value > best.value + 1e-9 * max(1.0, abs(best.value))):
                best = a
            if ev.left() <= 0:
                ev.timed_out = True
                return best, False
        return best, True
    current = ev.allocate(base)
    if current is None:
        cheapest = {j.id: min(j.templates, key=lambda t: t.cpu_min).name for j in admitted}
        current = ev.allocate(cheapest)
    improved = current is not None
    while improved and ev.left(step=True) > 0:
        improved = False
        for job in multi:
            for tpl in job.templates:
                if tpl.name == current.templates[job.id]:
                    continue
                a = ev.allocate({**current.templates, job.id: tpl.name}, base=current, changed=job.id)
                if a is not None and a.value > current.value + 1e-9 * max(1.0, abs(current.value)):
                    current, improved = a, True
                if ev.left(step=True) <= 0:
                    ev.timed_out = True
                    return current, False
    return current, False


def _admission_sets(scenario: Scenario) -> list[tuple[int, list[Job], list[Job]]]:
    """(cut-off rank, jobs always in at that cut, boundary jobs of that rank), best cut first."""
    ranks = sorted({j.rank for j in scenario.jobs}, reverse=True)
    out = []
    for r in ranks:
        fixed = [j for j in scenario.jobs if j.rank < r or j.required]
        boundary = [j for j in scenario.jobs if j.rank == r and not j.required]
        out.append((r, fixed, boundary))
    return out


def _subsets(boundary: list[Job]) -> list[list[Job]]:
    if 2 ** len(boundary) <= EXHAUSTIVE:
        return [list(c) for k in range(len(boundary), -1, -1) for c in itertools.combinations(boundary, k)]
    return []


def macro_q(
    scenario: Scenario,
    deadline_s: float,
    previous_templates: Mapping[str, str] | None = None,
    capacity: float | None = None,
    clock: Callable[[], float] = time.perf_counter,
    exact: bool = True,
) -> MacroQ:
    """Admit rank-legally, choose templates and cpu goals maximising projected importance.

    First the exact multiple-choice MILP (:mod:`strata.plan.choice`) when the instance is within
    its limits; when it is not, fails or is not proven optimal in half the time left, SODA's
    anytime search (``exact=False``: that search alone), the better answer kept and the notes
    saying which and why.
    """
    start = clock()
    cap = scenario.cluster.total_cores if capacity is None else capacity
    memory = scenario.cluster.total_memory
    check_required(scenario, cap, memory)
    ev = _Evaluator(scenario, cap, memory, start + deadline_s, clock)
    # Only previous choices that still exist (jobs and templates may have changed since).
    prev = {
        j: t
        for j, t in (previous_templates or {}).items()
        if j in scenario.job and any(tp.name == t for tp in scenario.job[j].templates)
    }
    # Exact first: the multiple-choice MILP over template options (half the time left at most).
    began = clock()
    exact_choice, why = (
        mc.solve(
            scenario, cap, memory, lambda g, pes, tpls: ev.curve(g, pes, tpls), lambda: 0.5 * (ev.stop() - clock())
        )
        if exact
        else (None, "the exact multiple-choice MILP was not asked for")
    )
    milp_s = clock() - began
    milp: MacroQ | None = None
    if exact_choice is not None:
        milp = _from_choice(scenario, exact_choice, ev, milp_s)
        if exact_choice.exact:
            return milp
        why = f"multiple-choice MILP {exact_choice.status} (gap {100 * exact_choice.gap:.2f}%) in {milp_s:.2f}s"
    heuristic = _heuristic(scenario, ev, prev, start, clock)
    if milp is not None and (heuristic is None or milp.importance > heuristic.importance):
        milp.detail += f"; the heuristic search after it reached {heuristic.importance:.6g}" if heuristic else ""
        milp.notes.append(f"macroQ: {why}; its answer kept over the heuristic search")
        return milp
    if heuristic is None:
        raise PlanError(
            [
                "no rank-legal admission set fits: even the required jobs exceed the cluster "
                "(binding constraint: total cpu or memory of the cheapest templates)"
            ]
        )
    heuristic.detail += f"; fallback to the heuristic search: {why}"
    heuristic.notes.append(f"macroQ: heuristic search (not proven optimal): {why}")
    return heuristic


def _heuristic(
    scenario: Scenario, ev: _Evaluator, prev: Mapping[str, str], start: float, clock: Callable[[], float]
) -> MacroQ | None:
    """SODA's nested search: rank-legal cut-offs, template choices, cpu grids (the anytime fallback)."""
    free = all(_cheapest(j)[0] == 0 for j in scenario.jobs)
    best: Allocation | None = None
    best_cut: int | None = None
    exhaustive = True
    for level, points in enumerate(GRID_POINTS):
        ev.points = points
        for cut, fixed, boundary in _admission_sets(scenario):
            # With no cpu_min anywhere, admitting more never costs importance: the widest feasible cut wins.
            if free and best is not None:
                break
            subsets = _subsets(boundary)
            if not subsets:
                exhaustive = False
                subsets = _greedy_boundary(ev, fixed, boundary, prev)
            for extra in subsets:
                admitted = fixed + extra
                if ev.feasible({j.id: min(j.templates, key=lambda t: t.cpu_min).name for j in admitted}):
                    continue
                alloc, complete = _template_choices(ev, admitted, prev)
                exhaustive &= complete
                if alloc is not None and (best is None or alloc.value > best.value + 1e-9 * max(1, abs(best.value))):
                    best, best_cut = alloc, cut
                if ev.left() <= 0:
                    break
            if ev.left() <= 0:
                ev.timed_out = True
                break
        if best is not None and (best.concave or ev.left() <= 0):
            break
        if level + 1 < len(GRID_POINTS):
            elapsed = clock() - start
            if elapsed * 4 > ev.left():  # the next grid costs ≈ 4× this one
                break
    if best is None:
        return None
    return _result(scenario, best, best_cut, ev, exhaustive)


def _from_choice(scenario: Scenario, choice: mc.TemplateChoice, ev: _Evaluator, seconds: float) -> MacroQ:
    """macroQ's answer from the multiple-choice MILP's."""
    free = [scenario.job[j].rank for j in choice.templates if not scenario.job[j].required]
    others = [j.rank for j in scenario.jobs if not j.required]
    cut = max(free) if free else (min(others) if others else None)
    alloc = Allocation(choice.templates, choice.objective, choice.components, choice.curves, choice.budgets, True)
    out = _result(scenario, alloc, cut, ev, exhaustive=True)
    out.goals = dict(choice.goals)
    graph = joined_graph(scenario, choice.templates)
    out.rates = propagate(graph, out.goals)
    out.importance = importance(graph, out.rates)
    out.status = "optimal" if choice.exact else ("time-limit" if choice.status == "time-limit" else "feasible")
    proof = "proven optimal" if choice.exact else f"{choice.status}, gap {100 * choice.gap:.2f}%"
    out.detail = (
        f"exact multiple-choice MILP over {choice.options} template options ({choice.binaries} binaries; "
        f"{choice.form}): {proof} in {seconds:.2f}s; "
        f"{len(choice.curves)} components"
    )
    return out


def _greedy_boundary(ev: _Evaluator, fixed: list[Job], boundary: list[Job], prev: Mapping[str, str]) -> list[list[Job]]:
    """Too many boundary jobs to enumerate: add them one at a time while importance grows.

    A job with no cpu_min costs nothing to admit (its PEs may get zero cpu), so
    such jobs go in first while memory allows; the rest are added greedily.
    """

    def tpl(jobs: list[Job]) -> dict[str, str]:
        return {j.id: prev.get(j.id, j.templates[0].name) for j in jobs}

    chosen: list[Job] = []
    pool = []
    for job in boundary:
        if _cheapest(job)[0] == 0 and ev.feasible(tpl([*fixed, *chosen, job])) is None:
            chosen.append(job)
        else:
            pool.append(job)
    current = ev.allocate(tpl([*fixed, *chosen])) if pool else None
    value = -math.inf if current is None else current.value
    while pool and ev.left() > 0:
        scored = []
        for job in pool:
            a = ev.allocate(tpl([*fixed, *chosen, job]))
            if a is not None:
                scored.append((a.value, job.id, job))
            if ev.left() <= 0:
                ev.timed_out = True
                break
        if not scored:
            break
        v, _, job = max(scored, key=lambda s: (s[0], s[1]))
        if v < value - 1e-9 * max(1.0, abs(value)):
            break
        chosen.append(job)
        pool.remove(job)
        value = v
    return [chosen]


def chord_curve(graph: nx.DiGraph, pes: tuple[str, ...]) -> Curve:
    """The curve of a component the deadline came before (SODA §4's anytime answer, feasible at once): the chord
    from every PE at its cpu_min to every PE at the cpu its offered rate needs (the saturation), each PE's cpu
    scaled in proportion between the two.

    A budget on the chord is feasible, and worth at least the chord: each PE gets the same share of its need, so
    (capacities concave in cpu) each processes at least that share of its rate, and values are concave in rates.
    The minimum alone would plan every such component at cpu_min (0 by default): admitted, with no throughput.
    """
    parts = component_parts(graph, pes)
    low = {pe: op.cpu_min for pe, op in parts.ops.items()}
    points = [low] if parts.saturation <= parts.minimum else [low, parts.need]
    sub = graph.subgraph(pes)
    return Curve(
        tuple(pes),
        np.array([sum(a.values()) for a in points]),
        np.array([importance(sub, propagate(sub, a)) for a in points]),
        points,
        exact=False,
        status="time-limit",
    )


def _result(scenario: Scenario, best: Allocation, cut: int | None, ev: _Evaluator, exhaustive: bool) -> MacroQ:
    goals: dict[str, float] = {}
    for curve, b in zip(best.curves, best.budgets, strict=True):
        goals.update(curve.alloc_at(b))
    graph = joined_graph(scenario, best.templates)
    rates = propagate(graph, goals)
    value = importance(graph, rates)
    admitted = sorted(best.templates, key=lambda j: (scenario.job[j].rank, j))
    rejected = {}
    for job in scenario.jobs:
        if job.id in best.templates:
            continue
        if cut is not None and job.rank > cut:
            rejected[job.id] = f"rank {job.rank} is worse than the admission cut-off rank {cut}"
        else:
            need = ev.feasible({**best.templates, job.id: min(job.templates, key=lambda t: t.cpu_min).name})
            rejected[job.id] = (
                f"rank {job.rank} is the cut-off rank; admitting it would exceed {need}"
                if need
                else f"rank {job.rank} is the cut-off rank; admitting it lowers projected "
                "importance (its cpu_min is worth more elsewhere)"
            )
    exact = all(c.exact for c in best.curves) and best.concave
    if ev.timed_out:
        status = "time-limit"
    elif exact and exhaustive:
        status = "optimal"
    else:
        status = "feasible"
    how = "greedy (concave curves)" if best.concave else f"DP on a {ev.points}-point grid"
    detail = f"{len(best.curves)} components, {ev.evaluations} evaluations, RAP by {how}" + (
        "" if exhaustive else "; templates/boundary by local search"
    )
    if ev.chords:
        detail += (
            f"; {ev.chords} components planned on the chord from their minimum cpu to their need"
            " (the deadline came before their curves)"
        )
    return MacroQ(
        admitted,
        rejected,
        best.templates,
        goals,
        best.components,
        best.curves,
        best.budgets,
        value,
        rates,
        status,
        detail,
        ev.evaluations,
        cut,
    )
