"""Slot-based static isolation: the Flink-like baseline Cameo is compared against (Xu et al., NSDI'21).

Each dataflow owns a fixed number of a node's cores (its slots). A dataflow
never runs more messages at once than it has slots, even when other
dataflows' slots are idle (no work conserving across dataflows: that is the
isolation, and its cost in utilisation); within its slots a dataflow runs its
messages first come, first served. With ``per="pe"`` the slots go to each
operator instead (Flink without slot sharing: every task has its own slot).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from math import floor

from strata.model import Scenario, joined_graph, offered_rates
from strata.protocol.units import DispatchFactory, Message, NodeView


def apportion(cores: int, demand: Mapping[str, float]) -> dict[str, int]:
    """Split ``cores`` among dataflows in proportion to ``demand``, at least one each (largest remainder).

    Static isolation gives every dataflow on a node a whole core, so a node
    needs at least as many cores as dataflows.
    """
    jobs = sorted(demand)
    if len(jobs) > cores:
        raise ValueError(f"slot isolation needs a core per dataflow: {len(jobs)} dataflows on {cores} cores")
    if not jobs:
        return {}
    spare = cores - len(jobs)
    total = sum(max(demand[j], 0.0) for j in jobs)
    share = {j: spare * (max(demand[j], 0.0) / total if total > 0 else 1.0 / len(jobs)) for j in jobs}
    slots = {j: 1 + floor(share[j]) for j in jobs}
    left = cores - sum(slots.values())
    # Hamilton's method: the leftover cores go to the largest fractional parts (ties by name).
    for j in sorted(jobs, key=lambda j: (-(share[j] - floor(share[j])), j))[:left]:
        slots[j] += 1
    return slots


class SlotDispatch:
    """A node's dispatcher under static isolation: per-owner FIFO queues, at most ``slots[owner]`` running.

    The owner of a message is its dataflow (``per="job"``) or its PE (``per="pe"``).
    """

    __slots__ = ("_len", "_per_pe", "_queues", "_running", "_slots")

    def __init__(self, slots: Mapping[str, int], per: str = "job") -> None:
        if per not in ("job", "pe"):
            raise ValueError(f"slots are per 'job' or per 'pe', not {per!r}")
        self._per_pe = per == "pe"
        self._slots = dict(slots)
        self._queues: dict[str, deque[Message]] = {j: deque() for j in self._slots}
        self._running = dict.fromkeys(self._slots, 0)
        self._len = 0

    def push(self, msg: Message, now: float) -> None:
        self._queues[msg.pe if self._per_pe else msg.job].append(msg)
        self._len += 1

    def pop(self, now: float) -> Message | None:
        best: str | None = None
        best_seq = 0
        for job, queue in self._queues.items():
            if queue and self._running[job] < self._slots[job] and (best is None or queue[0].seq < best_seq):
                best, best_seq = job, queue[0].seq
        if best is None:
            return None
        self._running[best] += 1
        self._len -= 1
        return self._queues[best].popleft()

    def completed(self, msg: Message, service: float, now: float) -> None:
        self._running[msg.pe if self._per_pe else msg.job] -= 1

    def __len__(self) -> int:
        return self._len

    @property
    def slots(self) -> dict[str, int]:
        return dict(self._slots)


def slot_dispatcher(pe_demand: Mapping[str, float] | None = None, per: str = "job") -> DispatchFactory:
    """One ``SlotDispatch`` per node; a node's cores are apportioned among the owners with PEs on it.

    ``pe_demand`` (PE → cores, e.g. ``model_demand``) sets each owner's share
    on a node from the demand of its PEs there; without it, owners share a
    node's cores equally. ``per`` is ``"job"`` (a dataflow's slots) or ``"pe"``.
    """

    def factory(view: NodeView) -> SlotDispatch:
        demand: dict[str, float] = {}
        for pe in view.pes:
            owner = pe if per == "pe" else pe.partition(".")[0]
            demand[owner] = demand.get(owner, 0.0) + (pe_demand.get(pe, 0.0) if pe_demand is not None else 1.0)
        return SlotDispatch(apportion(view.cores, demand), per)

    return factory


def model_demand(scenario: Scenario, templates: Mapping[str, str] | None = None) -> dict[str, float]:
    """Each PE's nominal cpu demand in cores: offered records/s × cost_per_record (the planner's view)."""
    graph = joined_graph(scenario, templates)
    return {pe: rate * graph.nodes[pe]["op"].cost_per_record for pe, rate in offered_rates(graph).items()}
