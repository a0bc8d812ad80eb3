"""What the simulator measures over a control window, as plain data (:class:`~strata.protocol.window.WindowStats`).

The engine adapter (:mod:`strata.sim.adapter`) takes a :func:`snapshot` of the
kernel's cumulative counters at the start of every window and, at its end,
:func:`window` turns the counters' growth since into per-key-group and
per-instance loads, node utilisation, queue lengths, per-job latency, rates,
routing, placement, migrations pending and drops. Reading changes nothing in
the simulation.
"""

from __future__ import annotations

import numpy as np

from strata.protocol.units import KeyGroupLoad
from strata.protocol.window import InstanceLoad, LatencyStats, WindowStats
from strata.sim.kernel_api import Kernel


def snapshot(k: Kernel) -> dict:
    """The counters :func:`window` measures a window against (opaque; pass it back unchanged)."""
    return {
        "kg": {pe.name: (list(pe.kg_busy), list(pe.kg_records)) for pe in k.pes.values() if pe.keyed},
        "inst": [(i.busy, i.records) for i in k.instances],
        "node": [n.busy for n in k.nodes],
        "out": {pe.name: pe.done for pe in k.pes.values()},
        "gen": {pe.name: pe.generated for pe in k.pes.values() if pe.stream is not None},
        "lat": k.metrics.lat_cursor(),
        "produced": {pe.name: pe.produced for pe in k.pes.values()},
    }


def window(k: Kernel, since: dict, start: float) -> WindowStats:
    """The world since snapshot ``since`` (taken at ``start``) as plain data."""
    now = k.now
    span = max(now - start, 1e-12)
    kgs, loads = _key_groups(k, since), _instances(k, since)
    util = {n.name: (n.busy - b0) / (n.cores * span) for n, b0 in zip(k.nodes, since["node"], strict=False)}
    latency = {}
    for job, (lat, n) in k.metrics.lat_since(since["lat"]).items():
        latency[job] = _stats(lat, n, k.scenario.job[job].target_latency_s)
    return WindowStats(
        now=now,
        start=start,
        key_groups=kgs,
        instances=loads,
        node_utilisation=util,
        queue_lengths={n.name: len(n.policy) for n in k.nodes},
        latency=latency,
        rates={name: (pe.produced - since["produced"][name]) / span for name, pe in k.pes.items()},
        ingest={pe: (k.pes[pe].generated - g0) / span for pe, g0 in since["gen"].items()},
        routing={pe.name: tuple(pe.route) for pe in k.pes.values() if pe.keyed},
        placement={pe.name: tuple(i.node.name for i in pe.instances) for pe in k.pes.values()},
        migrating=k.migrations.pending(),
        dropped=k.metrics.drop_totals(),
        latency_so_far=k.metrics.latency_so_far(),
    )


def _key_groups(k: Kernel, since: dict) -> tuple[KeyGroupLoad, ...]:
    """Every keyed PE's key groups over the window: owner as routed now, records, busy time, state bytes."""
    kgs = []
    for pe in k.pes.values():
        if not pe.keyed:
            continue
        busy0, rec0 = since["kg"][pe.name]
        sizes = k.migrations.state_sizes(pe)
        for g in range(pe.groups):
            kgs.append(
                KeyGroupLoad(pe.name, g, pe.route[g], pe.kg_records[g] - rec0[g], pe.kg_busy[g] - busy0[g], sizes[g])
            )
    return tuple(kgs)


def _instances(k: Kernel, since: dict) -> tuple[InstanceLoad, ...]:
    """Every instance over the window: records, busy time, records waiting at its end, key groups routed to it."""
    loads = []
    for inst, (b0, r0) in zip(k.instances, since["inst"], strict=False):
        pe = inst.pe
        waiting = inst.queued + sum(m.records for m in inst.held) + sum(m.records for m in inst.throttled)
        waiting += sum(m.records for buf in inst.incoming.values() for m in buf)
        groups = sum(1 for r in pe.route if r == inst.index) if pe.keyed else 0
        loads.append(
            InstanceLoad(pe.name, inst.index, inst.node.name, inst.records - r0, inst.busy - b0, waiting, groups)
        )
    return tuple(loads)


def _stats(lat: np.ndarray, n: np.ndarray, target: float) -> LatencyStats:
    """Records-weighted latency percentiles of one job."""
    order = np.argsort(lat, kind="stable")
    lat, n = lat[order], n[order]
    cum = np.cumsum(n)
    total = int(cum[-1])

    def q(p: float) -> float:
        return float(lat[np.searchsorted(cum, p * total, side="left")])

    return LatencyStats(total, q(0.5), q(0.95), q(0.99), float(lat[-1]), float(n[lat > target].sum()) / total)
