"""Units of work and the extension points a scheduling level plugs into.

Engines observe and enforce; policies decide (DESIGN.md, rules 1 and 2). An
engine calls these objects at well-defined moments and never decides on its
own beyond the documented defaults (FIFO dispatch, hash routing).

Engine-neutral: ``strata.sim`` implements it message by message; the levels
(``strata.dispatch``, ``strata.balance``, ``strata.control``) import it
without importing any engine.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Protocol, runtime_checkable

from strata.model import Job, Template


class Kind(IntEnum):
    """What a message carries. Only DATA goes through dispatch; the rest is control."""

    DATA = 0
    MARKER = 1  # AutoFlow migration marker on one channel
    STATE = 2  # a key group's state in flight to its new owner
    WATERMARK = 3


@dataclass(slots=True)
class Message:
    """One unit of work queued at an operator instance.

    ``frontier`` is Cameo's t_MF, filled by the engine: the event time of the
    source record for regular operators, the time the window's result is due
    for windowed ones. ``cost`` is the true service time the engine will charge;
    policies must not read it (they learn costs through ``completed``) — it is
    here so the engine has one record per message.
    """

    seq: int  # global creation order: the FIFO tie-break
    job: str
    pe: str  # destination PE, "job.operator"
    instance: int  # destination instance index within the PE
    upstream: int  # global id of the sending instance; -1 for a source emission
    created: float  # sim time the message entered the destination queue
    event_time: float  # event time of the newest contributing source record
    frontier: float  # Cameo's t_MF
    key: int = -1
    key_group: int = -1
    cost: float = 0.0
    kind: Kind = Kind.DATA
    priority: float = 0.0  # free for the dispatch policy (e.g. its computed deadline)
    payload: object = None
    # Engine bookkeeping, appended compatibly: how many records of ``key`` the
    # message stands for (1 unless the run batches), the record's id (drives the
    # deterministic filter decisions), its integer value (for exact sums), and
    # the channel epoch that orders control messages behind earlier data.
    records: int = 1
    uid: int = -1
    value: float = 0
    epoch: int = 0


@dataclass(frozen=True, slots=True)
class NodeView:
    """What a per-node policy may know about its node and the dataflows on it."""

    name: str
    cores: int
    pes: tuple[str, ...]  # PEs with an instance on this node
    target_latency: Mapping[str, float]  # job → L (seconds)
    weight: Mapping[str, float] = field(default_factory=dict)  # job → fair-share weight
    downstream: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # PE → PEs it feeds
    # Appended compatibly: static profile (the model's cost_per_record, core-seconds) and the
    # cpu share the placement gave each PE's instance on this node (absent: unlimited).
    cost_per_record: Mapping[str, float] = field(default_factory=dict)  # PE → core-seconds per record
    share: Mapping[str, float] = field(default_factory=dict)  # PE → cpu share on this node


class DispatchPolicy(Protocol):
    """Which queued DATA message an idle core of one node runs next (non-preemptive).

    The engine calls ``push`` when a message reaches an instance on the node,
    ``pop`` whenever a core is idle (None = nothing runnable), and ``completed``
    after each message with the measured service time, so policies can profile
    costs (Cameo's reply context). One policy object per node; it must not
    share state with other nodes' policies (no global coordination).
    """

    def push(self, msg: Message, now: float) -> None: ...

    def pop(self, now: float) -> Message | None: ...

    def completed(self, msg: Message, service: float, now: float) -> None: ...

    def __len__(self) -> int: ...


@runtime_checkable
class TurnPolicy(DispatchPolicy, Protocol):
    """A :class:`DispatchPolicy` that can run under an actor runtime's turns.

    In an actor runtime (Orleans, which Cameo runs on) an operator instance is
    an activation that processes one message at a time. With
    ``SimOptions(actor_turns=True)`` the engine calls ``hold(pe, instance)``
    when a message of the instance starts on a core and ``free(pe, instance,
    now)`` when it completes (after ``completed``); in between, ``pop`` must
    not return a message of that instance. The policy keeps every queued
    message meanwhile, so its order within and across instances stays its own.
    """

    def hold(self, pe: str, instance: int) -> None: ...

    def free(self, pe: str, instance: int, now: float) -> None: ...


DispatchFactory = Callable[[NodeView], DispatchPolicy]


URGENT_POOL = "urgent"  # the FAIR pool of a micro-batch that is short of slack (declared by the Spark engine)

SHARE_POOLS: dict[str, int] = {"w1": 1, "w2": 2, "w4": 4, "w8": 8}
"""The pools a cpu share is enforced through (:func:`strata.control.budgets.pool_names`); FAIR weight ∝ the number."""

POOLS: dict[str, int] = {URGENT_POOL: 32, **SHARE_POOLS}
"""Every FAIR pool a policy may name, with its weight: what a Spark session declares at its start (Spark reads the
allocation file once)."""


@dataclass(frozen=True, slots=True)
class BatchRelease:
    """What the micro-batch gate's policy decided for one released batch (one row of the ``gate`` table).

    ``deadline`` is the batch's target ``t_MF + L``; ``key`` the strategy's sort key;
    ``pool`` the FAIR pool its Spark jobs run in; ``cost_*`` the batch-cost model then; ``bound`` the batches the
    gate let run at once then.
    """

    frontier: float
    deadline: float
    predicted_cost: float
    key: float
    pool: str | None
    cost_fixed: float
    cost_per_record: float
    bound: int


class BatchGatePolicy(Protocol):
    """Which pending micro-batch goes next, and in which pool: what the gate mechanism
    (:class:`strata.spark.gate.Gate`) asks of its L2 policy (:class:`strata.dispatch.gate.GateCore`).

    Queries are named by their pipeline; time is passed in (the mechanism owns the clock).
    """

    @property
    def strategy(self) -> str: ...

    def use(self, strategy: str) -> None:
        """Order the next batches by dispatch strategy ``strategy`` (unknown: ValueError naming the choices)."""

    def arrive(self, query: str, job: Job, template: str, oldest_event_time: float, rows: int, now: float) -> None:
        """A batch of ``rows`` records, the oldest at ``oldest_event_time``, waits at the gate."""

    def next_release(self, now: float) -> str | None:
        """The query whose batch goes now, or None."""

    def release(self, query: str, base_pool: str | None, now: float) -> BatchRelease:
        """Let ``query``'s waiting batch go (``base_pool``: the pool L0's cpu share gave its job)."""

    def finish(self, query: str) -> None:
        """``query``'s running batch is done."""

    def learn(self, query: str, rows: int, seconds: float) -> None:
        """A batch of ``query`` with ``rows`` records took ``seconds``."""

    def forget(self, query: str, *, waiting: bool = True) -> None:
        """``query`` restarted: drop what was learned of it (and, with ``waiting``, any batch or slot it held)."""


