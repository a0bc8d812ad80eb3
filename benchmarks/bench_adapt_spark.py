"""The meta level on Spark against each fixed composition it chooses among (issue 30, item 5).

Per seed, Strata in control of one Spark application (what ``strata run --cells 1`` runs: plan, pools, gate,
pacing, learned costs, do no harm) runs the workload once per mode on the same seeded input:

- each fixed composition of :func:`strata.control.meta.candidates` — the default (the config's own blocks, run
  with no meta level, exactly as ``strata run`` runs it) and every one that changes one level (the gate's
  dispatch strategy: edf, fifo; L1's balancing: off);
- ``adaptive``: the meta level (:func:`strata.control.meta.selector`) choosing among them every control window
  from the default, switching only on evidence larger than its measured noise.

Workloads (``--workload``):

- ``demo``: ``examples/demo.yaml`` reseeded (:func:`strata.runners.demo.reseed`), every mode in one warmed
  :class:`~strata.runners.demo.DemoSession` (:func:`~strata.runners.demo.run_in_session`), as
  ``bench_one_app.py`` runs its modes;
- ``platform``: ``bench_platform.py``'s users' queries (workload ``platform``) in its ``strata`` mode under its
  warm protocol: one session in this process, warmed up once on the alert query, each mode a fresh input
  directory filled in real time from the seeded producers (``bench_platform.run_one`` with ``--meta``),
  measured on the windows every mode shares.

The machine keeps warming up as the modes run, so the order alternates with the seed's index (even: as listed,
odd: reversed). Per mode: total on-time importance, the critical jobs' p99 and misses, the bulk jobs' rows/s;
for ``adaptive`` the composition in force after every control step and the meta level's own time per step (mean
and max, ms; the controller times ``select``). Per seed: whether adaptive's importance is at least the best
fixed mode's. JSON (small: figures only) to ``benchmarks/results/adapt_spark_<workload>.json``.

    flock /tmp/strata-bench.lock .venv/bin/python benchmarks/bench_adapt_spark.py \
        [--workload demo|platform] [--seeds 0 1 2] [--duration 30]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from dataclasses import replace
from pathlib import Path

import pandas as pd
from rich.console import Console
from rich.table import Table

from strata.control.meta import ADAPTIVE, OFF, candidates, with_meta
from strata.model import critical_jobs, load_scenario
from strata.runners.demo import DemoConfig, DemoSession, reseed, run_in_session
from strata.runners.spark_loop import RunConfig
from strata.spark.conf import SparkSettings, user_conf

ROOT = Path(__file__).resolve().parents[1]
CONTROL = RunConfig().control


def modes() -> list[str]:
    """The fixed compositions ("dispatch/balancing", the default first) and ``adaptive``."""
    return [f"{c.dispatch}/{c.balancing}" for c in candidates(CONTROL)] + [ADAPTIVE]


def choice_of(mode: str) -> str:
    """The ``--meta`` choice a mode runs: the default composition runs with no meta level at all."""
    default = modes()[0]
    return OFF if mode == default else mode


def order_of(index: int) -> list[str]:
    return modes() if index % 2 == 0 else list(reversed(modes()))


def figures(summary: list[dict], controller: pd.DataFrame, critical: list[str]) -> dict:
    """One mode's figures from its per-job summary rows and its controller steps."""
    crit = [r for r in summary if r["job"] in critical]
    bulk = [r for r in summary if r["job"] not in critical]
    out = {
        "importance": float(sum(r["importance"] for r in summary)),
        "critical_p99_s": max((float(r["p99_s"]) for r in crit), default=None),
        "critical_misses": int(sum(r["misses"] for r in crit)),
        "bulk_rows_s": float(sum(r["throughput"] for r in bulk)),
    }
    if "meta_seconds" in controller and controller["meta_seconds"].gt(0).any():
        steps = controller[controller["meta_seconds"] > 0]
        out["meta_ms"] = {"mean": 1000 * steps["meta_seconds"].mean(), "max": 1000 * steps["meta_seconds"].max()}
        out["steps"] = len(steps)
        # the composition in force after each step, kept only where it changed (and the first)
        picks = [(round(float(r["t"]), 1), f"{r['dispatch']}/{r['balancing']}") for _, r in steps.iterrows()]
        out["chosen"] = [p for k, p in enumerate(picks) if k == 0 or p[1] != picks[k - 1][1]]
        out["windows_off_default"] = sum(1 for _, name in picks if name != modes()[0])
    return out


