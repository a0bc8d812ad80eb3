"""The Spark data plane's floor: sustained rows/s per core per operator kind, and per-batch overhead.

Each operator kind runs as its own pipeline on one embedded session
(local[CORES]), from the generator source with a virtual clock (everything
available at once) and a fixed batch size, so every micro-batch is full and
the query runs flat out. Sustained rate = rows of batches 2..n / their wall
time (batch 0 and 1 pay Python worker start-up and are left out, and a
warm-up pipeline runs before the first kind). Per-batch overhead = median time
per phase of a micro-batch (Spark's durationMs) with 100-row batches, where
the work per batch is negligible.

    .venv/bin/python benchmarks/bench_spark.py [--cores 2] [--batch 50000] [--batches 6] [--quick]

The machine is shared: the figures are as measured, under whatever else ran.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import platform
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from strata.model import Job
from strata.spark import build_session
from strata.spark.pipelines import Pipeline, PipelineOptions

SOURCE = {"arrivals": {"process": "constant"}, "keys": {"count": 10000, "zipf_s": 1.0}, "seed": 1}
KINDS: dict[str, tuple[list[dict], frozenset[str] | None]] = {
    "source only (map id,key,value)": ([{"name": "m", "kind": "map", "expressions": ["id", "key", "value"]}], None),
    "filter (value > 0.5)": ([{"name": "f", "kind": "filter", "predicate": "value > 0.5"}], None),
    "map (3 expressions)": (
        [{"name": "m", "kind": "map", "expressions": ["id", "key", "value * 2 AS v2", "sqrt(value) AS r"]}],
        None,
    ),
    "join (stream–static, 10k rows)": ([{"name": "j", "kind": "join", "join": {"rows": 10000}}], None),
    "window_aggregate (Spark state)": (
        [{"name": "w", "kind": "window_aggregate", "window": {"size_s": 1, "watermark_s": 0.5}}],
        None,
    ),
    "window_aggregate (Strata store)": (
        [{"name": "w", "kind": "window_aggregate", "key_groups": 64, "window": {"size_s": 1, "watermark_s": 0.5}}],
        frozenset({"w"}),
    ),
    "keyed_stateful (Spark state)": ([{"name": "k", "kind": "keyed_stateful"}], frozenset()),
    "keyed_stateful (Strata store)": ([{"name": "k", "kind": "keyed_stateful", "key_groups": 64}], None),
}


def job(name: str, ops: list[dict], rate: float) -> Job:
    source = {**SOURCE, "rate": rate}
    chain = [{"name": "src", "kind": "source", "source": source}, *ops, {"name": "out", "kind": "sink"}]
    names = [o["name"] for o in chain]
    return Job.model_validate(
        {
            "id": name,
            "rank": 1,
            "templates": [
                {"operators": chain, "streams": [{"from": a, "to": b} for a, b in itertools.pairwise(names)]}
            ],
        }
    )


def measure(spark, root: Path, name: str, ops: list[dict], managed, batch: int, batches: int, cores: int) -> dict:
    """Run one pipeline to the end of its finite input; batch durations from the sink-side records.

    The source rate is chosen so the input is exactly ``batches`` batches of
    ``batch`` rows: 10 ticks of 0.1 s per batch, constant arrivals.
    """
    rows = batch * batches
    rate = batch  # rows per second of event time: one batch = 1 s = 10 ticks
    opts = PipelineOptions(
        sink="parquet",
        clock="virtual",
        end_s=float(batches),
        epoch=1_700_000_000.0,
        max_rows_per_batch=batch,
        available_now=True,
        managed=managed,
        input_partitions=cores,
        state_partitions=cores,
    )
    j = job("q" + str(abs(hash(name)) % 10**6), ops, rate)
    shutil.rmtree(root / j.id, ignore_errors=True)
    p = Pipeline(spark, j, j.templates[0], root / j.id, opts)
    p.start()
    p.query.awaitTermination()
    if p.query.exception() is not None:
        raise RuntimeError(f"{name}: {p.query.exception()}")
    recs = sorted(p.batch_records(), key=lambda r: r["batch_id"])
    progress = {r["batchId"]: r for r in p.query.recentProgress}
    steady = [r for r in recs if r["batch_id"] >= 2]
    wall = steady[-1]["finished"] - recs[1]["finished"]
    steady_rows = sum(progress[r["batch_id"]]["numInputRows"] for r in steady if r["batch_id"] in progress)
    phases = {
        k: statistics.median(
            progress[r["batch_id"]]["durationMs"].get(k, 0) for r in steady if r["batch_id"] in progress
        )
        / 1000
        for k in ("latestOffset", "queryPlanning", "addBatch", "walCommit", "commitOffsets", "triggerExecution")
    }
    return {
        "kind": name,
        "rows": rows,
        "phases_s": phases,
        "batches": len(recs),
        "first_batch_s": recs[0]["finished"] - recs[0]["started"],
        "steady_rows": steady_rows,
        "steady_wall_s": wall,
        "rows_per_s": steady_rows / wall,
        "rows_per_s_per_core": steady_rows / wall / cores,
        "median_batch_s": statistics.median(r["finished"] - r["started"] for r in steady),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--batch", type=int, default=50000, help="rows per micro-batch for the throughput runs")
    ap.add_argument("--batches", type=int, default=6)
    ap.add_argument("--quick", action="store_true", help="smaller batches, fewer kinds")
    args = ap.parse_args()
    if args.quick:
        args.batch, args.batches = 10000, 5
    console = Console()
    root = Path(tempfile.mkdtemp(prefix="bench-spark-"))
    t0 = time.time()
    spark = build_session("bench-spark", cores=args.cores, shuffle_partitions=args.cores, work_dir=root / "spark")
    session_s = time.time() - t0
    kinds = dict(list(KINDS.items())[:3]) if args.quick else KINDS
    results, overhead = [], []
    try:
        # warm-up: JIT, Python workers and the first-batch costs, so the first measured kind is not penalised
        warm_ops, _ = KINDS["filter (value > 0.5)"]
        measure(spark, root, "warm-up", warm_ops, None, args.batch // 5, 4, args.cores)
        for name, (ops, managed) in kinds.items():
            results.append(measure(spark, root, name, ops, managed, args.batch, args.batches, args.cores))
            console.print(f"{name}: {results[-1]['rows_per_s']:.0f} rows/s")
        for name in ("filter (value > 0.5)", "keyed_stateful (Spark state)", "keyed_stateful (Strata store)"):
            ops, managed = KINDS[name]
            overhead.append(measure(spark, root, name + " @100 rows", ops, managed, 100, 8, args.cores))
    finally:
        with contextlib.suppress(Exception):
            spark.stop()
        shutil.rmtree(root, ignore_errors=True)

    table = Table(
        title=f"Spark data plane, local[{args.cores}], {args.batch} rows/batch (session start {session_s:.1f} s)"
    )
    for col in ("operator", "rows/s", "rows/s/core", "median batch s", "first batch s"):
        table.add_column(col, justify="left" if col == "operator" else "right")
    for r in results:
        table.add_row(
            r["kind"],
            f"{r['rows_per_s']:.0f}",
            f"{r['rows_per_s_per_core']:.0f}",
            f"{r['median_batch_s']:.2f}",
            f"{r['first_batch_s']:.1f}",
        )
    console.print(table)
    over = Table(title="Per-batch overhead (100-row batches): median seconds per phase of a micro-batch")
    phases = ("latestOffset", "queryPlanning", "addBatch", "walCommit", "commitOffsets", "triggerExecution")
    for col in ("pipeline", *phases):
        over.add_column(col, justify="left" if col == "pipeline" else "right")
    for r in overhead:
        over.add_row(r["kind"], *(f"{r['phases_s'][k]:.3f}" for k in phases))
    console.print(over)
    out = Path(__file__).parent / "results" / "spark.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "cores": args.cores,
                "batch_rows": args.batch,
                "batches": args.batches,
                "session_start_s": session_s,
                "machine": platform.platform(),
                "note": "shared 2-core machine: other work ran at the same time",
                "throughput": results,
                "overhead": overhead,
            },
            indent=2,
        )
    )
    console.print(f"wrote {out}")


if __name__ == "__main__":
    main()
