"""The simulator's runtime records: nodes, PEs, operator instances, channels.

Plain slotted classes read and written by the engine's hot loop; nothing here
decides anything.
"""

from __future__ import annotations

from collections import deque

from strata.model import Operator
from strata.protocol.units import DispatchPolicy, Message, NodeView
from strata.sim.fifo import FifoDispatch

# Operator behaviour codes (strata.sim.semantics describes each); DUPLICATE: a record met before (no effect).
SOURCE, PASS, KEYED, WINDOW, SINK, DUPLICATE = range(6)
# Event codes of the engine's heap.
(
    EV_GEN,
    EV_DELIVER,
    EV_DONE,
    EV_TICK,
    EV_STATE,
    EV_FAIL,
    EV_RECOVER,
    EV_ACTION,
    EV_THROTTLE,
    EV_CHECKPOINT,
) = range(10)


class NodeRt:
    """A node: ``cores`` cores running one message each, a NIC, one dispatch policy."""

    __slots__ = (
        "_policy",
        "busy",
        "busy_bins",
        "cores",
        "failed_at",
        "fifo",
        "idle",
        "index",
        "name",
        "nic",
        "nic_free",
        "over",
        "rack",
        "running",
        "state_free",
        "up",
        "view",
    )

    def __init__(self, name: str, index: int, cores: int, nic: float, view: NodeView, policy: DispatchPolicy) -> None:
        self.name = name
        self.index = index
        self.cores = cores
        self.nic = nic
        self.view = view
        self.policy = policy
        self.idle = cores
        self.nic_free = 0.0
        self.state_free = 0.0
        self.rack: RackRt | None = None
        self.up = True
        self.failed_at: float | None = None
        self.running: dict[int, Message] = {}  # seq → message running on a core
        self.busy = 0.0
        self.busy_bins: list[float] = []
        self.over: dict = {}  # instances holding messages back over their share (borrow_idle), in insertion order

    @property
    def policy(self) -> DispatchPolicy:
        return self._policy

    @policy.setter
    def policy(self, policy: DispatchPolicy) -> None:
        self._policy = policy
        # The built-in FIFO's queue, which the engine uses directly (no method calls, no no-op
        # ``completed``); None for any other policy, which is called through the protocol.
        self.fifo: deque[Message] | None = policy.queue if type(policy) is FifoDispatch else None


class RackRt:
    """A rack: its uplink carries every byte leaving it for another rack (FIFO; state transfers apart)."""

    __slots__ = ("free", "name", "state_free", "uplink")

    def __init__(self, name: str, uplink: float) -> None:
        self.name = name
        self.uplink = uplink  # bytes/s
        self.free = 0.0  # when the uplink has sent the last data message queued on it
        self.state_free = 0.0


class Channel:
    """Receiver-side view of one upstream → instance channel.

    ``counts[e]`` = data messages of epoch ``e`` received and not yet processed;
    a control message waits in ``ctrl`` (tagged with the epoch it closed) until
    every earlier data message of the channel has been processed, so markers
    and watermarks never overtake data even when dispatch reorders it.
    """

    __slots__ = ("counts", "ctrl", "epoch")

    def __init__(self) -> None:
        self.epoch = 0
        self.counts: dict[int, int] = {}
        self.ctrl: deque[Message] = deque()


