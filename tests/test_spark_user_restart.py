"""Users' own queries across a SIGKILL of `strata run` and a restart: every sink equals pandas, nothing twice.

The jobs file holds a Python-UDF filter, a windowed count (state kept by Spark across the crash, in the job's
checkpoint) and a job reading the filter's output (a shared stream). Files arrive while the first run works;
it is killed with SIGKILL (no chance to drain), then `strata run` is started again on the same directory and
resumes every job from its checkpoint. Known answers: the records the rule keeps, each once; the per-window
counts of the records, each window once; the reader's rows, each once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest

from strata.model import SourceSpec
from strata.runners.producer import Producer

STRATA = str(Path(sys.executable).with_name("strata"))
SOURCE = SourceSpec(rate=300, keys={"count": 20, "zipf_s": 1.0}, seed=11)
JOBS = """
import os

from pyspark.sql import functions as F

import strata.api as strata

INPUT = os.environ["STRATA_INPUT"]
EVENTS = "id LONG, event_time TIMESTAMP, key LONG, value DOUBLE"


def rule(value):
    return value is not None and value > 0.8


alerts = strata.job("alerts", rank=1, required=True, target_latency_s=2.0)


@alerts.template
def udf_filter(spark):
    events = spark.readStream.format("json").schema(EVENTS).load(INPUT)
    return events.filter(F.udf(rule, "boolean")(F.col("value")))


counts = strata.job("counts", rank=2, target_latency_s=30.0, event_time="window_end")


@counts.template
def per_window(spark):
    events = spark.readStream.format("json").schema(EVENTS).load(INPUT)
    return (
        events.withWatermark("event_time", "1 second")
        .groupBy(F.window("event_time", "2 seconds"))
        .count()
        .select(F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"), "count")
    )


keys = strata.job("alert_keys", rank=3, target_latency_s=30.0, reads=alerts)


@keys.template
def of_alerts(spark):
    return alerts.stream(spark).select("id", "key", "event_time")
"""


def output(run: Path, job: str) -> pd.DataFrame:
    """The job's committed Parquet files (``batch_id=<b>/*.parquet``: a task's ``_temporary`` files come and go
    while a batch is written, and are not output)."""
    files = sorted((run / "strata" / "jobs" / job / "output").glob("batch_id=*/*.parquet"))
    if not files:
        return pd.DataFrame()
    return pd.concat(
        [pd.read_parquet(f).assign(batch_id=int(f.parent.name.split("=", 1)[1])) for f in files], ignore_index=True
    )


@pytest.mark.spark
def test_user_queries_resume_exactly_once_after_sigkill(tmp_path):
    jobs = tmp_path / "jobs.py"
    jobs.write_text(textwrap.dedent(JOBS))
    run = tmp_path / "run"
    env = {**os.environ, "STRATA_INPUT": str(tmp_path / "in")}
    seconds = 30.0
    (tmp_path / "in").mkdir()

    def strata_run(duration: int, log: Path) -> subprocess.Popen:
        with open(log, "w") as out:
            return subprocess.Popen(
                [STRATA, "run", str(jobs), "--duration", str(duration), "--out", str(run)],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,  # its own process group: the crash takes the Spark JVM with it
            )

    first = strata_run(600, tmp_path / "first.log")
    try:
        deadline = time.monotonic() + 240
        checkpoints = [run / "strata" / "jobs" / j / "checkpoint" / "metadata" for j in ("alerts", "alert_keys")]
        while not all(c.exists() for c in checkpoints) and time.monotonic() < deadline:
            assert first.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
            time.sleep(0.2)
        producer = Producer(tmp_path / "in", SOURCE, time.time(), seconds, file_s=0.5)  # the queries are up
        producer.start()
        while time.monotonic() < deadline:
            assert first.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
            alerts, readers = output(run, "alerts"), output(run, "alert_keys")
            if not readers.empty and alerts["batch_id"].nunique() >= 2:
                break
            time.sleep(0.5)
        else:
            raise AssertionError("the first run wrote no two batches of alerts and one of their reader in 240 s")
        # no drain: the driver and its JVM die at once (killing the Python driver alone lets the JVM see its
        # stdin close and stop the queries gracefully); whatever batch was running is replayed after the restart
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(30)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    killed_at = {j: len(output(run, j)) for j in ("alerts", "alert_keys")}
    assert producer.is_alive(), "the input was all written before the kill: nothing left for the restart"

    second = strata_run(round(seconds) + 20, tmp_path / "second.log")  # the input keeps arriving
    assert second.wait(300) == 0, (tmp_path / "second.log").read_text()[-3000:]
    producer.join()
    events = producer.rows(0, producer.written)
    said = (tmp_path / "second.log").read_text()
    assert "alerts: resuming (udf_filter)" in said and "Traceback" not in said

    kept = events.loc[events["value"] > 0.8]
    alerts, readers = output(run, "alerts"), output(run, "alert_keys")
    assert len(alerts) > killed_at["alerts"] and len(readers) > killed_at["alert_keys"]  # both runs wrote
    assert sorted(alerts["id"]) == sorted(kept["id"])  # each kept record once, across the kill
    assert sorted(readers["id"]) == sorted(kept["id"])

    # the windowed count: every window written once with the right count (its state survived the kill);
    # the windows written are the reference's first ones (the last wait for a watermark no later data moves)
    got = output(run, "counts")
    reference = events.groupby(events["event_time"].dt.floor("2s")).size()
    starts = pd.to_datetime(got["window_start"], utc=True)
    assert not starts.duplicated().any() and len(got) >= 5
    assert dict(zip(starts, got["count"], strict=True)) == {w: int(reference[w]) for w in starts}
    assert sorted(starts) == list(reference.index[: len(got)])
