"""The exact macroQ: admission, templates and cpu as one MILP (reference for SODA §4.1).

Binary a_j admits job j, binary y_jt picks its template (Σ_t y_jt = a_j);
required jobs have a_j = 1; rank legality among the other jobs is a_k ≤ a_i
whenever rank_i < rank_k. Every template's PEs get their own copy of the
importance model (:mod:`strata.plan.formulation`) gated by y_jt; a shared stream
feeds its consumers from whichever copy of the producer runs. Σ cpu ≤ the
cluster's cores and Σ memory ≤ its memory. A stream's value term is gated by
its template's y_jt (a template that does not run earns nothing, even where its
value function is positive at rate 0). Solved by HiGHS; on small
instances it proves optimality, which is what macroQ is measured against.
"""

from __future__ import annotations

from dataclasses import dataclass

from strata.model import Scenario, importance, joined_graph, propagate, resolve
from strata.plan import formulation as F
from strata.plan.lp import INF, Program


@dataclass
class Exact:
    value: float  # the MILP's objective
    realised: float  # importance of its answer by propagate (equal up to tolerance)
    admitted: list[str]
    templates: dict[str, str]
    cpu: dict[str, float]
    status: str
    gap: float


def exact_macro_q(scenario: Scenario, capacity: float | None = None, time_limit: float = 60.0) -> Exact:
    cap = scenario.cluster.total_cores if capacity is None else capacity
    ops, inputs, copies_of = {}, {}, {}
    for job in scenario.jobs:
        for tpl in job.templates:
            for op in tpl.operators:
                key = F.template_copy(job.id, op.name, tpl.name)
                ops[key] = op
                copies_of.setdefault(f"{job.id}.{op.name}", []).append(key)
    values, owner = [], []  # owner: the (job, template) whose stream each value term is
    for job in scenario.jobs:
        for tpl in job.templates:
            for st in tpl.streams:
                dst = F.template_copy(job.id, st.dst, tpl.name)
                src = resolve(job.id, st.src)
                producers = copies_of.get(src, []) if st.is_external else [F.template_copy(job.id, st.src, tpl.name)]
                inputs.setdefault(dst, []).extend(producers)
                w = tpl.weight_of(st)
                if w > 0 and producers:
                    values.append(F.ValueTerm(tuple(producers), w, st.value))
                    owner.append((job.id, tpl.name))
    bound = F.rate_bounds(ops, inputs, copies_of)
    prog = Program(maximize=True)
    admit, choose, gate = {}, {}, {}
    for job in scenario.jobs:
        admit[job.id] = prog.binary()
        if job.required:
            prog.row({admit[job.id]: 1.0}, lower=1.0, upper=1.0)
        row = {admit[job.id]: -1.0}
        for tpl in job.templates:
            y = prog.binary()
            choose[(job.id, tpl.name)] = y
            row[y] = 1.0
            for op in tpl.operators:
                gate[F.template_copy(job.id, op.name, tpl.name)] = y
        prog.row(row, lower=0.0, upper=0.0)
    free = [j for j in scenario.jobs if not j.required]
    for a in free:
        for b in free:
            if a.rank < b.rank:
                prog.row({admit[b.id]: 1.0, admit[a.id]: -1.0}, upper=0.0)
    cols = F.build(prog, ops, inputs, values, bound, gate=gate, budget=cap)
    # A stream is worth something only in a template that runs: a value function positive at rate 0 (a
    # positive intercept, a table starting above 0) would otherwise credit every copy, chosen or not.
    for term, v, jt in zip(values, cols.value, owner, strict=True):
        top = sum(bound[u] * max(1.0, ops[u].selectivity) for u in term.producers)
        cap = F.value_cap(term.value, top)
        if cap < INF:
            prog.row({v: 1.0, choose[jt]: -cap}, upper=0.0)
    prog.row(
        {choose[(j.id, t.name)]: t.memory for j in scenario.jobs for t in j.templates},
        upper=scenario.cluster.total_memory,
    )
    sol = prog.solve(time_limit=time_limit, mip_gap=1e-9)
    if not sol.usable:
        raise RuntimeError(f"exact macroQ MILP {sol.status}")
    templates = {j: t for (j, t), y in choose.items() if sol.x[y] > 0.5}
    cpu = F.chosen_cpu(scenario, [jt for jt, y in choose.items() if sol.x[y] > 0.5], sol.x, cols)
    graph = joined_graph(scenario, templates)
    realised = importance(graph, propagate(graph, cpu))
    admitted = sorted(templates, key=lambda j: (scenario.job[j].rank, j))
    return Exact(sol.objective, realised, admitted, templates, cpu, sol.status, sol.mip_gap)
