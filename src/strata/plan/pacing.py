"""Rate caps from a plan (SODA's microQ pacing): admit at the sources only what the plan's cpu can process.

A SODA plan gives every PE a cpu budget. With the (learned) resource functions
the plan implies, per source, the largest rate its downstream PEs can process
inside their budgets: the plan's *admitted ingest*. When the offered load is
above it, the engine should read no faster than that — the rest waits in the
source (deferred, not dropped) instead of piling up inside the operators.

Admitted ingest. Record flow is linear in the source rates (every PE forwards
``selectivity ×`` its input), so a PE ``k`` receives ``Σ_s g_sk r_s`` where
``g_sk`` is the gain along the paths from source ``s``. Scaling each source by
``f_s = min_k capacity_k / input_k`` over the PEs ``k`` it reaches
(``input_k`` at the offered rates) keeps every PE within its capacity, also
where several sources meet: ``Σ_s f_s g_sk r_s ≤ (capacity_k / input_k) ·
input_k``. For a chain it is exactly the bottleneck's rate divided by the gain
in front of it.

Pure functions over plain numbers and the model: no clock, no engine.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import networkx as nx

from strata.model import OperatorKind, Scenario, joined_graph
from strata.model.graph import topological_order
from strata.model.traffic import as_emitted, runs
from strata.plan.epoch import with_headroom
from strata.plan.plan import Plan
from strata.protocol.window import WindowStats


def admitted_ingest(
    scenario: Scenario,
    templates: Mapping[str, str],
    cpu: Mapping[str, float],
    offered: Mapping[str, float],
    batch: int = 1,
    headroom: float = 0.0,
) -> dict[str, float]:
    """Source PE → the largest rate the plan's ``cpu`` lets every downstream PE process (above or below
    the offered rate).

    Window aggregates forward what the engines emit at ``batch`` records per source message, linearised at
    the scenario's rates (:func:`strata.model.traffic.as_emitted`: the plan's own traffic model), and every PE
    processes what its cpu buys on the plan's model (:func:`strata.plan.epoch.with_headroom`).

    ``templates``: the plan's admitted jobs and their templates; ``cpu``: PE → cores
    (the plan's assignment); ``offered``: source PE → records/s offered (sources
    absent from it are taken at their spec rate), which fixes the mix where
    several sources meet. A PE whose planned cpu buys nothing is not run
    (:func:`strata.model.traffic.runs`: the engines send it nothing and the plan's
    rate model has it process nothing), so it limits no source and forwards
    nothing: a source is paced by the PEs the plan runs, not held at 0 by one it
    does not (a source the plan does not run gets 0). Sinks are not budgeted by
    the planner and do not limit.
    """
    return _admitted(joined_graph(with_headroom(as_emitted(scenario, batch), headroom), templates), cpu, offered)


def _admitted(graph: nx.DiGraph, cpu: Mapping[str, float], offered: Mapping[str, float]) -> dict[str, float]:
    """:func:`admitted_ingest` on the joined graph of the plan's jobs."""
    order = topological_order(graph)
    rates: dict[str, float] = {}
    inputs: dict[str, float] = {}
    for pe in order:
        op = graph.nodes[pe]["op"]
        if op.kind is OperatorKind.SOURCE:
            inputs[pe] = offered.get(pe, op.source.rate)
            rates[pe] = inputs[pe]
        else:
            inputs[pe] = sum(rates[u] for u in graph.predecessors(pe))
            rates[pe] = op.selectivity * inputs[pe]
        if not runs(op, cpu.get(pe, 0.0)):  # not run: nothing is sent to it, nothing leaves it
            inputs[pe] = rates[pe] = 0.0
    # a source's records reach only the PEs the plan runs: one it does not run stops them and limits no source
    carried = graph.subgraph(pe for pe in order if runs(graph.nodes[pe]["op"], cpu.get(pe, 0.0)))
    out = {}
    for pe in order:
        if graph.nodes[pe]["op"].kind is not OperatorKind.SOURCE:
            continue
        if pe not in carried:
            out[pe] = 0.0
            continue
        factor = math.inf
        for k in [pe, *nx.descendants(carried, pe)]:
            op = graph.nodes[k]["op"]
            # a sink's rate is worth nothing in itself (importance is on the stream into it): SODA gives it no cpu
            if inputs[k] <= 0 or op.kind is OperatorKind.SINK:
                continue
            capacity = op.resource.capacity(cpu.get(k, 0.0), op.cost_per_record)
            factor = min(factor, capacity / inputs[k])
        out[pe] = math.inf if factor == math.inf else max(0.0, factor) * inputs[pe]
    return out


