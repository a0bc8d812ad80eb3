"""FIFO dispatch: the default when no policy is plugged in (an actor runtime's mailbox order)."""

from __future__ import annotations

from collections import deque

from strata.sim.hooks import DispatchPolicy, Message, NodeView


class FifoDispatch:
    """Runs messages in the order they reached the node, across all its operator instances."""

    __slots__ = ("_queue",)

    def __init__(self, view: NodeView | None = None) -> None:
        self._queue: deque[Message] = deque()

    def push(self, msg: Message, now: float) -> None:
        self._queue.append(msg)

    def pop(self, now: float) -> Message | None:
        return self._queue.popleft() if self._queue else None

    def completed(self, msg: Message, service: float, now: float) -> None:
        return None

    def __len__(self) -> int:
        return len(self._queue)


def fifo(view: NodeView) -> DispatchPolicy:
    """The default :data:`~strata.sim.hooks.DispatchFactory`."""
    return FifoDispatch(view)
