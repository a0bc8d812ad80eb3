"""Strata inside one Spark application against FAIR pools by hand and plain Spark (issue 29's targets).

Each seed runs the demo's three jobs (``examples/demo.yaml``, reseeded) in one embedded session, warmed up once,
mode after mode on the same seeded input: plain Spark (``baseline``: FIFO), FAIR pools by hand (``fair``: the
latency-critical job in the weight-32 pool, the others by rank) and Strata in control of the same application
(``strata``: what ``strata run --cells 1`` runs — plan, pools, gate, pacing, learned costs, do no harm). The
machine keeps warming up as the modes run, so the order alternates with the seed's index (even: baseline, fair,
strata; odd: the reverse); each seed records its order and the load average around it.

Per seed: the figures of issue 29 against FAIR by hand (critical p99 and misses, each bulk job's throughput
≥ 0.9× FAIR's, total on-time importance) and against plain (:mod:`strata.report.targets`), and every decision
Strata's Controller made (``decisions.csv``: kind, job, detail, reasons) — what the first plan did before any
observation, and which caps and switches followed. The last lines give the worst seed for every target.

With ``--cpu`` the session's CPU (its JVM and Python workers, :mod:`app_cpu`) and this process's (the driver:
Strata's Controller in its mode) over each mode's measured window go into each seed's ``cpu`` rows: what each
mode's decisions cost the cores the jobs share.

Usage: ``flock /tmp/strata-bench.lock .venv/bin/python benchmarks/bench_one_app.py [--seeds 0 1 2]
[--duration 30] [--json PATH] [--cpu]`` (JSON by default to ``benchmarks/results/one_app.json``).
Timing-dependent.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path

import pandas as pd
from rich.console import Console
from rich.table import Table

from app_cpu import AppCpu, OwnCpu, cpu_rows, cpu_table, demo_application
from strata.model import critical_jobs, load_scenario
from strata.report.targets import VERSUS_FAIR, VERSUS_PLAIN, judge, versus_fair, versus_plain, worst_seeds
from strata.runners.demo import DemoConfig, DemoSession, reseed, run_in_session
from strata.spark.conf import SparkSettings, user_conf

ROOT = Path(__file__).resolve().parents[1]
MODES = ("baseline", "fair", "strata")
RESULTS = ("benchmarks", "results", "one_app.json")


def measure_seed(index: int, seed: int, args, console: Console) -> dict:
    """The three modes in one session, in the seed's order; their summaries, Strata's decisions, the verdicts."""
    scenario = reseed(load_scenario(args.spec), seed)
    config = DemoConfig(duration_s=args.duration, seed=seed)
    order = MODES if index % 2 == 0 else tuple(reversed(MODES))
    out = args.out / f"seed{seed}"
    shutil.rmtree(out, ignore_errors=True)  # a mode's queries would resume an earlier run's checkpoints
    out.mkdir(parents=True)
    settings = SparkSettings(tuple(user_conf().items()))
    session = DemoSession(scenario, out, config, settings, lambda text: console.print(f"[dim]seed {seed}: {text}[/]"))
    t0, load_before = time.time(), os.getloadavg()
    try:
        for mode in order:
            console.print(f"[dim]seed {seed}: {mode}[/]")
            run_in_session(session, scenario, mode, out, config, None)
    finally:
        session.stop(end=False)
    rows = pd.concat([pd.read_csv(out / m / "metrics" / "summary.csv") for m in MODES]).to_dict("records")
    decisions = pd.read_csv(out / "strata" / "metrics" / "decisions.csv")
    cpu = []
    if args.samplers:
        batches = pd.concat([pd.read_csv(out / m / "metrics" / "batches.csv") for m in MODES])
        cpu = cpu_rows(batches, MODES, args.duration, *args.samplers)
    critical = critical_jobs(scenario, config.run.control.critical_latency_s)
    figures = {"versus_fair": versus_fair(rows, critical), "versus_plain": versus_plain(rows, critical)}
    targets = {"versus_fair": VERSUS_FAIR, "versus_plain": VERSUS_PLAIN}
    return {
        "seed": seed,
        "order": list(order),
        "critical_jobs": critical,
        "wall_s": time.time() - t0,
        "load_average": {"before": load_before, "after": os.getloadavg()},  # a shared machine: what else ran
        **figures,
        **{f"{name}_met": judge(f, targets[name]) for name, f in figures.items()},
        "summary": rows,
        "decisions": decisions[["t", "kind", "job", "detail", "reasons"]].fillna("").to_dict("records"),
        **({"cpu": cpu} if cpu else {}),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--duration", type=float, default=30.0)
    paths = {"spec": ("examples", "demo.yaml"), "out": ("runs", "bench_one_app"), "json": RESULTS}
    for name, parts in paths.items():
        parser.add_argument(f"--{name}", type=Path, default=ROOT.joinpath(*parts))
    parser.add_argument("--cpu", action="store_true", help="sample the session's and the driver's CPU per mode")
    args = parser.parse_args()
    console = Console(width=200)
    args.samplers = (AppCpu(demo_application).start(), OwnCpu()) if args.cpu else ()
    runs = [measure_seed(k, seed, args, console) for k, seed in enumerate(args.seeds)]
    for sampler in args.samplers:
        sampler.stop()
    table = Table(title=f"bench_one_app: Strata in one application ({args.duration:g} s per mode)")
    for col in ("seed", "order", "mode", "job", "p99 s", "misses", "rec/s", "importance"):
        table.add_column(col, justify="right")
    for r in runs:
        for s in r["summary"]:
            table.add_row(
                str(r["seed"]),
                " ".join(m[0] for m in r["order"]),
                s["mode"],
                s["job"],
                f"{s['p99_s']:.2f}",
                f"{s['misses']:.0f}",
                f"{s['throughput']:.0f}",
                f"{s['importance']:.1f}",
            )
    console.print(table)
    if args.samplers:
        console.print(cpu_table(runs, args.duration))
    for r in runs:
        console.print(f"seed {r['seed']}: vs FAIR {r['versus_fair']} met {r['versus_fair_met']}")
        for d in r["decisions"]:
            console.print(f"  {d['t']:7.2f} {d['kind']:>10} {d['job']:>9} {d['detail']} [{d['reasons']}]")
    worst = {
        "versus_fair": worst_seeds({r["seed"]: r["versus_fair"] for r in runs}, VERSUS_FAIR),
        "versus_plain": worst_seeds({r["seed"]: r["versus_plain"] for r in runs}, VERSUS_PLAIN),
    }
    console.print(f"worst seed: {json.dumps(worst)}")
    given = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items() if k != "samplers"}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"args": given, "runs": runs, "worst": worst}, indent=1))
    console.print(f"→ {args.json}")


if __name__ == "__main__":
    main()
