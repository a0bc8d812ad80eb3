"""The CPU a small streaming query's checkpoint writes cost: Spark's default checkpoint file manager against
Strata's (:data:`strata.spark.session.LOCAL_CHECKPOINTS`), issue 28 (a critical cell's appetite).

One query in a session of its own (``local[2]``): JSON files in (a producer thread writes one of 150 records every
0.5 s, as bench_platform's inputs arrive), a filter, ``foreachBatch`` writing Parquet, its checkpoint on the local
disk. Per mode, over ``--duration`` s after a 5 s start: micro-batches, the JVM's own CPU (``utime + stime``), the
CPU of the processes the JVM forked and reaped (its ``cutime + cstime``: Hadoop's local file system without the
native library runs ``chmod`` and ``readlink`` as processes), their sum per batch, and the median
``triggerExecution`` of batches with rows. ``spark``: the session with Spark's checkpoint defaults given as the
user's settings (they win over Strata's); ``strata``: Strata's; ``strata-c1``: Strata's with the JVM compiling
with C1 only, as a cell of latency-critical jobs runs (:func:`strata.control.cells.light_compiling`). The modes run
in the order given, reversed every other round.

Seen (27 Nov, machine loaded by other work, load 7–10): 25 s, two rounds, back to back: Spark's defaults 109 / 93
ms of forks per batch, 566 / 319 ms of CPU per batch in all, trigger median 399 / 210 ms; Strata's 29 / 29, 332 /
263, 168 / 138 (``results/checkpoint_writes.json``). C1 only, measured with this query by a probe before this
mode existed (40 s, trigger 100 ms, Strata's checkpoint defaults in both, two pairs): JVM CPU 16.8 and 17.6 s
against 27.9 and 26.0 s with C2, trigger median 217 and 196 ms against 260 and 194 ms.

Usage: ``flock /tmp/strata-bench.lock .venv/bin/python benchmarks/bench_checkpoint_writes.py [--duration 25]
[--rounds 1] [--trigger-ms 0] [--modes spark strata strata-c1]``. Prints a table; writes
``benchmarks/results/checkpoint_writes.json``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import threading
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from strata.spark.conf import SparkSettings
from strata.spark.session import FIRST_TIER_ONLY, LOCAL_CHECKPOINTS, build_session

ROOT = Path(__file__).resolve().parents[1]
SPARK_DEFAULTS = {  # what Spark and Hadoop use when nobody sets them
    "spark.sql.streaming.checkpointFileManagerClass": (
        "org.apache.spark.sql.execution.streaming.checkpointing.FileContextBasedCheckpointFileManager"
    ),
    "spark.hadoop.fs.file.impl": "org.apache.hadoop.fs.LocalFileSystem",
    "spark.hadoop.fs.file.impl.disable.cache": "false",
}
MODES = {
    "spark": SPARK_DEFAULTS,
    "strata": LOCAL_CHECKPOINTS,
    "strata-c1": {**LOCAL_CHECKPOINTS, "spark.driver.extraJavaOptions": FIRST_TIER_ONLY},
}
TICK_S = 0.01  # /proc's clock ticks (USER_HZ)


def cpu_of(pid: int) -> tuple[float, float]:
    """(own CPU, reaped children's CPU) of process ``pid``, seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * TICK_S, (int(fields[13]) + int(fields[14])) * TICK_S


def produce(directory: Path, stop: threading.Event) -> None:
    """One JSON file of 150 records every 0.5 s, written whole then renamed (as a producer must)."""
    i = 0
    while not stop.is_set():
        rows = [{"event_time": time.time(), "key": j % 7, "value": j * 0.5} for j in range(150)]
        tmp = directory / f".f{i}.json"
        tmp.write_text("\n".join(json.dumps(r) for r in rows))
        tmp.rename(directory / f"f{i}.json")
        i += 1
        stop.wait(0.5)


def run(mode: str, args) -> dict:
    base = args.work / mode
    shutil.rmtree(base, ignore_errors=True)
    (base / "in").mkdir(parents=True)
    settings = SparkSettings(tuple(MODES[mode].items()))
    spark = build_session(f"checkpoint-writes-{mode}", cores=2, shuffle_partitions=2, work_dir=base, settings=settings)
    jvm = spark.sparkContext._gateway.proc.pid
    done = []

    def sink(batch, batch_id: int) -> None:
        batch.where("value > 10").write.mode("append").parquet(str(base / "out" / f"batch_id={batch_id}"))
        done.append(batch_id)

    stream = spark.readStream.schema("event_time DOUBLE, key BIGINT, value DOUBLE").json(str(base / "in"))
    writer = stream.writeStream.option("checkpointLocation", str(base / "checkpoint")).foreachBatch(sink)
    if args.trigger_ms:
        writer = writer.trigger(processingTime=f"{args.trigger_ms} milliseconds")
    stop = threading.Event()
    producer = threading.Thread(target=produce, args=(base / "in", stop))
    producer.start()
    query = writer.start()
    try:
        time.sleep(5.0)
        (own0, forks0), first = cpu_of(jvm), len(done)
        time.sleep(args.duration)
        (own1, forks1), last = cpu_of(jvm), len(done)
        triggers = [p["durationMs"]["triggerExecution"] for p in query.recentProgress if p["numInputRows"]]
    finally:
        stop.set()
        query.stop()
        producer.join()
        spark.stop()
    batches = max(last - first, 1)
    return {
        "mode": mode,
        "batches": last - first,
        "jvm_s": own1 - own0,
        "forks_s": forks1 - forks0,
        "cpu_per_batch_ms": 1000 * (own1 - own0 + forks1 - forks0) / batches,
        "forks_per_batch_ms": 1000 * (forks1 - forks0) / batches,
        "trigger_median_ms": statistics.median(triggers) if triggers else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=25.0)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--modes", nargs="+", choices=tuple(MODES), default=["spark", "strata"])
    parser.add_argument("--trigger-ms", type=int, default=0, help="processing-time trigger (0: back to back)")
    parser.add_argument("--work", type=Path, default=Path("/tmp/strata-bench-checkpoint-writes"))
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "checkpoint_writes.json")
    args = parser.parse_args()
    rows = []
    for index in range(args.rounds):
        order = list(args.modes) if index % 2 == 0 else list(reversed(args.modes))
        rows += [{"round": index, **run(mode, args)} for mode in order]
    table = Table(title=f"one query, a file every 0.5 s, {args.duration:g} s per run, trigger {args.trigger_ms} ms")
    for col in ("round", "mode", "batches", "JVM s", "forks s", "CPU ms/batch", "forks ms/batch", "trigger ms"):
        table.add_column(col, justify="left" if col == "mode" else "right")
    for r in rows:
        table.add_row(
            str(r["round"]),
            r["mode"],
            str(r["batches"]),
            f"{r['jvm_s']:.2f}",
            f"{r['forks_s']:.2f}",
            f"{r['cpu_per_batch_ms']:.0f}",
            f"{r['forks_per_batch_ms']:.0f}",
            "–" if r["trigger_median_ms"] is None else f"{r['trigger_median_ms']:.0f}",
        )
    Console().print(table)
    args.out.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "rows": rows}, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
