"""The runner behind `strata run`: a query that dies is reported with its cause, the others keep running."""

from __future__ import annotations

import contextlib

import pandas as pd
import pytest
from pyspark.errors import StreamingQueryException

from strata.model import Scenario
from strata.spark.pipelines import PipelineOptions
from strata.spark.runner import Runner, wait
from strata.spark.sources import expected_rows

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


def test_a_dead_query_is_reported_and_the_other_finishes(spark, tmp_path):
    runner = Runner(
        scenario(),
        tmp_path,
        PipelineOptions(clock="virtual", end_s=END_S, epoch=EPOCH, max_rows_per_batch=700, available_now=True),
    )
    runner.build(spark)
    try:
        runner.start()
        seen = []
        wait(runner, 300, on_tick=seen.append, tick_s=0.5)
        for p in runner.pipelines:
            with contextlib.suppress(StreamingQueryException):
                p.query.awaitTermination(60)
            assert runner.listener.wait_terminated(p.query.runId)
        final = {s.job: s for s in runner.status()}
        tables = runner.write_metrics()
    finally:
        runner.close()
    assert seen, "the live view was never updated"
    assert final["dies"].state == "failed"
    assert "(id < 500)" in final["dies"].cause and "is not true" in final["dies"].cause
    assert final["lives"].state == "stopped" and final["lives"].cause is None
    ref = pd.DataFrame(expected_rows(scenario().jobs[0].templates[0].operators[0].source, END_S, EPOCH))
    assert final["lives"].input_rows == len(ref)
    out = runner.pipelines[1].result()
    assert sorted(out["id"]) == sorted(ref.loc[ref["value"] < 0.5, "id"])
    progress = pd.read_csv(tables["progress"])
    assert progress.loc[progress["query"] == "lives", "input_rows"].sum() == len(ref)
    batches = pd.read_csv(tables["batches"])
    assert (batches.loc[batches["query"] == "lives", "rows_out"].sum()) == len(out)
    assert not spark.sparkContext._jsc.sc().isStopped()  # the shared session was not the runner's to stop


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


def test_a_data_directory_streams_through_spark_file_source(spark, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    frame = pd.DataFrame(
        {
            "id": range(300),
            "key": [i % 7 for i in range(300)],
            "value": [i / 10 for i in range(300)],
            "event_time": pd.date_range("2026-01-01", periods=300, freq="10ms").strftime("%Y-%m-%dT%H:%M:%S.%f"),
        }
    )
    for part in range(3):  # three files: the file source may take them in one batch or several
        frame.iloc[part * 100 : (part + 1) * 100].to_json(data / f"part-{part}.json", orient="records", lines=True)
    runner = Runner(file_job(data, "json"), tmp_path / "run", PipelineOptions(available_now=True))
    runner.build(spark)
    try:
        runner.start()
        runner.pipelines[0].query.awaitTermination(120)
        assert runner.pipelines[0].query.exception() is None
        out = runner.pipelines[0].result()
    finally:
        runner.close()
    final = out.sort_values("batch_id").groupby("key").tail(1).set_index("key").sort_index()
    ref = frame.groupby("key")["value"].sum().sort_index()
    assert list(final.index) == list(ref.index)
    assert final["sum"].to_numpy() == pytest.approx(ref.to_numpy())


def test_a_missing_data_directory_is_located_before_any_query(spark, tmp_path):
    from strata.spark.pipelines import PipelineProblems

    runner = Runner(file_job(tmp_path / "nowhere", "parquet"), tmp_path / "run")
    with pytest.raises(PipelineProblems) as err:
        runner.build(spark)
    runner.close()
    (problem,) = err.value.problems
    assert problem.path == ("jobs", 0, "templates", 0, "operators", 0, "source", "path")
    assert "parquet files" in problem.expected and "nowhere" in problem.found