def read_controller(metrics: Path) -> pd.DataFrame:
    path = metrics / "controller.csv"
    return pd.read_csv(path) if path.exists() and path.stat().st_size > 1 else pd.DataFrame()


def demo_seed(index: int, seed: int, args, console: Console) -> dict:
    """Every mode on the demo in one warmed session, in the seed's order."""
    scenario = reseed(load_scenario(ROOT / "examples" / "demo.yaml"), seed)
    config = DemoConfig(duration_s=args.duration, seed=seed)
    critical = critical_jobs(scenario, config.run.control.critical_latency_s)
    out = args.work / "demo" / f"seed{seed}"
    shutil.rmtree(out, ignore_errors=True)  # a mode's queries would resume an earlier run's checkpoints
    out.mkdir(parents=True)
    settings = SparkSettings(tuple(user_conf().items()))
    session = DemoSession(scenario, out, config, settings, lambda text: console.print(f"[dim]seed {seed}: {text}[/]"))
    runs, load_before = {}, os.getloadavg()
    try:
        for mode in order_of(index):
            console.print(f"[dim]demo seed {seed}: {mode}[/]")
            control = with_meta(config.run.control, choice_of(mode))
            mode_config = replace(config, run=replace(config.run, control=control))
            where = out / mode.replace("/", "-")
            run_in_session(session, scenario, "strata", where, mode_config, None)
            metrics = where / "strata" / "metrics"
            summary = pd.read_csv(metrics / "summary.csv").to_dict("records")
            runs[mode] = figures(summary, read_controller(metrics), critical)
    finally:
        session.stop(end=False)
    load = {"before": load_before, "after": os.getloadavg()}  # a shared machine: what else ran
    return {"seed": seed, "order": order_of(index), "critical_jobs": critical, "load_average": load, "modes": runs}


def platform_seed(index: int, seed: int, args, console: Console, spark) -> dict:
    """Every mode on bench_platform's workload (its strata mode, warm protocol) in this process's session."""
    import bench_platform as bp

    runs, load_before = {}, os.getloadavg()
    critical = [bp.WORKLOADS["platform"].critical]
    for mode in order_of(index):
        console.print(f"[dim]platform seed {seed}: {mode}[/]")
        ns = platform_args(args, choice_of(mode))
        work = args.work / "platform" / mode.replace("/", "-")
        rows = bp.run_one(spark, "strata", seed, ns, work)
        runs[mode] = figures(rows, read_controller(work / f"strata-{seed}" / "run-strata" / "metrics"), critical)
    load = {"before": load_before, "after": os.getloadavg()}
    return {"seed": seed, "order": order_of(index), "critical_jobs": critical, "load_average": load, "modes": runs}


def platform_args(args, meta: str) -> argparse.Namespace:
    """bench_platform's arguments for its strata mode: its defaults but ``--duration``, the warm protocol and the
    meta level."""
    return argparse.Namespace(
        workload="platform",
        duration=args.duration,
        rate=300.0,
        burst=3.0,
        protocol="warm",
        settle=0.0,  # its settled figures are not reported here: the whole run's are
        cap_reads=False,
        bulk_nice=10,
        meta=meta,
    )


