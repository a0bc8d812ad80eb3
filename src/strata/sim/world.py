"""The world a simulation runs: nodes, PEs and operator instances built from a scenario, its options and placement.

Nothing here moves in time: :func:`build` reads the scenario's joined graph
(one template per job), resolves the placement (:mod:`strata.sim.assignment`),
gives every node its dispatch policy and every instance its routing, and
returns the runtime records (:mod:`strata.sim.runtime`) the kernel
(:mod:`strata.sim.kernel`) then runs. Keyed PEs route key group ``g`` to
instance ``g mod instances`` (round-robin routing) or apportion their groups by
cpu share (``routing="local"``, :func:`strata.model.traffic.key_group_owners`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import networkx as nx

from strata.model import OperatorKind, Scenario, joined_graph, topological_order
from strata.model.cluster import Node
from strata.model.traffic import key_group_owners, runs
from strata.protocol.units import DispatchFactory, NodeView, TurnPolicy
from strata.sim.assignment import Assignment, resolve_placement
from strata.sim.options import SimOptions
from strata.sim.routing import weights
from strata.sim.runtime import KEYED, PASS, SINK, SOURCE, WINDOW, InstanceRt, NodeRt, PeRt, RackRt
from strata.sim.workload import SourceStream

_CODES = {
    OperatorKind.SOURCE: SOURCE,
    OperatorKind.FILTER: PASS,
    OperatorKind.MAP: PASS,
    OperatorKind.JOIN: KEYED,
    OperatorKind.KEYED_STATEFUL: KEYED,
    OperatorKind.WINDOW_AGGREGATE: WINDOW,
    OperatorKind.SINK: SINK,
}


@dataclass
class World:
    """The runtime records of one simulation, wired together."""

    graph: nx.DiGraph
    order: list[str]
    pes: dict[str, PeRt]
    nodes: list[NodeRt]
    node_by_name: dict[str, NodeRt]
    instances: list[InstanceRt]
    no_cpu: frozenset[str]  # PEs the placement gives no cpu at all: not run


def build(scenario: Scenario, options: SimOptions, factory: DispatchFactory) -> World:
    """The world of ``scenario`` under ``options``; every node's dispatch policy from ``factory``."""
    graph = joined_graph(scenario, options.templates)
    order = topological_order(graph)
    cluster_nodes = scenario.cluster.all_nodes
    counts = {pe: graph.nodes[pe]["op"].instances for pe in order}
    assign = resolve_placement(options.placement, order, counts, [n.name for n in cluster_nodes])
    no_cpu = _no_cpu(options.placement, graph)
    pes = _pes(scenario, options, graph, order)
    nodes = _nodes(scenario, options, graph, factory, cluster_nodes, order, pes, assign)
    node_by_name = {n.name: n for n in nodes}
    instances = _instances(order, pes, assign, node_by_name)
    if options.routing == "local":
        for rt in pes.values():
            if rt.keyed:
                rt.route[:] = key_group_owners(rt.groups, weights(rt))
    _wire(graph, order, pes, no_cpu)
    return World(graph, order, pes, nodes, node_by_name, instances, no_cpu)


def _no_cpu(placement: Mapping | None, graph: nx.DiGraph) -> frozenset[str]:
    """PEs the placement gives no cpu at all (a plan's PE with cpu 0 on every node).

    As in the plan's rate model (SODA §3: a PE processes what its cpu buys) such a PE is not run: nothing is sent
    to it (counted as ``dropped["no_cpu"]``), a source generates nothing, watermarks still pass. Sinks need no cpu
    and run.
    """
    return frozenset(
        pe
        for pe, v in (placement or {}).items()
        if isinstance(v, Mapping) and v and pe in graph and not runs(graph.nodes[pe]["op"], sum(v.values()))
    )


def _pes(scenario: Scenario, options: SimOptions, graph: nx.DiGraph, order: list[str]) -> dict[str, PeRt]:
    """Every PE's runtime record, in topological order: its source stream, service times, buffer, watermarks."""
    pes: dict[str, PeRt] = {}
    for i, pe in enumerate(order):
        job = graph.nodes[pe]["job"]
        op = graph.nodes[pe]["op"]
        rt = PeRt(pe, job, op, i, _CODES[op.kind], scenario.job[job].target_latency_s)
        if op.kind is OperatorKind.SOURCE:
            rt.stream = SourceStream(op.source, options.seed, i, options.batch, options.base_dir)
        pes[pe] = rt
    service, shed_after_s = options.service, options.shed_after_s
    for pe, rt in pes.items():
        rt.exp = (service if isinstance(service, str) else service.get(pe, "deterministic")) == "exponential"
        if shed_after_s is not None:
            # SODA §3's PE processes what its cpu buys and no more: an instance held to its share whose backlog
            # over the share exceeds this many seconds drops what arrives (``dropped["overflow"]``), as a PE with a
            # bounded input buffer does. A PE downstream of a window aggregate buffers that much more than the
            # window's slide: the window emits a slide's results at once (its burst), which a PE given the cpu for
            # their mean rate takes the slide to process.
            slides = [pes[w].slide for w in nx.ancestors(graph, pe) if pes[w].slide > 0]
            rt.buffer = shed_after_s + max(slides, default=0.0)
    for u, v, data in graph.edges(data=True):
        pes[u].down.append((pes[v], data["stream"].bytes_per_record))
    windows = [pe for pe in order if pes[pe].code == WINDOW]
    need = set(windows).union(*(nx.ancestors(graph, w) for w in windows)) if windows else set()
    for pe in need:
        pes[pe].needs_wm = True
    _check_fire_cost(options.fire_cost, graph, windows)
    return pes


