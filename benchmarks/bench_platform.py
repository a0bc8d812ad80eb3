"""A platform of users' own queries: plain Spark (FIFO; FAIR pools by hand; plus static read limits) vs Strata.

The queries are ``examples/platform/jobs.py`` as a Spark team wrote them: an alert filter with a Python UDF
(rank 1, target 2 s), two chained window aggregations, a stream–stream join of clicks and impressions,
sessionization over Zipf-skewed users, a pandas-UDF scoring model, and a job reading the chained aggregation's
output (a shared stream). They read directories that :mod:`strata.runners.producer` fills at seeded, bursty
rates (the same records in every mode), each mode on a fresh copy of the input. The modes:

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
- ``strata``: Strata in control of one application, as ``strata run jobs.py --cells 1`` runs it (its queries
  warmed first; admission, pools, the gate, learned costs; with ``--cap-reads`` also L0's rate caps as read
  limits, each change a restart);
- ``strata+dedicated``: the dedicated deployment with Strata in control of each application, as
  ``strata run jobs.py --dedicate alerts`` made it before cells (the alert query's application at normal
  priority, the others' under ``nice`` +10);
- ``strata-cells``: the default command, ``strata run jobs.py``, as a user runs it (a child process): L0 places
  the queries onto cells (Spark applications with OS-enforced CPU shares) under one hierarchy; its own run
  directory's metrics give its rows.

Protocol (``--protocol``). ``cold`` (the default): every mode runs as a user starts it. Each application is a
fresh process (this script re-invoked with ``--serve``) that builds its own SparkSession. A baseline's
(``alone``, ``fifo``, ``fair``, ``fair+limits``, ``dedicated``) runs no warm-up, as a team starts plain Spark: a
dedicated mode's two applications start together, both cold. Strata's own modes warm because its commands do:
``strata`` (and each application of ``strata+dedicated``) runs, before it says it is up,
:func:`strata.runners.warmup.warm_application` — what ``strata run --cells 1`` runs before its sources' epoch:
its Python workers started, each query rehearsed on a sample into a memory sink from a scratch checkpoint, never
the run's — and ``strata-cells``' cells warm the jobs they hold before they report ready. That is the footing
``strata-cells`` has had since its cells warm (issue 28): the commands are compared as users run them, so
Strata's warm-up, paid before the producers' epoch, is a start-up the baselines as a team starts them do not
run. ``warm`` (for comparison with earlier figures): a mode's first application runs in this script's own
session after a 15 s warm-up run of the alert query, and a dedicated mode's second application runs a 15 s
warm-up of its own queries before the epoch, so they start with JIT-compiled code and warm Python workers;
Strata's modes warm as above besides, and ``strata-cells`` runs as the command starts it under both protocols.

In every mode the producers start when the mode's applications are up (each session built; for
``strata-cells`` its ``▸ cells`` line), from an epoch 3 s ahead, and every application starts its queries
at once, on the input's directories made empty beforehand (as ``strata-cells`` does): no mode's queries start
on a backlog. Seeds run one after the other; the
order of the modes is reversed on every other seed, as whoever runs last gains from a machine that keeps
warming up.

Measured on the same windows for every mode, on the producers' clock (``strata-cells``' times are moved from its
own sources' epoch to the producers'): the whole run (the headline) counts each job's outputs with event time
from the epoch to ``--duration`` less 4 s delivered by ``--duration`` (p50, p99, misses, on-time importance)
and the input rows its batches committed by then per second; beside it the settled figures count only outputs
of event time at least ``--settle`` s (default 20) after the epoch and rows committed from then on (the steady
state after start-up). Each run's own figures (to its own stop) are kept in the JSON as ``<figure>_own``.

With ``--cpu`` (cold protocol) each application's CPU over the same window is sampled (:mod:`app_cpu`: its core-seconds,
per role, and for the one running the critical job those inside its batches and between them): a table and the
JSON's ``cpu`` rows.

Usage: ``.venv/bin/python benchmarks/bench_platform.py [--duration 60] [--seeds 1 2 3] [--rate 300] [--cpu]``. Prints a
table; writes ``benchmarks/results/platform.json``. Timing-dependent: the load average is recorded.
User queries are timed at their sinks, not verified here (the tests verify them). The summary gives, per seed
and then the worst seed for each figure, the alert query's p99 and misses as ratios of each baseline's to
Strata's, the bulk queries' summed throughput as Strata's share of each baseline's, and total importance;
whole run and settled.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
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

from app_cpu import AppCpu
from strata.control.meta import ADAPTIVE, OFF, with_meta
from strata.model import Scenario, SourceSpec
from strata.model.user import SessionNeeded, load_jobs, with_python_jobs
from strata.protocol.units import POOLS
from strata.runners.live import DRAIN_S
from strata.runners.producer import (
    platform_input,
    team_b_input,
    team_b_layout,
    team_c_input,
    team_c_layout,
    team_d_input,
    team_d_layout,
)
from strata.runners.spark_loop import RunConfig, hand_pools, run_mode
from strata.runners.warmup import Warmed, warm_application
from strata.spark.measure import collect, job_summary

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
    "team_c": Workload(
        ROOT / "benchmarks" / "workloads" / "team_c" / "jobs.py",
        "fraud",
        team_c_input,
        team_c_layout,
        {"volume": 2, "risk": 2, "card_sessions": 2},
        25.0,
        8.0,
    ),
    "team_d": Workload(
        ROOT / "benchmarks" / "workloads" / "team_d" / "jobs.py",
        "excursions",
        team_d_input,
        team_d_layout,
        {"depot_load": 2, "eta": 2, "fleet_summary": 2},
        24.0,
        6.0,
    ),
}
MODES = ("alone", "fifo", "fair", "fair+limits", "dedicated", "strata", "strata+dedicated", "strata-cells")
COMPARED = ("alone", "fifo", "fair", "dedicated", "strata", "strata-cells")  # the default --modes
BASELINES = ("fifo", "fair", "fair+limits", "dedicated")
STRATA = ("strata", "strata+dedicated", "strata-cells")
CELLS_READY = "▸ cells ("  # what `strata run` prints once its cells are up, before its loop starts
# the second application of a dedicated deployment, by the mode of its first: the other queries, under FAIR
# pools by hand or under Strata
BULK = {"dedicated": "bulk", "strata+dedicated": "strata-bulk"}
CONTROLLED = ("strata", "strata+dedicated", "strata-bulk")
WARM_UP_S = 15.0  # the warm protocol's warm-up run


def applications(mode: str) -> tuple[str, ...]:
    """The Spark applications a mode runs, named as the modes :func:`serve` runs: a dedicated deployment's two
    (the alert query's, then the others'), else the mode's one."""
    return (mode, BULK[mode]) if mode in BULK else (mode,)