def platform_runs(args, console: Console) -> list[dict]:
    import bench_platform as bp
    from strata.protocol.units import POOLS
    from strata.spark.session import build_session

    spark = build_session(
        "bench-adapt-platform", cores=2, shuffle_partitions=2, pools=POOLS, work_dir=args.work / "spark"
    )
    spark.sparkContext.setLogLevel("FATAL")
    try:
        # not measured: the session's first queries pay the JVM's and Python workers' warm-up (bench_platform's own)
        warm = argparse.Namespace(**{**vars(platform_args(args, OFF)), "duration": bp.WARM_UP_S})
        bp.run_one(spark, "alone", 0, warm, args.work / "platform" / "warmup")
        return [platform_seed(k, seed, args, console, spark) for k, seed in enumerate(args.seeds)]
    finally:
        spark.stop()


def verdict(run: dict) -> dict:
    """Adaptive's importance against the best fixed mode's (and the default's) on one seed."""
    fixed = {m: r["importance"] for m, r in run["modes"].items() if m != ADAPTIVE}
    best = max(fixed, key=fixed.get)
    adaptive = run["modes"][ADAPTIVE]["importance"]
    return {
        "best_fixed": best,
        "best_fixed_importance": fixed[best],
        "adaptive_importance": adaptive,
        "adaptive_over_best": adaptive / fixed[best] if fixed[best] else None,
        "adaptive_over_default": adaptive / fixed[modes()[0]] if fixed[modes()[0]] else None,
        "met": adaptive >= fixed[best],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", choices=("demo", "platform"), default="demo")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--duration", type=float, default=30.0, help="seconds of input per mode")
    parser.add_argument("--work", type=Path, default=Path("/tmp/strata-bench-adapt-spark"))
    parser.add_argument("--json", type=Path, help="default: benchmarks/results/adapt_spark_<workload>.json")
    args = parser.parse_args()
    args.json = args.json or ROOT / "benchmarks" / "results" / f"adapt_spark_{args.workload}.json"
    console = Console(width=200)
    t0, load_before = time.time(), os.getloadavg()
    if args.workload == "demo":
        runs = [demo_seed(k, seed, args, console) for k, seed in enumerate(args.seeds)]
    else:
        runs = platform_runs(args, console)
    for r in runs:
        r["verdict"] = verdict(r)
    table = Table(title=f"bench_adapt_spark: {args.workload}, {args.duration:g} s per mode")
    for col in ("seed", "mode", "importance", "crit p99 s", "misses", "bulk rows/s", "meta ms mean/max", "switches"):
        table.add_column(col, justify="right")
    for r in runs:
        for mode in modes():
            f = r["modes"][mode]
            meta = f.get("meta_ms")
            table.add_row(
                str(r["seed"]),
                mode,
                f"{f['importance']:.1f}",
                "-" if f["critical_p99_s"] is None else f"{f['critical_p99_s']:.2f}",
                str(f["critical_misses"]),
                f"{f['bulk_rows_s']:.0f}",
                "" if meta is None else f"{meta['mean']:.2f}/{meta['max']:.2f}",
                "" if "chosen" not in f else str(len(f["chosen"]) - 1),
            )
    console.print(table)
    for r in runs:
        v = r["verdict"]
        console.print(
            f"seed {r['seed']}: adaptive {v['adaptive_importance']:.1f} vs best fixed {v['best_fixed']} "
            f"{v['best_fixed_importance']:.1f} ({v['adaptive_over_best']:.3f}x): met {v['met']}; "
            f"chosen {r['modes'][ADAPTIVE].get('chosen')}"
        )
    given = {k: str(v) for k, v in vars(args).items()}
    result = {
        "args": given,
        "modes": modes(),
        "wall_s": time.time() - t0,
        "load_average": {"before": load_before, "after": os.getloadavg()},  # a shared machine: what else ran
        "runs": runs,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=1))
    console.print(f"→ {args.json}")


if __name__ == "__main__":
    main()
