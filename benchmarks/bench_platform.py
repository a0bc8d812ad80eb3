"""A platform of users' own queries: plain Spark (FIFO; FAIR pools by hand; plus static read limits) vs Strata.

The queries are ``examples/platform/jobs.py`` as a Spark team wrote them: an alert filter with a Python UDF
(rank 1, target 2 s), two chained window aggregations, a stream–stream join of clicks and impressions,
sessionization over Zipf-skewed users, a pandas-UDF scoring model, and a job reading the chained aggregation's
output (a shared stream). They read directories that :mod:`strata.runners.producer` fills at seeded, bursty
rates (the same records in every mode). The modes, one after the other in one session, each on a fresh copy of
the input:

- ``alone``: the alert query by itself on plain Spark: the floor no scheduler can go below on this machine;
- ``fifo``: plain Spark, one pool (FIFO inside it), as it comes;
- ``fair``: FAIR pools set by hand as Spark's documentation recommends: the latency-critical query in a
  weight-32 pool, the others by importance (weights 4, 2, 2, 1, 1 by rank);
- ``fair+limits``: the same plus static ``maxFilesPerTrigger`` on the bulk queries (2 files, about 1 s of input
  at the mean rate), as a careful Spark user would set them;
- ``dedicated``: what teams do today for a critical stream, on the same two cores: the alert query in a
  Spark application of its own, the other queries in a second application (FAIR pools by hand) started at
  ``nice`` +10 (``--bulk-nice``), so the operating system gives the alert query's JVM and Python workers the
  cores first whenever it has work; both read the same input directories;
- ``strata``: Strata in control (admission, pools, the gate, learned costs; with ``--cap-reads`` also L0's rate
  caps as read limits, each change a restart).
- ``strata+dedicated``: the dedicated deployment with Strata in control of each application, as
  ``strata run jobs.py --dedicate alerts`` made it before cells (the alert query in a child application at
  normal priority, the others under ``nice`` +10; here the roles of parent and child are swapped so that this
  process keeps the producers).
- ``strata-cells``: the default command, ``strata run jobs.py``, as a user runs it (a child process): L0 places
  the queries onto cells (Spark applications with OS-enforced CPU shares) under one hierarchy. The producers
  start once its cells are up (its ``▸ cells`` line), so its start-up is not a backlog; its own run directory's
  metrics give its rows (its sources' epoch is its own, within a second of the producers').

``--workload team_b`` runs the same modes on a second team's queries, which Strata was not developed on
(``benchmarks/workloads/team_b/jobs.py``: a pandas-UDF filter over CSV files, rank 1, target 1.5 s, critical;
a windowed count, a CPU-heavy Python UDF and a stream–static join over Parquet files; a deduplication of CSV
orders), fed by :func:`strata.runners.producer.team_b_input` at bursts of 3× for 10 s of every 30 s.

Usage: ``.venv/bin/python benchmarks/bench_platform.py [--workload platform] [--duration 60] [--seeds 1]
[--rate 300]``. Prints a table; writes ``benchmarks/results/<workload>.json``. Timing-dependent: the load
average is recorded. User queries are timed at their sinks, not verified here (the tests verify them). The
summary gives, per seed, the critical query's p99 and misses as ratios of each baseline's to Strata's, the bulk
queries' summed throughput as Strata's share of each baseline's, and total importance.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd
from rich.console import Console
from rich.table import Table

from strata.model import SourceSpec
from strata.model.user import load_jobs, with_python_jobs
from strata.protocol.units import POOLS
from strata.runners.producer import platform_input, team_b_input, team_b_layout
from strata.runners.spark_loop import RunConfig, hand_pools, run_mode
from strata.spark.measure import collect

ROOT = Path(__file__).resolve().parents[1]
JOBS = ROOT / "src" / "strata" / "examples" / "platform" / "jobs.py"
RESULTS = ROOT / "benchmarks" / "results"
STATIC_LIMITS = {"active_users": 2, "attributed_clicks": 2, "sessions": 2, "enriched": 2}


@dataclass(frozen=True)
class Workload:
    """A set of queries to run in every mode: its jobs file, its latency-critical job, the producers of its
    input (``input(root, source, epoch, end_s)``), its input's layout made before any query starts
    (``layout(root, source)``: empty directories, static tables), fair+limits' read limits, and its bursts
    (``burst`` × the rate for ``on_s`` of every ``period_s``)."""

    jobs: Path
    critical: str
    input: Callable
    layout: Callable
    static_limits: dict[str, int]
    period_s: float
    on_s: float


def platform_layout(root: Path, source: SourceSpec) -> None:
    for name in ("events", "clicks"):  # platform_input's directories, empty: the queries are analysed on them
        (root / name).mkdir(parents=True, exist_ok=True)


WORKLOADS = {
    "platform": Workload(JOBS, "alerts", platform_input, platform_layout, STATIC_LIMITS, 20.0, 5.0),
    "team_b": Workload(
        ROOT / "benchmarks" / "workloads" / "team_b" / "jobs.py",
        "anomalies",
        team_b_input,
        team_b_layout,
        {"bucket_counts": 2, "route_scores": 2, "enriched": 2, "orders_once": 2},
        30.0,
        10.0,
    ),
}
MODES = ("alone", "fifo", "fair", "fair+limits", "dedicated", "strata", "strata+dedicated", "strata-cells")
BASELINES = ("fifo", "fair", "fair+limits", "dedicated")
STRATA = ("strata", "strata+dedicated", "strata-cells")
CELLS_READY = "▸ cells ("  # what `strata run` prints once its cells are up, before its loop starts
# the second application of a dedicated deployment, by the mode of its first: the other queries, under FAIR
# pools by hand or under Strata
BULK = {"dedicated": "bulk", "strata+dedicated": "strata-bulk"}
CONTROLLED = ("strata", "strata+dedicated", "strata-bulk")


def jobs_of(mode: str, workload: Workload) -> list:
    """The declared jobs a mode runs in this process: the critical one alone, the others (a dedicated
    deployment's second application), or all of them."""
    declared = load_jobs(workload.jobs)
    if mode == "alone" or mode in BULK:
        return [j for j in declared if j.id == workload.critical]
    if mode in BULK.values():
        return [j for j in declared if j.id != workload.critical]
    return declared


def source_of(seed: int, args) -> SourceSpec:
    """The seeded source every mode's input is made from, with the workload's bursts."""
    workload = WORKLOADS[args.workload]
    arrivals = {"process": "onoff", "period_s": workload.period_s, "on_s": workload.on_s, "burst_factor": args.burst}
    return SourceSpec(rate=args.rate, arrivals=arrivals, keys={"count": 200, "zipf_s": 1.1}, seed=seed)


def start_input(base: Path, seed: int, args) -> tuple[float, list]:
    """Producers filling ``base/input`` from the seeded source, from an epoch 3 s ahead (the same records in
    every mode)."""
    epoch = time.time() + 3.0
    producers = WORKLOADS[args.workload].input(base / "input", source_of(seed, args), epoch, args.duration + 5.0)
    for p in producers:
        p.start()
    return epoch, producers


def run_one(spark, mode: str, seed: int, args, work: Path) -> list[dict]:
    """One mode on a fresh input directory filled in real time from the same seeded source. A dedicated mode
    runs its bulk queries in a second Spark application (:func:`bulk_application`) on the same input."""
    base = work / f"{mode}-{seed}"
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    if mode == "strata-cells":
        return run_cells(base, seed, args)
    bulk = None
    if mode in BULK:
        bulk = bulk_application(base, seed, BULK[mode], args)
    epoch, producers = start_input(base, seed, args)
    if bulk is not None:  # written whole, then renamed: the second application polls for it
        (base / "go.tmp").write_text(repr(epoch))
        (base / "go.tmp").rename(base / "go")
    time.sleep(3.5)  # the first files exist, so every query can start
    try:
        rows = run_jobs(spark, mode, seed, base, epoch, args)
    finally:
        for p in producers:
            p.stop()
    if bulk is not None:
        if bulk.wait(timeout=args.duration + 300) != 0:
            raise RuntimeError(f"the dedicated mode's bulk application failed: see {base / 'bulk.log'}")
        rows += [{**r, "mode": mode} for r in json.loads((base / "bulk.json").read_text())]
    return rows


def run_cells(base: Path, seed: int, args) -> list[dict]:
    """The default command (``strata run jobs.py``, a child process reading ``base/input``): the producers start
    once its cells are up; one row per job from its metrics."""
    if args.cap_reads:
        raise SystemExit("--cap-reads: not a knob of the default command; run strata-cells without it")
    WORKLOADS[args.workload].layout(base / "input", source_of(seed, args))
    log = (base / "cells.log").open("w")
    load = os.getloadavg()[0]
    command = [sys.executable, "-m", "strata", "run", str(WORKLOADS[args.workload].jobs), "--out", str(base / "run")]
    command += ["--duration", str(args.duration + 3.5)]
    child = subprocess.Popen(
        command, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "STRATA_INPUT": str(base / "input")}
    )
    deadline = time.time() + 300
    while CELLS_READY not in (base / "cells.log").read_text(errors="replace"):
        if child.poll() is not None or time.time() > deadline:
            child.kill()
            raise RuntimeError(f"strata-cells did not start its cells: see {base / 'cells.log'}")
        time.sleep(0.2)
    _, producers = start_input(base, seed, args)
    try:
        code = child.wait(timeout=args.duration + 600)
    finally:
        for p in producers:
            p.stop()
        log.close()
    if code not in (0, 1):  # 1: a query died or a sink mismatched, which its rows show
        raise RuntimeError(f"strata-cells exited {code}: see {base / 'cells.log'}")
    measured = pd.read_csv(base / "run" / "metrics" / "summary.csv").to_dict("records")
    return [
        {**r, "mode": "strata-cells", "seed": seed, "load_before": load, "python_cpu_s": None, "died": None}
        for r in measured
    ]


