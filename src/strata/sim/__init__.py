"""``strata.sim``: a discrete-event simulator of a cluster running dataflows message by message.

Every scheduling level plugs in as an object (DESIGN.md, rules 1–2: policies
decide, the simulator only observes and enforces). Public API (stable):

.. code-block:: python

    from strata.protocol.engine import Decisions
    from strata.sim import Move, SimOptions, Simulation

    sim = Simulation(scenario, SimOptions(seed=1, routing="local"))  # every option: strata.sim.options
    sim.apply(Decisions(0, moves=[Move("job.agg", 7, dst=2, mode="live")]), at=30.0)
    sim.run(600.0)                # advance to t = 600 s (call again to continue)
    sim.run(600.0, drain=30.0)    # or: stop sources at 600 s, let everything in flight finish
    m = sim.metrics               # tables: latency(), timeseries(), importance(), nodes(),
                                  # instances(), imbalance(), network(), drops(), migrations(),
                                  # conservation(), sink_totals(), summary(), write(dir)

A policy that observes and decides runs under the one control loop
(:func:`strata.control.loop.run`) with the simulator's engine adapter,
:class:`strata.sim.adapter.SimEngine`: every window the adapter measures an
:class:`~strata.protocol.window.WindowStats` (per-key-group loads as
:class:`~strata.protocol.units.KeyGroupLoad`, per-instance loads, node
utilisation, queue lengths, per-job latency in the window, rates, routing,
placement, migrations pending; :mod:`strata.sim.observation`) and the
policy's :class:`~strata.protocol.engine.Decisions` are enforced: key-group
moves (:mod:`strata.sim.migration`, AutoFlow's live protocol or
stop-the-world), a new placement (instances relocate with their state; more
instances than running scale out, :mod:`strata.sim.scaling`) and source rate
limits (drop or defer).

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

Module map: ``kernel`` (the event loop and the messages' life), ``kernel_api``
(what the kernel offers its submodules), ``options`` (every option and its
default), ``world`` (nodes, PEs and instances built from the scenario),
``assignment`` (a placement resolved to nodes and shares per instance),
``routing`` (routing="local" tables), ``runtime`` (the runtime records),
``semantics`` (what each operator does to a record), ``workload`` (arrivals,
keys), ``migration`` (key-group moves, instance relocation), ``scaling``
(scale-out at runtime), ``recovery`` (checkpoints, retention, replay after a
failure), ``metrics``, ``observation`` (a control window as ``WindowStats``),
``fifo`` (default dispatch), ``adapter`` (the Engine the control loop
drives), ``reference`` (offline recomputation for exactly-once checks),
``scenarios`` (known-answer and benchmark scenarios), ``terminal`` (what
``strata simulate`` prints: calibration, progress bar, summary tables).
Full description: docs/sim.md.
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
from strata.protocol.window import InstanceLoad, LatencySoFar, LatencyStats, WindowStats
from strata.sim.fifo import FifoDispatch, TurnFifoDispatch, fifo, turn_fifo
from strata.sim.kernel import Simulation
from strata.sim.options import SimOptions

__all__ = [
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
    "SimOptions",
    "Simulation",
    "TurnFifoDispatch",
    "TurnPolicy",
    "WindowStats",
    "fifo",
    "turn_fifo",
]
