"""``strata.sim``: a discrete-event simulator of a cluster running dataflows message by message.

Every scheduling level plugs in as an object (DESIGN.md, rules 1–2: policies
decide, the engine only observes and enforces). Public API (stable):

.. code-block:: python

    from strata.sim import Simulation, Actions, Move

    sim = Simulation(
        scenario,                 # strata.model.Scenario
        seed=1,                   # same seed → identical metrics, bit for bit
        dispatch=None,            # DispatchFactory: NodeView → DispatchPolicy, one per node (default FIFO)
        placement=None,           # {pe: [(node, share), ...]} | {pe: [node, ...]} | {pe: node}
                                  # | {(pe, i) or "pe#i": node}; default round-robin (strata.sim.placement)
        controllers=[(5.0, fn)],  # fn(WindowStats) → Actions | [Move] | Move | None, every 5 s
        templates=None,           # job → template name (default: first template of every job)
        batch=1,                  # records per source message (coarse-graining for big runs; 1 = exact)
        service="deterministic",  # or "exponential", or {pe: ...}: service time = records × cost_per_record
        network_latency=5e-4,     # seconds, plus bytes / NIC bandwidth through the sender's NIC
        rack_latency=0.0,         # seconds more between racks, after bytes / the sending rack's uplink
        watermark_interval=0.2,   # seconds between source watermarks
        bin_s=1.0,                # width of time-series bins
        failures=[("n3", 60.0, 90.0)],  # node down at 60 s, up at 90 s (None: stays down)
        record_inputs=False,      # keep every generated record (for reference checks)
        enforce_shares=False,     # True: an instance placed with a cpu share never uses more (cgroup-like)
        recovery=None,            # "replay": upstream backup + checkpoints + de-duplication, no record lost
        checkpoint_interval=5.0,  # seconds between checkpoints (recovery="replay")
        actor_turns=False,        # True: an instance runs one message at a time (an actor's turns);
                                  # the policy must be a TurnPolicy (default then: turn_fifo)
        routing="round-robin",    # "local": the plan's traffic model (strata.model.traffic)
        shed_after_s=None,        # seconds of backlog over an enforced share before arrivals are dropped
        rate_limits=None,         # {source_pe: records/s}: caps from the start (drop mode)
        borrow_idle=False,        # True (with enforce_shares, FIFO): shares are guarantees, idle cores lent
    )
    sim.every(10.0, balancer)     # more controllers, any time
    sim.apply(Actions(moves=[Move("job.agg", 7, dst=2, mode="live")]), at=30.0)
    sim.run(600.0)                # advance to t = 600 s (call again to continue)
    sim.run(600.0, drain=30.0)    # or: stop sources at 600 s, let everything in flight finish
    m = sim.metrics               # tables: latency(), timeseries(), importance(), nodes(),
                                  # instances(), imbalance(), network(), drops(), migrations(),
                                  # conservation(), sink_totals(), summary(), write(dir)

Dispatch: only ``Kind.DATA`` messages go through the node's
:class:`~strata.protocol.units.DispatchPolicy`: ``push`` on arrival, ``pop(now)`` offered
to every idle core after any push or completion until it returns None,
``completed(msg, service, now)`` after each. ``Message.frontier`` is Cameo's
t_MF: the source record's event time, or for a message entering a window
operator the time its earliest window is due (window end + ``watermark_s``;
:mod:`strata.sim.semantics`). :class:`~strata.protocol.units.NodeView` carries each
job's target latency, every PE's downstream PEs and static cost per record.
With ``actor_turns=True`` an instance runs one message at a time (an actor's
turn): the policy must be a :class:`~strata.protocol.units.TurnPolicy`, told
``hold(pe, instance)`` when a message starts and ``free(pe, instance, now)`` when
it completes, and ``pop`` passes over held instances (``turn_fifo``: Orleans'
ready activations in turn; ``strata.dispatch``'s two-level queue). Control
messages take no turn.

Controllers receive an :class:`~strata.protocol.window.WindowStats` (per-key-group
loads as :class:`~strata.protocol.units.KeyGroupLoad`, per-instance loads, node
utilisation, queue lengths, per-job latency in the window, rates, routing,
placement, migrations pending) and return :class:`~strata.protocol.window.Actions`:
key-group moves (:mod:`strata.sim.migration`, AutoFlow's live protocol or
stop-the-world), a new placement (instances relocate with their state) and
source rate limits (drop or defer).

Module map: ``engine`` (event loop), ``runtime`` (nodes, PEs, instances,
channels), ``semantics`` (what each operator does to a record), ``workload``
(arrivals, keys), ``placement``, ``migration`` (key-group moves, instance
relocation), ``metrics``, ``observe``, ``fifo`` (default dispatch),
``recovery`` (checkpoints, retention, replay after a failure), ``scaling`` (scale-out at runtime),
``reference`` (offline recomputation for exactly-once checks), ``scenarios``
(known-answer and benchmark scenarios), ``report`` (progress bar, summary
tables), ``hooks`` (the contract). Full description: docs/sim.md.
"""

from strata.protocol.units import (
    DispatchFactory,
    DispatchPolicy,
    KeyGroupLoad,
    Kind,
    Message,
    Move,
    NodeView,
    TurnPolicy,
)
from strata.protocol.window import Actions, InstanceLoad, LatencySoFar, LatencyStats, WindowStats
from strata.sim.engine import Simulation
from strata.sim.fifo import FifoDispatch, TurnFifoDispatch, fifo, turn_fifo

__all__ = [
    "Actions",
    "DispatchFactory",
    "DispatchPolicy",
    "FifoDispatch",
    "InstanceLoad",
    "KeyGroupLoad",
    "Kind",
    "LatencySoFar",
    "LatencyStats",
    "Message",
    "Move",
    "NodeView",
    "Simulation",
    "TurnFifoDispatch",
    "TurnPolicy",
    "WindowStats",
    "fifo",
    "turn_fifo",
]
