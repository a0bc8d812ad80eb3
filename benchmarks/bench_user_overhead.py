"""Strata's own overhead on one uncontended user query: median batch time with and without Strata.

The query is the platform example's alert filter (a Python UDF over a directory of JSON files that
:mod:`strata.runners.producer` fills at a steady rate). ``plain``: the user's query as they would run it
without Strata — Spark's own Parquet file sink, the same trigger (as fast as possible). The figure is each
mode's median ``triggerExecution`` (Spark's own batch duration, from StreamingQueryProgress) over the batches
that read rows after the first ``--warmup`` of each run; the issue's target (28) is ≤ 50 ms added.

Two protocols:

- in one session (the default): ``strata`` is the same query under Strata's in-process loop
  (:func:`strata.runners.spark_loop.run_mode`: its ``foreachBatch`` sink with the gate, pool, sink-side timing,
  the controller's steps in the driver). Rounds alternate the two modes in one session (plain, strata, plain,
  …) so drift on a shared machine falls on both. Writes ``benchmarks/results/user_overhead.json``; seen: plain
  244 ms, strata 243 ms, −1 ms (2 × 40 s, 200 events/s).
- ``--default-command``: each mode a fresh process (a cold JVM each, so both pay the same start-up).
  ``plain`` is this script re-invoked with a hidden ``--plain-child`` (the same plain code path in a session
  of its own); ``strata`` is the default command, ``python -m strata run …/platform/jobs.py --jobs alerts``
  (a fleet: with one job L0 places one cell, which the fleet process hosts; what it did is recorded from its
  log's cells line and its run directory). The producer starts once the process says it is up (plain: its
  session built and the job loaded; strata: its cells line), a fresh input directory per run, the same seed
  per round; the modes' order alternates per round (plain first on even rounds). The strata run's batch
  times are its run directory's ``metrics/batches.csv`` (``batch_ms``: the same ``triggerExecution``, from
  its engine's progress listener; ``rows_in``: the batch's input rows). Writes
  ``benchmarks/results/user_overhead_default.json``. Seen (2 × 40 s, run twice): +10 ms (plain 358.5 ms,
  strata 369 ms; load 2.9–4.1; per round −18, +39) and +78 ms (plain 321, strata 399.5; load 1.3–2.4; per
  round +63, +88: ``user_overhead_default_run2.json``), so over the target on the quieter machine; on the tree of
  28 Nov (3 × 40 s, load 1.0–1.8) +36 ms (plain 170, strata 206; per round +23.5, +38, +33.5:
  ``user_overhead_stop40.json``). Where it
  goes (that run's progress rows, medians after warm-up): every phase of Spark's trigger grows a little, no
  one step — ``addBatch`` +31–42 ms, ``latestOffset`` +12–19 ms, the rest (offset log and commit writes)
  +22–31 ms, planning +0–3 ms. A probe sampling /proc over the steady state of one run each (plain 382 ms,
  strata 449 ms): the fleet's Python process 0.075 cores against plain's driver 0.054, its JVM 0.87 cores
  against 0.97, the UDF workers 0.09 in both — the JVM does no more work and gets less CPU, so the time is
  not the fleet's Python (status RPC, live view, controller) competing for cores. The same run with the cgroup
  backends hidden (cells by nice) gave 459.5 ms at load 6.8, unpaired: no sign that the cell's cgroup is the
  cause. Not yet isolated: the ``foreachBatch`` round trip to the Python driver in a cold process (the
  in-session protocol found it free in a warm one).

Usage: ``flock /tmp/strata-bench.lock .venv/bin/python benchmarks/bench_user_overhead.py [--default-command]
[--rounds 2] [--duration 40] [--rate 200]``. Prints a table; writes the JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
from rich.console import Console
from rich.table import Table

from strata.model import SourceSpec
from strata.model.user import load_jobs, with_python_jobs
from strata.protocol.units import POOLS
from strata.runners.producer import Producer
from strata.runners.spark_loop import RunConfig, run_mode
from strata.spark.listener import ProgressListener

ROOT = Path(__file__).resolve().parents[1]
JOBS = ROOT / "src" / "strata" / "examples" / "platform" / "jobs.py"
RESULTS = ROOT / "benchmarks" / "results" / "user_overhead.json"
RESULTS_DEFAULT = ROOT / "benchmarks" / "results" / "user_overhead_default.json"
CELLS_READY = "▸ cells ("  # what `strata run` prints once its cells are up, just before its queries start
JOB = "alerts"
TARGET_MS = 50.0


def batch_times(rows: list[dict], warmup: int) -> list[float]:
    """Milliseconds of each batch that read rows, after the first ``warmup`` (JVM and Python worker warm-up)."""
    timed = [r for r in rows if r.get("batch_ms") is not None and (r.get("input_rows") or 0) > 0]
    return [float(r["batch_ms"]) for r in sorted(timed, key=lambda r: r["batch_id"])[warmup:]]


def plain(spark, declared, base: Path, seconds: float) -> list[dict]:
    """The user's query on Spark alone: its own file sink and checkpoint, a listener for its progress."""
    listener = ProgressListener()
    spark.streams.addListener(listener)
    df = declared.templates[next(iter(declared.templates))](spark)
    query = (
        df.writeStream.queryName(JOB)
        .format("parquet")
        .option("path", str(base / "out"))
        .option("checkpointLocation", str(base / "checkpoint"))
        .start()
    )
    time.sleep(seconds)
    query.stop()
    listener.wait_terminated(query.runId)
    spark.streams.removeListener(listener)
    return listener.snapshot()


