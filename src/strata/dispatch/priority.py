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

from collections.abc import Iterable, Mapping
from graphlib import TopologicalSorter

from strata.sim.semantics import window_due

WindowTiming = tuple[float, float, float]  # (size, slide, lateness) of an event-time window, seconds


def deadline(frontier: float, target_latency: float, own_cost: float, path_cost: float) -> float:
    """``ddl_M = t_MF + L − C_OM − C_path``: the latest start time that still meets ``t_MF + L``."""
    return frontier + target_latency - own_cost - path_cost


def window_routes(downstream: Mapping[str, Iterable[str]], windows: Mapping[str, WindowTiming]
                  ) -> dict[str, tuple[WindowTiming, ...]]:
    """For each non-window operator, the windows its output waits for: ``()`` if it can reach a sink without one.

    Cameo's priority context carries the query's window semantics upstream: a
    record that can only reach the output through a window is not needed until
    that window is due, so its t_MF at every operator before the window is the
    window's due time, not its event time. ``windows`` maps each windowed
    operator to its ``(size, slide, lateness)``. Only the nearest windows count
    (a later window is reached through the earlier one's output).
    """
    feeds = {op: tuple(ds) for op, ds in downstream.items()}
    direct: dict[str, bool] = {}
    waits: dict[str, set[str]] = {}
    for op in TopologicalSorter(feeds).static_order():
        ds = feeds.get(op, ())
        direct[op] = not ds or any(d not in windows and direct[d] for d in ds)
        waits[op] = {w for d in ds for w in ((d,) if d in windows else waits[d])}
    return {op: () if direct[op] else tuple(windows[w] for w in sorted(waits[op]))
            for op in feeds if op not in windows}


def frontier(event_time: float, engine_frontier: float, waits: tuple[WindowTiming, ...]) -> float:
    """t_MF of a message: the engine's frontier, or the earliest due time of the windows it waits for."""
    if not waits:
        return engine_frontier
    return min(window_due(event_time, size, slide, lateness) for size, slide, lateness in waits)


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
