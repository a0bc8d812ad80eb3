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


def deadline(frontier: float, target_latency: float, own_cost: float, path_cost: float) -> float:
    """``ddl_M = t_MF + L − C_OM − C_path``: the latest start time that still meets ``t_MF + L``."""
    return frontier + target_latency - own_cost - path_cost


def window_due(event_time: float, size: float, slide: float | None = None) -> float:
    """When the first event-time window containing ``event_time`` is due: the end of that window.

    Windows start at multiples of ``slide`` (``size`` for tumbling windows) and
    cover ``[start, start + size)``. Of the windows holding ``event_time`` the
    earliest to close decides when the record's contribution is first needed,
    so this is a windowed operator's ``t_MF`` (Cameo: early messages of a window
    are not urgent).
    """
    step = size if slide is None else slide
    k = (event_time - size) // step + 1
    return k * step + size


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
