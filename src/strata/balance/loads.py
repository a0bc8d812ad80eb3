"""Load windows: per-key-group load, instance load, imbalance (AutoFlow, time-window load measurement).

AutoFlow measures load per time window without user input: the engine counts,
for every key group, the records it processed and the core time it spent on
them; an instance's load is the sum over the key groups it owns and the
imbalance of an operator is max / mean over its instances. Everything here is
plain data in, plain data out, so the Spark engine feeds partitions through the
same functions the simulator feeds key groups through.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

Metric = Literal["busy", "records"]


class LoadRecord(Protocol):
    """What one window's measurement of one key group carries (``strata.protocol.units.KeyGroupLoad`` fits)."""

    @property
    def pe(self) -> str: ...
    @property
    def key_group(self) -> int: ...
    @property
    def records(self) -> int: ...
    @property
    def busy(self) -> float: ...
    @property
    def state_bytes(self) -> float: ...


@dataclass(slots=True)
class GroupLoads:
    """One operator's key groups over one window: load (in the chosen metric) and state size."""

    load: dict[int, float] = field(default_factory=dict)
    state_bytes: dict[int, float] = field(default_factory=dict)


def window_loads(records: Iterable[LoadRecord], metric: Metric = "busy") -> dict[str, GroupLoads]:
    """Per PE, per key group: the window's load and the latest state size.

    A key group can appear under two instances in one window (it migrated
    mid-window); its load is the sum, since the question is how much work the
    key group brings wherever it goes. ``metric`` picks core time (``busy``,
    what imbalance of cpu means) or record counts (``records``, when an engine
    cannot attribute time per key group).
    """
    out: dict[str, GroupLoads] = {}
    for r in records:
        g = out.setdefault(r.pe, GroupLoads())
        value = r.busy if metric == "busy" else float(r.records)
        g.load[r.key_group] = g.load.get(r.key_group, 0.0) + value
        g.state_bytes[r.key_group] = max(g.state_bytes.get(r.key_group, 0.0), r.state_bytes)
    return out


def demand_factors(
    processed: Sequence[float],
    queued_before: Sequence[float],
    queued_after: Sequence[float],
) -> list[float]:
    """Per instance: records that arrived in the window over records it processed (AutoFlow's load = demand).

    What an instance processes is capped by its capacity: once it is
    overloaded, busy time saturates at the window length and the excess piles
    up in its queue, so processed work underestimates the load its key groups
    bring. Arrivals are the processed records plus the growth of the queue
    (negative while a backlog drains, which processed work overstates). The
    factor scales the instance's processed key-group loads to demand; 1.0
    where the instance processed nothing (no mix to scale).
    """
    out = []
    for done, before, after in zip(processed, queued_before, queued_after, strict=True):
        out.append(max(done + after - before, 0.0) / done if done > 0 else 1.0)
    return out


def scale_by_instance(
    loads: Mapping[int, float],
    table: Mapping[int, int],
    factors: Sequence[float],
) -> dict[int, float]:
    """Each key group's load times its instance's factor (``demand_factors``); groups not in the table unscaled.

    An instance's queue is not broken down by key group, so the excess is
    spread over its key groups in proportion to what they were processed at:
    exact when the queue holds the same mix, first-order otherwise (the next
    window measures the groups where they went).
    """
    return {g: load * (factors[table[g]] if g in table else 1.0) for g, load in loads.items()}


def instance_loads(loads: Mapping[int, float], table: Mapping[int, int], instances: int) -> list[float]:
    """Load of each instance 0..instances-1: the sum over the key groups the table gives it.

    An instance that owns no key group has load 0 and still counts (it is the
    best place to move load to).
    """
    out = [0.0] * instances
    for group, inst in table.items():
        out[inst] += loads.get(group, 0.0)
    return out


def imbalance(per_instance: Iterable[float]) -> float:
    """max / mean of instance loads; 1.0 (perfect balance) when there is no load at all."""
    values = list(per_instance)
    total = sum(values)
    if not values or total <= 0:
        return 1.0
    return max(values) * len(values) / total


@dataclass(slots=True)
class SmoothedLoads:
    """Exponentially weighted key-group loads across windows (part of AutoFlow's hysteresis).

    One window of a Zipf stream is noisy for cold key groups; acting on raw
    windows makes key groups oscillate. ``alpha`` is the weight of the newest
    window (1.0 = no smoothing). A key group absent from a window decays towards 0.
    """

    alpha: float = 0.5
    load: dict[int, float] = field(default_factory=dict)

    def update(self, window: Mapping[int, float]) -> dict[int, float]:
        for group in set(self.load) | set(window):
            old = self.load.get(group)
            new = window.get(group, 0.0)
            self.load[group] = new if old is None else self.alpha * new + (1.0 - self.alpha) * old
        return dict(self.load)