class PeRt:
    """One PE of the joined graph and its instances."""

    __slots__ = (
        "agg",
        "arrived",
        "buffer",
        "code",
        "cost",
        "done",
        "down",
        "dropped",
        "duplicates",
        "exp",
        "gen",
        "generated",
        "groups",
        "index",
        "instances",
        "job",
        "keyed",
        "kg_busy",
        "kg_records",
        "lateness",
        "limit",
        "limit_drop",
        "log",
        "name",
        "needs_wm",
        "op",
        "out_bins",
        "outs",
        "paused",
        "produced",
        "replayed",
        "rolled_back",
        "route",
        "rr",
        "running",
        "salt",
        "seen",
        "sel",
        "sent",
        "sink_totals",
        "size",
        "slide",
        "stream",
        "target",
        "tat",
        "ticks",
        "uid",
        "upstream",
        "wm_deferred",
        "wm_last",
    )

    def __init__(self, name: str, job: str, op: Operator, index: int, code: int, target: float) -> None:
        self.name = name
        self.job = job
        self.op = op
        self.index = index
        self.code = code
        self.target = target
        self.keyed = op.keyed
        self.groups = op.key_groups
        self.route: list[int] = []
        self.instances: list[InstanceRt] = []
        self.down: list[tuple[PeRt, float]] = []  # (downstream PE, bytes per record)
        self.outs: list[tuple] = []  # down, unpacked for the engine's emit loop
        self.exp = False  # exponential service times
        self.produced = 0
        self.upstream: list[InstanceRt] = []  # every instance feeding this PE
        self.cost = op.cost_per_record
        self.sel = op.selectivity
        self.salt = (index + 1) * 0x2545F4914F6CDD1D
        self.agg = op.aggregate.fn if op.aggregate else "count"
        w = op.window
        self.size = w.size_s if w else 0.0
        self.slide = (w.slide_s or w.size_s) if w else 0.0
        self.lateness = w.watermark_s if w else 0.0
        self.needs_wm = False
        self.buffer: float | None = None  # seconds of backlog over its cpu share before it sheds (None: never)
        self.paused = False
        self.running = 0
        # conservation counters, in records
        self.generated = 0
        self.sent = 0
        self.arrived = 0
        self.done = 0
        self.dropped: dict[str, int] = {}
        # recovery="replay" (strata.sim.recovery): records processed again without effect, lost with a
        # failed node (each replayed), re-sent from retention; messages sent to this PE and retained until
        # a checkpoint covers them (record key → (message, bytes)); per key group, keys of records processed
        self.duplicates = 0
        self.rolled_back = 0
        self.replayed = 0
        self.log: dict[int, tuple[Message, float]] = {}
        self.seen: list[dict[int, None]] = [{} for _ in range(self.groups)] if self.keyed else []
        self.out_bins: list[float] = []
        self.kg_busy = [0.0] * self.groups
        self.kg_records = [0] * self.groups
        self.sink_totals: dict[int, list[float]] = {}
        # sources
        self.stream = None
        self.uid = 0
        self.rr = 0
        self.gen: list[int] | None = None  # routing="local": weighted round-robin table over the instances
        self.limit: float | None = None
        self.limit_drop = True
        self.tat = 0.0
        self.ticks = 0  # watermark ticks scheduled so far (tick k is due at k × interval)
        self.wm_deferred: deque[float] = deque()
        self.wm_last = float("-inf")  # the source's last watermark


class InstanceRt:
    """One instance of a PE on a node: its channels, keyed state, watermark and buffers."""

    __slots__ = (
        "busy",
        "busy_bins",
        "chans",
        "ckpt",
        "fresh",
        "gid",
        "gone",
        "held",
        "incoming",
        "index",
        "last_arrival",
        "moving",
        "node",
        "paused",
        "pe",
        "queued",
        "records",
        "routes",
        "rr",
        "running",
        "seen",
        "share",
        "state",
        "throttled",
        "vtime",
        "win_starts",
        "wm",
        "wm_in",
    )

    def __init__(self, gid: int, pe: PeRt, index: int, node: NodeRt, share: float | None) -> None:
        self.gid = gid
        self.pe = pe
        self.index = index
        self.node = node
        self.share = share
        self.chans: dict[int, Channel] = {}
        self.state: dict[int, dict] = {}  # key group → {key: [count, sum]} or {window: {key: acc}}
        self.win_starts: set[int] = set()
        self.wm = float("-inf")
        self.wm_in: dict[int, float] = {}
        self.paused = 0  # reasons to take no message (a stop-the-world move, a relocation)
        self.running = 0
        self.moving: object = None  # the relocation in progress, if any
        self.held: list[Message] = []  # arrivals, and whatever dispatch pops, while paused
        self.vtime = 0.0  # cpu-share accounting: when the instance's share has paid for its past work
        self.throttled: deque[Message] = deque()  # over its cpu share: back to dispatch as the share allows
        self.incoming: dict[int, list[Message]] = {}  # key group → records buffered until its state arrives
        self.gone: set[int] = set()  # key groups shipped away by a stop-the-world move
        self.rr: list[int] = []
        # routing="local": per downstream stream, a weighted round-robin table of destination instances (or None)
        self.routes: list[list[int] | None] | None = None
        self.last_arrival: dict[int, float] = {}  # destination gid → last arrival time (channel FIFO)
        self.queued = 0  # records pushed to the dispatch policy and not yet popped
        self.busy = 0.0
        self.busy_bins: list[float] = []
        self.records = 0
        # recovery="replay": keys of records processed (unkeyed PEs; keyed ones per group in PeRt.seen),
        # those processed since the last checkpoint, and the last checkpoint
        self.seen: dict[int, None] = {}
        self.fresh: list[int] = []
        self.ckpt: object = None

    @property
    def name(self) -> str:
        return f"{self.pe.name}#{self.index}"
