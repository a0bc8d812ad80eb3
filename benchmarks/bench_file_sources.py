"""A source Strata knows nothing about, against one it generates: is it scheduled as well? (issue 18)

The demo's three jobs (``src/strata/examples/demo.yaml``: an alert filter, rank 1, target 2 s; a skewed window
aggregation; a heavy scoring map) run on the same seeded records from two kinds of source:

- ``generated``: Strata's generator source. Strata knows each record's event time and the offered rate as a
  function of time, and L0's rate caps change rows per batch with no restart;
- ``files``: the same records (the same seeded source specs) written as JSON files by another process
  (:func:`strata.runners.producer.write_sources` in a spawned child). Strata sees only the files: offered
  rate, backlog and each batch's oldest record come from the directories and the checkpoint's file log
  (docs/spark.md, "Observation of files"); rate caps would need restarts and are off (``cap_reads``).

Each kind runs in three modes on one session, one after the other: plain Spark FIFO, FAIR pools by hand
(:func:`strata.runners.spark_loop.hand_pools`), Strata. The summary gives, per kind and baseline, the critical
job's p99 and misses over Strata's, Strata's bulk rows/s over the baseline's, and total importance. The target:
Strata's gains over the baselines with files as large as with generated sources.

Usage: ``.venv/bin/python benchmarks/bench_file_sources.py [--duration 40] [--seeds 0]``. Prints tables;
writes ``benchmarks/results/file_sources.json``. Timing-dependent: the load average is recorded.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from strata.model import Scenario, SourceSpec, load_scenario
from strata.protocol.units import POOLS
from strata.runners.demo import reseed
from strata.runners.producer import write_sources
from strata.runners.spark_loop import RunConfig, hand_pools, run_mode
from strata.spark.measure import collect

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "src" / "strata" / "examples" / "demo.yaml"
RESULTS = ROOT / "benchmarks" / "results" / "file_sources.json"
KINDS = ("generated", "files")
MODES = ("fifo", "fair", "strata")
LEAD_S = 3.0  # the first files exist before the queries start (a file source infers its schema from them)


def sources(scenario: Scenario) -> dict[str, SourceSpec]:
    """Job → its (one) source's spec."""
    return {j.id: op.source for j in scenario.jobs for op in j.templates[0].operators if op.source is not None}


def reading_files(scenario: Scenario, root: Path) -> Scenario:
    """The same scenario, every source read from ``root/<job>`` as JSON files instead of generated."""
    data = scenario.model_dump(by_alias=True)
    for job in data["jobs"]:
        for tpl in job["templates"]:
            for op in tpl["operators"]:
                if op.get("source"):
                    op["source"]["path"] = str(root / job["id"])
                    op["source"]["format"] = "json"
    return Scenario.model_validate(data)


def run_one(spark, scenario: Scenario, kind: str, mode: str, seed: int, duration: float, work: Path) -> list[dict]:
    """One mode on one kind of source, over ``duration`` s of input from a fresh epoch."""
    base = work / f"{kind}-{mode}-{seed}"
    shutil.rmtree(base, ignore_errors=True)
    epoch = time.time() + LEAD_S
    producer = None
    if kind == "files":
        scenario = reading_files(scenario, base / "input")
        directories = {str(base / "input" / job): spec for job, spec in sources(scenario).items()}
        producer = multiprocessing.get_context("spawn").Process(
            target=write_sources, args=(directories, epoch, duration + 5.0), daemon=True
        )
        producer.start()
        while time.time() < epoch + 0.6:  # the first file of every source is there
            time.sleep(0.1)
    config = RunConfig(sink="parquet", pools=hand_pools(scenario) if mode == "fair" else {})
    load = os.getloadavg()[0]
    result = run_mode(
        spark, scenario, "strata" if mode == "strata" else "baseline", base / "run", config, epoch, epoch + duration
    )
    if producer is not None:
        producer.terminate()
        producer.join()
    measured = collect([result], scenario, max(0.0, duration - 4.0), spark, base / "run", {"config": {}}, {})
    failures = result.engine.failures()
    lost = int(measured.checks[["missing", "duplicated", "wrong"]].to_numpy().sum()) if len(measured.checks) else None
    return [
        {
            **r,
            "kind": kind,
            "mode": mode,
            "seed": seed,
            "load_before": load,
            "died": failures.get(r["job"]),
            "lost": lost,
        }
        for r in measured.summary.to_dict("records")
    ]


