"""A user's own query is warmed before its run by a rehearsal: its query on a sample of its input, a throwaway
checkpoint, a sink of its own (issue 28; :mod:`strata.spark.rehearsal`, :func:`strata.runners.warmup.warm_up`).

Known answers: the rehearsal reads the first 3 files of the source's directory, a file a batch, and writes the
rows the query keeps of them; with no file yet it reads 3 × 1000 rows of the declared schema, whose ``value``
column counts up through [0, 1) (so ``value > 0.9`` keeps 299 of them); a source with no file and no declared
schema, or Kafka, is skipped with its reason; the real run afterwards writes, to its own sink, exactly the rows
pandas keeps of the whole input, each once.
"""

from __future__ import annotations

import time

import pandas as pd
import pytest

from strata.model import SourceSpec
from strata.model.user import collecting, job, memory, parquet, with_python_jobs
from strata.runners.producer import Producer
from strata.runners.spark_loop import RunConfig
from strata.runners.warmup import warm_up
from strata.spark.rehearsal import SAMPLE_FILES, SAMPLE_ROWS
from strata.spark.sinks import ParquetSink
from strata.spark.user import UserPipeline
from tests.conftest import rows_read, run_until, written_at_once

EVENTS = "id LONG, event_time TIMESTAMP, key LONG, value DOUBLE"
SOURCE = SourceSpec(rate=200, keys={"count": 20}, seed=5)


def declare(root, sink):
    with collecting() as jobs:
        alerts = job("alerts", rank=1, required=True, target_latency_s=2.0, sink=parquet(sink))

        @alerts.template
        def rules(spark):
            return spark.readStream.schema(EVENTS).json(str(root / "events")).where("value > 0.9")

        quiet = job("quiet", rank=2, target_latency_s=20.0, sink=memory())

        @quiet.template
        def lines(spark):  # a text source: no schema of its own to write rows of
            return spark.readStream.text(str(root / "empty")).selectExpr("value", "current_timestamp() AS event_time")

        feed = job("feed", rank=3, target_latency_s=20.0, sink=memory())

        @feed.template
        def from_kafka(spark):
            return spark.readStream.format("kafka").option("subscribe", "payments").load()

    return jobs


@pytest.fixture
def started(monkeypatch) -> list[UserPipeline]:
    """Every user query started, as started."""
    seen: list[UserPipeline] = []
    original = UserPipeline.start

    def start(self, *args, **kwargs):
        seen.append(self)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(UserPipeline, "start", start)
    return seen


@pytest.mark.spark
def test_a_warmed_user_query_rehearses_on_a_copy_and_its_run_stays_exactly_once(spark, tmp_path, started):
    root, sink = tmp_path / "in", tmp_path / "alerts-out"
    (root / "empty").mkdir(parents=True)
    seconds = 4.0
    events = written_at_once([Producer(root / "events", SOURCE, time.time() - seconds, seconds)], seconds)["events"]
    files = sorted((root / "events").glob("part-*.json"))
    assert len(files) == 8  # a file per 0.5 s
    scenario = with_python_jobs(declare(root, sink), [], "warm")

    warmed = warm_up(spark, scenario, tmp_path / "warm")
    assert warmed.jobs == ("alerts",) and warmed.start_s > 0
    assert warmed.skipped == {"quiet": f"no input yet in {root / 'empty'} (no schema declared)", "feed": "reads Kafka"}
    (rehearsed,) = started  # neither skipped query was started
    # its checkpoint and sink were the warm-up's own: nothing of the run's exists, the scratch is gone
    assert rehearsed.checkpoint.is_relative_to(tmp_path / "warm")
    assert isinstance(rehearsed.sink, ParquetSink) and rehearsed.sink.directory.is_relative_to(tmp_path / "warm")
    assert not sink.exists() and not (tmp_path / "warm").exists()
    assert sorted(p.name for p in (root / "events").iterdir()) == [f.name for f in files]  # the input untouched
    # the first 3 files, a file a batch: the rows the rule keeps of them
    first = pd.concat([pd.read_json(f, lines=True) for f in files[:SAMPLE_FILES]])["id"]
    assert [r["batch_id"] for r in rehearsed.records] == list(range(SAMPLE_FILES))
    kept = events[events["id"].isin(first) & (events["value"] > 0.9)]
    assert sum(r["rows_out"] for r in rehearsed.records) == len(kept) > 0

    alone = with_python_jobs([j for j in declare(root, sink) if j.id == "alerts"], [], "run")
    result = run_until(
        spark, alone, tmp_path / "run", RunConfig(), lambda e: rows_read(e).get("alerts", 0) >= len(events), 60.0
    )
    assert not result.engine.failures()
    real = started[-1]
    assert real.checkpoint.is_relative_to(tmp_path / "run") and real.checkpoint != rehearsed.checkpoint
    out = pd.read_parquet(sink)
    kept = events[events["value"] > 0.9]
    assert len(out) == len(kept) and sorted(out["id"]) == sorted(kept["id"])  # every row once


