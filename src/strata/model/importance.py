"""Rates and importance over the joined job graph (:mod:`strata.model.graph`; SODA §3).

Rates flow in topological order from the primal (source) rates through each
PE's resource function; importance = Σ over streams of weight × value(rate).
PEs are named ``"job.operator"`` (:func:`strata.model.scenario.pe_id`).
"""

from __future__ import annotations

from collections.abc import Mapping

import networkx as nx

from strata.model.graph import joined_graph, topological_order
from strata.model.job import OperatorKind
from strata.model.scenario import Scenario
from strata.model.traffic import as_emitted


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
    graph = joined_graph(as_emitted(scenario, batch), templates)
    return importance(graph, propagate(graph, cpu))
