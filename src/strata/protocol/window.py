"""What a periodic controller sees and what it may return (DESIGN.md, "observe()/apply()").

The engine builds an :class:`WindowStats` every ``period`` seconds for each
controller registered with ``Simulation.every``; the callback returns
:class:`Actions` (or just a list of :class:`~strata.protocol.units.Move`, or None).
The engine only enforces what comes back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from strata.protocol.units import KeyGroupLoad, Move


@dataclass(frozen=True, slots=True)
class InstanceLoad:
    """One instance over the observation window."""

    pe: str
    instance: int
    node: str
    records: int  # records processed
    busy: float  # core-seconds spent
    queued: int  # records waiting at the end of the window (dispatch queue and buffers)
    key_groups: int  # key groups routed to it


@dataclass(frozen=True, slots=True)
class LatencyStats:
    """End-to-end latency of one job's sink outputs within the window (records-weighted)."""

    records: int
    p50: float
    p95: float
    p99: float
    max: float
    miss_rate: float  # share of records over the job's target latency


@dataclass(frozen=True, slots=True)
class LatencySoFar:
    """End-to-end latency of one job's sink outputs since the start of the run (records-weighted)."""

    records: int
    mean: float
    max: float
    miss_rate: float


@dataclass(frozen=True, slots=True)
class WindowStats:
    """The world over ``[start, now)`` as engines expose it; plain data only."""

    now: float
    start: float
    key_groups: tuple[KeyGroupLoad, ...]  # every keyed PE's key groups, owner as routed now
    instances: tuple[InstanceLoad, ...]
    node_utilisation: Mapping[str, float]  # busy / (cores × window)
    queue_lengths: Mapping[str, int]  # node → messages in its dispatch policy
    latency: Mapping[str, LatencyStats]  # job → stats of outputs in the window (absent: none)
    rates: Mapping[str, float]  # PE → output records/s in the window
    ingest: Mapping[str, float]  # source PE → records/s generated in the window
    routing: Mapping[str, tuple[int, ...]]  # keyed PE → instance of each key group
    placement: Mapping[str, tuple[str, ...]]  # PE → node of each instance
    migrating: tuple[tuple[str, int], ...]  # (PE, key group) moves in progress or queued
    dropped: Mapping[str, int]  # reason → records dropped so far
    latency_so_far: Mapping[str, LatencySoFar] = field(default_factory=dict)  # job → since t = 0


@dataclass
class Actions:
    """Decisions for the engine to enforce.

    ``rate_limits``: source PE → records/s (None lifts the limit); over-limit
    records are dropped (``limit_mode='drop'``, counted as ``shed``) or deferred
    (``'defer'``: admitted later at the limited rate, keeping their event time,
    counted as ``deferred``). ``placement``: a new placement for the PEs it
    names, in any form :mod:`strata.sim.placement` accepts, keeping their
    instance counts; moved instances pause, ship their state and resume on
    their new node (:meth:`strata.sim.migration.Migrations.relocate`).
    ``instances``: PE → a larger instance count (scale-out; applied before
    ``moves`` and ``placement``, so those may name the new instances;
    :mod:`strata.sim.scaling`).
    """

    moves: list[Move] = field(default_factory=list)
    placement: Mapping | None = None
    rate_limits: Mapping[str, float | None] = field(default_factory=dict)
    limit_mode: str = "drop"
    instances: Mapping[str, int] = field(default_factory=dict)
