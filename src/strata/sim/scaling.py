"""Scale-out at runtime: a placement that lists more instances of a running PE than it has adds the new ones.

``sim.apply(Decisions(0, placement={pe: [(node, cpu), ...]}))`` with a longer
list than the PE's instances starts the extra ones empty on the nodes given
(with the cpu given as their share; 0: none). They join every routing table
at once: unkeyed upstreams include them in their round-robin; a keyed PE's
key groups are then spread by live AutoFlow moves (:mod:`strata.sim.migration`),
group ``g`` going to instance ``g mod n`` when that is one of the new
instances — the kernel's documented default, as ``g mod instances`` is at the
start. A new instance's watermark starts at the minimum of its upstream
instances' (what they have forwarded already covers everything it will
receive), and downstream instances take it into their minimum.

Not supported: scale-in (fewer instances), and scaling together with
``recovery="replay"`` (record-id routing to unkeyed PEs depends on the count).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from strata.protocol.units import Move
from strata.sim.kernel_api import Kernel
from strata.sim.runtime import SOURCE, InstanceRt


def grown(k: Kernel, placement: Mapping[str, Sequence[tuple[str, float]]]) -> dict[str, list[tuple[str, float | None]]]:
    """Per PE the placement grows, its new instances' (node, share); ValueError naming the first bad entry."""
    out: dict[str, list[tuple[str, float | None]]] = {}
    for name, where in placement.items():
        pe = k.pes.get(name)
        if pe is None:
            raise ValueError(f"placement[{name!r}]: expected a PE 'job.operator' the simulation runs")
        n = len(pe.instances)
        if len(where) < n:
            raise ValueError(
                f"placement[{name!r}]: expected at least the {n} instances running (scale-in is not supported); "
                f"found {len(where)}"
            )
        if len(where) == n:
            continue
        if k.recovery is not None:
            raise ValueError(f"placement[{name!r}]: scaling is not supported with recovery='replay'")
        for node, _ in where[n:]:
            if node not in k.node_by_name:
                raise ValueError(f"placement[{name!r}]: expected a node of the cluster; found {node!r}")
        out[name] = [(node, cpu if cpu > 0 else None) for node, cpu in where[n:]]
    return out


def scale_out(k: Kernel, name: str, where: Sequence[tuple[str, float | None]]) -> list[Move]:
    """Start PE ``name``'s new instances at ``where`` (node, share); returns the key-group moves that spread its
    groups onto them."""
    pe = k.pes[name]
    old = len(pe.instances)
    n = old + len(where)
    for index, (node, share) in enumerate(where, start=old):
        inst = InstanceRt(len(k.instances), pe, index, k.node_by_name[node], share)
        inst.rr = [0] * len(pe.down)
        inst.busy_bins = [0.0] * len(k.nodes[0].busy_bins)
        if pe.needs_wm:
            if pe.code == SOURCE:
                inst.wm_in = {-1: pe.wm_last}
            else:
                inst.wm_in = {u.gid: u.wm for u in pe.upstream}
            inst.wm = min(inst.wm_in.values(), default=-math.inf)
        pe.instances.append(inst)
        k.instances.append(inst)
        for d, _ in pe.down:
            d.upstream.append(inst)
            for di in d.instances:
                if d.needs_wm:
                    di.wm_in[inst.gid] = inst.wm
    k.reroute()  # routing="local": the new instances get their share of the streams
    if not pe.keyed:
        return []
    return [Move(name, g, g % n, "live") for g in range(pe.groups) if g % n >= old]
