"""Rates and importance over the joined job graph (SODA §3).

Rates flow in topological order from the primal (source) rates through each
PE's resource function; importance = Σ over streams of weight × value(rate).
PEs are named ``"job.operator"`` (:func:`strata.model.scenario.pe_id`).
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


def propagate(
    graph: nx.DiGraph,
    cpu: Mapping[str, float] | None = None,
    primal: Mapping[str, float] | None = None,
) -> dict[str, float]:
    """Output rate (records/s) of every PE given its cpu (cores; default unlimited): SODA §3's rate model.

    ``primal`` overrides source rates (e.g. observed ingest). A source's output is
    min(primal rate, its capacity); every other PE outputs
    ``selectivity × min(Σ input rates, capacity(cpu))``.

    A window aggregate's selectivity is what the engines emit (one record per key per window) only in a
    graph of :func:`strata.model.traffic.as_emitted`'s scenario: every projection the planner, the
    pacing and the adaptive level make is built on that one traffic model. On a spec's own scenario a
    window counts at its declared selectivity.
    """
    rates: dict[str, float] = {}
    for pe in topological_order(graph):
        op = graph.nodes[pe]["op"]
        if op.kind is OperatorKind.SOURCE:
            offered = (primal or {}).get(pe, op.source.rate)
        else:
            offered = sum(rates[u] for u in graph.predecessors(pe))
        give = float("inf") if cpu is None else cpu.get(pe, 0.0)
        processed = min(offered, op.resource.capacity(give, op.cost_per_record))
        rates[pe] = processed * (1.0 if op.kind is OperatorKind.SOURCE else op.selectivity)
    return rates


def offered_rates(graph: nx.DiGraph, rates: Mapping[str, float] | None = None) -> dict[str, float]:
    """Records/s offered to every PE: a source's primal rate, else Σ of its producers' output rates.

    ``rates`` are output rates from :func:`propagate` (default: unlimited cpu).
    """
    rates = propagate(graph) if rates is None else rates
    out: dict[str, float] = {}
    for pe in graph:
        op = graph.nodes[pe]["op"]
        out[pe] = op.source.rate if op.kind is OperatorKind.SOURCE else sum(rates[u] for u in graph.predecessors(pe))
    return out


def importance(graph: nx.DiGraph, rates: Mapping[str, float]) -> float:
    """Σ over streams of weight × value(rate of the stream's producer)."""
    total = 0.0
    for u, _, data in graph.edges(data=True):
        if data["weight"]:
            total += data["weight"] * data["stream"].value(rates[u])
    return total


def scenario_importance(
    scenario: Scenario,
    templates: Mapping[str, str] | None = None,
    cpu: Mapping[str, float] | None = None,
    batch: int = 1,
) -> float:
    """Importance of running ``templates`` (default: every job, first template) with ``cpu``.

    Window aggregates emit what the engines do at ``batch`` records per source message
    (:func:`strata.model.traffic.as_emitted`), as in every projection of the plan.
    """
    from strata.model.traffic import as_emitted  # traffic builds on this module's joined graph

    graph = joined_graph(as_emitted(scenario, batch), templates)
    return importance(graph, propagate(graph, cpu))


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