def _check_fire_cost(fire_cost: Mapping[str, float], graph: nx.DiGraph, windows: list[str]) -> None:
    for pe, c in fire_cost.items():
        if pe not in windows or c < 0:
            raise ValueError(f"fire_cost[{pe!r}]: expected a window PE and core-seconds per record ≥ 0")
        if any(d in windows for d in nx.descendants(graph, pe)):
            # Its results would be computed after the watermark it forwards: a window downstream could fire early.
            raise ValueError(f"fire_cost[{pe!r}]: not supported with a window downstream")


def _nodes(
    scenario: Scenario,
    options: SimOptions,
    graph: nx.DiGraph,
    factory: DispatchFactory,
    cluster_nodes: Sequence[Node],
    order: list[str],
    pes: dict[str, PeRt],
    assign: Assignment,
) -> list[NodeRt]:
    """Every node of the cluster with its racks' uplinks and its dispatch policy over the PEs placed on it."""
    node_pes: dict[str, list[str]] = {n.name: [] for n in cluster_nodes}
    node_share: dict[str, dict[str, float]] = {n.name: {} for n in cluster_nodes}
    for pe in order:
        for node, share in assign[pe]:
            if pe not in node_pes[node]:
                node_pes[node].append(pe)
            if share is not None:
                node_share[node][pe] = node_share[node].get(pe, 0.0) + share
    # Every PE and job, not only the node's: instances may be relocated here later.
    downstream = {pe: tuple(graph.successors(pe)) for pe in order}
    costs = {pe: pes[pe].cost for pe in order}
    targets = {j.id: j.target_latency_s for j in scenario.jobs if any(pes[p].job == j.id for p in order)}
    racks = {r.name: RackRt(r.name, r.uplink) for r in scenario.cluster.racks}
    nodes: list[NodeRt] = []
    for k, n in enumerate(cluster_nodes):
        view = NodeView(
            name=n.name,
            cores=max(1, round(n.cores)),
            pes=tuple(node_pes[n.name]),
            target_latency=targets,
            weight=dict.fromkeys(targets, 1.0),
            downstream=downstream,
            cost_per_record=costs,
            share=node_share[n.name],
        )
        policy = factory(view)
        if options.actor_turns and not isinstance(policy, TurnPolicy):
            # Without hold/free the policy could hand a second core a message of a running instance.
            raise ValueError(
                f"actor_turns: the dispatch policy {type(policy).__name__} has no hold/free "
                "(strata.protocol.units.TurnPolicy); FIFO under turns is strata.sim.turn_fifo"
            )
        rt = NodeRt(n.name, k, view.cores, n.nic, view, policy)
        if n.rack is not None:
            rt.rack = racks[n.rack]
        nodes.append(rt)
    return nodes


def _instances(
    order: list[str], pes: dict[str, PeRt], assign: Assignment, node_by_name: dict[str, NodeRt]
) -> list[InstanceRt]:
    """Every PE's instances where the assignment puts them; keyed PEs route group g to instance g mod n."""
    instances: list[InstanceRt] = []
    for pe in order:
        rt = pes[pe]
        for j, (node, share) in enumerate(assign[pe]):
            inst = InstanceRt(len(instances), rt, j, node_by_name[node], share)
            inst.rr = [0] * len(rt.down)
            rt.instances.append(inst)
            instances.append(inst)
        if rt.keyed:
            rt.route[:] = [g % len(rt.instances) for g in range(rt.groups)]
    return instances


def _wire(graph: nx.DiGraph, order: list[str], pes: dict[str, PeRt], no_cpu: frozenset[str]) -> None:
    """Each PE's outputs (the hot path's tuple per downstream PE), upstream instances and watermark inputs."""
    for rt in pes.values():
        rt.outs = [
            (d, bpr, d.keyed, d.groups, d.route, d.instances, d.code == WINDOW, d.name in no_cpu) for d, bpr in rt.down
        ]
    for pe in order:
        rt = pes[pe]
        rt.upstream = [i for u in graph.predecessors(pe) for i in pes[u].instances]
        if rt.needs_wm:
            ups = [-1] if rt.code == SOURCE else [i.gid for i in rt.upstream]
            for inst in rt.instances:
                inst.wm_in = dict.fromkeys(ups, -float("inf"))