class ReadLimitPolicy(Protocol):
    """Whether a source's read limit (Spark: ``maxFilesPerTrigger``, ``maxOffsetsPerTrigger``) is changed to a new
    value, when the engine can change it only by restarting the query: what the engine asks its policy
    (:class:`strata.control.micro_batches.ReadLimitRestarts`) before it restarts a query for a rate cap."""

    @property
    def enabled(self) -> bool:
        """False: rate caps are not enforced through read limits at all (the engine says so once)."""

    def worth_restart(self, current: int | None, proposed: int | None, since_restart_s: float) -> bool:
        """Change the limit from ``current`` to ``proposed`` (None: no limit), ``since_restart_s`` after the
        query's last restart?"""


Attribution = Callable[[str, Template, float, float, float], list[tuple[str, float, float, float]]]
"""How an engine that runs a job's template as one unit splits one observation of it across the template's PEs:
``(job id, template, records in, records out, busy s) → [(PE, records in, records out, busy s)]``
(:func:`strata.control.estimation.attribute`; estimation, so a policy the engine is given, not its own)."""


@dataclass(frozen=True, slots=True)
class KeyGroupLoad:
    """Load of one key group over one window (AutoFlow's measurement, no user input)."""

    pe: str
    key_group: int
    instance: int
    records: int
    busy: float  # seconds of core time spent on it in the window
    state_bytes: float


MIGRATION_MODES = ("live", "precopy", "handover", "stop")


@dataclass(frozen=True, slots=True)
class Move:
    """Move ``key_group`` of ``pe`` to ``dst`` instance.

    ``mode``: 'live' (AutoFlow's marker protocol), 'precopy' (live after a
    snapshot of the group's state was copied, then only the changes),
    'handover' (precopy, with the group's queued records shipped along instead
    of run by the old owner) or 'stop' (the stop-the-world baseline);
    docs/balance.md describes each.
    """

    pe: str
    key_group: int
    dst: int
    mode: str = "live"
