"""Learned cost per record under contention: core-seconds from Spark's accounting against wall time (issue 29).

Two queries over Strata's generated source, each run alone on one local[2] session, first on an idle machine,
then beside N CPU burners (busy-loop processes, so the load average is about N plus the query's own), each at a
fixed number of records per batch (the source's per-batch cap; it offers more):

- ``sql``: a map with a CPU-heavy SQL expression (work on the executor's JVM threads);
- ``python``: a light map over a fast source, whose records are made by the generator, a Python data source
  (work in the PySpark workers, which no task metric holds: read from /proc).

Each run goes through the engine and the learner as ``strata run`` does (:class:`strata.spark.engine.SparkEngine`
under the one loop, windows into :class:`strata.control.estimation.ResourceLearner`), after a warm-up. Per run:
the learner's cost per record (core-seconds: executor CPU + Python workers' CPU), the same from wall time
(release → commit over records: what the learner fitted before), and each against the idle run of the same
query. Target: the learned cost within 20% of the idle one at load averages from 1 to 6.

Usage: ``.venv/bin/python benchmarks/bench_learned_cost.py [--burners 0 1 3 6] [--duration 20]``. Prints a table;
writes ``benchmarks/results/learned_cost.json``. Run under the benchmark lock: the burners load the whole machine.
"""

from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing
import os
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from strata.control.estimation import ResourceLearner, attribute
from strata.control.loop import Plain, run
from strata.model import Scenario
from strata.spark.engine import EngineConfig, SparkEngine

RESULTS = Path(__file__).resolve().parent / "results" / "learned_cost.json"
WARMUP_BATCHES = 3  # the first batches carry the query's start-up (a Python worker starting, planning)

QUERIES = {
    # source, the map's expression, records per batch (the source offers more: every batch is full)
    "sql": (
        {"rate": 3000, "keys": {"count": 50}, "seed": 7},
        "aggregate(sequence(1, 400), 0D, (a, i) -> a + sqrt(value * i)) AS w",
        600,
    ),
    "python": ({"rate": 20000, "keys": {"count": 50}, "seed": 8}, "value * 2 AS w", 6000),
}


def scenario(query: str) -> Scenario:
    """The query as one job on a 2-core node: its source → a map of its expression → a sink."""
    source, expression, _ = QUERIES[query]
    kinds = {"s": {"kind": "source", "source": source}, "m": {"kind": "map"}, "o": {"kind": "sink"}}
    kinds["m"]["expressions"] = ["id", "event_time", expression]
    template = {
        "operators": [{"name": name, **op} for name, op in kinds.items()],
        "streams": [{"from": a, "to": b} for a, b in itertools.pairwise(kinds)],
    }
    job = {"id": query, "rank": 1, "templates": [template]}
    return Scenario.model_validate({"name": query, "cluster": {"nodes": [{"name": "n0", "cores": 2}]}, "jobs": [job]})


def burn() -> None:
    while True:
        pass


def measure(spark, query: str, duration_s: float, work: Path) -> dict:
    """One run of ``query``: the learner's cost per record after the warm-up, and the wall-time one."""
    sc = scenario(query)
    engine = SparkEngine(spark, sc, work, EngineConfig(epoch=time.time()), attribute=attribute)
    learner = ResourceLearner()
    warm: list[bool] = []

    def step(obs, _decisions) -> None:
        # a fixed batch size, so a per-batch cost is spread over the same records at every load (under
        # contention batches come slower and, uncapped, larger: their per-record cost would fall with the load)
        cap = engine.running[query].pipeline.rate_cap
        if cap.get() is None:
            cap.set(QUERIES[query][2])
        if len(engine.costs) >= WARMUP_BATCHES:  # windows after the warm-up batches only
            warm.append(True)
            learner.observe_window(obs.window)

    started = time.time()
    stop = lambda: _done(warm, started, duration_s)  # noqa: E731
    try:
        run(engine, Plain(sc), window_s=1.0, until=time.time() + 120, on_step=step, should_stop=stop)
    finally:
        stop_engine(engine)
    batches = [b for b in engine.batch_observations() if b.get("cpu_s") is not None and b.get("rows_in")][
        WARMUP_BATCHES:
    ]
    rows = sum(b["rows_in"] for b in batches)
    return {
        "query": query,
        "batches": len(batches),
        "rows": rows,
        "learned_s": sum(e.cost_per_record for e in learner.estimates().values()),
        "cpu_s": sum(b["cpu_s"] for b in batches) / rows if rows else None,
        "python_s": sum(b["python_s"] for b in batches) / rows if rows else None,
        "wall_s": sum(b["finished"] - b["released"] for b in batches) / rows if rows else None,
        "load": os.getloadavg()[0],
    }