def bulk_application(base: Path, seed: int, mode: str, args):
    """Start the dedicated mode's second Spark application (this script with ``--bulk-of``) at ``nice`` +N and
    return it once its JVM is warm (``base/ready``); it starts its queries when ``base/go`` holds the epoch."""
    command = [sys.executable, __file__, "--bulk-of", str(base), "--modes", mode, "--seeds", str(seed)]
    command += ["--duration", str(args.duration), "--rate", str(args.rate), "--burst", str(args.burst)]
    command += ["--workload", args.workload]
    log = (base / "bulk.log").open("w")
    child = subprocess.Popen(["nice", "-n", str(args.bulk_nice), *command], stdout=log, stderr=log)
    deadline = time.time() + 300
    while not (base / "ready").exists():
        if child.poll() is not None or time.time() > deadline:
            child.kill()
            raise RuntimeError(f"the dedicated mode's bulk application did not start: see {base / 'bulk.log'}")
        time.sleep(0.2)
    return child


def serve_bulk(base: Path, args) -> None:
    """A dedicated deployment's second application (mode ``args.modes[0]``): warm up, wait for the epoch, run
    the bulk queries on ``base/input`` (its producers belong to the first application) and write their rows."""
    from strata.spark.session import build_session

    spark = build_session("bench-platform-bulk", cores=2, shuffle_partitions=2, pools=POOLS, work_dir=base / "spark")
    spark.sparkContext.setLogLevel("FATAL")
    try:
        warm = argparse.Namespace(**{**vars(args), "duration": 15.0})
        run_one(spark, args.modes[0], 0, warm, base / "warmup")
        (base / "ready").touch()
        while not (base / "go").exists():
            time.sleep(0.05)
        epoch = float((base / "go").read_text())
        time.sleep(max(0.0, epoch + 0.5 - time.time()))
        rows = run_jobs(spark, args.modes[0], args.seeds[0], base, epoch, args)
    finally:
        spark.stop()
    (base / "bulk.json").write_text(json.dumps(rows, default=str))


