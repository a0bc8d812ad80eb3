"""SODA's six placement metrics and stream affinity (SODA §4.2, §5.1).

Given each PE's cpu per node and the traffic of each stream, the metrics are
the average and maximum node cpu utilisation, the average and maximum link
utilisation and the average and maximum NIC utilisation. macroW minimises their
weighted sum; the same function scores every planner, so SODA and the
baselines are compared on one ruler.

Traffic model: a PE spread over several nodes sends and receives in proportion
to its cpu share there, and a stream's records go to a consumer instance on the
same node when there is one, so the share of stream u→v that stays on node n is
min(f_un, f_vn). Links are rack uplinks when the cluster has racks; without
racks the network is one switch whose one link carries all cross-node traffic,
normalised by the cluster's total NIC bandwidth.

Stream affinity is measured with the traffic model the simulator's
locality-first routing executes (:mod:`strata.model.traffic`): unkeyed streams
keep Σ_n min(s_un, f_vn) local, keyed ones Σ_n s_un · g_vn, g_vn being the
share of the consumer's key groups owned on n (pass ``key_groups``). The six
metrics keep the min(f_un, f_vn) model above for every stream.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields

import networkx as nx

from strata.model import Cluster
from strata.model.traffic import local_share, shares

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


def flows(graph: nx.DiGraph, rates: Mapping[str, float]) -> list[tuple[str, str, float]]:
    """(producer, consumer, bytes/s) for every stream with traffic."""
    out = []
    for u, v, d in graph.edges(data=True):
        t = rates.get(u, 0.0) * d["stream"].bytes_per_record
        if t > 0:
            out.append((u, v, t))
    return out


def fractions(assignment: Mapping[str, Mapping[str, float]]) -> dict[str, dict[str, float]]:
    """Each PE's share per node: by cpu, or split evenly when it has no cpu."""
    out = {}
    for pe, parts in assignment.items():
        total = sum(parts.values())
        if total > 0:
            out[pe] = {n: c / total for n, c in parts.items() if c > 0}
        elif parts:
            out[pe] = {n: 1.0 / len(parts) for n in parts}
    return out


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
    nodes = cluster.all_nodes
    load = dict.fromkeys((n.name for n in nodes), 0.0)
    for parts in assignment.values():
        for n, c in parts.items():
            load[n] += c
    util = [load[n.name] / n.cores for n in nodes]
    frac = fractions(assignment)
    out = dict.fromkeys(load, 0.0)
    inn = dict.fromkeys(load, 0.0)
    rack_of = {n.name: n.rack for n in nodes}
    racks = {r.name: r.uplink for r in cluster.racks}
    up_out = dict.fromkeys(racks, 0.0)
    up_in = dict.fromkeys(racks, 0.0)
    total = local = 0.0
    for u, v, t in traffic:
        fu, fv = frac.get(u, {}), frac.get(v, {})
        total += t
        for n, a in fu.items():
            m = min(a, fv.get(n, 0.0))
            local += t * m
            out[n] += t * (a - m)
        for n, b in fv.items():
            inn[n] += t * (b - min(b, fu.get(n, 0.0)))
        if racks:
            ru: dict[str | None, float] = {}
            rv: dict[str | None, float] = {}
            for n, a in fu.items():
                ru[rack_of[n]] = ru.get(rack_of[n], 0.0) + a
            for n, b in fv.items():
                rv[rack_of[n]] = rv.get(rack_of[n], 0.0) + b
            for r in racks:
                m = min(ru.get(r, 0.0), rv.get(r, 0.0))
                up_out[r] += t * (ru.get(r, 0.0) - m)
                up_in[r] += t * (rv.get(r, 0.0) - m)
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
