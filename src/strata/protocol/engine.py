"""The engine-neutral contract between the hierarchy controller and an engine (DESIGN.md, rules 1–2).

An engine (``strata.sim`` through :mod:`strata.sim.adapter`, Spark
through ``strata.spark.engine``) implements :class:`Engine`: it turns the
world into an :class:`Observation` and enforces :class:`Decisions`. Nothing in
an engine decides; the :class:`~strata.control.controller.Controller` is a
pure function of observations (time comes in them) and its own memory.

The window measurements reuse the neutral plain-data types of :mod:`strata.protocol`
(:class:`strata.protocol.window.WindowStats`, re-exported here as
:data:`WindowStats`; :class:`~strata.protocol.units.KeyGroupLoad`,
:class:`~strata.protocol.units.Move`): they carry nothing simulator-specific. An
engine that cannot measure a field leaves it empty (Spark has no per-node
dispatch queues: ``queue_lengths={}``); the controller treats empty as
"unknown", never as zero load.

Contract, one control step::

    obs = engine.observe()                # Observation (plain data, a snapshot)
    decisions = controller.step(obs)      # pure policy
    engine.apply(decisions)               # enforce; fields left None mean "unchanged"

Every field of :class:`Decisions` is owned by exactly one level (the
``owner`` column in docs/hierarchy.md); the controller never emits two values
for one thing in one step.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from strata.protocol.units import KeyGroupLoad, Move
from strata.protocol.window import InstanceLoad, LatencyStats, WindowStats

__all__ = [
    "Decisions",
    "Engine",
    "InstanceLoad",
    "KeyGroupLoad",
    "LatencyStats",
    "Move",
    "Observation",
    "Placement",
    "TaskRun",
    "WindowStats",
]

Placement = dict[str, list[tuple[str, float]]]
"""PE → one ``(node, cpu cores)`` per instance, in instance order (SODA's fractional assignment made concrete)."""


@dataclass(frozen=True)
class TaskRun:
    """A job's units of work in one window as their tasks ran them: the tasks' wall time summed (seconds) over
    the input records of those units. Not a cost (that is core-seconds, in the window's loads): how long the
    job's non-preemptible tasks hold a core on the machine as loaded, what a latency-critical batch waits out."""

    run_s: float
    records: int


@dataclass(frozen=True)
class Observation:
    """What an engine exposes at one control step: the window's measurements plus engine state.

    ``window`` is the measurement over ``[window.start, window.now)``: per-key-group
    and per-instance loads, node utilisation, per-job latency (p50/p95/p99 and
    deadline-miss rate), PE output rates, source ingest, routing, placement,
    migrations in flight, records dropped by reason. ``task_run``: job → its
    batches' task wall time and records in the window (engines whose units run
    as tasks, i.e. Spark; empty: unknown). ``nodes_down``: nodes the
    engine knows to be lost (the node-loss signal). ``templates``: job →
    template running now (absent: not running). ``dispatch``: the L2 strategy
    in force (``strata.dispatch.STRATEGIES`` name) or None if the engine has no
    L2 gate. ``units``: units of work (messages or micro-batches) completed in
    the window, and ``unit_records`` their mean size in records — the
    emergent learner's features and its safe switching points.
    """

    window: WindowStats
    nodes_down: frozenset[str] = frozenset()
    templates: Mapping[str, str] = field(default_factory=dict)
    dispatch: str | None = None
    units: int = 0
    unit_records: float = 0.0
    task_run: Mapping[str, TaskRun] = field(default_factory=dict)

    @property
    def now(self) -> float:
        return self.window.now


@dataclass
class Decisions:
    """What the controller asks an engine to enforce at one step. ``None`` = leave as is.

    - ``admitted`` (L0): job → template for every job that should run; a running
      job absent from it is stopped (Spark: query stopped; sim: sources paused).
    - ``cpu_share`` (L0): job → cores it is entitled to. Spark: the job's FAIR
      pool weight ∝ this; the simulator receives the PE-level split in ``placement``.
    - ``pools`` (L0, with ``cpu_share``): job → the FAIR pool (a name in
      :data:`strata.protocol.units.POOLS`) its share is enforced through, for
      engines with pools (:func:`strata.control.budgets.pool_names`).
    - ``triggers``: job → processing-time trigger in seconds for engines that
      run micro-batches (absent: batches back to back); a query takes it when it
      (re)starts (:func:`strata.control.micro_batches.trigger_intervals`).
    - ``placement`` (L0, cpu and nodes; L1 may change only the instance *count*
      of a keyed PE inside L0's node and cpu budget): PE → [(node, cpu)] per
      instance, for engines that place. Only PEs that change are listed.
    - ``rate_limits`` (L0, SODA microQ pacing): source PE → records/s (None lifts
      the cap); ``limit_mode`` 'defer' (no record lost) or 'drop' (shedding jobs only).
    - ``task_records`` (L0, bulk batch sizes: :class:`strata.control.micro_batches.BatchSizing`):
      source PE → the most records one task of a micro-batch reads (None: the source's own split), for
      engines that split a batch's input into tasks (Spark's generator source); a batch is split into more,
      shorter tasks, never read smaller.
    - ``moves`` (L1): key-group moves, AutoFlow's live protocol by default.
    - ``dispatch`` (meta, learner): name of the L2 strategy to run from the next
      unit of work on; engines switch between units, never inside one.
    - ``cells`` (L0, cell placement, :func:`strata.plan.cells.place_cells`): job → the cell (one Spark
      application) that runs it, for engines that run cells (:mod:`strata.runners.fleet`); a job whose cell
      changes moves: stopped at a batch boundary, restarted from its checkpoint in the new cell.
    - ``cell_shares`` (L0, with ``cells``): cell → cores it is entitled to (the OS enforces it:
      :class:`strata.runners.shares.CpuShares`).
    - ``epoch``: the controller's epoch counter; ``replan``: the components
      (job names, or ``"*"`` for a full epoch) re-planned in this step, and
      ``reasons``: the signals that caused it — for logs and reports only.
    - ``reverts`` (the Controller's do-no-harm check): (job, why) per decision
      reverted in this step; the plain value travels in the fields above.
    - ``withheld`` (the same check, before the fact): (job, why) per decision the
      plan proposed and the Controller did not make; logged once, when it starts.
    """

    epoch: int
    admitted: dict[str, str] | None = None
    cpu_share: dict[str, float] | None = None
    pools: dict[str, str] | None = None
    triggers: dict[str, float] | None = None
    placement: Placement | None = None
    rate_limits: dict[str, float | None] | None = None
    limit_mode: str = "defer"
    task_records: dict[str, int | None] | None = None
    moves: list[Move] = field(default_factory=list)
    dispatch: str | None = None
    cells: dict[str, str] | None = None
    cell_shares: dict[str, float] | None = None
    replan: tuple[str, ...] = ()
    reasons: tuple[str, ...] = ()
    # (job, why) for each decision reverted in this step (strata.control.harm): its field above carries the plain
    # value; engines log the why (Spark: a "revert" row in decisions.csv). For logs and reports only.
    reverts: tuple[tuple[str, str], ...] = ()
    # (job, why) for each decision the Controller did not make although the plan proposed it (do no harm: no
    # observation of the job yet, or no predicted gain beyond noise): its field above keeps the plain value.
    withheld: tuple[tuple[str, str], ...] = ()

    def empty(self) -> bool:
        """True when enforcing this changes nothing."""
        return (
            self.admitted is None
            and self.cpu_share is None
            and self.pools is None
            and self.triggers is None
            and self.placement is None
            and self.rate_limits is None
            and self.task_records is None
            and not self.moves
            and self.dispatch is None
            and self.cells is None
            and self.cell_shares is None
        )


@runtime_checkable
class Engine(Protocol):
    """An engine the control loop can run: its clock, time passing, a snapshot out, decisions in. No decisions inside.

    Time is the engine's own: wall-clock seconds for Spark, simulated seconds for
    the simulator. The loop (:func:`strata.control.loop.run`) never reads a clock
    of its own, so one loop drives both.
    """

    def now(self) -> float:
        """The engine's current time in seconds."""
        ...

    def advance(self, until: float) -> bool:
        """Let the world run up to time ``until``; False when it cannot go on (every query ended, a failure)."""
        ...

    def observe(self) -> Observation:
        """The world since the previous call (the first call: since the start)."""
        ...

    def apply(self, decisions: Decisions) -> None:
        """Enforce ``decisions``; fields left None are unchanged. Raise ValueError naming a bad entry."""
        ...