def summary(rows: list[dict], critical: str) -> list[dict]:
    """Per seed, kind and baseline: the critical job's p99 and misses over Strata's, Strata's bulk rows/s over the
    baseline's, total importance of both."""
    out = []
    for seed in sorted({r["seed"] for r in rows}):
        for kind in KINDS:
            mine = [r for r in rows if r["seed"] == seed and r["kind"] == kind]
            if not mine:
                continue

            def of(mode: str, key: str, mine=mine):
                return next((r[key] for r in mine if r["mode"] == mode and r["job"] == critical), None)

            def bulk(mode: str, mine=mine) -> float:
                return sum(r["throughput"] or 0.0 for r in mine if r["mode"] == mode and r["job"] != critical)

            def total(mode: str, mine=mine) -> float:
                return sum(r["importance"] or 0.0 for r in mine if r["mode"] == mode)

            for base in ("fifo", "fair"):
                b99, s99 = of(base, "p99_s"), of("strata", "p99_s")
                out.append(
                    {
                        "seed": seed,
                        "kind": kind,
                        "baseline": base,
                        "p99_ratio": b99 / s99 if b99 and s99 else None,
                        "misses": (of(base, "misses"), of("strata", "misses")),
                        "bulk_share": bulk("strata") / bulk(base) if bulk(base) else None,
                        "importance": (total(base), total("strata")),
                    }
                )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=40.0, help="seconds of input per run")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    parser.add_argument("--work", type=Path, default=Path("/tmp/strata-bench-file-sources"))
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    from strata.spark.session import build_session

    demo = load_scenario(SPEC)
    critical = min(demo.jobs, key=lambda j: j.rank).id
    spark = build_session(
        "bench-file-sources", cores=2, shuffle_partitions=2, pools=POOLS, work_dir=args.work / "spark"
    )
    spark.sparkContext.setLogLevel("FATAL")
    rows: list[dict] = []
    try:
        # not measured: the session's first queries pay the JVM's and the Python workers' warm-up
        run_one(spark, demo, "generated", "fifo", 0, 10.0, args.work / "warmup")
        for seed in args.seeds:
            scenario = reseed(demo, seed)
            for kind in args.kinds:
                for mode in MODES:
                    rows += run_one(spark, scenario, kind, mode, seed, args.duration, args.work)
    finally:
        spark.stop()

    def fmt(x, spec):
        return "–" if x is None or x != x else format(x, spec)

    table = Table(title=f"demo jobs, generated vs files from another process: {args.duration:g} s, local[2]")
    for col in ("seed", "kind", "mode", "job", "outputs", "p99 s", "misses", "rows/s", "importance", "lost"):
        table.add_column(col, justify="left" if col in ("kind", "mode", "job") else "right")
    for r in rows:
        table.add_row(
            str(r["seed"]),
            r["kind"],
            r["mode"],
            r["job"] + (" (died)" if r["died"] else ""),
            str(r["outputs"]),
            fmt(r["p99_s"], ".2f"),
            str(r["misses"]),
            fmt(r["throughput"], ".0f"),
            fmt(r["importance"], ".1f"),
            str(r["lost"]),
        )
    console = Console()
    console.print(table)
    ratios = summary(rows, critical)
    versus = Table(title=f"{critical} (critical) and the bulk jobs: each baseline against Strata, per kind of source")
    for col in ("seed", "kind", "baseline", "p99 ÷ Strata's", "misses (base / Strata)", "bulk: Strata ÷ base"):
        versus.add_column(col, justify="left" if col in ("kind", "baseline") else "right")
    versus.add_column("importance (base / Strata)", justify="right")
    for r in ratios:
        versus.add_row(
            str(r["seed"]),
            r["kind"],
            r["baseline"],
            fmt(r["p99_ratio"], ".2f"),
            "{} / {}".format(*r["misses"]),
            fmt(r["bulk_share"], ".2f"),
            "{:.1f} / {:.1f}".format(*r["importance"]),
        )
    console.print(versus)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {"args": {k: str(v) for k, v in vars(args).items()}, "rows": rows, "summary": ratios}, indent=1, default=str
        )
    )
    console.print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
