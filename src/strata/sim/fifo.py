"""FIFO dispatch: the default when no policy is plugged in (an actor runtime's mailbox order).

``FifoDispatch`` runs a node's messages in arrival order on any idle core;
``TurnFifoDispatch`` is the same runtime's default scheduler when each
operator instance runs one message at a time (``SimOptions(actor_turns=True)``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from strata.protocol.units import DispatchPolicy, Message, NodeView, TurnPolicy


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


Activation = tuple[str, int]  # (PE, instance index): one actor


class TurnFifoDispatch:
    """Orleans' default scheduler: ready activations take turns in the order they became ready.

    Each operator instance is an activation with a FIFO mailbox. An activation
    with mail and no turn running is *ready*; a free core takes the first ready
    activation and runs one message (a turn), after which the activation, if it
    still has mail, goes to the back of the ready queue. So two backlogged
    activations on one core alternate message by message, whatever order their
    messages arrived in.

    The ready queue is a deque with lazy deletion: an activation's valid entry
    is the one carrying its current ticket, so moving it to the back is an
    append, and entries made stale by ``hold`` are skipped when they surface.
    """

    __slots__ = ("_boxes", "_busy", "_len", "_ready", "_ticket", "_tickets")

    def __init__(self, view: NodeView | None = None) -> None:
        self._boxes: dict[Activation, deque[Message]] = {}
        self._ready: deque[tuple[Activation, int]] = deque()
        self._ticket: dict[Activation, int] = {}  # activations in the ready queue → their valid entry's ticket
        self._busy: set[Activation] = set()
        self._tickets = 0
        self._len = 0

    def _enqueue(self, act: Activation) -> None:
        self._tickets += 1
        self._ticket[act] = self._tickets
        self._ready.append((act, self._tickets))

    def push(self, msg: Message, now: float) -> None:
        act = (msg.pe, msg.instance)
        box = self._boxes.get(act)
        if box is None:
            box = self._boxes[act] = deque()
        box.append(msg)
        self._len += 1
        if act not in self._ticket and act not in self._busy:
            self._enqueue(act)

    def pop(self, now: float) -> Message | None:
        ready, ticket = self._ready, self._ticket
        while ready:
            act, t = ready.popleft()
            if ticket.get(act) != t:
                continue
            del ticket[act]
            box = self._boxes[act]
            msg = box.popleft()
            self._len -= 1
            # Still ready until the engine starts the turn (``hold``): a message the engine
            # does not run (its instance paused or moved) must not strand the rest of the mailbox.
            if box:
                self._enqueue(act)
            return msg
        return None

    def completed(self, msg: Message, service: float, now: float) -> None:
        return None

    def hold(self, pe: str, instance: int) -> None:
        act = (pe, instance)
        self._busy.add(act)
        self._ticket.pop(act, None)

    def free(self, pe: str, instance: int, now: float) -> None:
        act = (pe, instance)
        self._busy.discard(act)
        if self._boxes[act]:
            self._enqueue(act)

    def withdraw(self, take: Callable[[Message], bool]) -> list[Message]:
        """Remove and return the queued messages ``take`` selects, in arrival order (a key-group handover)."""
        taken: list[Message] = []
        for act, box in self._boxes.items():
            kept: deque[Message] = deque()
            for msg in box:
                (taken if take(msg) else kept).append(msg)
            self._boxes[act] = kept
            if not kept:
                self._ticket.pop(act, None)  # nothing left to run: its ready entry is stale
        self._len -= len(taken)
        return sorted(taken, key=lambda m: m.seq)

    def __len__(self) -> int:
        return self._len


def turn_fifo(view: NodeView) -> TurnPolicy:
    """The default :data:`~strata.protocol.units.DispatchFactory` with ``SimOptions(actor_turns=True)``."""
    return TurnFifoDispatch(view)
