"""Cameo's per-node dispatcher behind the simulator's ``DispatchPolicy`` hook (Xu et al., NSDI'21).

One ``StrategyDispatch`` per node, no global coordinator: when a message
arrives, the node prices it with its strategy from the message's priority
context (``t_MF`` in ``Message.frontier``, the job's ``L`` from the node view)
and its profiled costs, and files it in the two-level queue; an idle core
takes the most urgent message, non-preemptively (under a deadline order, the
most urgent that can still meet its deadline, overdue ones after); when it completes, the
measured service time updates the operator's moving average, which is
reported upstream as a reply context.

Costs are profiled per record (a message may stand for several records):
``C_OM`` = the operator's per-record estimate × the message's records, and
``C_path`` the per-record critical path downstream. A message standing for no
records is work on an operator's state — a window computing a result when it
fires — and is profiled per message, apart from its operator's per-record
cost: folding a whole firing into the per-record average would price every
later record of the window as if it were a firing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from strata.dispatch.priority import WindowTiming, frontier, window_routes
from strata.dispatch.profiling import CostProfile, ReplyContexts
from strata.dispatch.queues import TwoLevelQueue
from strata.dispatch.strategies import Strategy, WorkUnit, strategy
from strata.model import Scenario, joined_graph
from strata.protocol.units import DispatchFactory, Message, NodeView

_STATE_WORK = "state"  # profile key suffix for messages standing for no records (a window's firing)


@dataclass(frozen=True)
class Priors:
    """What the dispatcher knows before measuring: the static part of Cameo's priority context.

    ``cost``: PE → core-seconds per record (seeds ``C_OM`` and ``C_path``);
    ``downstream``: PE → PEs it feeds; ``windows``: windowed PE → (size, slide,
    lateness), so operators upstream of a window price its messages by the
    window's due time.
    """

    cost: Mapping[str, float] = field(default_factory=dict)
    downstream: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    windows: Mapping[str, WindowTiming] = field(default_factory=dict)

    @classmethod
    def from_scenario(cls, scenario: Scenario, templates: Mapping[str, str] | None = None) -> Priors:
        """The planner's view: ``cost_per_record``, the joined graph, window specs."""
        graph = joined_graph(scenario, templates)
        cost, windows = {}, {}
        for pe in graph:
            op = graph.nodes[pe]["op"]
            cost[pe] = op.cost_per_record
            if op.window is not None:
                w = op.window
                windows[pe] = (w.size_s, w.slide_s or w.size_s, w.watermark_s)
        return cls(cost, {pe: tuple(graph.successors(pe)) for pe in graph}, windows)


class StrategyDispatch:
    """A node's dispatcher: any ``Strategy`` over Cameo's two-level queue, costs profiled online."""

    __slots__ = (
        "_defers",
        "_down",
        "_late",
        "_latency",
        "_profile",
        "_queue",
        "_replies",
        "_strategy",
        "_waits",
        "_weight",
    )

    def __init__(
        self,
        view: NodeView,
        by: Strategy,
        replies: ReplyContexts,
        profile: CostProfile,
        waits: Mapping[str, tuple[WindowTiming, ...]] | None = None,
        weights: Mapping[str, float] | None = None,
    ) -> None:
        self._strategy = by
        self._waits = {pe: w for pe, w in (waits or {}).items() if w and pe in view.pes}
        self._replies = replies
        self._profile = profile
        self._latency = view.target_latency
        self._weight = {**view.weight, **(weights or {})}
        self._down = view.downstream
        self._queue: TwoLevelQueue[tuple[Message, WorkUnit]] = TwoLevelQueue()
        # Messages found past their deadline (``Strategy.overdue``), in the same order: run only when no message in
        # ``_queue`` that can still meet its deadline is runnable. Time only moves on, so once overdue always overdue.
        self._late: TwoLevelQueue[tuple[Message, WorkUnit]] = TwoLevelQueue()
        self._defers = type(by).overdue is not Strategy.overdue

    def push(self, msg: Message, now: float) -> None:
        pe = msg.pe
        waits = self._waits.get(pe)
        t_mf = msg.frontier if waits is None else frontier(msg.event_time, msg.frontier, waits)
        records = msg.records
        unit = WorkUnit(
            msg.job,
            t_mf,
            self._latency[msg.job],
            self._profile[pe] * records if records else self._profile[(pe, _STATE_WORK)],
            self._replies.path(pe),
            now,
            msg.seq,
            self._weight.get(msg.job, 1.0),
        )
        key = self._strategy.key(unit)
        msg.priority = key
        self._queue.push((pe, msg.instance), key, msg.seq, (msg, unit))

    def pop(self, now: float) -> Message | None:
        entry = self._queue.pop()
        if self._defers:
            overdue, late = self._strategy.overdue, self._late
            while entry is not None and overdue(entry[1], now):
                msg = entry[0]
                late.push((msg.pe, msg.instance), msg.priority, msg.seq, entry)
                entry = self._queue.pop()
            if entry is None:
                entry = late.pop()
        if entry is None:
            return None
        msg, unit = entry
        self._strategy.started(unit, msg.priority)
        return msg

    def completed(self, msg: Message, service: float, now: float) -> None:
        pe = msg.pe
        if not msg.records:
            self._profile.observe((pe, _STATE_WORK), service)
            return
        per_record = self._profile.observe(pe, service / msg.records)
        self._replies.report(pe, per_record, self._down.get(pe, ()))

    def hold(self, pe: str, instance: int) -> None:
        """A message of this activation started: under actor turns, the next core takes another one."""
        self._queue.hold((pe, instance))
        self._late.hold((pe, instance))

    def free(self, pe: str, instance: int, now: float) -> None:
        """The activation's turn is over: it competes again with its most urgent pending message."""
        self._queue.free((pe, instance))
        self._late.free((pe, instance))

    def __len__(self) -> int:
        return len(self._queue) + len(self._late)

    def estimate(self, pe: str) -> tuple[float, float]:
        """Current (C_OM per record, C_path) of ``pe`` as this node prices its messages."""
        return self._profile[pe], self._replies.path(pe)

    def estimate_state_work(self, pe: str) -> float:
        """Current C_OM of a message of ``pe`` standing for no records (a window's firing)."""
        return self._profile[(pe, _STATE_WORK)]


def dispatcher(
    by: str | Callable[[], Strategy] = "cameo",
    priors: Priors | None = None,
    alpha: float = 0.2,
    weights: Mapping[str, float] | None = None,
) -> DispatchFactory:
    """A ``DispatchFactory``: one ``StrategyDispatch`` per node, each with its own strategy instance.

    ``by`` is a strategy name (``strategies.STRATEGIES`` or an alias) or a zero-argument
    callable returning a fresh ``Strategy``; ``priors`` seed costs and carry
    window semantics (``Priors.from_scenario``; without them a node starts from
    its view's ``cost_per_record``); ``alpha`` is the moving-average weight of
    the newest measurement; ``weights`` (job → fair-share weight) override the
    node view's.
    """
    make = (lambda: strategy(by)) if isinstance(by, str) else by
    priors = priors or Priors()
    replies = ReplyContexts(priors.downstream, priors.cost)
    waits = window_routes(priors.downstream, priors.windows)

    def factory(view: NodeView) -> StrategyDispatch:
        profile = CostProfile(alpha, {**view.cost_per_record, **priors.cost})
        return StrategyDispatch(view, make(), replies, profile, waits, weights)

    return factory
