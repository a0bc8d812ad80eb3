"""The joined data-flow graph of the jobs' chosen templates (SODA §3's job graph, joined by shared streams).

PEs are named ``"job.operator"`` (:func:`strata.model.scenario.pe_id`). Rates and importance over it are
:mod:`strata.model.importance`; the traffic between its PEs' instances is :mod:`strata.model.traffic`.
"""

from __future__ import annotations

from collections.abc import Mapping

import networkx as nx

from strata.model.job import OperatorKind
from strata.model.scenario import Scenario, pe_id, resolve


def chosen_templates(scenario: Scenario, templates: Mapping[str, str] | None = None) -> dict[str, str]:
    """Job id → template name; jobs not in ``templates`` get their first template."""
    templates = templates or {}
    return {j.id: templates.get(j.id, j.templates[0].name) for j in scenario.jobs}


def joined_graph(scenario: Scenario, templates: Mapping[str, str] | None = None) -> nx.DiGraph:
    """The joined data-flow graph of the given jobs' chosen templates.

    ``templates`` maps job id → template name and also selects the jobs: pass only
    the admitted ones. Node attributes: ``job``, ``op`` (the Operator). Edge
    attributes: ``stream`` and ``weight``. A shared stream whose producer is not
    in the graph is left out (its consumer sees rate 0).
    """
    graph = nx.DiGraph()
    if templates is None:
        templates = chosen_templates(scenario)
    for job_id, name in templates.items():
        tpl = scenario.job[job_id].template(name)
        for op in tpl.operators:
            graph.add_node(pe_id(job_id, op.name), job=job_id, op=op)
    for job_id, name in templates.items():
        tpl = scenario.job[job_id].template(name)
        for st in tpl.streams:
            src, dst = resolve(job_id, st.src), pe_id(job_id, st.dst)
            if src in graph:
                graph.add_edge(src, dst, stream=st, weight=tpl.weight_of(st))
    return graph


def topological_order(graph: nx.DiGraph) -> list[str]:
    """PEs in topological order; a cycle is rejected with its PEs named."""
    try:
        return list(nx.topological_sort(graph))
    except nx.NetworkXUnfeasible:
        cycle = [a for a, _ in nx.find_cycle(graph)]
        raise ValueError("the data-flow graph has a cycle: " + " → ".join([*cycle, cycle[0]])) from None


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
