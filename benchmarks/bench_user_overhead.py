"""Strata's own overhead on one uncontended user query: median batch time with and without Strata.

The query is the platform example's alert filter (a Python UDF over a directory of JSON files that
:mod:`strata.runners.producer` fills at a steady rate). ``plain``: the user's query as they would run it
without Strata — Spark's own Parquet file sink, the same trigger (as fast as possible). ``strata``: the same
query under Strata's control loop (its ``foreachBatch`` sink with the gate, pool, sink-side timing, the
controller's steps in the driver). Rounds alternate the two modes in one session (plain, strata, plain, …) so
drift on a shared machine falls on both. The figure is each mode's median ``triggerExecution`` (Spark's own
batch duration, from StreamingQueryProgress) over the batches after the first ``--warmup`` of each round; the
issue's target is ≤ 50 ms added.

Usage: ``.venv/bin/python benchmarks/bench_user_overhead.py [--rounds 2] [--duration 40] [--rate 200]``.
Prints a table; writes ``benchmarks/results/user_overhead.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import time
from pathlib import Path

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--duration", type=float, default=40.0, help="seconds per mode per round")
    parser.add_argument("--rate", type=float, default=200.0, help="events/s, steady")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--work", type=Path, default=Path("/tmp/strata-bench-overhead"))
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    from strata.spark.session import build_session

    shutil.rmtree(args.work, ignore_errors=True)
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
                source = SourceSpec(rate=args.rate, keys={"count": 200, "zipf_s": 1.1}, seed=r + 1)
                producer = Producer(base / "input" / "events", source, time.time(), args.duration + 5.0)
                producer.start()
                time.sleep(1.0)  # the directory has its first file
                loads.append(os.getloadavg()[0])
                run = plain if mode == "plain" else under_strata
                times[mode] += batch_times(run(spark, declared, base, args.duration), args.warmup)
                producer.stop()
    finally:
        spark.stop()
    medians = {m: statistics.median(t) if t else None for m, t in times.items()}
    added = medians["strata"] - medians["plain"] if None not in medians.values() else None
    table = Table(title=f"{JOB} alone: median batch time (triggerExecution), {args.rounds} × {args.duration:g} s")
    for col in ("mode", "batches", "median ms", "p90 ms"):
        table.add_column(col, justify="left" if col == "mode" else "right")
    for m, t in times.items():
        p90 = statistics.quantiles(t, n=10)[-1] if len(t) >= 10 else None
        table.add_row(m, str(len(t)), f"{medians[m]:.0f}" if medians[m] else "–", f"{p90:.0f}" if p90 else "–")
    console = Console()
    console.print(table)
    verdict = "–" if added is None else f"{added:+.0f} ms ({'within' if added <= TARGET_MS else 'over'} {TARGET_MS:g})"
    console.print(f"Strata adds {verdict} to the median batch; load average before each mode: {loads}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "args": {k: str(v) for k, v in vars(args).items()},
                "batch_ms": times,
                "median_ms": medians,
                "added_ms": added,
                "load_before": loads,
            },
            indent=1,
        )
    )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