def run_jobs(spark, mode: str, seed: int, base: Path, epoch: float, args) -> list[dict]:
    """Run ``mode``'s jobs on ``base/input`` from ``epoch`` for the run's duration; one row per job."""
    os.environ["STRATA_INPUT"] = str(base / "input")  # read by the jobs' file when it is loaded
    workload = WORKLOADS[args.workload]
    scenario = with_python_jobs(jobs_of(mode, workload), [], args.workload)
    config = RunConfig(
        sink="parquet",
        pools=hand_pools(scenario) if mode in ("fair", "fair+limits", "bulk") else {},
        read_limits=workload.static_limits if mode == "fair+limits" else {},
        control=replace(RunConfig().control, cap_reads=args.cap_reads),
    )
    load = os.getloadavg()[0]
    cpu = os.times()
    result = run_mode(
        spark,
        scenario,
        "strata" if mode in CONTROLLED else "baseline",
        base / "run",
        config,
        epoch,
        epoch + args.duration,
    )
    python_cpu = sum(os.times()[:2]) - sum(cpu[:2])  # this process: Strata's loop, the producers, py4j calls
    measured = collect([result], scenario, max(0.0, args.duration - 4.0), spark, base / "run", {"config": {}}, {})
    failures = result.engine.failures()
    rows = []
    for r in measured.summary.to_dict("records"):
        rows.append(
            {
                **r,
                "mode": mode,
                "seed": seed,
                "load_before": load,
                "python_cpu_s": python_cpu,
                "died": failures.get(r["job"]),
            }
        )
    return rows


