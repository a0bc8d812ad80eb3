"""SODA's fleet planner against RAND, RR, a plain greedy and the exact MILP (SODA §5).

Three experiments, each printing a table and writing ``benchmarks/results/plan_<name>.json``:

- ``apps``: lsd at 30/50/70/82 nodes and dac at 9/15/29/30 nodes, seeds 1–3:
  importance, projected ingest, stream affinity, max node load (cpu the PEs
  use / cores), seconds per phase — SODA (5 s epoch budget), RAND, RR, greedy,
  and SODA held to RR's max node load (``utilisation`` = RR's max load) for the
  comparison "at comparable maximum load".
- ``gap``: small lsd-shaped instances (≤ 40 PEs, cpu_min on every PE so
  admission binds): macroQ and the full four-phase plan against the exact
  admission/template/cpu MILP (HiGHS, proven optimal).
- ``scale``: a 10 000-PE, 1 000-node lsd-shaped instance with a 60 s budget.

Timings are wall-clock on a shared 2-core machine: noisy.

    .venv/bin/python benchmarks/bench_plan.py all
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from strata.generators import dac, lsd
from strata.model import Scenario
from strata.plan import Options, Plan, plan
from strata.plan.baselines import greedy, rand, rr
from strata.plan.exact import exact_macro_q
from strata.plan.macro_q import macro_q

RESULTS = Path(__file__).parent / "results"
app = typer.Typer(add_completion=False, help=__doc__)
console = Console(width=180)
PHASES = ("macroQ", "macroW", "microQ", "microW")


def write(name: str, doc: dict[str, Any]) -> None:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"plan_{name}.json"
    path.write_text(json.dumps(doc, indent=1, default=float))
    console.print(f"wrote {path}")


def row(p: Plan, seconds: float) -> dict[str, Any]:
    phases = {ph.name: {"seconds": ph.seconds, "deadline": ph.deadline, "status": ph.status} for ph in p.phases}
    return {
        "planner": p.planner,
        "importance": p.importance,
        "ingest": p.ingest,
        "affinity": p.affinity,
        "max_load": p.metrics["max_cpu"],
        "avg_load": p.metrics["avg_cpu"],
        "objective": p.metrics["objective"],
        "admitted": len(p.admitted),
        "seconds": seconds,
        "phases": phases,
        "within_deadlines": all(ph.seconds <= ph.deadline + 1e-3 for ph in p.phases if ph.deadline > 0),
    }


def timed(fn, *args, **kwargs) -> tuple[Plan, float]:
    t = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - t


@app.command()
def apps(seeds: int = 3, budget: float = 5.0) -> None:
    configs = [("lsd", n) for n in (30, 50, 70, 82)] + [("dac", n) for n in (9, 15, 29, 30)]
    rows = []
    for name, nodes in configs:
        for seed in range(1, seeds + 1):
            gen = lsd if name == "lsd" else dac
            s = Scenario.model_validate(gen(seed=seed, nodes=nodes))
            base = {
                "app": name,
                "nodes": nodes,
                "seed": seed,
                "pes": sum(len(j.templates[0].operators) for j in s.jobs),
            }
            soda, t = timed(plan, s, options=Options(budget_s=budget))
            rows.append({**base, **row(soda, t)})
            for fn in (rand, rr, greedy):
                p, t = timed(fn, s)
                rows.append({**base, **row(p, t)})
            rr_load = rows[-2]["max_load"]
            matched, t = timed(plan, s, options=Options(budget_s=budget, utilisation=max(0.05, rr_load)))
            rows.append({**base, **row(matched, t), "planner": "SODA@RR-load"})
            console.print(f"{name} {nodes} nodes seed {seed}: done")
    table = Table(title=f"SODA vs baselines (mean of {seeds} seeds; SODA budget {budget:g} s)")
    for col in (
        "app",
        "nodes",
        "planner",
        "importance",
        "ingest",
        "affinity",
        "max load",
        "seconds",
        *[f"{ph} s" for ph in PHASES],
        "in deadlines",
    ):
        table.add_column(col, justify="right")
    summary = []
    planners = ("soda", "RAND", "RR", "greedy", "SODA@RR-load")
    for name, nodes in configs:
        for planner in planners:
            sel = [r for r in rows if r["app"] == name and r["nodes"] == nodes and r["planner"] == planner]
            mean = {
                k: statistics.fmean(r[k] for r in sel)
                for k in ("importance", "ingest", "affinity", "max_load", "seconds")
            }
            ph = {
                p: statistics.fmean(r["phases"][p]["seconds"] for r in sel) if p in sel[0]["phases"] else None
                for p in PHASES
            }
            ok = all(r["within_deadlines"] for r in sel)
            summary.append(
                {"app": name, "nodes": nodes, "planner": planner, **mean, "phase_seconds": ph, "within_deadlines": ok}
            )
            table.add_row(
                name,
                str(nodes),
                planner,
                f"{mean['importance']:,.0f}",
                f"{mean['ingest']:,.0f}",
                f"{mean['affinity']:.3f}",
                f"{mean['max_load']:.3f}",
                f"{mean['seconds']:.2f}",
                *[f"{ph[p]:.2f}" if ph[p] is not None else "" for p in PHASES],
                "yes" if ok else "NO",
            )
    console.print(table)
    write("apps", {"budget_s": budget, "seeds": seeds, "summary": summary, "rows": rows})


def small(seed: int) -> Scenario:
    """≤ 40 PEs, overloaded, cpu_min on every PE so admission and templates matter."""
    doc = lsd(seed=seed, nodes=3, cores=2, jobs=6, pes=36, demand_cores=12, required=1, share=0.5, two_templates=0.5)
    for job in doc["jobs"]:
        for tpl in job["templates"]:
            for op in tpl["operators"]:
                if op["kind"] != "sink":
                    op["cpu_min"] = 0.06
    return Scenario.model_validate(doc)


@app.command()
def gap(seeds: int = 10, budget: float = 5.0) -> None:
    rows = []
    for seed in range(1, seeds + 1):
        s = small(seed)
        e, te = timed(exact_macro_q, s, time_limit=120)
        q, tq = timed(macro_q, s, deadline_s=budget)
        p, tp = timed(plan, s, options=Options(budget_s=budget))
        pes = sum(len(j.templates[0].operators) for j in s.jobs)
        rows.append(
            {
                "seed": seed,
                "pes": pes,
                "exact_status": e.status,
                "exact": e.value,
                "exact_s": te,
                "macro_q": q.importance,
                "macro_q_s": tq,
                "macro_q_status": q.status,
                "plan": p.importance,
                "plan_s": tp,
                "admitted_exact": e.admitted,
                "admitted_soda": p.admitted,
                "templates_equal": e.templates == q.templates,
            }
        )
    table = Table(title="Optimality gap on small instances (exact = admission/template/cpu MILP, proven)")
    for col in (
        "seed",
        "PEs",
        "exact",
        "status",
        "macroQ",
        "macroQ/exact",
        "plan",
        "plan/exact",
        "exact s",
        "macroQ s",
        "plan s",
    ):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(
            str(r["seed"]),
            str(r["pes"]),
            f"{r['exact']:,.2f}",
            r["exact_status"],
            f"{r['macro_q']:,.2f}",
            f"{r['macro_q'] / r['exact']:.6f}",
            f"{r['plan']:,.2f}",
            f"{r['plan'] / r['exact']:.4f}",
            f"{r['exact_s']:.2f}",
            f"{r['macro_q_s']:.2f}",
            f"{r['plan_s']:.2f}",
        )
    console.print(table)
    worst_q = min(r["macro_q"] / r["exact"] for r in rows)
    worst_p = min(r["plan"] / r["exact"] for r in rows)
    console.print(f"worst macroQ/exact {worst_q:.6f}; worst plan/exact {worst_p:.4f}")
    write("gap", {"budget_s": budget, "rows": rows, "worst_macro_q_ratio": worst_q, "worst_plan_ratio": worst_p})


@app.command()
def scale(budget: float = 60.0, seed: int = 1) -> None:
    t = time.perf_counter()
    s = Scenario.model_validate(lsd(seed=seed, jobs=1400, pes=10_000, nodes=1000, demand_cores=5000))
    gen_s = time.perf_counter() - t
    n_pes = sum(len(j.templates[0].operators) for j in s.jobs)
    soda, ts = timed(plan, s, options=Options(budget_s=budget))
    rows = [{"planner": "soda", **row(soda, ts)}]
    for fn in (rr, greedy):
        p, t = timed(fn, s)
        rows.append({"planner": p.planner, **row(p, t)})
    table = Table(title=f"Scale: {n_pes} PEs (first templates), {len(s.cluster.all_nodes)} nodes, budget {budget:g} s")
    for col in ("planner", "importance", "ingest", "affinity", "max load", "seconds", *PHASES):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(
            r["planner"],
            f"{r['importance']:,.0f}",
            f"{r['ingest']:,.0f}",
            f"{r['affinity']:.3f}",
            f"{r['max_load']:.3f}",
            f"{r['seconds']:.1f}",
            *[
                f"{r['phases'][p]['seconds']:.1f}/{r['phases'][p]['deadline']:.1f} {r['phases'][p]['status']}"
                if p in r["phases"]
                else ""
                for p in PHASES
            ],
        )
    console.print(table)
    for ph in soda.phases:
        console.print(f"  {ph.name}: {ph.detail}")
    write(
        "scale",
        {
            "budget_s": budget,
            "pes": n_pes,
            "nodes": len(s.cluster.all_nodes),
            "generate_s": gen_s,
            "rows": rows,
            "details": {ph.name: ph.detail for ph in soda.phases},
        },
    )


@app.command(name="all")
def run_all() -> None:
    gap()
    apps()
    scale()


if __name__ == "__main__":
    app()
