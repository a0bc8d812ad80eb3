"""Plan fidelity: does the simulator realise the stream affinity and importance the plan projects? (issue 15)

lsd-shaped scenarios (``strata.generators.lsd``) at two sizes (10 nodes / 10
jobs / 100 PEs and 30 / 30 / 200), seeds 1–3, each at lsd's default demand
(160 cores of work: more than the cluster, so SODA admits less than the
sources offer) and at a light demand (half the cluster's cores). Each is
planned (``strata.plan.plan`` with ``Options(batch=--batch)``: the engine's
records per message set how many distinct keys a window sees) and run for ``--duration`` simulated seconds
at ``--batch`` records per message on the plan's placement with the plan's
traffic model (``SimOptions(routing="local")``, what ``strata simulate --plan``
runs), in two ways:

In both, a PE the plan gives no cpu is not run (the simulator sends it nothing:
``strata.model.traffic.runs``) and each source the plan reads below what it offers
is capped at the plan's rate (``Plan.source_rates``, drop mode: the plan's
admission; a source the plan reads whole is not capped), as ``strata simulate
--plan`` runs a plan:

- ``open``: every instance runs its planned cpu share first and any core of its
  node that would idle (``enforce_shares`` with ``borrow_idle``: shares as
  guarantees, not caps), with no shedding: a PE the plan gives less cpu than its
  input needs takes idle cores, never the planned work's;
- ``shares``: the plan's rate model executed (SODA §3: a PE processes what its cpu
  buys): every instance held to its planned cpu share (``enforce_shares``) and
  dropping what arrives once its backlog over the share exceeds ``--buffer`` s
  (``shed_after_s``: a bounded input buffer, below the windows' 1 s of allowed
  lateness). Planned with SODA's fluid model
  (``Options.headroom`` 0), every PE is at utilisation 1 at its planned rate;
- ``shares+headroom``: the same, planned with ``Options(headroom=--headroom)``
  (each PE holds (1 + h) × the cpu its planned rate needs: utilisation 1/(1 + h);
  default 0.25, utilisation 0.8, at which an M/D/1 queue's mean wait is 2 service
  times by Pollaczek–Khinchine), the caps read on the same model.

Reported per run: planned and realised stream affinity and their ratio;
``model@realised`` = the shared traffic model's affinity on the realised
stream bytes (separates what routing keeps local from how the rates moved);
planned importance and realised importance (importance of each PE's mean
output rate from ``--warm`` s to the end: a span of whole 10 s window slides
that starts after the first firing (10 s window + 1 s lateness), so that every
window PE fires the same number of times in it as it would per 10 s on average
and the PEs behind it are in their periodic regime — a PE held to its share
processes a window's results over most of the slide, and a span that starts
before the first firing holds no tail of an earlier one) and their ratio; the largest
node demand over the node's cores (> 1: the run overloads a node; ``open``:
the cpu for the run PEs to process every record offered at the sources' capped
rates, ``shares``: the planned cpu) and the realised utilisation of the busiest node.

Writes benchmarks/results/plan_fidelity.json.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from strata.generators import lsd
from strata.model import OperatorKind, Scenario, joined_graph, propagate
from strata.model.traffic import as_emitted, runs
from strata.plan import Options, Plan, plan
from strata.plan.quality import flows, stream_affinity
from strata.sim import SimOptions, Simulation

RESULTS = Path(__file__).parent / "results"
app = typer.Typer(add_completion=False, help=__doc__)
console = Console(width=200)
SIZES = ((10, 10, 100), (30, 30, 200))


def offered_demand(scenario: Scenario, p: Plan, source_rates: dict[str, float], batch: int = 1) -> float:
    """Largest node cpu demand / cores when the PEs process every record offered at ``source_rates`` (windows
    emitting what they do at ``batch`` records per source message: the plan's traffic model)."""
    graph = joined_graph(as_emitted(scenario, batch), p.templates)
    planned = p.cpu()
    # a PE the plan gives no cpu is not run (strata.model.traffic.runs); every other one processes all it is offered
    run = {pe for pe in graph if runs(graph.nodes[pe]["op"], planned.get(pe, 0.0))}
    rates = propagate(graph, {pe: math.inf if pe in run else 0.0 for pe in graph}, source_rates)
    load: dict[str, float] = {}
    for pe in graph:
        op = graph.nodes[pe]["op"]
        offered = rates[pe] if op.kind is OperatorKind.SOURCE else sum(rates[u] for u in graph.predecessors(pe))
        need = op.resource.cpu_for(offered, op.cost_per_record) if pe in run else 0.0
        parts = p.assignment.get(pe, {})
        total = sum(parts.values())
        for n, c in parts.items():
            if total > 0:
                load[n] = load.get(n, 0.0) + need * c / total
    cores = {n.name: n.cores for n in scenario.cluster.all_nodes}
    return max((v / cores[n] for n, v in load.items()), default=0.0)


def window_slides(scenario: Scenario) -> set[float]:
    """Every window aggregate's slide: a window PE emits once per slide, so its mean rate is only its rate over
    a span holding whole slides (its firings away from the span's ends)."""
    return {
        op.window.slide_s or op.window.size_s
        for j in scenario.jobs
        for t in j.templates
        for op in t.operators
        if op.window is not None
    }


def run_one(
    scenario: Scenario,
    p: Plan,
    shares: bool,
    duration: float,
    batch: int,
    seed: int,
    warm: float,
    headroom: float = 0.0,
    buffer: float = 0.5,
) -> dict[str, Any]:
    graph = joined_graph(scenario, p.templates)
    sources = [pe for pe in graph if graph.nodes[pe]["op"].kind is OperatorKind.SOURCE]
    offered = {pe: graph.nodes[pe]["op"].source.rate for pe in sources}
    # the plan's admission: a source read at most at the rate the plan reads it (as strata simulate --plan does)
    caps = {pe: r for pe, r in p.source_rates.items() if r < offered[pe] * (1 - 1e-9)}
    t = time.perf_counter()
    sim = Simulation(
        scenario,
        SimOptions(
            seed=seed,
            templates={j: p.templates[j] for j in p.admitted},
            placement=p.assignment,
            batch=batch,
            routing="local",
            enforce_shares=True,
            borrow_idle=not shares,
            shed_after_s=buffer if shares else None,
            rate_limits=caps,
        ),
    )
    sim.run(duration)
    wall = time.perf_counter() - t
    summary = sim.metrics.summary()
    rates = sim.metrics.mean_rates(warm)
    realised_bytes = flows(graph, rates, p.cpu())
    keyed = {pe: graph.nodes[pe]["op"].key_groups for pe in graph if graph.nodes[pe]["op"].keyed}
    realised_imp = sim.metrics.mean_importance(warm)
    if shares:  # the instances use at most their planned cpu
        cores = {n.name: n.cores for n in scenario.cluster.all_nodes}
        demand = max(c / cores[n] for n, c in p.node_load().items())
    else:
        demand = offered_demand(scenario, p, offered | caps, batch)
    return {
        "mode": ("shares+headroom" if headroom else "shares") if shares else "open",
        "headroom": headroom,
        "capped_sources": len(caps),
        "planned_affinity": p.affinity,
        "realised_affinity": summary["stream_affinity"],
        "affinity_ratio": summary["stream_affinity"] / p.affinity if p.affinity else float("nan"),
        "model_affinity_at_realised_rates": stream_affinity(p.assignment, realised_bytes, keyed),
        "planned_importance": p.importance,
        "realised_importance": realised_imp,
        "importance_ratio": realised_imp / p.importance if p.importance else float("nan"),
        "node_demand_max": demand,
        "overloaded": demand > 1.0 + 1e-6,
        "utilisation_max": summary["node_utilisation_max"],
        "utilisation_mean": summary["node_utilisation_mean"],
        "planned_ingest": p.ingest,
        "offered_ingest": sum(offered.values()),
        "dropped": summary["dropped"],
        "events": summary["events"],
        "wall_s": wall,
    }


@app.command()
def main(
    seeds: int = 3,
    duration: float = 55.0,
    warm: float = 15.0,
    batch: int = 16,
    budget: float = 5.0,
    light: float = 0.5,
    headroom: float = 0.25,
    buffer: float = 0.5,
    out: Path = RESULTS / "plan_fidelity.json",
) -> None:
    rows = []
    load_start = os.getloadavg()
    for nodes, jobs, pes in SIZES:
        for demand_name in ("lsd", "light"):
            for seed in range(1, seeds + 1):
                kwargs: dict[str, Any] = {"seed": seed, "nodes": nodes, "jobs": jobs, "pes": pes}
                if demand_name == "light":
                    kwargs["demand_cores"] = light * nodes * 4
                scenario = Scenario.model_validate(lsd(**kwargs))
                t = time.perf_counter()
                slides = window_slides(scenario)
                if any(abs((duration - warm) / s - round((duration - warm) / s)) > 1e-9 for s in slides):
                    console.print(f"[yellow]warning: {duration - warm:g} s measured is not a multiple of every slide")
                p = plan(scenario, options=Options(budget_s=budget, batch=batch))
                plan_s = time.perf_counter() - t
                held = plan(scenario, options=Options(budget_s=budget, batch=batch, headroom=headroom))
                for q, shares, h in ((p, False, 0.0), (p, True, 0.0), (held, True, headroom)):
                    r = run_one(scenario, q, shares, duration, batch, seed, warm, h, buffer)
                    row = {"nodes": nodes, "jobs": jobs, "pes": pes, "demand": demand_name, "seed": seed}
                    rows.append(row | {"plan_s": plan_s, "admitted": len(q.admitted)} | r)
                    console.print(
                        f"{nodes}n/{jobs}j/{pes}pe {demand_name} seed {seed} {r['mode']}: affinity "
                        f"{r['realised_affinity']:.3f}/{r['planned_affinity']:.3f} = {r['affinity_ratio']:.3f}, "
                        f"importance {r['importance_ratio']:.3f}, demand {r['node_demand_max']:.2f}",
                        highlight=False,
                    )
    table = Table(
        title=f"plan fidelity: {duration:g} simulated s (rates from {warm:g} s), batch {batch}, routing=local"
    )
    cols = [
        "nodes/jobs/PEs", "demand", "seed", "run", "affinity plan", "realised", "ratio", "model@realised",
        "importance plan", "realised", "ratio", "node demand max", "util max",
    ]  # fmt: skip
    for c in cols:
        table.add_column(c, justify="right")
    for r in rows:
        table.add_row(
            f"{r['nodes']}/{r['jobs']}/{r['pes']}",
            r["demand"],
            str(r["seed"]),
            r["mode"],
            f"{r['planned_affinity']:.3f}",
            f"{r['realised_affinity']:.3f}",
            f"{r['affinity_ratio']:.3f}",
            f"{r['model_affinity_at_realised_rates']:.3f}",
            f"{r['planned_importance']:,.0f}",
            f"{r['realised_importance']:,.0f}",
            f"{r['importance_ratio']:.3f}",
            f"{r['node_demand_max']:.3f}" + (" over" if r["overloaded"] else ""),
            f"{r['utilisation_max']:.2f}",
        )
    console.print(table)
    targets: dict[str, Any] = {"runs": len(rows)}
    for mode in ("open", "shares", "shares+headroom"):
        ratios = [r["affinity_ratio"] for r in rows if r["mode"] == mode]
        fits = [r["importance_ratio"] for r in rows if r["mode"] == mode and not r["overloaded"]]
        targets[mode] = {
            "affinity_ratio_min_max": [min(ratios), max(ratios)],
            "affinity_ratio_ge_0.95_everywhere": all(x >= 0.95 for x in ratios),
            "importance_ratio_not_overloaded_min_max": [min(fits), max(fits)] if fits else None,
            "importance_within_5pct_where_not_overloaded": all(abs(x - 1) <= 0.05 for x in fits) if fits else None,
            "runs_not_overloaded": len(fits),
        }
    console.print(targets)
    doc = {
        "command": f"benchmarks/bench_plan_fidelity.py --seeds {seeds} --duration {duration:g} --warm {warm:g} "
        f"--batch {batch} "
        f"--budget {budget:g} --light {light:g} --headroom {headroom:g} --buffer {buffer:g}",
        "targets": targets,
        "rows": rows,
        "load_average_start": load_start,
        "load_average_end": os.getloadavg(),
    }
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(doc, indent=1, default=float))
    console.print(f"wrote {out}")


if __name__ == "__main__":
    app()
