"""SODA's six placement metrics and stream affinity (SODA §4.2, §5.1).

Given each PE's cpu per node and the traffic of each stream, the metrics are
the average and maximum node cpu utilisation, the average and maximum link
utilisation and the average and maximum NIC utilisation. macroW minimises their
weighted sum; the same function scores every planner, so SODA and the
baselines are compared on one ruler.

Traffic model: the one the engines execute (:mod:`strata.model.traffic`). A PE
split over several nodes sends its share s_un from node n (its cpu share, or
for a keyed PE the share of its key groups owned there); an **unkeyed** stream
u→v is routed locality first (:func:`strata.model.traffic.transport`: min(s_un,
f_vn) stays on n, the surpluses cross to the nodes where v lacks input), a
**keyed** one by key group, s_un · g_vm of it from n to m. Every node's NIC
out/in and every rack uplink carry exactly those flows. Links are rack uplinks
when the cluster has racks; without racks the network is one switch whose one
link carries all cross-node traffic, normalised by the cluster's total NIC
bandwidth. Without ``key_groups`` every stream counts as unkeyed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields

import networkx as nx

from strata.model import Cluster
from strata.model.traffic import local_share, runs, shares, transport

NAMES = ("avg_cpu", "max_cpu", "avg_link", "max_link", "avg_nic", "max_nic")


@dataclass(frozen=True)
class Weights:
    """Weights of the six metrics in macroW's objective (defaults favour balance, then traffic)."""

    avg_cpu: float = 0.0
    max_cpu: float = 1.0
    avg_link: float = 4.0
    max_link: float = 1.0
    avg_nic: float = 1.0
    max_nic: float = 1.0

    def combine(self, metrics: Mapping[str, float]) -> float:
        return sum(getattr(self, f.name) * metrics[f.name] for f in fields(self))


def flows(
    graph: nx.DiGraph, rates: Mapping[str, float], cpu: Mapping[str, float] | None = None
) -> list[tuple[str, str, float]]:
    """(producer, consumer, bytes/s) for every stream with traffic: a stream into a PE that does not run with its
    ``cpu`` (:func:`strata.model.traffic.runs`; ``cpu`` None: every PE runs) carries none, as in the engines, so
    no plan claims affinity (or pays network) for traffic no one receives."""
    out = []
    for u, v, d in graph.edges(data=True):
        t = rates.get(u, 0.0) * d["stream"].bytes_per_record
        if t > 0 and (cpu is None or runs(graph.nodes[v]["op"], cpu.get(v, 0.0))):
            out.append((u, v, t))
    return out


def keyed_groups(graph: nx.DiGraph) -> dict[str, int]:
    """Keyed PE → its key groups (the engines route a stream into such a PE by key group)."""
    return {pe: graph.nodes[pe]["op"].key_groups for pe in graph if graph.nodes[pe]["op"].keyed}


def stream_flow(
    sending: Mapping[str, float], receiving: Mapping[str, float], keyed: bool
) -> dict[tuple[str, str], float]:
    """(from node, to node) → share of one stream, as the engines route it (:mod:`strata.model.traffic`).

    Unkeyed: locality first (:func:`~strata.model.traffic.transport`); keyed: s_un · g_vm from n to m.
    """
    if keyed:
        return {(n, m): a * b for n, a in sending.items() for m, b in receiving.items() if a * b > 0}
    return transport(sending, receiving)


def stream_affinity(
    assignment: Mapping[str, Mapping[str, float]],
    traffic: Iterable[tuple[str, str, float]],
    key_groups: Mapping[str, int] | None = None,
) -> float:
    """Share of stream bytes kept on one node under the shared traffic model (:mod:`strata.model.traffic`)."""
    key_groups = key_groups or {}
    share = shares(assignment, key_groups)
    total = kept = 0.0
    for u, v, t in traffic:
        total += t
        kept += t * local_share(share.get(u, {}), share.get(v, {}), v in key_groups)
    return min(kept, total) / total if total > 0 else 1.0


def evaluate(
    cluster: Cluster,
    assignment: Mapping[str, Mapping[str, float]],
    traffic: Iterable[tuple[str, str, float]],
    weights: Weights | None = None,
    key_groups: Mapping[str, int] | None = None,
) -> dict[str, float]:
    """The six metrics, their weighted sum ("objective"), stream affinity and cross-node bytes/s.

    ``key_groups`` (keyed PE → its key groups) makes stream affinity count keyed
    streams as routed by key group (:mod:`strata.model.traffic`); without it
    every stream counts as unkeyed.
    """
    weights = weights or Weights()
    traffic = list(traffic)
    key_groups = key_groups or {}
    nodes = cluster.all_nodes
    load = dict.fromkeys((n.name for n in nodes), 0.0)
    for parts in assignment.values():
        for n, c in parts.items():
            load[n] += c
    util = [load[n.name] / n.cores for n in nodes]
    share = shares(assignment, key_groups)
    out = dict.fromkeys(load, 0.0)
    inn = dict.fromkeys(load, 0.0)
    rack_of = {n.name: n.rack for n in nodes}
    racks = {r.name: r.uplink for r in cluster.racks}
    up_out = dict.fromkeys(racks, 0.0)
    up_in = dict.fromkeys(racks, 0.0)
    total = local = 0.0
    for u, v, t in traffic:
        total += t
        for (n, m), x in stream_flow(share.get(u, {}), share.get(v, {}), v in key_groups).items():
            if n == m:
                local += t * x
                continue
            out[n] += t * x
            inn[m] += t * x
            rn, rm = rack_of[n], rack_of[m]
            if racks and rn != rm:
                if rn in up_out:
                    up_out[rn] += t * x
                if rm in up_in:
                    up_in[rm] += t * x
    # Shares like 1/3 sum to a hair over 1; no stream keeps more than all of itself local.
    local = min(local, total)
    nic = [max(out[n.name], inn[n.name]) / n.nic for n in nodes]
    nic_avg = sum((out[n.name] + inn[n.name]) / (2 * n.nic) for n in nodes) / len(nodes)
    cross = total - local
    if racks:
        link = [max(up_out[r], up_in[r]) / bw for r, bw in racks.items()]
        link_avg = sum((up_out[r] + up_in[r]) / (2 * bw) for r, bw in racks.items()) / len(racks)
        link_max = max(link)
    else:
        link_avg = link_max = cross / sum(n.nic for n in nodes)
    metrics = {
        "avg_cpu": sum(util) / len(util),
        "max_cpu": max(util),
        "avg_link": link_avg,
        "max_link": link_max,
        "avg_nic": nic_avg,
        "max_nic": max(nic),
    }
    metrics["objective"] = weights.combine(metrics)
    metrics["affinity"] = stream_affinity(assignment, traffic, key_groups)
    metrics["cross_bytes"] = cross
    return metrics
