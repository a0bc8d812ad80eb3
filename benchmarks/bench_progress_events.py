"""What one streaming progress event costs the driver: PySpark's field-by-field reading against its JSON text.

A Python ``StreamingQueryListener`` is called by the JVM's listener bus (one thread) for every batch of every
query. PySpark turns each progress event into Python objects with ``StreamingQueryProgress.fromJObject``, one
py4j call per field, per source, sink and state operator and per metrics map; :class:`strata.spark.listener.
ProgressListener` reads the same event as its JSON text (``progress().json()``: two calls). This measures
both on the progress of a stateful query (a windowed count over the rate source): py4j round trips and
milliseconds per event, the median of ``--repeat`` readings, on an idle driver. Each round trip waits for the
JVM and, in a cell with a small CPU share and other queries' callbacks, for the cores: the count is what
scales with contention.

    flock /tmp/strata-bench.lock .venv/bin/python benchmarks/bench_progress_events.py [--repeat 200]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
from pyspark.sql import functions as F
from pyspark.sql.streaming.listener import StreamingQueryProgress
from rich.console import Console
from rich.table import Table

from strata.spark.session import build_session

RESULTS = Path(__file__).parent / "results" / "progress_events.json"


def _counting(client) -> list[int]:
    """Count the py4j commands the driver sends through ``client`` (its class's ``send_command``, wrapped)."""
    calls = [0]
    cls = type(client)
    send = cls.send_command

    def counted(self, *args, **kwargs):
        calls[0] += 1
        return send(self, *args, **kwargs)

    cls.send_command = counted
    return calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--json", type=Path, default=RESULTS)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="strata-progress-"))
    spark = build_session("bench-progress", cores=2, shuffle_partitions=2, work_dir=work / "spark")
    spark.sparkContext.setLogLevel("ERROR")
    counts = (
        spark.readStream.format("rate")
        .option("rowsPerSecond", 200)
        .load()
        .withWatermark("timestamp", "2 seconds")
        .groupBy(F.window("timestamp", "1 second"), (F.col("value") % 10).alias("k"))
        .count()
    )
    query = (
        counts.writeStream.format("memory")
        .queryName("counts")
        .outputMode("append")
        .option("checkpointLocation", str(work / "ckpt"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    while query.lastProgress is None or not query.lastProgress.get("stateOperators"):
        time.sleep(0.2)
    jprogress = query._jsq.lastProgress()
    calls = _counting(spark.sparkContext._gateway._gateway_client)
    readers = {
        "pyspark (fromJObject)": lambda: StreamingQueryProgress.fromJObject(jprogress),
        "strata (JSON text)": lambda: json.loads(jprogress.json()),
    }
    rows = []
    for name, read in readers.items():
        read()
        before = calls[0]
        read()
        per_event = calls[0] - before
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            read()
            times.append(time.perf_counter() - t0)
        rows.append(
            {
                "reader": name,
                "py4j_calls": per_event,
                "ms_median": 1e3 * float(np.median(times)),
                "ms_p90": 1e3 * float(np.percentile(times, 90)),
            }
        )
    query.stop()
    spark.stop()
    table = Table(title=f"one progress event of a stateful query, {args.repeat} readings")
    for col in ("reader", "py4j calls", "ms median", "ms p90"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["reader"], str(r["py4j_calls"]), f"{r['ms_median']:.2f}", f"{r['ms_p90']:.2f}")
    Console().print(table)
    args.json.write_text(json.dumps({"repeat": args.repeat, "rows": rows}, indent=1))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