def under_strata(spark, declared, base: Path, seconds: float) -> list[dict]:
    scenario = with_python_jobs([declared], [], "overhead", cores=2)
    start = time.time()
    result = run_mode(spark, scenario, "strata", base / "run", RunConfig(), start, start + seconds)
    return result.engine.progress.snapshot()


def source(r: int, rate: float) -> SourceSpec:
    """Round ``r``'s input: steady ``rate`` events/s, its own seed (the same for both modes of the round)."""
    return SourceSpec(rate=rate, keys={"count": 200, "zipf_s": 1.1}, seed=r + 1)


def in_session(args) -> tuple[dict[str, list[float]], list[float], list[dict]]:
    """Both modes in this one session, plain first in every round: each mode's batch times and the load average
    before each run."""
    from strata.spark.session import build_session

    spark = build_session("bench-overhead", cores=2, shuffle_partitions=2, pools=POOLS, work_dir=args.work / "spark")
    spark.sparkContext.setLogLevel("FATAL")
    times: dict[str, list[float]] = {"plain": [], "strata": []}
    loads: list[float] = []
    try:
        for r in range(args.rounds):
            for mode in ("plain", "strata"):
                base = args.work / f"{mode}-{r}"
                os.environ["STRATA_INPUT"] = str(base / "input")
                (declared,) = [j for j in load_jobs(JOBS) if j.id == JOB]
                producer = Producer(base / "input" / "events", source(r, args.rate), time.time(), args.duration + 5.0)
                producer.start()
                time.sleep(1.0)  # the directory has its first file
                loads.append(os.getloadavg()[0])
                run = plain if mode == "plain" else under_strata
                times[mode] += batch_times(run(spark, declared, base, args.duration), args.warmup)
                producer.stop()
    finally:
        spark.stop()
    return times, loads, []


def plain_child(base: Path, args) -> None:
    """``plain`` in a process of its own (``--plain-child``): its session, the job loaded, ``base/ready``
    touched, the query run on ``base/input`` (``$STRATA_INPUT``) for ``--duration`` s; its progress rows to
    ``base/progress.json``."""
    from strata.spark.session import build_session

    spark = build_session("bench-overhead", cores=2, shuffle_partitions=2, pools=POOLS, work_dir=base / "spark")
    spark.sparkContext.setLogLevel("FATAL")
    try:
        (declared,) = [j for j in load_jobs(JOBS) if j.id == JOB]
        (base / "ready").touch()
        rows = plain(spark, declared, base, args.duration)
    finally:
        spark.stop()
    (base / "progress.json").write_text(json.dumps(rows, default=str))


def fleet_batches(out: Path) -> list[dict]:
    """The job's batches as a ``strata run`` measured them (``out/metrics/batches.csv``), as progress rows:
    ``batch_ms`` (Spark's triggerExecution), ``input_rows`` (its ``rows_in``), ``batch_id``."""
    frame = pd.read_csv(out / "metrics" / "batches.csv")
    frame = frame[frame["job"] == JOB]
    return [
        {"batch_id": int(r.batch_id), "batch_ms": r.batch_ms, "input_rows": r.rows_in}
        for r in frame.itertuples()
        if pd.notna(r.batch_ms) and pd.notna(r.rows_in)
    ]


def what_fleet_did(out: Path, log: Path) -> dict:
    """What the default command did with the one job: its cells line, the cell processes it started (a child
    cell keeps its log under ``out/cells/<cell>/cell.log``), the fleet's decisions on cells (placements,
    shares, moves)."""
    said = next((line.strip() for line in log.read_text(errors="replace").splitlines() if CELLS_READY in line), None)
    decisions = pd.read_csv(out / "metrics" / "decisions.csv")
    fleet = decisions[decisions["cell"] == "fleet"] if "cell" in decisions else decisions.iloc[0:0]
    return {
        "cells_line": said,
        "child_cells": sorted(p.parent.name for p in (out / "cells").glob("*/cell.log")),
        "fleet_decisions": [f"{r.kind} {r.job}: {r.detail}" for r in fleet.itertuples()],
        "moves": int((decisions["kind"] == "move").sum()),
    }


