"""Offline recomputation of what the sinks should hold, for exactly-once checks.

Runs the same per-record semantics (:mod:`strata.sim.semantics`) over the
generated input (``SimOptions(record_inputs=True)``) in topological order,
without time, queues or routing. After ``sim.run(T, drain=…)`` has finished
every record (nothing in flight, no drops, no late window contributions),
``sim.metrics.sink_totals()`` must equal :func:`sink_totals` of the same
simulation exactly: any loss or duplication by dispatch, routing or migration
shows up as a difference.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from strata.sim.runtime import KEYED, PASS, SINK, SOURCE, WINDOW
from strata.sim.semantics import accumulate, aggregate, outputs, window_starts, window_uid

if TYPE_CHECKING:
    from strata.sim.kernel import Simulation

Record = tuple[int, int, float, int, float]  # uid, key, value, records, event time


def sink_totals(sim: Simulation) -> dict[str, dict[int, tuple[float, float]]]:
    """Sink PE → key → (records, Σ value) as a loss-free, duplicate-free run must deliver."""
    if not sim.record_inputs:
        raise ValueError("reference.sink_totals needs SimOptions(record_inputs=True)")
    incoming: dict[str, list[Record]] = {pe: [] for pe in sim.order}
    for pe, uid, t, key, value, records in sim.inputs:
        incoming[pe].append((uid, key, value, records, t))
    totals: dict[str, dict[int, tuple[float, float]]] = {}
    for name in sim.order:
        pe = sim.pes[name]
        records = incoming.pop(name)
        out: list[Record]
        if pe.code == SOURCE:
            out = records
        elif pe.code in (PASS, KEYED):
            out = []
            for uid, key, value, n, et in records:
                m = outputs(n, pe.sel, uid, pe.salt)
                if m:
                    out.append((uid, key, value, m, et))
        elif pe.code == WINDOW:
            windows: dict[tuple[int, int], list[float]] = {}
            for _, key, value, n, et in records:
                for k in window_starts(et, pe.size, pe.slide):
                    windows[(k, key)] = accumulate(windows.get((k, key)), n, value, et)
            out = [
                (window_uid(k, key, pe.index), key, aggregate(pe.agg, acc), 1, acc[4])
                for (k, key), acc in sorted(windows.items())
            ]
        else:
            assert pe.code == SINK
            acc_by_key: dict[int, list[float]] = {}
            for _, key, value, n, _ in records:
                acc = acc_by_key.setdefault(key, [0, 0])
                acc[0] += n
                acc[1] += n * value
            totals[name] = {k: (v[0], v[1]) for k, v in sorted(acc_by_key.items())}
            out = []
        for d, _ in pe.down:
            incoming[d.name].extend(out)
    return totals