@functools.cache
def declared_jobs(path: Path) -> list:
    """The jobs a workload's file declares, for their ids, ranks and targets. A file that makes, when imported,
    what PySpark makes only with a session (team_d's module-level pandas UDF) loads under a local session of
    its own, stopped at once, as ``strata run`` loads it under the run's session."""
    try:
        return load_jobs(path)
    except SessionNeeded:
        from pyspark.sql import SparkSession

        spark = SparkSession.builder.master("local[1]").appName("bench-platform-jobs").getOrCreate()
        try:
            return load_jobs(path)
        finally:
            spark.stop()


def jobs_of(app: str, workload: Workload, declared: list | None = None) -> list:
    """The jobs one application runs, of ``declared`` (default: the workload file's, as first loaded): the
    critical one alone, the others (a dedicated deployment's second application), or all of them."""
    declared = declared_jobs(workload.jobs) if declared is None else declared
    if app == "alone" or app in BULK:
        return [j for j in declared if j.id == workload.critical]
    if app in BULK.values():
        return [j for j in declared if j.id != workload.critical]
    return declared


def order_of(modes: list[str], index: int) -> list[str]:
    """The order in which the ``index``-th seed (0, 1, …) runs the modes: as given, reversed on every other seed
    (the JVM and the machine keep warming up, and whoever runs last gains)."""
    return list(modes) if index % 2 == 0 else list(reversed(modes))