def stop_engine(engine: SparkEngine) -> None:
    """Every query stopped where it is, then the listener removed once the last progress events are in."""
    engine.stop_all()
    time.sleep(0.5)
    engine.close()


def _done(warm: list[bool], started: float, duration_s: float) -> bool:
    return len(warm) * 1.0 >= duration_s or time.time() - started > 110


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--burners", type=int, nargs="+", default=[0, 1, 3, 6])
    ap.add_argument("--duration", type=float, default=20.0, help="seconds of windows measured per run")
    ap.add_argument("--queries", nargs="+", default=list(QUERIES), choices=list(QUERIES))
    ap.add_argument("--warmup", type=float, default=8.0, help="seconds of windows of the unrecorded first run")
    args = ap.parse_args()
    from strata.spark.session import build_session

    work = Path(tempfile.mkdtemp(prefix="bench-learned-cost-"))
    spark = build_session("bench-learned-cost", cores=2, shuffle_partitions=2, work_dir=work / "spark")
    rows: list[dict] = []
    try:
        # one unrecorded run of each query first: the JVM compiles a query's code as it runs, so whichever load
        # came first would pay for it (without this run, the SQL query's first, idle run took 1.6× the JVM CPU a
        # record of its next run, beside one busy loop: most likely that)
        for q in args.queries:
            measure(spark, q, args.warmup, work / f"{q}-warmup")
        for n in args.burners:
            burners = [multiprocessing.Process(target=burn, daemon=True) for _ in range(n)]
            for p in burners:
                p.start()
            try:
                for q in args.queries:
                    row = measure(spark, q, args.duration, work / f"{q}-{n}")
                    rows.append({"burners": n, **row})
                    print(json.dumps(rows[-1]), flush=True)
            finally:
                for p in burners:
                    p.kill()
                    p.join()
            time.sleep(5 if n else 0)  # let the burners' load drain a little before the next level
    finally:
        spark.stop()
    idle = {r["query"]: r for r in rows if r["burners"] == 0}
    table = Table(title="cost per record (ms of core time) learned beside N busy loops, against the idle run")
    for col in ("query", "burners", "load avg", "learned", "vs idle", "JVM cpu", "python cpu", "wall", "wall vs idle"):
        table.add_column(col, justify="left" if col == "query" else "right")
    for r in rows:
        base = idle.get(r["query"])
        r["learned_vs_idle"] = r["learned_s"] / base["learned_s"] if base and base["learned_s"] else None
        r["wall_vs_idle"] = r["wall_s"] / base["wall_s"] if base and base["wall_s"] and r["wall_s"] else None
        table.add_row(
            r["query"],
            str(r["burners"]),
            f"{r['load']:.1f}",
            f"{1e3 * r['learned_s']:.3f}",
            f"{r['learned_vs_idle']:.2f}×" if r["learned_vs_idle"] else "–",
            f"{1e3 * (r['cpu_s'] or 0):.3f}",
            f"{1e3 * (r['python_s'] or 0):.3f}",
            f"{1e3 * (r['wall_s'] or 0):.3f}",
            f"{r['wall_vs_idle']:.2f}×" if r["wall_vs_idle"] else "–",
        )
    Console().print(table)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"runs": rows, "cores": 2, "duration_s": args.duration}, indent=1))
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
