"""Learned cost per record under contention: core-seconds from Spark's accounting against wall time (issue 29).

Two queries over Strata's generated source, each run alone on one local[2] session, on an idle machine and beside
N CPU burners (busy-loop processes: the load is about N plus the query's own), each at a fixed number of records
per batch (the source's per-batch cap):

- ``sql``: a map with a CPU-heavy SQL expression (work on the executor's JVM threads);
- ``python``: a light map over a fast source, whose records are made by the generator, a Python data source
  (work in the PySpark workers, which no task metric holds: read from /proc).

Each run goes through the engine and the learner as ``strata run`` does (:class:`strata.spark.engine.SparkEngine`
under the one loop, windows into :class:`strata.control.estimation.ResourceLearner`), from the window after the
one that accounted its first batches (that one holds them, with the batch Spark planned before the cap).
Per run: the learner's cost per record (core-seconds: executor CPU + Python workers' CPU), the same from wall time
(release → commit over records: what the learner fitted before), the batches' fill (records over the cap), the
load (the 1-minute load average at the run's end, and the mean of the runnable threads, ``procs_running``, sampled
every 0.1 s through the run: the load average lags a burner's start by a minute), and a plain loop's CPU time at
the same level (a fixed Python loop in the driver, no Spark: the physics of a core shared with busy loops).

What makes the comparison fair: every batch full at every level (each source offers several times what the query
reads at idle, so the per-batch part of the cost falls on the same records); one unrecorded run of each query
first (the JVM compiles a query's code as it runs: the first run pays for it) and the levels' order alternating
over ``--rounds`` (0 1 3 6, then 6 3 1 0, …), each level's figure the median over rounds. Target: the learned cost
within 20% of the idle one at load averages from 1 to 6.

Usage: ``.venv/bin/python benchmarks/bench_learned_cost.py [--burners 0 1 3 6] [--rounds 3] [--duration 12]
[--out FILE]``. Prints a table; writes ``benchmarks/results/learned_cost.json`` (or ``--out``). Run under the
benchmark lock: the burners load the whole machine.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import multiprocessing
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from strata.control.estimation import ResourceLearner, attribute
from strata.control.loop import Plain, run
from strata.model import Scenario
from strata.spark.engine import EngineConfig, SparkEngine

RESULTS = Path(__file__).resolve().parent / "results" / "learned_cost.json"
WARMUP_BATCHES = 3  # batches after the cap is set: the query's start-up (a Python worker starting, planning), and
# the batch Spark may have planned before the cap took effect

QUERIES = {
    # source, the map's expression, records per batch. The source offers its rate from the epoch on: several times
    # what the query reads at idle (sql ≈ 3,500 records/s, python ≈ 25,000), so a backlog builds from the first
    # batch and every batch is full at every level
    "sql": (
        {"rate": 20000, "keys": {"count": 50}, "seed": 7},
        "aggregate(sequence(1, 400), 0D, (a, i) -> a + sqrt(value * i)) AS w",
        600,
    ),
    "python": ({"rate": 200000, "keys": {"count": 50}, "seed": 8}, "value * 2 AS w", 6000),
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
    """One run of ``query``: the learner's cost per record after the first batches, the wall-time one, the batches'
    fill and the load through the run."""
    sc = scenario(query)
    engine = SparkEngine(spark, sc, work, EngineConfig(epoch=time.time()), attribute=attribute)
    learner = ResourceLearner()
    whole = ResourceLearner(decay=1.0)  # the same windows, none forgotten: the run's mean, against the tracking one
    warm: list[bool] = []
    cap_rows = QUERIES[query][2]
    capped_after: list[int] = []  # batches accounted when the cap was set: the ones before may be larger
    skipped: list[int] = []  # batches accounted before the first window the learner observes

    def step(obs, _decisions) -> None:
        # a fixed batch size, so a per-batch cost is spread over the same records at every load (under
        # contention batches come slower and, uncapped, larger: their per-record cost would fall with the load)
        cap = engine.running[query].pipeline.rate_cap
        if cap.get() is None:
            cap.set(cap_rows)
            capped_after.append(len(engine.costs))
        # windows after the one that accounted the warm-up batches only: that window holds them (and a first,
        # uncapped batch of the backlog, whose many cheap records would weigh on the learner for many windows)
        if skipped:
            warm.append(True)
            learner.observe_window(obs.window)
            whole.observe_window(obs.window)
        elif len(engine.costs) >= capped_after[0] + WARMUP_BATCHES:
            skipped.append(len(engine.costs))

    started = time.time()
    stop = lambda: _done(warm, started, duration_s)  # noqa: E731
    with LoadSampler() as load:
        try:
            run(engine, Plain(sc), window_s=1.0, until=time.time() + 120, on_step=step, should_stop=stop)
        finally:
            stop_engine(engine)
    accounted = [b for b in engine.batch_observations() if b.get("cpu_s") is not None and b.get("rows_in")]
    batches = accounted[skipped[0] if skipped else len(accounted) :]  # the batches of the learner's windows
    rows = sum(b["rows_in"] for b in batches)
    return {
        "query": query,
        "batches": len(batches),
        "rows": rows,
        "fill": rows / (cap_rows * len(batches)) if batches else None,  # records a batch over the cap
        "full": sum(b["rows_in"] >= cap_rows for b in batches) / len(batches) if batches else None,
        "learned_s": sum(e.cost_per_record for e in learner.estimates().values()),
        "learned_whole_s": sum(e.cost_per_record for e in whole.estimates().values()),
        "accounted_s": sum(b["cpu_s"] + b["python_s"] for b in batches) / rows if rows else None,
        "cpu_s": sum(b["cpu_s"] for b in batches) / rows if rows else None,
        "python_s": sum(b["python_s"] for b in batches) / rows if rows else None,
        "wall_s": sum(b["finished"] - b["released"] for b in batches) / rows if rows else None,
        "load": os.getloadavg()[0],
        "runnable": load.mean(),
    }


def runnable_threads() -> int | None:
    """Threads runnable now on the machine (``procs_running`` of /proc/stat); None where it is absent."""
    try:
        for line in Path("/proc/stat").read_text().splitlines():
            if line.startswith("procs_running "):
                return int(line.split()[1])
    except OSError:
        pass
    return None


class LoadSampler:
    """The mean of :func:`runnable_threads` sampled every ``every_s`` while the ``with`` block runs (this sampler's
    own thread excluded: it is runnable when it samples)."""

    def __init__(self, every_s: float = 0.1) -> None:
        self.every_s = every_s
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(self.every_s):
            if (n := runnable_threads()) is not None:
                self.samples.append(n - 1)

    def __enter__(self) -> LoadSampler:
        self._thread.start()
        return self

    def __exit__(self, *_exc) -> None:
        self._stop.set()
        self._thread.join()

    def mean(self) -> float | None:
        return statistics.fmean(self.samples) if self.samples else None


def plain_loop_cpu(iterations: int = 1_000_000, repeats: int = 5) -> float:
    """Median CPU seconds (this thread's) of a fixed Python loop, no Spark: what the same work costs in CPU time on
    a core shared with the busy loops (caches, SMT siblings), against which a learned cost's change is judged."""
    took = []
    for _ in range(repeats):
        t, x = time.thread_time(), 0.0
        for i in range(iterations):
            x += math.sqrt(i * 1.5)
        took.append(time.thread_time() - t)
    return statistics.median(took)


def stop_engine(engine: SparkEngine) -> None:
    """Every query stopped where it is, then the listener removed once the last progress events are in."""
    engine.stop_all()
    time.sleep(0.5)
    engine.close()


def _done(warm: list[bool], started: float, duration_s: float) -> bool:
    return len(warm) * 1.0 >= duration_s or time.time() - started > 110


def level_orders(levels: list[int], rounds: int) -> list[list[int]]:
    """The levels' order in each round: as given, then reversed, alternating (no level always first or last)."""
    return [list(levels) if r % 2 == 0 else list(reversed(levels)) for r in range(rounds)]


def summarise(rows: list[dict]) -> list[dict]:
    """Per query and level: medians over rounds, each against the same query's idle (0 burners) median, and the
    spread of the rounds (each round's figure over the idle median)."""
    out = []
    for (query, n), group in itertools.groupby(
        sorted(rows, key=lambda r: (r["query"], r["burners"])), key=lambda r: (r["query"], r["burners"])
    ):
        group = list(group)
        idle = [r for r in rows if r["query"] == query and r["burners"] == 0]

        def med(key: str, runs: list[dict] = group) -> float | None:
            vals = [r[key] for r in runs if r.get(key) is not None]
            return statistics.median(vals) if vals else None

        row = {"query": query, "burners": n, "rounds": len(group)}
        for key in ("learned_s", "learned_whole_s", "accounted_s", "cpu_s", "python_s", "wall_s", "plain_cpu_s"):
            row[key] = med(key)
            base = med(key, idle)
            row[f"{key}_vs_idle"] = row[key] / base if base and row[key] is not None else None
            runs = [r[key] / base for r in group if base and r.get(key) is not None]
            row[f"{key}_spread"] = [min(runs), max(runs)] if runs else None
        row["load"] = [min(r["load"] for r in group), max(r["load"] for r in group)]
        runnable = [r["runnable"] for r in group if r.get("runnable") is not None]
        row["runnable"] = statistics.median(runnable) if runnable else None
        fills = [r["fill"] for r in group if r.get("fill") is not None]
        row["fill"] = [min(fills), max(fills)] if fills else None  # 1–1: every batch at the cap, no larger one
        row["full"] = min((r["full"] for r in group if r.get("full") is not None), default=None)
        out.append(row)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--burners", type=int, nargs="+", default=[0, 1, 3, 6])
    ap.add_argument("--rounds", type=int, default=3, help="rounds over the levels, their order alternating")
    ap.add_argument("--duration", type=float, default=12.0, help="seconds of windows measured per run")
    ap.add_argument("--queries", nargs="+", default=list(QUERIES), choices=list(QUERIES))
    ap.add_argument("--warmup", type=float, default=8.0, help="seconds of windows of the unrecorded first run")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    if 0 not in args.burners:
        ap.error("--burners: expected 0 among the levels (the idle run every level is compared with)")
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
        for r, levels in enumerate(level_orders(args.burners, args.rounds)):
            for n in levels:
                burners = [multiprocessing.Process(target=burn, daemon=True) for _ in range(n)]
                for p in burners:
                    p.start()
                try:
                    plain = plain_loop_cpu()
                    for q in args.queries:
                        row = measure(spark, q, args.duration, work / f"{q}-{r}-{n}")
                        rows.append({"round": r, "burners": n, "plain_cpu_s": plain, **row})
                        print(json.dumps(rows[-1]), flush=True)
                        write(args.out, rows, args)  # each run kept as it ends
                finally:
                    for p in burners:
                        p.kill()
                        p.join()
                time.sleep(3 if n else 0)  # the burners' caches and run queues drain before the next level
    finally:
        spark.stop()
    summary = summarise(rows)
    print_table(summary)
    write(args.out, rows, args, summary)
    print(f"wrote {args.out}")


def print_table(summary: list[dict]) -> None:
    table = Table(title="cost per record (ms of core time), median over rounds, against the idle median")
    cols = (
        "query",
        "burners",
        "load avg",
        "runnable",
        "fill",
        "learned",
        "vs idle",
        "spread",
        "JVM cpu",
        "vs idle",
        "python cpu",
        "vs idle",
        "plain loop vs idle",
        "wall vs idle",
    )
    for col in cols:
        table.add_column(col, justify="left" if col == "query" else "right")

    def ratio(x: float | None) -> str:
        return f"{x:.2f}×" if x is not None else "–"

    for s in summary:
        spread = s["learned_s_spread"]
        table.add_row(
            s["query"],
            str(s["burners"]),
            f"{s['load'][0]:.1f}–{s['load'][1]:.1f}",
            f"{s['runnable']:.1f}" if s["runnable"] is not None else "–",
            f"{s['fill'][0]:.2f}–{s['fill'][1]:.2f}" if s["fill"] is not None else "–",
            f"{1e3 * (s['learned_s'] or 0):.4f}",
            ratio(s["learned_s_vs_idle"]),
            f"{spread[0]:.2f}–{spread[1]:.2f}" if spread else "–",
            f"{1e3 * (s['cpu_s'] or 0):.4f}",
            ratio(s["cpu_s_vs_idle"]),
            f"{1e3 * (s['python_s'] or 0):.4f}",
            ratio(s["python_s_vs_idle"]),
            ratio(s["plain_cpu_s_vs_idle"]),
            ratio(s["wall_s_vs_idle"]),
        )
    Console(width=200).print(table)


def write(path: Path, rows: list[dict], args: argparse.Namespace, summary: list[dict] | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    out = {"runs": rows, "summary": summary, "cores": 2, "duration_s": args.duration, "rounds": args.rounds}
    path.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
