"""What an engine measures over one control window, as plain data (DESIGN.md, "observe()/apply()").

Every engine turns the window since its previous observation into a
:class:`WindowStats` (inside :class:`~strata.protocol.engine.Observation`);
policies read it and answer with :class:`~strata.protocol.engine.Decisions`,
which the engine only enforces (:func:`strata.control.loop.run`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from strata.protocol.units import KeyGroupLoad


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