def horizon_of(args) -> float:
    """The event time measured (seconds after the producers' epoch): the run less its drain."""
    return max(0.0, args.duration - DRAIN_S)


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
    """One mode on a fresh input directory filled in real time from the same seeded source, once its
    applications are up. ``spark``: this script's session, which runs the mode's first application (warm
    protocol), or None: every application a process of its own (:func:`launch`; cold protocol)."""
    base = work / f"{mode}-{seed}"
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    if mode == "strata-cells":
        return run_cells(base, seed, args)
    load = os.getloadavg()[0]
    WORKLOADS[args.workload].layout(base / "input", source_of(seed, args))  # every query starts before its input
    here = applications(mode)[:1] if spark is not None else ()
    children = {app: launch(base, app, seed, args) for app in applications(mode) if app not in here}
    producers: list = []
    try:
        warmed = {app: warm_if_strata(spark, app, base, args) for app in here}
        wait_ready(base, children)
        epoch, producers = start_input(base, seed, args)
        (base / "go.tmp").write_text(repr(epoch))  # written whole, then renamed: the applications poll for it
        (base / "go.tmp").rename(base / "go")
        rows = []
        if here:
            rows = with_warm_up(run_jobs(spark, here[0], seed, base, epoch, args), warmed[here[0]])
        for app, child in children.items():
            if child.wait(timeout=args.duration + 300) != 0:
                raise RuntimeError(f"{mode}: the application {app} failed: see {base / f'{app}.log'}")
            rows += json.loads((base / f"{app}.json").read_text())
    finally:
        for p in producers:
            p.stop()
        for child in children.values():
            if child.poll() is None:
                child.kill()
    tables = [metrics_of(base / f"run-{app}", 0.0) for app in applications(mode)]
    latency, batches = (
        pd.concat([t[i] for t in tables if not t[i].empty] or [pd.DataFrame()], ignore_index=True) for i in (0, 1)
    )
    return on_common_windows([{**r, "mode": mode, "load_before": load} for r in rows], mode, latency, batches, args)


def run_cells(base: Path, seed: int, args) -> list[dict]:
    """The default command (``strata run jobs.py``, a child process reading ``base/input``): the producers start
    once its cells are up; one row per job from its metrics."""
    if args.cap_reads:
        raise SystemExit("--cap-reads: not a knob of the default command; run strata-cells without it")
    WORKLOADS[args.workload].layout(base / "input", source_of(seed, args))
    out = base / "run-strata-cells"
    log = (base / "strata-cells.log").open("w")
    load = os.getloadavg()[0]
    command = [sys.executable, "-m", "strata", "run", str(WORKLOADS[args.workload].jobs), "--out", str(out)]
    command += ["--duration", str(args.duration + 3.5)]
    child = subprocess.Popen(
        command, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "STRATA_INPUT": str(base / "input")}
    )
    deadline = time.time() + 300
    while CELLS_READY not in (base / "strata-cells.log").read_text(errors="replace"):
        if child.poll() is not None or time.time() > deadline:
            child.kill()
            raise RuntimeError(f"strata-cells did not start its cells: see {base / 'strata-cells.log'}")
        time.sleep(0.2)
    epoch, producers = start_input(base, seed, args)
    (base / "go").write_text(repr(epoch))  # the producers' epoch, as the other modes' applications read it
    try:
        code = child.wait(timeout=args.duration + 600)
    finally:
        for p in producers:
            p.stop()
        log.close()
    if code not in (0, 1):  # 1: a query died or a sink mismatched, which its rows show
        raise RuntimeError(f"strata-cells exited {code}: see {base / 'strata-cells.log'}")
    measured = pd.read_csv(out / "metrics" / "summary.csv").to_dict("records")
    rows = [
        {**r, "mode": "strata-cells", "seed": seed, "load_before": load, "python_cpu_s": None, "died": None}
        for r in measured
    ]
    own_epoch = float(json.loads((out / "strata" / "run.json").read_text())["epoch"])  # its sources' epoch
    return on_common_windows(rows, "strata-cells", *metrics_of(out, own_epoch - epoch), args)


def launch(base: Path, app: str, seed: int, args) -> subprocess.Popen:
    """Start one application of a mode in a process of its own (this script with ``--serve``); a dedicated
    deployment's second application at ``nice`` +``--bulk-nice``."""
    command = [sys.executable, __file__, "--serve", str(base), "--modes", app, "--seeds", str(seed)]
    command += ["--duration", str(args.duration), "--rate", str(args.rate), "--burst", str(args.burst)]
    command += ["--protocol", args.protocol, "--workload", args.workload, *(["--cap-reads"] if args.cap_reads else [])]
    command += ["--meta", args.meta]
    if app in BULK.values():
        command = ["nice", "-n", str(args.bulk_nice), *command]
    log = (base / f"{app}.log").open("w")
    return subprocess.Popen(command, stdout=log, stderr=log)


def wait_ready(base: Path, children: dict[str, subprocess.Popen]) -> None:
    """Return once every application in ``children`` is up (its ``base/<app>.ready``)."""
    deadline = time.time() + 300
    for app, child in children.items():
        while not (base / f"{app}.ready").exists():
            if child.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"the application {app} did not start: see {base / f'{app}.log'}")
            time.sleep(0.2)


