"""What one more task costs: a bulk query's batches split into more tasks, its CPU per record (issue 29).

Spark cannot preempt a task, so Strata splits a bulk job's batches into tasks whose longest fits the critical jobs'
slack (``strata.control.micro_batches``); every task has a fixed cost (its launch, its input split, its sink
file), which the split multiplies. This measures it, for the floor the split keeps (``HierarchyConfig.
task_overhead_s``, :func:`strata.control.micro_batches.fewest_records`): the demo's `scoring` template (its
generated source and its map, from ``examples/demo.yaml``) reads a fixed number of records in batches of
``--batch-rows`` with ``--splits`` input partitions each, written as Parquet by Spark, alone in an embedded
session; each run's CPU is the driver's Python (``os.times``) and every process below it (its JVM, the Python
workers: ``app_cpu.AppCpu``, cpuacct where the machine has it). The splits alternate over ``--rounds`` (the JVM
keeps warming up), after one run that is not counted.
The per-task cost is the least-squares slope of a run's core-seconds on its tasks (batches × splits).

Usage: ``flock /tmp/strata-bench.lock .venv/bin/python benchmarks/bench_task_split.py [--splits 2 8 16]
[--rounds 2] [--batch-rows 10000] [--end-s 40] [--json PATH]``. Timing-dependent; a few minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from app_cpu import AppCpu
from strata.model import load_scenario
from strata.spark.session import build_session
from strata.spark.sources import register, synthetic_options

ROOT = Path(__file__).resolve().parents[1]
SPARK = "session"  # every process below this one: the session's JVM and its Python workers


def own_cpu_s() -> float:
    """This process's core-seconds so far (the driver's Python, every thread)."""
    used = os.times()
    return used.user + used.system


def run_once(spark, source, expressions: list[str], splits: int, args, work: Path, cpu: AppCpu) -> dict:
    """One run: the query over ``args.end_s`` of generated input in batches of ``args.batch_rows``, ``splits``
    input partitions each; its core-seconds, this process's and everything below it (``cpu``)."""
    out = work / "out"
    shutil.rmtree(out, ignore_errors=True)
    opts = synthetic_options(
        source, clock="virtual", end_s=args.end_s, epoch=1.7e9, partitions=splits, max_rows_per_batch=args.batch_rows
    )
    df = spark.readStream.format("strata-generator").options(**opts).load().selectExpr(*expressions, "event_time")
    query = (
        df.writeStream.foreachBatch(lambda batch, batch_id: batch.write.parquet(str(out / f"batch={batch_id}")))
        .trigger(availableNow=True)
        .option("checkpointLocation", str(work / f"checkpoint-{time.monotonic_ns()}"))
        .start()
    )
    own0, t0 = own_cpu_s(), time.time()
    query.awaitTermination()
    t1 = time.time()
    time.sleep(2 * cpu.interval_s)  # the sampler's next samples bracket the run's end
    used, wall = own_cpu_s() - own0 + cpu.core_s(SPARK, t0, t1), t1 - t0
    batches = [p for p in query.recentProgress if p["numInputRows"] > 0]
    rows = sum(p["numInputRows"] for p in batches)
    return {
        "splits": splits,
        "batches": len(batches),
        "tasks": len(batches) * splits,
        "rows": rows,
        "wall_s": wall,
        "cpu_s": used,
        "cpu_us_per_row": used / rows * 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--splits", type=int, nargs="+", default=[2, 8, 16])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batch-rows", type=int, default=10_000)
    parser.add_argument("--end-s", type=float, default=40.0)
    parser.add_argument("--spec", type=Path, default=ROOT / "examples" / "demo.yaml")
    parser.add_argument("--json", type=Path, default=ROOT / "benchmarks" / "results" / "task_split.json")
    args = parser.parse_args()
    template = load_scenario(args.spec).job["scoring"].templates[0]
    source = template.operator["txns"].source
    expressions = list(template.operator["score"].expressions)
    work = Path(tempfile.mkdtemp(prefix="strata-task-split-"))
    cpu = AppCpu(lambda cmdline: SPARK).start()  # the JVM and its Python workers, short-lived children included
    spark = build_session("bench_task_split", cores=2, work_dir=work / "spark")
    register(spark)
    plan = [s for k in range(args.rounds) for s in (args.splits if k % 2 == 0 else args.splits[::-1])]
    try:
        run_once(spark, source, expressions, args.splits[0], args, work, cpu)  # JVM and workers warm: not counted
        runs = [run_once(spark, source, expressions, s, args, work, cpu) for s in plan]
    finally:
        spark.stop()
        cpu.stop()
        shutil.rmtree(work, ignore_errors=True)
    slope, intercept = np.polyfit([r["tasks"] for r in runs], [r["cpu_s"] for r in runs], 1)
    table = Table(title=f"bench_task_split: `scoring`, batches of {args.batch_rows} records")
    for col in ("splits", "batches", "tasks", "records", "wall s", "core-s", "µs/record"):
        table.add_column(col, justify="right")
    for r in runs:
        table.add_row(
            *(str(r[k]) for k in ("splits", "batches", "tasks", "rows")),
            f"{r['wall_s']:.1f}",
            f"{r['cpu_s']:.1f}",
            f"{r['cpu_us_per_row']:.0f}",
        )
    console = Console(width=160)
    console.print(table)
    console.print(f"per task: {slope:.3f} core-s (least squares over {len(runs)} runs; intercept {intercept:.1f})")
    result = {
        "command": " ".join(["benchmarks/bench_task_split.py", *sys.argv[1:]]),
        "runs": runs,
        "task_overhead_s": slope,
        "load_average": os.getloadavg(),
    }
    args.json.write_text(json.dumps(result, indent=1, default=str))
    console.print(f"→ {args.json}")


if __name__ == "__main__":
    main()
