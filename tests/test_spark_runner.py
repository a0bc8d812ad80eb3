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
        return {"id": jid, "rank": 1, "templates": [{"operators": [
            {"name": "s", "kind": "source", "source": SOURCE}, op, {"name": "o", "kind": "sink"}],
            "streams": [{"from": "s", "to": op["name"]}, {"from": op["name"], "to": "o"}]}]}

    return Scenario.model_validate({"cluster": {"nodes": [{"name": "n0", "cores": 2}]}, "jobs": [
        job("dies", {"name": "m", "kind": "map", "expressions": ["id", "assert_true(id < 500) AS ok"]}),
        job("lives", {"name": "f", "kind": "filter", "predicate": "value < 0.5"}),
    ]})


def test_a_dead_query_is_reported_and_the_other_finishes(spark, tmp_path):
    runner = Runner(scenario(), tmp_path, PipelineOptions(clock="virtual", end_s=END_S, epoch=EPOCH,
                                                          max_rows_per_batch=700, available_now=True))
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
