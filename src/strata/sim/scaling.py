"""Scale-out at runtime: ``Actions(instances={pe: n})`` adds instances to a running PE.

New instances start empty on the live node hosting the fewest instances (ties:
cluster order; a placement in the same ``Actions`` may put them elsewhere, as
it relocates any instance). They join every routing table at once: unkeyed
upstreams include them in their round-robin; a keyed PE's key groups are then
spread by live AutoFlow moves (:mod:`strata.sim.migration`), group ``g`` going
to instance ``g mod n`` when that is one of the new instances — the engine's
documented default, as ``g mod instances`` is at the start. A new instance's
watermark starts at the minimum of its upstream instances' (what they have
forwarded already covers everything it will receive), and downstream
instances take it into their minimum.

Not supported: scale-in (fewer instances), and scaling together with
``recovery="replay"`` (record-id routing to unkeyed PEs depends on the count).
"""

from __future__ import annotations

import math
from collections import Counter
from typing import TYPE_CHECKING

from strata.protocol.units import Move
from strata.sim.runtime import SOURCE, InstanceRt

if TYPE_CHECKING:
    from strata.sim.engine import Simulation


def validate(sim: Simulation, instances: dict[str, int]) -> None:
    """Raise ValueError naming the first bad entry of ``Actions.instances``."""
    for name, n in instances.items():
        pe = sim.pes.get(name)
        if pe is None:
            raise ValueError(f"instances[{name!r}]: expected a PE 'job.operator'")
        if not isinstance(n, int) or n < len(pe.instances):
            raise ValueError(
                f"instances[{name!r}]: expected an instance count ≥ {len(pe.instances)} (scale-in is not supported); "
                f"found {n!r}"
            )
        if sim.recovery is not None and n != len(pe.instances):
            raise ValueError(f"instances[{name!r}]: scaling is not supported with recovery='replay'")


def scale_out(sim: Simulation, name: str, n: int) -> list[Move]:
    """Give PE ``name`` ``n`` instances; returns the key-group moves that spread its groups onto the new ones."""
    pe = sim.pes[name]
    old = len(pe.instances)
    if n == old:
        return []
    live = [node for node in sim.nodes if node.up]
    if not live:
        raise RuntimeError(f"instances[{name!r}]: no node is up to start new instances on")
    load = Counter(i.node.name for i in sim.instances if i.node.up)
    for index in range(old, n):
        node = min(live, key=lambda x: (load[x.name], x.index))
        load[node.name] += 1
        inst = InstanceRt(len(sim.instances), pe, index, node, None)
        inst.rr = [0] * len(pe.down)
        inst.busy_bins = [0.0] * len(sim.nodes[0].busy_bins)
        if pe.needs_wm:
            if pe.code == SOURCE:
                inst.wm_in = {-1: pe.wm_last}
            else:
                inst.wm_in = {u.gid: u.wm for u in pe.upstream}
            inst.wm = min(inst.wm_in.values(), default=-math.inf)
        pe.instances.append(inst)
        sim.instances.append(inst)
        for d, _ in pe.down:
            d.upstream.append(inst)
            for di in d.instances:
                if d.needs_wm:
                    di.wm_in[inst.gid] = inst.wm
    sim.reroute()  # routing="local": the new instances get their share of the streams
    if not pe.keyed:
        return []
    return [Move(name, g, g % n, "live") for g in range(pe.groups) if g % n >= old]
