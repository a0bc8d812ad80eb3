"""The jobs as the controller sees them: every template's PEs, and the spec's jobs with observed rates and costs.

Two pure functions over the model (DESIGN.md rule 4), used by the controller
(Dangwal et al.: signals are attributed to jobs, and a component re-plan
plans the jobs as measured) and by the meta level's score.
"""

from __future__ import annotations

from collections.abc import Mapping

import networkx as nx

from strata.model import Scenario, pe_id, resolve
from strata.model.job import Job, OperatorKind, Template


def job_maps(scenario: Scenario) -> tuple[dict[str, str], dict[str, str], nx.Graph]:
    """PE → job and source PE → job over every template of every job, and the jobs joined by shared streams.

    Every template counts, not only the first: the planner may run any of a
    job's templates, and a re-plan must know the PEs of whichever runs.
    """
    job_of: dict[str, str] = {}
    sources: dict[str, str] = {}
    jobs = nx.Graph()
    jobs.add_nodes_from(j.id for j in scenario.jobs)
    for job in scenario.jobs:
        for tpl in job.templates:
            for op in tpl.operators:
                job_of[pe_id(job.id, op.name)] = job.id
                if op.kind is OperatorKind.SOURCE:
                    sources[pe_id(job.id, op.name)] = job.id
    for job in scenario.jobs:
        for tpl in job.templates:
            for st in tpl.streams:
                producer = job_of.get(resolve(job.id, st.src))
                if producer is not None:
                    jobs.add_edge(producer, job.id)
    return job_of, sources, jobs


def observed_jobs(
    scenario: Scenario,
    rates: Mapping[str, float],
    costs: Mapping[str, float],
    margin: Mapping[str, float],
) -> list[Job]:
    """The jobs as observed: source rates = observed ingest × the job's margin, costs = measured per-record costs.

    Templates are built anew rather than copied: a pydantic copy keeps the
    original's cached ``operator`` map, which would still answer with the
    spec's operators.
    """
    out = []
    for job in scenario.jobs:
        jid = job.id
        tpls = []
        for t in job.templates:
            ops = []
            for op in t.operators:
                pe = pe_id(jid, op.name)
                upd = {}
                if pe in costs:
                    upd["cost_per_record"] = costs[pe]
                if op.source is not None and pe in rates:
                    # A source observed silent is planned at a trickle (SODA needs a positive primal rate).
                    rate = max(rates[pe] * margin.get(jid, 1.0), 1e-3)
                    upd["source"] = op.source.model_copy(update={"rate": rate, "rate_curve": None})
                ops.append(op.model_copy(update=upd) if upd else op)
            tpls.append(Template(name=t.name, operators=ops, streams=t.streams))
        out.append(job.model_copy(update={"templates": tpls}))
    return out
