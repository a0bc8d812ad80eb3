"""Cameo's priority generation as pure functions (Xu et al., NSDI'21, §"Message Priority (Deadline)").

A message M at operator O gets the deadline

    ddl_M = t_MF + L − C_OM − C_path

``t_MF`` is M's frontier time (event time of the source record for a regular
operator; the time the window's result is due for a windowed one), ``L`` the
dataflow's target latency, ``C_OM`` the profiled cost of M at O and ``C_path``
the profiled cost of the critical path from O to the sink. The latest moment M
may start and still let the result reach the sink by ``t_MF + L`` is exactly
``ddl_M``: the smaller it is, the less slack M has (least laxity first).

Nothing here reads a clock or an engine; the same functions price a message in
the simulator and a micro-batch on Spark.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from graphlib import TopologicalSorter

WindowTiming = tuple[float, float, float]  # (size, slide, lateness) of an event-time window, seconds


def deadline(frontier: float, target_latency: float, own_cost: float, path_cost: float) -> float:
    """``ddl_M = t_MF + L − C_OM − C_path``: the latest start time that still meets ``t_MF + L``."""
    return frontier + target_latency - own_cost - path_cost


def next_due(event_time: float, size: float, slide: float, lateness: float) -> float:
    """The first firing of a window, due at ``k·slide + size + lateness``, at or after ``event_time``.

    A window ``[k·slide, k·slide + size)`` fires when the watermark reaches its
    end plus the allowed lateness. Watermarks follow the data in each channel,
    so a record with event time ``e`` holds back every firing due at or after
    ``e`` — the first of them may be the previous window's, not its own.
    """
    k = math.ceil((event_time - size - lateness) / slide)
    return k * slide + size + lateness


def window_routes(
    downstream: Mapping[str, Iterable[str]], windows: Mapping[str, WindowTiming]
) -> dict[str, tuple[WindowTiming, ...]]:
    """For each operator, the windows its records wait for: ``()`` if it can reach a sink without one.

    Cameo's priority context carries the query's window semantics upstream: a
    record that can only reach the output through a window is not needed until
    that window fires. ``windows`` maps each windowed operator to its ``(size,
    slide, lateness)``; a windowed operator waits for itself, any other for the
    nearest windows downstream (a later window is reached through the earlier
    one's output).
    """
    feeds = {op: tuple(ds) for op, ds in downstream.items()}
    direct: dict[str, bool] = {}
    waits: dict[str, set[str]] = {}
    for op in TopologicalSorter(feeds).static_order():
        ds = feeds.get(op, ())
        direct[op] = not ds or any(d not in windows and direct[d] for d in ds)
        waits[op] = {w for d in ds for w in ((d,) if d in windows else waits[d])}
    return {
        op: (windows[op],) if op in windows else () if direct[op] else tuple(windows[w] for w in sorted(waits[op]))
        for op in feeds
    }


def frontier(event_time: float, engine_frontier: float, waits: tuple[WindowTiming, ...]) -> float:
    """t_MF of a record: the engine's frontier, or the first firing it holds back among the windows it waits for.

    Cameo's t_MF for windowed operators is the time the window's result is due;
    with in-band watermarks a record is also needed by any earlier firing still
    waiting behind it in its channel, hence ``next_due`` rather than the due
    time of the record's own window (the two agree when lateness is 0).
    """
    if not waits:
        return engine_frontier
    if len(waits) == 1:  # the common case, on the per-message path
        return next_due(event_time, *waits[0])
    return min(next_due(event_time, size, slide, lateness) for size, slide, lateness in waits)


def critical_path(downstream: Mapping[str, Iterable[str]], cost: Mapping[str, float]) -> dict[str, float]:
    """``C_path`` for every operator: the most expensive chain of downstream costs to a sink.

    ``downstream`` maps an operator to the operators it feeds (a DAG); ``cost``
    is each operator's per-message cost (missing = 0). An operator's own cost is
    not part of its path (that is ``C_OM``): ``path(o) = max_{d ∈ down(o)} cost(d) + path(d)``,
    0 at sinks.
    """
    feeds = {op: tuple(ds) for op, ds in downstream.items()}
    # Predecessors in the sorter are the downstream operators, so sinks come out first.
    order = TopologicalSorter(feeds).static_order()
    path: dict[str, float] = {}
    for op in order:
        path[op] = max((cost.get(d, 0.0) + path[d] for d in feeds.get(op, ())), default=0.0)
    return path
