"""FIFO dispatch: the default when no policy is plugged in (an actor runtime's mailbox order)."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from strata.protocol.units import DispatchPolicy, Message, NodeView


class FifoDispatch:
    """Runs messages in the order they reached the node, across all its operator instances.

    ``queue`` is public because the engine appends to and pops from it directly
    when a node runs this policy (the simulator's hot path; see
    ``strata.sim.runtime.NodeRt.fifo``): the methods below are what every other
    caller uses, and do exactly the same.
    """

    __slots__ = ("queue",)

    def __init__(self, view: NodeView | None = None) -> None:
        self.queue: deque[Message] = deque()

    def push(self, msg: Message, now: float) -> None:
        self.queue.append(msg)

    def pop(self, now: float) -> Message | None:
        return self.queue.popleft() if self.queue else None

    def completed(self, msg: Message, service: float, now: float) -> None:
        return None

    def withdraw(self, take: Callable[[Message], bool]) -> list[Message]:
        """Remove and return the queued messages ``take`` selects, in queue order (a key-group handover)."""
        kept: deque[Message] = deque()
        taken: list[Message] = []
        for msg in self.queue:
            (taken if take(msg) else kept).append(msg)
        self.queue.clear()  # in place: the engine holds this deque (NodeRt.fifo)
        self.queue.extend(kept)
        return taken

    def __len__(self) -> int:
        return len(self.queue)


def fifo(view: NodeView) -> DispatchPolicy:
    """The default :data:`~strata.protocol.units.DispatchFactory`."""
    return FifoDispatch(view)