def summary(rows: list[dict], critical: str) -> list[dict]:
    """Per seed and baseline: the critical query's p99 and misses over Strata's, Strata's bulk throughput over
    the baseline's, and both total importances."""
    out = []
    for seed in sorted({r["seed"] for r in rows}):
        mine = [r for r in rows if r["seed"] == seed]

        def of(mode: str, job: str, key: str, mine=mine):
            return next((r[key] for r in mine if r["mode"] == mode and r["job"] == job), None)

        def bulk(mode: str, mine=mine) -> float:
            return sum(r["throughput"] or 0.0 for r in mine if r["mode"] == mode and r["job"] != critical)

        def total(mode: str, mine=mine) -> float:
            return sum(r["importance"] or 0.0 for r in mine if r["mode"] == mode)

        for mine_mode in (m for m in STRATA if any(r["mode"] == m for r in mine)):
            p99, misses = of(mine_mode, critical, "p99_s"), of(mine_mode, critical, "misses")
            for base in (b for b in BASELINES if any(r["mode"] == b for r in mine)):
                b99, bmiss = of(base, critical, "p99_s"), of(base, critical, "misses")
                out.append(
                    {
                        "seed": seed,
                        "strata": mine_mode,
                        "baseline": base,
                        "p99_ratio": b99 / p99 if b99 and p99 else None,
                        "misses": (bmiss, misses),
                        "bulk_share": bulk(mine_mode) / bulk(base) if bulk(base) else None,
                        "importance": (total(base), total(mine_mode)),
                        "floor_p99": of("alone", critical, "p99_s"),
                    }
                )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", choices=tuple(WORKLOADS), default="platform")
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1])
    parser.add_argument("--rate", type=float, default=300.0, help="mean events/s (bursts at --burst x)")
    parser.add_argument("--burst", type=float, default=3.0)
    parser.add_argument("--modes", nargs="+", choices=MODES + tuple(BULK.values()), default=list(MODES))
    parser.add_argument(
        "--cap-reads", action="store_true", help="Strata mode: L0's rate caps as read limits (each change restarts)"
    )
    parser.add_argument(
        "--bulk-nice", type=int, default=10, help="dedicated mode: the bulk application's nice value (0-19)"
    )
    parser.add_argument("--bulk-of", type=Path, help=argparse.SUPPRESS)  # the dedicated mode's second application
    parser.add_argument("--work", type=Path, default=Path("/tmp/strata-bench-platform"))
    parser.add_argument("--out", type=Path, help="default: benchmarks/results/<workload>.json")
    args = parser.parse_args()
    args.out = args.out or RESULTS / f"{args.workload}.json"
    critical = WORKLOADS[args.workload].critical
    if args.bulk_of is not None:
        serve_bulk(args.bulk_of, args)
        return
    from strata.spark.session import build_session

    spark = build_session("bench-platform", cores=2, shuffle_partitions=2, pools=POOLS, work_dir=args.work / "spark")
    spark.sparkContext.setLogLevel("FATAL")
    rows: list[dict] = []
    try:
        # not measured: the session's first queries pay the JVM's and the Python workers' warm-up, which would
        # fall on whichever mode ran first
        run_one(spark, "alone", 0, argparse.Namespace(**{**vars(args), "duration": 15.0}), args.work / "warmup")
        for seed in args.seeds:
            for mode in args.modes:
                rows += run_one(spark, mode, seed, args, args.work)
    finally:
        spark.stop()
    table = Table(title=f"{args.workload}: {args.duration:g} s, rate {args.rate:g}/s × {args.burst:g} bursts, local[2]")
    for col in ("seed", "mode", "job", "outputs", "p50 s", "p99 s", "misses", "rows/s", "importance"):
        table.add_column(col, justify="left" if col in ("mode", "job") else "right")

    def fmt(x, spec):
        return "–" if x is None or x != x else format(x, spec)

    for r in rows:
        table.add_row(
            str(r["seed"]),
            r["mode"],
            r["job"] + (" (died)" if r["died"] else ""),
            str(r["outputs"]),
            fmt(r["p50_s"], ".2f"),
            fmt(r["p99_s"], ".2f"),
            str(r["misses"]),
            fmt(r["throughput"], ".0f"),
            fmt(r["importance"], ".1f"),
        )
    console = Console()
    console.print(table)
    ratios = summary(rows, critical)
    versus = Table(title=f"{critical} (critical) and the bulk queries: each baseline against Strata")
    for col in (
        "seed",
        "Strata as",
        "baseline",
        "p99 ÷ Strata's",
        "misses (base / Strata)",
        "bulk rows/s: Strata ÷ base",
    ):
        versus.add_column(col, justify="left" if col in ("Strata as", "baseline") else "right")
    versus.add_column("importance (base / Strata)", justify="right")
    versus.add_column(f"{critical} alone p99 s", justify="right")
    for r in ratios:
        versus.add_row(
            str(r["seed"]),
            r["strata"],
            r["baseline"],
            fmt(r["p99_ratio"], ".2f"),
            "{} / {}".format(*r["misses"]),
            fmt(r["bulk_share"], ".2f"),
            "{:.1f} / {:.1f}".format(*r["importance"]),
            fmt(r["floor_p99"], ".2f"),
        )
    console.print(versus)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {"args": {k: str(v) for k, v in vars(args).items()}, "rows": rows, "summary": ratios},
            indent=1,
            default=str,
        )
    )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
