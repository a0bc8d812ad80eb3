"""What one more cell (Spark application) costs in CPU: the figure behind ``strata.plan.cells.CELL_OVERHEAD_CORES``.

Starts a local Spark application (``local[1]``, no UI), lets it settle, then measures the CPU time of its
driver JVM (the child processes of this interpreter) and of this interpreter over ``--seconds``: first idle
(no query: what the application costs whatever it runs), then with one tiny streaming query (``rate`` source
at 10 rows/s into the ``noop`` sink on a 1 s trigger: mostly the driver's per-query work — planning, offset
and commit logs — which belongs to the query, not to the cell; in local mode the query's tiny tasks run in the
same JVM and are counted with it). Figures are cores (CPU seconds per wall second).

Usage: ``flock /tmp/strata-bench.lock .venv/bin/python benchmarks/bench_cell_overhead.py [--seconds 30]``.
Prints a table; writes ``benchmarks/results/cell_overhead.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from pyspark.sql import SparkSession
from rich.console import Console
from rich.table import Table

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "cell_overhead.json"


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (from /proc; its exited children not included)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children() -> list[int]:
    """This interpreter's child processes (the driver JVM PySpark started)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == os.getpid():
                        out.append(int(entry))
            except OSError:
                continue
    return out


def cores_over(seconds: float, pids: list[int]) -> float:
    def used() -> float:
        return sum(cpu_seconds(p) for p in pids) + time.process_time()

    t0, c0 = time.monotonic(), used()
    time.sleep(seconds)
    return (used() - c0) / (time.monotonic() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=30.0, help="measuring window per case")
    ap.add_argument("--settle", type=float, default=10.0, help="seconds before each window")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
    try:
        time.sleep(args.settle)
        pids = children()
        idle = cores_over(args.seconds, pids)
        query = (
            spark.readStream.format("rate").option("rowsPerSecond", 10).load()
            .writeStream.format("noop").trigger(processingTime="1 second").start()
        )  # fmt: skip
        time.sleep(args.settle)
        one_query = cores_over(args.seconds, pids)
        query.stop()
    finally:
        spark.stop()
    load = os.getloadavg()[0]
    table = Table(title=f"one Spark application's CPU (local[1], {args.seconds:g} s windows, load {load:.2f})")
    table.add_column("case")
    table.add_column("cores", justify="right")
    table.add_row("idle application (the cell's overhead)", f"{idle:.4f}")
    table.add_row("one tiny query, 1 s trigger", f"{one_query:.4f}")
    table.add_row("the query's own work (driver and tasks: one JVM in local mode)", f"{one_query - idle:.4f}")
    Console().print(table)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {"seconds": args.seconds, "load_1min": load, "idle_cores": idle, "one_query_cores": one_query}, indent=2
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