def fresh_run(mode: str, base: Path, r: int, args) -> tuple[list[dict], float, dict]:
    """One mode of round ``r`` as a fresh process reading ``base/input/events``, which a producer fills from the
    moment the process says it is up; its progress rows, the load average before it started, what it did."""
    (base / "input" / "events").mkdir(parents=True)
    log = base / f"{mode}.log"
    if mode == "plain":
        command = [sys.executable, __file__, "--plain-child", str(base), "--duration", str(args.duration)]

        def ready() -> bool:
            return (base / "ready").exists()
    else:
        command = [sys.executable, "-m", "strata", "run", str(JOBS), "--jobs", JOB]
        command += ["--duration", str(args.duration), "--out", str(base / "run")]

        def ready() -> bool:
            return CELLS_READY in log.read_text(errors="replace")

    load = os.getloadavg()[0]
    with log.open("w") as sink:
        child = subprocess.Popen(
            command, stdout=sink, stderr=subprocess.STDOUT, env={**os.environ, "STRATA_INPUT": str(base / "input")}
        )
    started = time.time()
    producer = None
    try:
        while not ready():
            if child.poll() is not None or time.time() > started + 300:
                raise RuntimeError(f"{mode}: the process did not come up: see {log}")
            time.sleep(0.1)
        up_s = time.time() - started
        producer = Producer(base / "input" / "events", source(r, args.rate), time.time(), args.duration + 5.0)
        producer.start()
        code = child.wait(timeout=args.duration + 600)
    finally:
        if producer is not None:
            producer.stop()
        if child.poll() is None:
            child.kill()
            child.wait()
    if code != 0:
        raise RuntimeError(f"{mode}: exited {code}: see {log}")
    if mode == "plain":
        return json.loads((base / "progress.json").read_text()), load, {"up_s": up_s}
    return fleet_batches(base / "run"), load, {"up_s": up_s, **what_fleet_did(base / "run", log)}


def default_command(args) -> tuple[dict[str, list[float]], list[float], list[dict]]:
    """Each mode a fresh process, the order alternating per round: each mode's batch times, the load average
    before each run, and per run what it was and did."""
    times: dict[str, list[float]] = {"plain": [], "strata": []}
    loads: list[float] = []
    runs: list[dict] = []
    for r in range(args.rounds):
        for mode in ("plain", "strata") if r % 2 == 0 else ("strata", "plain"):
            rows, load, did = fresh_run(mode, args.work / f"{mode}-{r}", r, args)
            measured = batch_times(rows, args.warmup)
            times[mode] += measured
            loads.append(load)
            median = statistics.median(measured) if measured else None
            runs.append({"round": r, "mode": mode, "batches": len(measured), "median_ms": median, **did})
    return times, loads, runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--duration", type=float, default=40.0, help="seconds per mode per round")
    parser.add_argument("--rate", type=float, default=200.0, help="events/s, steady")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument(
        "--default-command",
        action="store_true",
        help="each mode a fresh process: plain Spark against `strata run FILE --jobs alerts` (the fleet of cells)",
    )
    parser.add_argument("--plain-child", type=Path, help=argparse.SUPPRESS)  # plain in its own process (fresh_run)
    parser.add_argument("--work", type=Path, default=Path("/tmp/strata-bench-overhead"))
    parser.add_argument("--out", type=Path, help="default: benchmarks/results/user_overhead[_default].json")
    args = parser.parse_args()
    if args.plain_child is not None:
        plain_child(args.plain_child, args)
        return
    out = args.out or (RESULTS_DEFAULT if args.default_command else RESULTS)
    shutil.rmtree(args.work, ignore_errors=True)
    times, loads, runs = default_command(args) if args.default_command else in_session(args)
    medians = {m: statistics.median(t) if t else None for m, t in times.items()}
    added = medians["strata"] - medians["plain"] if None not in medians.values() else None
    protocol = "each a fresh process" if args.default_command else "one session"
    table = Table(
        title=f"{JOB} alone: median batch time (triggerExecution), {args.rounds} × {args.duration:g} s, {protocol}"
    )
    for col in ("mode", "batches", "median ms", "p90 ms"):
        table.add_column(col, justify="left" if col == "mode" else "right")
    for m, t in times.items():
        p90 = statistics.quantiles(t, n=10)[-1] if len(t) >= 10 else None
        table.add_row(m, str(len(t)), f"{medians[m]:.0f}" if medians[m] else "–", f"{p90:.0f}" if p90 else "–")
    console = Console()
    console.print(table)
    for run in runs:
        console.print(
            f"round {run['round']} {run['mode']}: {run['batches']} batches, median {run['median_ms']} ms, "
            f"up in {run['up_s']:.1f} s{'; ' + run['cells_line'] if run.get('cells_line') else ''}",
            highlight=False,
        )
    verdict = "–" if added is None else f"{added:+.0f} ms ({'within' if added <= TARGET_MS else 'over'} {TARGET_MS:g})"
    console.print(f"Strata adds {verdict} to the median batch; load average before each run: {loads}")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "args": {k: str(v) for k, v in {**vars(args), "out": out}.items()},
                "batch_ms": times,
                "median_ms": medians,
                "added_ms": added,
                "load_before": loads,
                **({"runs": runs} if runs else {}),
            },
            indent=1,
        )
    )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
