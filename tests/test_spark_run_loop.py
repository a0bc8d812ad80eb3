"""Queries under the loop: a query that dies is reported with its cause, the others keep running; file sources."""

from __future__ import annotations

import time

import pandas as pd
import pytest

from strata.control.estimation import attribute
from strata.control.loop import Plain, run
from strata.model import Scenario
from strata.spark.engine import EngineConfig, SparkEngine
from strata.spark.pipelines import Pipeline, PipelineOptions
from strata.spark.verify import verify_segment

pytestmark = pytest.mark.spark

SOURCE = {"rate": 400, "keys": {"count": 20}, "seed": 3}
END_S = 5.0
EPOCH = 1_700_000_000.0


def scenario() -> Scenario:
    def job(jid, op):
        return {
            "id": jid,
            "rank": 1,
            "templates": [
                {
                    "operators": [{"name": "s", "kind": "source", "source": SOURCE}, op, {"name": "o", "kind": "sink"}],
                    "streams": [{"from": "s", "to": op["name"]}, {"from": op["name"], "to": "o"}],
                }
            ],
        }

    return Scenario.model_validate(
        {
            "cluster": {"nodes": [{"name": "n0", "cores": 2}]},
            "jobs": [
                job("dies", {"name": "m", "kind": "map", "expressions": ["id", "assert_true(id < 500) AS ok"]}),
                job("lives", {"name": "f", "kind": "filter", "predicate": "value < 0.5"}),
            ],
        }
    )


def test_a_dead_query_is_reported_and_the_other_runs_on_under_the_loop(spark, tmp_path):
    sc = scenario()
    epoch = time.time()
    engine = SparkEngine(spark, sc, tmp_path, EngineConfig(epoch=epoch), attribute=attribute)
    seen = []
    try:
        run(
            engine,
            Plain(sc),
            window_s=1.0,
            until=time.time() + 90,
            on_step=lambda obs, _: seen.append(obs),
            should_stop=lambda: "dies" in engine.failures() and any(s.window.rates.get("lives.o") for s in seen),
        )
        failures = engine.failures()
        alive = engine.running["lives"].pipeline.query.isActive
        engine.stop_all()
        time.sleep(0.5)  # the last progress event arrives asynchronously
        check = verify_segment(spark, engine.segments_of("lives")[0], epoch, 0.1)
    finally:
        engine.close()
    assert seen, "the loop never stepped"
    assert "(id < 500)" in failures["dies"] and "is not true" in failures["dies"]
    assert alive and "lives" not in failures
    assert check["delivered"] > 0 and check["missing"] == check["duplicated"] == check["wrong"] == 0
    assert not spark.sparkContext._jsc.sc().isStopped()  # the shared session was not the engine's to stop


def file_job(path, fmt: str) -> Scenario:
    return Scenario.model_validate(
        {
            "cluster": {"nodes": [{"name": "n0", "cores": 2}]},
            "jobs": [
                {
                    "id": "files",
                    "rank": 1,
                    "templates": [
                        {
                            "operators": [
                                {
                                    "name": "s",
                                    "kind": "source",
                                    "source": {"rate": 100, "path": str(path), "format": fmt},
                                },
                                {"name": "k", "kind": "keyed_stateful", "aggregate": {"fn": "sum"}, "key_groups": 4},
                                {"name": "o", "kind": "sink"},
                            ],
                            "streams": [{"from": "s", "to": "k"}, {"from": "k", "to": "o"}],
                        }
                    ],
                }
            ],
        }
    )


def three_files(data, values) -> pd.DataFrame:
    """300 records (id, key, value, event_time 10 ms apart) as three JSON-lines files in ``data``."""
    data.mkdir()
    frame = pd.DataFrame(
        {
            "id": range(300),
            "key": [i % 7 for i in range(300)],
            "value": values,
            "event_time": pd.date_range("2026-01-01", periods=300, freq="10ms").strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        }
    )
    for part in range(3):  # three files: the file source may take them in one batch or several
        frame.iloc[part * 100 : (part + 1) * 100].to_json(data / f"part-{part}.json", orient="records", lines=True)
    return frame


def test_a_data_directory_streams_through_spark_file_source(spark, tmp_path):
    data = tmp_path / "data"
    frame = three_files(data, [i / 10 for i in range(300)])
    job = file_job(data, "json").jobs[0]
    pipeline = Pipeline(spark, job, job.templates[0], tmp_path / "run", PipelineOptions(available_now=True))
    pipeline.start()
    pipeline.query.awaitTermination(120)
    assert pipeline.query.exception() is None
    out = pipeline.result()
    final = out.sort_values("batch_id").groupby("key").tail(1).set_index("key").sort_index()
    ref = frame.groupby("key")["value"].sum().sort_index()
    assert list(final.index) == list(ref.index)
    assert final["sum"].to_numpy() == pytest.approx(ref.to_numpy())


