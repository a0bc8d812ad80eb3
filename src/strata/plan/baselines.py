"""Baseline planners from SODA §5.1, plus a plain greedy, scored like SODA.

- **RAND**: admit every job (first template); each PE on a node drawn uniformly
  at random (among nodes with its labels); each node's cores split equally
  among its PEs.
- **RR**: the same, but PEs in order go to the node with the fewest PEs so far.
- **greedy**: rank-legal admission while Σ cpu_min fits; cpu goals = each PE's
  nominal demand scaled down to the cluster; PEs in topological order go to
  their heaviest upstream's node when it has room, else to the node with most
  room (split over several when one is not enough).

Each scores its plan with :func:`strata.plan.epoch.finish` under the traffic
model of an engine sending ``batch`` records per source message (window
aggregates emit one result per key per window: :mod:`strata.model.traffic`).
"""

from __future__ import annotations

from collections.abc import Callable

import networkx as nx
import numpy as np

from strata.model import Scenario, joined_graph, offered_rates, propagate, topological_order
from strata.model.traffic import as_emitted
from strata.plan.epoch import finish
from strata.plan.plan import Phase, Plan
from strata.plan.quality import Weights


def _eligibility(scenario: Scenario, graph: nx.DiGraph) -> Callable[[str], list[str]]:
    """PE → nodes it may use (labels, fixed node), cached per label set."""
    by_labels: dict[frozenset[str], list[str]] = {}

    def eligible(pe: str) -> list[str]:
        c = graph.nodes[pe]["op"].constraints
        if c.fixed_node is not None:
            return [c.fixed_node]
        if c.required_labels not in by_labels:
            by_labels[c.required_labels] = [n.name for n in scenario.cluster.nodes_with(c.required_labels)]
        return by_labels[c.required_labels]

    return eligible


def _equal_split(scenario: Scenario, graph: nx.DiGraph, node_of: dict[str, str]) -> dict[str, dict[str, float]]:
    cores = {n.name: n.cores for n in scenario.cluster.all_nodes}
    count: dict[str, int] = {}
    for n in node_of.values():
        count[n] = count.get(n, 0) + 1
    return {pe: {n: min(graph.nodes[pe]["op"].cpu_max, cores[n] / count[n])} for pe, n in node_of.items()}


def _admit_all(
    scenario: Scenario, name: str, node_of: dict[str, str], graph: nx.DiGraph, weights: Weights, batch: int
) -> Plan:
    templates = {j.id: j.templates[0].name for j in scenario.jobs}
    assignment = _equal_split(scenario, graph, node_of)
    goals = {pe: sum(p.values()) for pe, p in assignment.items()}
    cands = {pe: [n] for pe, n in node_of.items()}
    phase = Phase(name, 0.0, 0.0, "feasible", "admit all, equal split of each node's cores")
    return finish(
        scenario, name, sorted(templates), {}, templates, goals, cands, assignment, [phase], weights, batch=batch
    )


def rand(scenario: Scenario, seed: int = 0, weights: Weights | None = None, batch: int = 1) -> Plan:
    graph = joined_graph(scenario)
    rng = np.random.default_rng(seed)
    eligible = _eligibility(scenario, graph)
    node_of = {}
    for pe in sorted(graph.nodes):
        options = eligible(pe)
        node_of[pe] = options[int(rng.integers(len(options)))]
    return _admit_all(scenario, "RAND", node_of, graph, weights or Weights(), batch)


def rr(scenario: Scenario, weights: Weights | None = None, batch: int = 1) -> Plan:
    graph = joined_graph(scenario)
    count = {n.name: 0 for n in scenario.cluster.all_nodes}
    order = {n.name: i for i, n in enumerate(scenario.cluster.all_nodes)}
    eligible = _eligibility(scenario, graph)
    node_of = {}
    for pe in sorted(graph.nodes):
        n = min(eligible(pe), key=lambda m: (count[m], order[m]))
        node_of[pe] = n
        count[n] += 1
    return _admit_all(scenario, "RR", node_of, graph, weights or Weights(), batch)


def greedy(scenario: Scenario, weights: Weights | None = None, batch: int = 1) -> Plan:
    cap = scenario.cluster.total_cores
    jobs = sorted(scenario.jobs, key=lambda j: (not j.required, j.rank, j.id))
    templates, used, rejected = {}, 0.0, {}
    for job in jobs:
        tpl = job.templates[0]
        if job.required or (used + tpl.cpu_min <= cap and len(rejected) == 0):
            templates[job.id] = tpl.name
            used += tpl.cpu_min
        else:
            rejected[job.id] = "greedy admission: Σ cpu_min would exceed the cluster (or a better job was out)"
    graph = joined_graph(as_emitted(scenario, batch), templates)
    rates = propagate(graph)
    demand = {}
    for pe, offered in offered_rates(graph, rates).items():
        op = graph.nodes[pe]["op"]
        demand[pe] = max(op.cpu_min, min(op.cpu_max, op.resource.cpu_for(offered, op.cost_per_record)))
    total = sum(demand.values())
    scale = min(1.0, cap / total) if total > 0 else 1.0
    goals = {pe: d * scale for pe, d in demand.items()}
    room = {n.name: n.cores for n in scenario.cluster.all_nodes}
    eligible = _eligibility(scenario, graph)
    assignment: dict[str, dict[str, float]] = {}
    for pe in topological_order(graph):
        need = goals[pe]
        options = eligible(pe)
        ups = sorted(graph.predecessors(pe), key=lambda u: -rates[u] * graph.edges[u, pe]["stream"].bytes_per_record)
        home = [n for u in ups[:1] for n in assignment.get(u, {}) if n in options]
        parts: dict[str, float] = {}
        for n in home + sorted(options, key=lambda m: -room[m]):
            if need <= 1e-12:
                break
            take = min(need, room[n])
            if take > 0 or not parts:
                parts[n] = parts.get(n, 0.0) + take
                room[n] -= take
                need -= take
        assignment[pe] = parts
    goals = {pe: sum(p.values()) for pe, p in assignment.items()}
    cands = {pe: sorted(p) for pe, p in assignment.items()}
    phase = Phase("greedy", 0.0, 0.0, "feasible", "proportional cpu, traffic-greedy placement")
    admitted = sorted(templates, key=lambda j: (scenario.job[j].rank, j))
    return finish(
        scenario,
        "greedy",
        admitted,
        rejected,
        templates,
        goals,
        cands,
        assignment,
        [phase],
        weights or Weights(),
        batch=batch,
    )