def rate_caps(
    admitted: Mapping[str, float],
    offered: Mapping[str, float],
    backlog: Mapping[str, float],
    catch_up_s: float = 2.0,
    tolerance: float = 0.2,
    step: float = 50.0,
    drain: Mapping[str, float] | None = None,
) -> dict[str, float | None]:
    """Source PE → records/s cap, or None (no cap) — for every source in ``admitted``.

    A source is capped at its admitted ingest while the load it offers (records/s) exceeds that by more
    than ``tolerance`` (a share: random arrivals scatter around the planned rate, a burst goes well past
    it), and afterwards while its ``backlog`` (records offered but not yet read) is more than
    ``catch_up_s`` of input at that rate, whatever it offers: the deferred records then come at the
    admitted rate instead of as one oversized, non-preemptible micro-batch (a window that straddles the
    end of a burst offers a little over the rate, and lifting the cap there would read the whole backlog
    at once). A backlog drains while the offer is below the admitted rate; a source that keeps offering
    more cannot drain at the cap, and its backlog, reported as the source's queue, is the Controller's
    capacity-shortfall signal (a re-plan). A source absent from ``offered`` (nothing observed yet: the
    plan's first window) is capped too: until its offer is known the plan's rate is the only bound there
    is, and a cap at or above what the source offers defers nothing. A cap is rounded down to a multiple
    of ``step`` records/s (at least one step), so small changes in the learned costs do not rewrite it
    every window.

    ``drain`` (source PE → records/s, default: its admitted ingest) is the cap while a backlog drains
    and the source offers less than its admitted ingest, e.g. the rate the cores the plan leaves idle
    add to it (work conserving: deferred records are read as fast as the idle cpu allows, not only
    with what the offer leaves under the plan's rate).
    """
    if not 0 <= tolerance < 1 or catch_up_s < 0 or step <= 0:
        raise ValueError(f"need tolerance in [0, 1), catch_up_s ≥ 0, step > 0; got {tolerance}, {catch_up_s}, {step}")
    caps: dict[str, float | None] = {}
    for pe, rate in admitted.items():
        load = offered.get(pe, math.inf)
        over = load > rate * (1 + tolerance)
        draining = backlog.get(pe, 0.0) > rate * catch_up_s
        if over or draining:
            cap = (drain or {}).get(pe, rate) if draining and load < rate else rate
            # (a relative 1e-9 keeps a rate that float sums leave a hair under a multiple of step on it)
            caps[pe] = max(step, step * math.floor(max(cap, rate) / step * (1 + 1e-9)))
        else:
            caps[pe] = None
    return caps


PACING = ("plan", "shares", "off")
"""L0 pacing modes: caps at the plan's admitted ingest (SODA microQ), at its cpu shares of the cluster, or none."""


def pace(
    model: Scenario,
    plan: Plan,
    window: WindowStats | None,
    catch_up_s: float,
    mode: str = "plan",
    batch: int = 1,
    headroom: float = 0.0,
) -> dict[str, float | None]:
    """Rate caps for the sources of ``plan`` (SODA microQ pacing), in one of the :data:`PACING` modes.

    ``plan``: a source is capped at the ingest the plan admits under the resource functions of ``model`` (the
    model it was made on) while the offered load or the source's backlog exceeds that
    (:func:`admitted_ingest`, :func:`rate_caps`); a backlog drains, while the offer is below the admitted rate,
    at the rate the plan's cpu scaled up to the whole cluster allows (the cores the plan leaves idle go to the
    deferred records, in proportion to each PE's share). This suits engines whose units of work cannot be
    preempted (Spark's micro-batches: a batch read over the plan's rate holds the cores whatever its deadline).

    ``shares``: work conserving — the cap is always the ingest the plan's cpu *shares* of the whole cluster
    allow, so cores the plan leaves idle (it buys a job only its value-saturating rate) are not held back from
    any source, and a plan made on a stale rate (a job waking from idle) does not throttle it below what the
    cluster can do; the plan's proportions still decide who gets what under overload. This suits engines that
    dispatch by deadline message by message (the simulator under Cameo), where deferring records at the source
    buys no latency.

    ``batch`` and ``headroom`` are the plan's (:class:`strata.plan.epoch.Options`): the caps are read on the model
    the plan was made on, windows as they emit and every PE at its planned utilisation.

    ``off``: no caps. With no ``window`` (the plan's start, before any observation) every capped source starts
    at its cap, so the first units of work already follow the plan. A required job's sources are never
    capped: the planner must fit such a job whole, and when it falls short that is the Controller's shortfall
    signal (a re-plan), not a reason to hold its input back.
    """
    if mode not in PACING:
        raise ValueError(f"pacing: expected one of {PACING}; found {mode!r}")
    if mode == "off":
        return {}
    offered = dict(window.ingest) if window is not None else {}
    cpu = plan.cpu()
    # the cores the plan leaves idle, shared in proportion to the plan's cpu
    scale = max(1.0, model.cluster.total_cores / max(sum(cpu.values()), 1e-9))
    whole = {pe: c * scale for pe, c in cpu.items()}
    graph = joined_graph(with_headroom(as_emitted(model, batch), headroom), plan.templates)
    shares = _admitted(graph, whole, offered)
    limited = _admitted(graph, cpu, offered) if mode == "plan" else shares
    admitted = {pe: rate for pe, rate in limited.items() if not model.job[pe.partition(".")[0]].required}
    backlog: dict[str, float] = {}
    for inst in window.instances if window is not None else ():  # a source may run several instances
        if inst.pe in admitted:
            backlog[inst.pe] = backlog.get(inst.pe, 0) + inst.queued
    drain = {pe: r for pe, r in shares.items() if pe in admitted}
    return rate_caps(admitted, offered, backlog, catch_up_s, drain=drain)