def serve(base: Path, args) -> None:
    """One application (mode ``args.modes[0]``) in a process of its own: build its session (warm protocol: then a
    warm-up run on input of its own; Strata's: its queries warmed, :func:`warm_if_strata`), say it is up
    (``base/<app>.ready``), wait for the epoch (``base/go``), run its queries on ``base/input`` (the producers
    belong to the benchmark's process) and write their rows (``base/<app>.json``)."""
    from strata.spark.session import build_session

    app = args.modes[0]
    spark = build_session(
        f"bench-platform-{app}", cores=2, shuffle_partitions=2, pools=POOLS, work_dir=base / f"spark-{app}"
    )
    spark.sparkContext.setLogLevel("FATAL")
    try:
        if args.protocol == "warm":
            run_one(spark, app, 0, argparse.Namespace(**{**vars(args), "duration": WARM_UP_S}), base / "warmup")
        warmed = warm_if_strata(spark, app, base, args)
        (base / f"{app}.ready").touch()
        while not (base / "go").exists():
            time.sleep(0.05)
        epoch = float((base / "go").read_text())
        rows = with_warm_up(run_jobs(spark, app, args.seeds[0], base, epoch, args), warmed)
    finally:
        spark.stop()
    (base / f"{app}.json").write_text(json.dumps(rows, default=str))


def warm_if_strata(spark, app: str, base: Path, args) -> Warmed | None:
    """Strata's own application ``app`` warms its queries before the epoch as ``strata run --cells 1`` does
    (:func:`strata.runners.warmup.warm_application`, on a scratch directory under ``base``): what it did. A
    baseline's, as a team starts plain Spark, does not (None)."""
    if app not in CONTROLLED:
        return None
    return warm_application(spark, scenario_of(app, base, args), base / f"warmup-{app}")


def with_warm_up(rows: list[dict], warmed: Warmed | None) -> list[dict]:
    """An application's rows with what its warm-up did: its wall seconds (before the epoch) and, per job, why it
    was not warmed (None: it was); a baseline's without."""
    if warmed is None:
        return rows
    return [{**r, "warm_up_s": warmed.seconds, "not_warmed": warmed.skipped.get(r["job"])} for r in rows]


def scenario_of(app: str, base: Path, args) -> Scenario:
    """Application ``app``'s jobs, reading ``base/input``: the workload's file loaded afresh, as the file reads
    its input directory when it is loaded (a copy loaded before would read another run's)."""
    os.environ["STRATA_INPUT"] = str(base / "input")
    workload = WORKLOADS[args.workload]
    return with_python_jobs(jobs_of(app, workload, load_jobs(workload.jobs)), [], args.workload)


def run_jobs(spark, app: str, seed: int, base: Path, epoch: float, args) -> list[dict]:
    """Run application ``app``'s jobs on ``base/input`` from ``epoch`` for the run's duration, its run directory
    ``base/run-<app>``; one row per job."""
    workload = WORKLOADS[args.workload]
    scenario = scenario_of(app, base, args)
    config = RunConfig(
        sink="parquet",
        pools=hand_pools(scenario) if app in ("fair", "fair+limits", "bulk") else {},
        read_limits=workload.static_limits if app == "fair+limits" else {},
        control=replace(with_meta(RunConfig().control, args.meta), cap_reads=args.cap_reads),
    )
    cpu = os.times()
    out = base / f"run-{app}"
    result = run_mode(
        spark, scenario, "strata" if app in CONTROLLED else "baseline", out, config, epoch, epoch + args.duration
    )
    python_cpu = sum(os.times()[:2]) - sum(cpu[:2])  # this process: Strata's loop, py4j calls (warm: the producers)
    measured = collect([result], scenario, horizon_of(args), spark, out, {"config": {}}, {})
    failures = result.engine.failures()
    rows = []
    for r in measured.summary.to_dict("records"):
        rows.append(
            {
                **r,
                "mode": app,
                "seed": seed,
                "python_cpu_s": python_cpu,
                "died": failures.get(r["job"]),
            }
        )
    return rows


