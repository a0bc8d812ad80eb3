"""Cameo's two-level scheduling queue (Xu et al., NSDI'21, §"Cameo Mechanism").

Per worker, operators are ordered by their most urgent pending message (the
"global priority" row of Cameo's table) and, within an operator, messages are
ordered by their own priority ("local priority"). A free core takes the most
urgent operator and runs its most urgent message, to completion.

Both levels are binary heaps (``heapq``): push and pop are O(log n). The outer
heap holds one entry per (operator, head) pair; when an operator's head
changes, the old entry is left behind and discarded when it surfaces (lazy
deletion), so each push adds at most one outer entry and the amortised cost
stays logarithmic.

Under an actor runtime's turns an operator instance runs one message at a
time, and Cameo's scheduler only considers activations not already running:
``hold(op)`` takes an operator out of the outer order while its message runs
(its heads are skipped when they surface) and ``free(op)`` puts it back with
its current most urgent message.
"""

from __future__ import annotations

from collections.abc import Hashable
from heapq import heappop, heappush
from typing import Generic, TypeVar

T = TypeVar("T")


class TwoLevelQueue(Generic[T]):
    """Items grouped by operator; ``pop`` returns the smallest ``(key, seq)`` item overall.

    ``seq`` must be unique among queued items (it identifies an operator's
    head in the outer heap).
    """

    __slots__ = ("_heads", "_held", "_len", "_ops")

    def __init__(self) -> None:
        self._ops: dict[Hashable, list[tuple[float, int, T]]] = {}
        self._heads: list[tuple[float, int, Hashable]] = []
        self._held: set[Hashable] = set()
        self._len = 0

    def push(self, op: Hashable, key: float, seq: int, item: T) -> None:
        queue = self._ops.get(op)
        if queue is None:
            queue = self._ops[op] = []
        if not queue or (key, seq) < queue[0][:2]:
            heappush(self._heads, (key, seq, op))
        heappush(queue, (key, seq, item))
        self._len += 1

    def pop(self) -> T | None:
        """Remove and return the most urgent item, or None when empty."""
        heads, held = self._heads, self._held
        while heads:
            _, seq, op = heappop(heads)
            queue = self._ops[op]
            if not queue or queue[0][1] != seq:
                continue  # stale: this operator's head has changed since
            if held and op in held:
                continue  # running: ``free`` files its head again
            _, _, item = heappop(queue)
            if queue:
                heappush(heads, (queue[0][0], queue[0][1], op))
            self._len -= 1
            return item
        return None

    def hold(self, op: Hashable) -> None:
        """``op`` is running a message: ``pop`` passes over its items until ``free(op)``."""
        self._held.add(op)

    def free(self, op: Hashable) -> None:
        """``op`` may run again, ranked by its most urgent item."""
        self._held.discard(op)
        queue = self._ops.get(op)
        if queue:
            heappush(self._heads, (queue[0][0], queue[0][1], op))

    def __len__(self) -> int:
        return self._len
