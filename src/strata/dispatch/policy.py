"""Cameo's per-node dispatcher behind the simulator's ``DispatchPolicy`` hook (Xu et al., NSDI'21).

One ``StrategyDispatch`` per node, no global coordinator: when a message
arrives, the node prices it with its strategy from the message's priority
context (``t_MF`` in ``Message.frontier``, the job's ``L`` from the node view)
and its profiled costs, and files it in the two-level queue; an idle core
takes the most urgent message, non-preemptively; when it completes, the
measured service time updates the operator's moving average, which is
reported upstream as a reply context.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from strata.dispatch.profiling import CostProfile, ReplyContexts
from strata.dispatch.queues import TwoLevelQueue
from strata.dispatch.strategies import Strategy, WorkUnit, strategy
from strata.model import Scenario, joined_graph
from strata.sim.hooks import DispatchFactory, Message, NodeView


class StrategyDispatch:
    """A node's dispatcher: any ``Strategy`` over Cameo's two-level queue, costs profiled online."""

    __slots__ = ("_down", "_latency", "_profile", "_queue", "_replies", "_strategy", "_weight")

    def __init__(self, view: NodeView, by: Strategy, replies: ReplyContexts, profile: CostProfile) -> None:
        self._strategy = by
        self._replies = replies
        self._profile = profile
        self._latency = view.target_latency
        self._weight = view.weight
        self._down = view.downstream
        self._queue: TwoLevelQueue[tuple[Message, WorkUnit]] = TwoLevelQueue()

    def push(self, msg: Message, now: float) -> None:
        pe = msg.pe
        unit = WorkUnit(msg.job, msg.frontier, self._latency[msg.job], self._profile[pe],
                        self._replies.path(pe), now, msg.seq, self._weight.get(msg.job, 1.0))
        key = self._strategy.key(unit)
        msg.priority = key
        self._queue.push((pe, msg.instance), key, msg.seq, (msg, unit))

    def pop(self, now: float) -> Message | None:
        entry = self._queue.pop()
        if entry is None:
            return None
        msg, unit = entry
        self._strategy.started(unit, msg.priority)
        return msg

    def completed(self, msg: Message, service: float, now: float) -> None:
        pe = msg.pe
        self._replies.report(pe, self._profile.observe(pe, service), self._down.get(pe, ()))

    def __len__(self) -> int:
        return len(self._queue)


def dispatcher(by: str | Callable[[], Strategy] = "cameo", *, prior_cost: Mapping[str, float] | None = None,
               downstream: Mapping[str, tuple[str, ...]] | None = None, alpha: float = 0.2) -> DispatchFactory:
    """A ``DispatchFactory``: one ``StrategyDispatch`` per node, each with its own strategy instance.

    ``by`` is a strategy name (see ``strategies.STRATEGIES``) or a zero-argument
    callable returning a fresh ``Strategy``. ``prior_cost`` (PE → seconds per
    message) and ``downstream`` (PE → PEs it feeds) seed the cost estimates
    before the first measurements (see ``model_priors``); ``alpha`` is the
    moving-average weight of the newest measurement.
    """
    make = (lambda: strategy(by)) if isinstance(by, str) else by
    replies = ReplyContexts(downstream, prior_cost)

    def factory(view: NodeView) -> StrategyDispatch:
        return StrategyDispatch(view, make(), replies, CostProfile(alpha, prior_cost))

    return factory


def model_priors(scenario: Scenario, templates: Mapping[str, str] | None = None
                 ) -> tuple[dict[str, float], dict[str, tuple[str, ...]]]:
    """The planner's view as dispatch priors: (PE → cost_per_record, PE → PEs it feeds)."""
    graph = joined_graph(scenario, templates)
    cost = {pe: graph.nodes[pe]["op"].cost_per_record for pe in graph}
    downstream = {pe: tuple(graph.successors(pe)) for pe in graph}
    return cost, downstream