def metrics_of(run_dir: Path, shift_s: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A run directory's per-output latencies and per-batch rows (``metrics/latency.csv``, ``batches.csv``), their
    times moved by ``shift_s`` (the run's own sources' epoch less the producers')."""
    tables = []
    for name, column in (("latency", "event_s"), ("batches", "t_finished")):
        path = run_dir / "metrics" / f"{name}.csv"
        frame = pd.read_csv(path) if path.exists() and path.stat().st_size > 1 else pd.DataFrame()
        tables.append(frame.assign(**{column: frame[column] + shift_s}) if not frame.empty else pd.DataFrame())
    return tables[0], tables[1]


def application_of(cmdline: str) -> str | None:
    """The application a process of a mode starts (``<mode>-<seed>.<app>``), for :class:`app_cpu.AppCpu`: this
    script serving one (``--serve BASE --modes APP``), ``strata run``'s fleet process (``fleet``: the controller
    and the cell it hosts) or one of its cells (``strata.runners.cell OUT/cells/<cell>/cell.spec``)."""
    words = cmdline.split()
    if "--serve" in words and "--modes" in words:
        return f"{Path(words[words.index('--serve') + 1]).name}.{words[words.index('--modes') + 1]}"
    if "strata" in words and "run" in words and "--out" in words:
        return f"{Path(words[words.index('--out') + 1]).parent.name}.fleet"
    if "strata.runners.cell" in words:
        spec = Path(words[words.index("strata.runners.cell") + 1])
        return f"{spec.parents[3].name}.{spec.parent.name}"
    return None


def cpu_figures(cpu: AppCpu, mode: str, seed: int, args) -> list[dict]:
    """Per application of a mode's run (cold protocol): its core-seconds from the producers' epoch to
    ``--duration`` (all its processes; and per role, its live processes'), and for the one running the critical
    job, those inside its batches and between them."""
    base = args.work / f"{mode}-{seed}"
    epoch = float((base / "go").read_text())
    end = epoch + args.duration
    critical = WORKLOADS[args.workload].critical
    if mode == "strata-cells":
        run = base / "run-strata-cells"
        batches = pd.read_csv(run / "metrics" / "batches.csv")
        batches = batches[batches["job"] == critical]
        hosted = re.search(r"this process hosts (\S+)", (base / "strata-cells.log").read_text(errors="replace"))
        cell = str(batches["cell"].iloc[0]) if not batches.empty else None
        holder = "fleet" if hosted is not None and hosted.group(1) == cell else cell
    else:
        holder = applications(mode)[0]
        path = base / f"run-{holder}" / "metrics" / "batches.csv"
        batches = pd.read_csv(path) if path.exists() else pd.DataFrame(columns=["job", "started", "finished"])
        batches = batches[batches["job"] == critical]
    rows = []
    for app in cpu.apps():
        if not app.startswith(f"{base.name}."):
            continue
        name = app[len(base.name) + 1 :]
        used = cpu.core_s(app, epoch, end)
        row = {"seed": seed, "mode": mode, "app": name, "core_s": used, "cores": used / args.duration}
        row.update({f"{role}_s": v for role, v in cpu.roles(app, epoch, end).items()})
        if name == holder:
            spans = list(zip(batches["started"], batches["finished"], strict=True))
            row["critical_batches"] = sum(1 for s, f in spans if s < end and f > epoch)
            row.update(cpu.split(app, epoch, end, spans))
        rows.append(row)
    return rows


def window_figures(
    latency: pd.DataFrame, batches: pd.DataFrame, scenario: Scenario, start_s: float, horizon_s: float, stop_s: float
) -> dict[str, dict]:
    """Per job of ``scenario``, what a window measured (times in seconds from the producers' epoch): the outputs
    with event time in [``start_s``, ``horizon_s``) delivered by ``stop_s`` (count, p50, p99, misses, on-time
    importance) and the input rows its batches committed from ``start_s`` to ``stop_s`` per second;
    :func:`strata.spark.measure.job_summary` over that window. ``latency`` and ``batches``: as ``metrics/``
    holds them."""
    if latency.empty:
        latency = pd.DataFrame(columns=["job", "event_s", "latency_s", "template", "delivered"])
    if not batches.empty:
        batches = batches[(batches["t_finished"] >= start_s) & (batches["t_finished"] <= stop_s)]
        batches = batches.assign(mode="window")
    by_stop = ~latency["delivered"].astype(bool) | (latency["event_s"] + latency["latency_s"] <= stop_s)
    window = latency[by_stop].assign(mode="window", event_s=lambda f: f["event_s"] - start_s)
    measured = job_summary(
        window, batches, pd.DataFrame(), scenario, "window", max(0.0, horizon_s - start_s), stop_s - start_s
    )
    return {r["job"]: r for r in measured}


WHOLE = ("outputs", "delivered", "p50_s", "p99_s", "misses", "miss_rate", "throughput", "importance")
SETTLED = {
    "outputs": "outputs_settled",
    "p99_s": "p99_settled_s",
    "misses": "misses_settled",
    "throughput": "throughput_settled",
    "importance": "importance_settled",
}


def on_common_windows(rows: list[dict], mode: str, latency: pd.DataFrame, batches: pd.DataFrame, args) -> list[dict]:
    """``rows`` (one per job of ``mode``) measured on the windows every mode shares (:func:`window_figures`: from
    the producers' epoch, delivered or committed by ``--duration``): the whole run (event time from 0) in place
    of the run's own figures, kept as ``<figure>_own`` (those count to the run's own stop: for the in-process
    modes the batches that finish while the queries stop, for ``strata-cells`` its own epoch and a stop that
    comes as late as its start-up), and beside it the settled one (event time from ``--settle``)."""
    workload = WORKLOADS[args.workload]
    ids = {j.id for app in applications(mode) for j in jobs_of(app, workload)}
    scenario = with_python_jobs([j for j in declared_jobs(workload.jobs) if j.id in ids], [], args.workload)
    whole = window_figures(latency, batches, scenario, 0.0, horizon_of(args), args.duration)
    settled = window_figures(latency, batches, scenario, args.settle, horizon_of(args), args.duration)
    return [
        {
            **r,
            **{f"{k}_own": r[k] for k in WHOLE},
            **{k: whole[r["job"]][k] for k in WHOLE},
            **{name: settled[r["job"]][k] for k, name in SETTLED.items()},
        }
        for r in rows
    ]


def summary(rows: list[dict], critical: str) -> list[dict]:
    """Per seed and baseline: the critical query's p99 and misses over Strata's, Strata's bulk throughput over
    the baseline's, both total importances, and the critical query's p99 alone (the floor); whole run and
    settled."""
    out = []
    for seed in sorted({r["seed"] for r in rows}):
        mine = [r for r in rows if r["seed"] == seed]

        def of(mode: str, job: str, key: str, mine=mine):
            return next((r[key] for r in mine if r["mode"] == mode and r["job"] == job), None)

        def bulk(mode: str, key: str, mine=mine) -> float:
            return sum(r[key] or 0.0 for r in mine if r["mode"] == mode and r["job"] != critical)

        def share(base: str, mine_mode: str, key: str) -> float | None:
            return bulk(mine_mode, key) / bulk(base, key) if bulk(base, key) else None

        def total(mode: str, key: str, mine=mine) -> float:
            return sum(r[key] or 0.0 for r in mine if r["mode"] == mode)

        def ratio(base: str, mine_mode: str, key: str) -> float | None:
            b, m = of(base, critical, key), of(mine_mode, critical, key)
            return b / m if b and m else None

        for mine_mode in (m for m in STRATA if any(r["mode"] == m for r in mine)):
            for base in (b for b in BASELINES if any(r["mode"] == b for r in mine)):
                out.append(
                    {
                        "seed": seed,
                        "strata": mine_mode,
                        "baseline": base,
                        "p99_ratio": ratio(base, mine_mode, "p99_s"),
                        "p99_settled_ratio": ratio(base, mine_mode, "p99_settled_s"),
                        "misses": (of(base, critical, "misses"), of(mine_mode, critical, "misses")),
                        "misses_settled": (
                            of(base, critical, "misses_settled"),
                            of(mine_mode, critical, "misses_settled"),
                        ),
                        "bulk_share": share(base, mine_mode, "throughput"),
                        "bulk_share_settled": share(base, mine_mode, "throughput_settled"),
                        "importance": (total(base, "importance"), total(mine_mode, "importance")),
                        "importance_settled": (
                            total(base, "importance_settled"),
                            total(mine_mode, "importance_settled"),
                        ),
                        "floor_p99": (of("alone", critical, "p99_s"), of("alone", critical, "p99_settled_s")),
                    }
                )
    return out


# How bad a summary figure is for Strata (higher: worse), by key: ratios of the baseline's to Strata's fall,
# Strata's misses rise past the baseline's, its total importance falls below the baseline's.
BADNESS = {
    "p99_ratio": lambda x: -x,
    "p99_settled_ratio": lambda x: -x,
    "bulk_share": lambda x: -x,
    "bulk_share_settled": lambda x: -x,
    "misses": lambda pair: pair[1] - pair[0],
    "misses_settled": lambda pair: pair[1] - pair[0],
    "importance": lambda pair: pair[0] - pair[1],
    "importance_settled": lambda pair: pair[0] - pair[1],
}


def _parts(value) -> tuple:
    """A figure's parts: a (baseline, Strata) pair's two, or the one value."""
    return value if isinstance(value, tuple) else (value,)


def worst(ratios: list[dict]) -> list[dict]:
    """Per Strata mode and baseline, the worst seed's value of each figure (:data:`BADNESS`; a figure missing on
    a seed is skipped), and in ``seeds`` which seed gave it; ``floor_p99``: the alert query's p99 alone on the
    seed of the worst p99 ratio, whole run and settled."""
    out = []
    for pair in dict.fromkeys((r["strata"], r["baseline"]) for r in ratios):
        mine = [r for r in ratios if (r["strata"], r["baseline"]) == pair]
        row: dict = {"seed": "worst", "strata": pair[0], "baseline": pair[1], "seeds": {}}
        for key, bad in BADNESS.items():
            known = [r for r in mine if r[key] is not None and None not in _parts(r[key])]
            pick = max(known, key=lambda r, key=key, bad=bad: bad(r[key]), default=None)
            row[key] = pick[key] if pick is not None else None
            row["seeds"][key] = pick["seed"] if pick is not None else None
        row["floor_p99"] = tuple(
            next((r["floor_p99"][i] for r in mine if r["seed"] == row["seeds"][key]), None)
            for i, key in enumerate(("p99_ratio", "p99_settled_ratio"))
        )
        out.append(row)
    return out


def fmt(x, spec: str) -> str:
    return "–" if x is None or x != x else format(x, spec)


def print_tables(rows: list[dict], ratios: list[dict], args) -> None:
    """The per-job table and the comparison (per seed, then each pair's worst seed)."""
    critical = WORKLOADS[args.workload].critical
    title = f"platform ({args.protocol}): {args.duration:g} s, rate {args.rate:g}/s × {args.burst:g} bursts, local[2]"
    table = Table(title=title)
    columns = ("seed", "mode", "job", "outputs", "p50 s", "p99 s", "misses", "rows/s", "importance")
    for col in (*columns, f"settled ≥{args.settle:g} s: outputs", "p99 s", "misses", "rows/s", "importance"):
        table.add_column(col, justify="left" if col in ("mode", "job") else "right")
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
            str(r["outputs_settled"]),
            fmt(r["p99_settled_s"], ".2f"),
            str(r["misses_settled"]),
            fmt(r["throughput_settled"], ".0f"),
            fmt(r["importance_settled"], ".1f"),
        )
    console = Console(width=None if sys.stdout.isatty() else 220)  # a log keeps every column whole
    console.print(table)
    versus = Table(
        title=f"{critical} (critical) and the bulk queries: each baseline against Strata; whole run and settled "
        f"(event time ≥ {args.settle:g} s); 'worst': each figure's worst seed for Strata (its seed in brackets)"
    )
    for col in ("seed", "Strata as", "baseline", "p99 ÷ Strata's", "settled", "misses (base / Strata)", "settled"):
        versus.add_column(col, justify="left" if col in ("Strata as", "baseline") else "right")
    for col in ("bulk rows/s: Strata ÷ base", "settled", "importance (base / Strata)", "settled"):
        versus.add_column(col, justify="right")
    versus.add_column(f"{critical} alone p99 s (settled)", justify="right")

    def cell(r: dict, key: str, text: str) -> str:
        seeds = r.get("seeds")
        return text if seeds is None or seeds[key] is None or len(args.seeds) < 2 else f"{text} ({seeds[key]})"

    def pair(r: dict, key: str, spec: str) -> str:
        return cell(r, key, "–" if r[key] is None else " / ".join(fmt(x, spec) for x in r[key]))

    for r in [*ratios, *worst(ratios)]:
        versus.add_row(
            str(r["seed"]),
            r["strata"],
            r["baseline"],
            cell(r, "p99_ratio", fmt(r["p99_ratio"], ".2f")),
            cell(r, "p99_settled_ratio", fmt(r["p99_settled_ratio"], ".2f")),
            pair(r, "misses", ""),
            pair(r, "misses_settled", ""),
            cell(r, "bulk_share", fmt(r["bulk_share"], ".2f")),
            cell(r, "bulk_share_settled", fmt(r["bulk_share_settled"], ".2f")),
            pair(r, "importance", ".1f"),
            pair(r, "importance_settled", ".1f"),
            " / ".join(fmt(x, ".2f") for x in r["floor_p99"]),
        )
    console.print(versus)


def print_cpu(cpu_rows: list[dict], args) -> None:
    """The applications' CPU (``--cpu``): per application, and for the critical one inside and between its
    batches."""
    table = Table(title=f"CPU per application from the epoch to {args.duration:g} s (core-seconds; app_cpu)")
    for col in ("seed", "mode", "app", "core-s", "cores", "driver", "jvm", "workers"):
        table.add_column(col, justify="left" if col in ("mode", "app") else "right")
    for col in ("critical batches", "in batches core-s", "per batch", "between core-s", "between cores"):
        table.add_column(col, justify="right")
    for r in cpu_rows:
        n = r.get("critical_batches")
        inside = r.get("in_batch_core_s")
        table.add_row(
            str(r["seed"]),
            r["mode"],
            r["app"],
            fmt(r["core_s"], ".1f"),
            fmt(r["cores"], ".2f"),
            fmt(r["driver_s"], ".1f"),
            fmt(r["jvm_s"], ".1f"),
            fmt(r["workers_s"], ".1f"),
            "" if n is None else str(n),
            fmt(inside, ".1f"),
            fmt(inside / n if n else None, ".3f"),
            fmt(r.get("between_core_s"), ".1f"),
            fmt(r["between_core_s"] / r["between_s"] if r.get("between_s") else None, ".2f"),
        )
    Console(width=None if sys.stdout.isatty() else 220).print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", choices=tuple(WORKLOADS), default="platform")
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1])
    parser.add_argument("--rate", type=float, default=300.0, help="mean events/s (bursts at --burst x)")
    parser.add_argument("--burst", type=float, default=3.0)
    parser.add_argument("--modes", nargs="+", choices=MODES + tuple(BULK.values()), default=list(COMPARED))
    parser.add_argument(
        "--protocol",
        choices=("cold", "warm"),
        default="cold",
        help="cold: every application a fresh process, the baselines with no warm-up (Strata's warm as its "
        "commands do); warm: the baselines after warm-up runs",
    )
    parser.add_argument(
        "--settle", type=float, default=20.0, help="settled figures: outputs of event time ≥ this after the epoch"
    )
    parser.add_argument(
        "--cap-reads", action="store_true", help="Strata mode: L0's rate caps as read limits (each change restarts)"
    )
    parser.add_argument(
        "--meta",
        default=OFF,
        help=f"Strata modes: the meta level ({OFF}, {ADAPTIVE}, or a composition 'dispatch/balancing' fixed; "
        "strata.control.meta)",
    )
    parser.add_argument(
        "--bulk-nice", type=int, default=10, help="dedicated mode: the bulk application's nice value (0-19)"
    )
    parser.add_argument(
        "--cpu",
        action="store_true",
        help="cold protocol: sample each application's CPU (app_cpu; cpuacct groups where cgroup v1 has them)",
    )
    parser.add_argument("--serve", type=Path, help=argparse.SUPPRESS)  # one application of a mode (launch)
    parser.add_argument("--work", type=Path, default=Path("/tmp/strata-bench-platform"))
    parser.add_argument("--out", type=Path, help="default: benchmarks/results/<workload>.json")
    args = parser.parse_args()
    args.out = args.out or RESULTS / f"{args.workload}.json"
    if args.serve is not None:
        serve(args.serve, args)
        return
    try:
        with_meta(RunConfig().control, args.meta)
    except ValueError as e:
        parser.error(str(e))
    if not 0 <= args.settle < horizon_of(args):
        parser.error(f"--settle: expected 0 ≤ s < the measured horizon ({horizon_of(args):g} s); found {args.settle:g}")
    spark = None
    if args.protocol == "warm":
        from strata.spark.session import build_session

        spark = build_session(
            "bench-platform", cores=2, shuffle_partitions=2, pools=POOLS, work_dir=args.work / "spark"
        )
        spark.sparkContext.setLogLevel("FATAL")
    if args.cpu and args.protocol != "cold":
        parser.error("--cpu: the cold protocol only (the warm one runs an application in this process)")
    declared_jobs(WORKLOADS[args.workload].jobs)  # before any timed run: it may start a session of its own
    rows: list[dict] = []
    cpu_rows: list[dict] = []
    cpu = AppCpu(application_of).start() if args.cpu else None
    try:
        if spark is not None:
            # not measured: the session's first queries pay the JVM's and the Python workers' warm-up, which
            # would fall on whichever mode ran first
            warm = argparse.Namespace(**{**vars(args), "duration": WARM_UP_S})
            run_one(spark, "alone", 0, warm, args.work / "warmup")
        for index, seed in enumerate(args.seeds):
            for mode in order_of(args.modes, index):
                rows += run_one(spark, mode, seed, args, args.work)
                if cpu is not None:
                    time.sleep(2 * cpu.interval_s)  # a sample past the window's end
                    cpu_rows += cpu_figures(cpu, mode, seed, args)
    finally:
        if spark is not None:
            spark.stop()
        if cpu is not None:
            cpu.stop()
    ratios = summary(rows, WORKLOADS[args.workload].critical)
    print_tables(rows, ratios, args)
    if cpu_rows:
        print_cpu(cpu_rows, args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "args": {k: str(v) for k, v in vars(args).items()},
                "rows": rows,
                "summary": ratios,
                "worst": worst(ratios),
                "cpu": cpu_rows,
            },
            indent=1,
            default=str,
        )
    )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