@pytest.mark.spark
def test_a_source_with_no_file_yet_is_rehearsed_on_rows_of_its_declared_schema(spark, tmp_path, started):
    root = tmp_path / "in"
    (root / "events").mkdir(parents=True)
    scenario = with_python_jobs([j for j in declare(root, tmp_path / "out") if j.id == "alerts"], [], "rows")
    warmed = warm_up(spark, scenario, tmp_path / "warm", sink="memory")  # a run that writes to memory: kept here
    assert (warmed.jobs, warmed.skipped) == (("alerts",), {})
    (rehearsed,) = started
    assert [r["batch_id"] for r in rehearsed.records] == list(range(SAMPLE_FILES))
    n = SAMPLE_FILES * SAMPLE_ROWS
    assert sorted(rehearsed.result()["id"]) == [i for i in range(n) if i / n > 0.9]  # 299 of 3000
    assert not any((root / "events").iterdir()) and not (tmp_path / "out").exists()


@pytest.mark.spark
def test_a_query_that_fails_or_outlasts_the_cap_is_skipped_and_the_warm_up_goes_on(spark, tmp_path):
    from pyspark.sql import functions as F

    root = tmp_path / "in"
    (root / "events").mkdir(parents=True)
    rows = pd.DataFrame({"id": [1, 2], "event_time": pd.Timestamp.now(tz="UTC"), "key": [1, 2], "value": [0.5, 0.95]})
    rows.to_json(root / "events" / "part-0.json", orient="records", lines=True, date_format="iso")

    def bad(_v):
        raise ValueError("no such card")

    def slow(v):
        time.sleep(3)
        return v

    with collecting() as jobs:
        for name, fn in (("broken", bad), ("slow", slow)):
            declared = job(name, rank=1, target_latency_s=2.0, sink=memory())

            def build(spark, fn=fn):
                events = spark.readStream.schema(EVENTS).json(str(root / "events"))
                return events.withColumn("value", F.udf(fn, "double")("value"))

            declared.template(build)
    scenario = with_python_jobs(jobs, [], "bad")
    failed = warm_up(spark, scenario, tmp_path / "warm", ["broken"])
    assert failed.jobs == () and failed.skipped["broken"].startswith("its query failed (")
    capped = warm_up(spark, scenario, tmp_path / "warm", ["slow"], cap_s=0.5)
    assert (capped.jobs, capped.skipped) == ((), {"slow": "no batch done within the warm-up's 0.5 s"})
    assert capped.seconds < 30 and not spark.streams.active


@pytest.mark.spark
def test_a_csv_source_with_no_file_yet_is_rehearsed_on_rows_written_as_its_reader_reads_them(spark, tmp_path, started):
    root = tmp_path / "in"
    (root / "readings").mkdir(parents=True)
    with collecting() as jobs:
        readings = job("readings", rank=1, target_latency_s=2.0, sink=memory())

        @readings.template
        def every_row(spark):  # a header and ";" as separator, given both ways a reader takes options
            reader = spark.readStream.option("header", True).option("mode", "FAILFAST").schema(EVENTS)
            return reader.csv(str(root / "readings"), sep=";")

    warmed = warm_up(spark, with_python_jobs(jobs, [], "csv"), tmp_path / "warm")
    assert (warmed.jobs, warmed.skipped) == (("readings",), {})
    (rehearsed,) = started
    assert [r["batch_id"] for r in rehearsed.records] == list(range(SAMPLE_FILES))
    # read back whole: a header read as a row or a wrong separator would fail the FAILFAST reader or drop rows
    assert sorted(rehearsed.result()["id"]) == list(range(SAMPLE_FILES * SAMPLE_ROWS))
    assert not any((root / "readings").iterdir())
