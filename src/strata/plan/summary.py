"""Readable summaries of a Plan for the ``strata plan`` command (rich tables)."""

from __future__ import annotations

import re

from rich.table import Table

from strata.plan.plan import Plan

_UNITS = {"ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "": 1.0}


def parse_budget(text: str) -> float:
    """'30s', '500ms', '2m' or a bare number of seconds → seconds; ValueError otherwise."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(ms|s|min|m|h)?\s*", text)
    if not m or float(m.group(1)) <= 0:
        raise ValueError(f"expected a positive duration such as 30s, 500ms or 2m; found {text!r}")
    return float(m.group(1)) * _UNITS[m.group(2) or ""]


def tables(plan: Plan) -> list[Table]:
    head = Table(title=f"{plan.scenario}: {plan.planner} plan")
    head.add_column("measure")
    head.add_column("value", justify="right")
    m = plan.metrics
    for name, value in (
        ("projected importance", f"{plan.importance:,.6g}"),
        ("projected ingest, records/s", f"{plan.ingest:,.6g}"),
        ("stream affinity", f"{plan.affinity:.3f}"),
        ("max node cpu utilisation", f"{m['max_cpu']:.3f}"),
        ("avg node cpu utilisation", f"{m['avg_cpu']:.3f}"),
        ("max NIC utilisation", f"{m['max_nic']:.3f}"),
        ("max link utilisation", f"{m['max_link']:.3f}"),
        ("weighted objective", f"{m['objective']:.4g}"),
        ("jobs admitted / rejected", f"{len(plan.admitted)} / {len(plan.rejected)}"),
    ):
        head.add_row(name, value)
    phases = Table(title="phases")
    for col in ("phase", "seconds", "deadline", "status", "detail"):
        phases.add_column(col)
    for ph in plan.phases:
        phases.add_row(ph.name, f"{ph.seconds:.3f}", f"{ph.deadline:.3f}", ph.status, ph.detail)
    out = [head, phases]
    if plan.rejected:
        rej = Table(title="rejected jobs")
        rej.add_column("job")
        rej.add_column("reason")
        for job, why in sorted(plan.rejected.items()):
            rej.add_row(job, why)
        out.append(rej)
    load = plan.node_load()
    nodes = Table(title="busiest nodes (assigned cpu)")
    for col in ("node", "cpu", "PEs"):
        nodes.add_column(col)
    count: dict[str, int] = {}
    for parts in plan.assignment.values():
        for n in parts:
            count[n] = count.get(n, 0) + 1
    for n, c in sorted(load.items(), key=lambda kv: (-kv[1], kv[0]))[:8]:
        nodes.add_row(n, f"{c:.3f}", str(count.get(n, 0)))
    out.append(nodes)
    return out