def test_a_missing_data_directory_is_located_before_any_query(spark, tmp_path):
    from strata.spark.pipelines import PipelineProblems

    job = file_job(tmp_path / "nowhere", "parquet").jobs[0]
    with pytest.raises(PipelineProblems) as err:
        Pipeline(spark, job, job.templates[0], tmp_path / "run", PipelineOptions(), here=("jobs", 0, "templates", 0))
    (problem,) = err.value.problems
    assert problem.path == ("jobs", 0, "templates", 0, "operators", 0, "source", "path")
    assert "parquet files" in problem.expected and "nowhere" in problem.found


def test_a_file_source_is_verified_against_its_files_and_unread_files_count_as_undelivered(spark, tmp_path):
    from strata.spark.engine import Segment
    from strata.spark.verify import unread_input

    data = tmp_path / "data"
    three_files(data, [(i * 37 % 100) / 100 for i in range(300)])
    spec = file_job(data, "json").model_dump(by_alias=True)
    spec["jobs"][0]["templates"][0]["operators"][1] = {"name": "k", "kind": "filter", "predicate": "value > 0.5"}
    job = Scenario.model_validate(spec).jobs[0]
    filtered = job.templates[0]
    pipeline = Pipeline(spark, job, filtered, tmp_path / "run", PipelineOptions(available_now=True, sink="memory"))
    pipeline.start()
    pipeline.query.awaitTermination(120)
    segment = Segment(job.id, filtered.name, 0, 0, tmp_path / "run", pipeline, 0.0)
    check = verify_segment(spark, segment, 0.0, 0.1)
    # 300 records, value > 0.5 for 147 of them (i·37 mod 100 > 50: 49 of every 100, 3 files)
    assert (check["rows_read"], check["expected"], check["delivered"]) == (300, 147, 147)
    assert check["missing"] == check["duplicated"] == check["wrong"] == 0
    # Spark counts the records read, not those past the filter (no filter pushed into the JSON reader)
    assert sum(p["numInputRows"] for p in pipeline.query.recentProgress) == 300
    # a fourth file the query never read: its records before the horizon are owed, the others are not
    late = pd.DataFrame(
        {
            "id": [300, 301, 302],
            "key": [0, 1, 2],
            "value": [0.9, 0.1, 0.8],
            "event_time": ["2026-01-01T00:00:03Z", "2026-01-01T00:00:04Z", "2026-01-01T00:01:00Z"],
        }
    )
    late.to_json(data / "part-3.json", orient="records", lines=True)
    horizon = pd.Timestamp("2026-01-01T00:00:30Z").timestamp()
    assert sorted(unread_input([segment], horizon)["id"]) == [300, 301]


def test_windows_read_but_still_in_state_count_as_undelivered(spark, tmp_path):
    """A window aggregate that read all its input has emitted only the windows its watermark passed; the others
    are owed as much as windows whose input it never read (else a job that read its input would count fewer
    outputs than one that read nothing)."""
    from types import SimpleNamespace

    from strata.spark.engine import Segment
    from strata.spark.measure import ModeRun, undelivered

    data = tmp_path / "data"
    three_files(data, [1.0] * 300)  # event times 0–2.99 s, keys i mod 7: every 1 s window holds all 7 keys
    spec = file_job(data, "json").model_dump(by_alias=True)
    spec["jobs"][0]["templates"][0]["operators"][1] = {
        "name": "k",
        "kind": "window_aggregate",
        "window": {"size_s": 1, "watermark_s": 0.5},
    }
    scenario = Scenario.model_validate(spec)
    job = scenario.jobs[0]
    pipeline = Pipeline(
        spark, job, job.templates[0], tmp_path / "run", PipelineOptions(available_now=True, sink="memory")
    )
    pipeline.start()
    pipeline.query.awaitTermination(120)
    segment = Segment(job.id, job.templates[0].name, 0, 0, tmp_path / "run", pipeline, 0.0)
    epoch = pd.Timestamp("2026-01-01T00:00:00Z").timestamp()
    run = ModeRun("m", epoch, epoch + 60.0, SimpleNamespace(segments=[segment]))
    owed = undelivered(run, scenario, 0.1, 60.0, spark)
    sink = pipeline.result()
    # 3 windows x 7 keys, all due by the horizon: each either in the sink or owed, never both
    assert len(sink) + len(owed) == 21
    # the watermark never passes 2.49 s (the last event, 2.99 s, less 0.5 s): window [2, 3) is never emitted
    ends = owed["event_s"].round(3).tolist()
    assert ends.count(3.0) == 7
    assert set(ends) <= {1.0, 2.0, 3.0}
    assert owed["latency_s"].to_numpy() == pytest.approx((60.0 - owed["event_s"]).to_numpy())
