"""routing="local": the weighted round-robin tables of the plan's traffic model, built from where instances run.

Sources spread their records by cpu share; an unkeyed stream goes locality
first — from each node, min(sending share, receiving share) stays on the node
and the rest crosses to where the downstream PE lacks input
(:func:`strata.model.traffic.transport`) — so each instance receives its cpu
share. One table per sender instance and stream, rebuilt by the kernel when
instances move or are added; keyed streams route by key group and need none.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from strata.model.traffic import ROUTE_SLOTS, apportion, transport
from strata.sim.runtime import PeRt


def weights(pe: PeRt) -> list[float]:
    """Each instance's cpu share, or 1 each when any has none."""
    shares = [i.share for i in pe.instances]
    if all(s is not None and s > 0 for s in shares):
        return shares  # type: ignore[return-value]
    return [1.0] * len(shares)


def sending(pe: PeRt) -> list[float]:
    """Share of ``pe``'s output each instance sends: its key groups' share if keyed, else its cpu share."""
    if pe.keyed:
        owned = [0] * len(pe.instances)
        for owner in pe.route:
            owned[owner] += 1
        return [c / len(pe.route) for c in owned]
    w = weights(pe)
    total = sum(w)
    return [x / total for x in w]


def table(dist: Mapping[int, float]) -> list[int]:
    """Weighted round-robin over ``dist`` (index → weight): ROUTE_SLOTS slots apportioned by weight, interleaved
    (smooth weighted round-robin, so any run of slots is close to the weights)."""
    keys = [k for k, w in dist.items() if w > 0] or list(dist)
    counts = apportion(ROUTE_SLOTS, [dist[k] for k in keys])
    if len(keys) == 1:
        return [keys[0]]
    current = [0] * len(keys)
    out = []
    for _ in range(ROUTE_SLOTS):
        best = 0
        for i, c in enumerate(counts):
            current[i] += c
            if current[i] > current[best]:
                best = i
        current[best] -= ROUTE_SLOTS
        out.append(keys[best])
    return out


def reroute(pes: Iterable[PeRt]) -> None:
    """Rebuild every source's and sender's table from where the instances run now."""
    for pe in pes:
        if pe.stream is not None:
            pe.gen = table(dict(enumerate(weights(pe))))
        by_node = _stream_tables(pe)
        for inst in pe.instances:
            inst.routes = by_node.get(inst.node.name) if pe.down else None
        for inst in pe.instances:
            if inst.routes is None and pe.down:  # a sender with no share (e.g. owning no key group)
                inst.routes = next(iter(by_node.values()), None)


def _stream_tables(pe: PeRt) -> dict[str, list[list[int] | None]]:
    """Per node that sends ``pe``'s output, one table per downstream stream (None: keyed or a single instance)."""
    supply: dict[str, float] = {}
    for inst, w in zip(pe.instances, sending(pe), strict=True):
        supply[inst.node.name] = supply.get(inst.node.name, 0.0) + w
    by_node: dict[str, list[list[int] | None]] = {name: [] for name in supply}
    for d, _ in pe.down:
        w = weights(d)
        if d.keyed or len(d.instances) == 1:
            for tables in by_node.values():
                tables.append(None)
            continue
        total = sum(w)
        demand: dict[str, float] = {}
        on: dict[str, list[int]] = {}
        for k, inst in enumerate(d.instances):
            demand[inst.node.name] = demand.get(inst.node.name, 0.0) + w[k] / total
            on.setdefault(inst.node.name, []).append(k)
        flow = transport(supply, demand)
        for n, tables in by_node.items():
            tables.append(table(_received(flow, n, on, w) or dict(enumerate(w))))
    return by_node


def _received(
    flow: Mapping[tuple[str, str], float], sender: str, on: Mapping[str, list[int]], w: list[float]
) -> dict[int, float]:
    """What node ``sender`` sends each downstream instance: its flow to each node, split there by cpu share."""
    dist: dict[int, float] = {}
    for m, ks in on.items():
        x = flow.get((sender, m), 0.0)
        if x > 0:
            wm = sum(w[k] for k in ks)
            for k in ks:
                dist[k] = dist.get(k, 0.0) + x * w[k] / wm
    return dist
