"""Pluggable dispatch strategies (Xu et al., NSDI'21, Cameo §"Pluggable strategy").

A strategy turns a unit of work into a sort key: the dispatcher runs the unit
with the smallest key first (ties: creation order). A unit is anything that
waits for a core: one message at an operator (``strata.sim``) or one pending
micro-batch of a query (the Spark gate). It is described by plain numbers, so
strategies know nothing about engines.

A user-defined strategy is a class with one method::

    class RateMonotonic(Strategy):
        def key(self, unit: WorkUnit) -> float:
            return unit.target_latency       # shorter period first

Stateful strategies (fair sharing) also override ``started``, which the
dispatcher calls when a unit is handed to a core. Deadline orders (``llf``,
``edf``) also override ``overdue``: a unit that can no longer meet its deadline
runs after every unit that still can (it is not dropped).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import NamedTuple

from strata.dispatch.priority import deadline


class WorkUnit(NamedTuple):
    """One unit of work waiting for a core: a message, or a micro-batch.

    ``frontier`` is Cameo's t_MF; ``own_cost`` and ``path_cost`` are profiled
    estimates (C_OM, C_path) in seconds; ``arrival`` is when the unit became
    runnable; ``seq`` its global creation order; ``weight`` its dataflow's
    fair-share weight. (A named tuple: immutable and cheap to build, once per
    message on the dispatch hot path.)
    """

    job: str
    frontier: float
    target_latency: float
    own_cost: float
    path_cost: float
    arrival: float
    seq: int
    weight: float = 1.0


class Strategy(ABC):
    """Orders units of work: smaller ``key`` runs first."""

    @abstractmethod
    def key(self, unit: WorkUnit) -> float:
        """Sort key of ``unit``, computed once when it becomes runnable."""

    def started(self, unit: WorkUnit, key: float) -> None:  # noqa: B027 - optional hook, no-op by default
        """``unit`` (with the key it was given) has just been handed to a core."""

    def overdue(self, unit: WorkUnit, now: float) -> bool:
        """Whether ``unit`` can no longer meet its deadline at ``now`` (then it runs after every unit that can)."""
        return False


class DeadlineOrder(Strategy):
    """A deadline order that serves work still able to meet its deadline before work already overdue.

    Under overload plain EDF (and least laxity) runs the most overdue work
    first, so every unit behind it misses too: the domino effect (Buttazzo,
    *Hard Real-Time Computing Systems*, §"Handling overload conditions"). The
    textbook remedy runs a unit that can no longer meet its deadline — its
    latest start ``t_MF + L − C_OM − C_path`` (Cameo's ``ddl_M``) has passed —
    only when no unit that still can is waiting; overdue units keep their
    order among themselves and none is dropped (docs/hierarchy.md, issue 30,
    ``select14``).
    """

    def overdue(self, unit: WorkUnit, now: float) -> bool:
        return deadline(unit.frontier, unit.target_latency, unit.own_cost, unit.path_cost) < now


class LeastLaxity(DeadlineOrder):
    """Cameo's default: the latest start time that meets the target, ``t_MF + L − C_OM − C_path``."""

    def key(self, unit: WorkUnit) -> float:
        return deadline(unit.frontier, unit.target_latency, unit.own_cost, unit.path_cost)


class EarliestDeadline(DeadlineOrder):
    """EDF on the result's due time ``t_MF + L`` (costs ignored in the order; ``overdue`` counts them)."""

    def key(self, unit: WorkUnit) -> float:
        return unit.frontier + unit.target_latency


class ShortestJob(Strategy):
    """Shortest (estimated) job first."""

    def key(self, unit: WorkUnit) -> float:
        return unit.own_cost


class Fifo(Strategy):
    """First come, first served: the actor runtime's default."""

    def key(self, unit: WorkUnit) -> float:
        return unit.arrival


class FairShare(Strategy):
    """Proportional fair sharing of cores among dataflows by weight: start-time fair queueing.

    Each unit gets a virtual start tag ``S = max(V, F_job)`` and moves its
    dataflow's finish tag to ``F_job = S + own_cost / weight``; units run in
    order of ``S``, and ``V`` is the largest start tag handed to a core (Goyal,
    Vin & Cheng, SIGCOMM'96, with several servers). A backlogged dataflow thus
    receives core time in proportion to its weight, and one that was idle
    restarts at ``V`` rather than cashing in credit for the time it was away.
    """

    def __init__(self) -> None:
        self._virtual = 0.0
        self._finish: dict[str, float] = {}

    def key(self, unit: WorkUnit) -> float:
        start = max(self._virtual, self._finish.get(unit.job, 0.0))
        self._finish[unit.job] = start + unit.own_cost / unit.weight
        return start

    def started(self, unit: WorkUnit, key: float) -> None:
        if key > self._virtual:
            self._virtual = key


# The dispatch blocks L2 offers (the meta level chooses among these names), and other names for them.
STRATEGIES: dict[str, type[Strategy]] = {
    "llf": LeastLaxity,
    "edf": EarliestDeadline,
    "sjf": ShortestJob,
    "fifo": Fifo,
    "fair": FairShare,
}
ALIASES: dict[str, str] = {"cameo": "llf"}


def strategy(name: str) -> Strategy:
    """A fresh strategy by name (``llf`` alias ``cameo``, ``edf``, ``sjf``, ``fifo``, ``fair``)."""
    try:
        return STRATEGIES[ALIASES.get(name, name)]()
    except KeyError:
        choices = sorted([*STRATEGIES, *ALIASES])
        raise ValueError(f"unknown dispatch strategy {name!r}; choose from {choices}") from None


def rank(units: Iterable[WorkUnit], by: Strategy) -> list[WorkUnit]:
    """Release ``units`` all at once, in dispatch order under ``by`` (ties by ``seq``).

    For a gate that lets a whole set of pending units go together, e.g. the
    micro-batches of all queries waiting at a Spark batch boundary. Keys are
    computed in the given order and ``started`` is called in release order.
    """
    keyed = sorted(((by.key(u), u.seq, u) for u in units), key=lambda t: (t[0], t[1]))
    for key, _, u in keyed:
        by.started(u, key)
    return [u for _, _, u in keyed]
