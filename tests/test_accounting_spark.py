"""A micro-batch's core-seconds from Spark's task metrics, and the learner fitting costs on them (issue 29 item 1)."""

from __future__ import annotations

import time

import pytest

from strata.control.estimation import ResourceLearner, attribute
from strata.control.loop import Plain, run
from strata.model import Scenario
from strata.spark.engine import EngineConfig, SparkEngine
from tests.test_accounting import chain_job, on_one_node

pytestmark = pytest.mark.spark


def scenario() -> Scenario:
    busy = "aggregate(sequence(1, 200), 0D, (acc, i) -> acc + sqrt(value * i)) AS work"
    query = {"kind": "map", "expressions": ["id", "event_time", busy]}
    return on_one_node(2, chain_job("heavy", query, source={"rate": 300, "keys": {"count": 20}, "seed": 5}))


def test_a_batch_cpu_time_is_read_and_the_learned_cost_is_it(spark, tmp_path):
    sc = scenario()
    engine = SparkEngine(spark, sc, tmp_path, EngineConfig(epoch=time.time()), attribute=attribute)
    learner = ResourceLearner(decay=1.0, min_samples=1)
    seen = []

    def step(obs, _):
        learner.observe_window(obs.window)
        seen.append(obs)

    enough = lambda: len(engine.costs) >= 4  # noqa: E731
    try:
        run(engine, Plain(sc), window_s=1.0, until=time.time() + 60, on_step=step, should_stop=enough)
    finally:
        engine.stop_all()
        time.sleep(0.5)
        engine.close()
    cores = spark.sparkContext.defaultParallelism
    batches = [b for b in engine.batch_observations() if b.get("cpu_s") is not None]
    assert len(batches) >= 4
    for b in batches:
        assert b["cpu_s"] > 0
        assert b["cpu_s"] <= b["run_s"] + 1e-3  # a task's CPU time never exceeds its run time
        assert b["cpu_s"] <= b["batch_ms"] / 1000 * cores  # nor what the cores could give in the batch's time
        assert b["python_s"] >= 0
    # the learner's cost per record of the chain (selectivity 1: every PE sees the same records) is the batches'
    # accounted core-seconds over their input rows (executor CPU and the Python workers' share), not their wall time
    taken = [b for b in batches if b["rows_in"]]
    # the generator is a Python data source: its reads run in the Python workers, whose CPU is part of the cost
    assert sum(b["python_s"] for b in taken) > 0
    cost = sum(b["cpu_s"] + b["python_s"] for b in taken) / sum(b["rows_in"] for b in taken)
    learned = sum(e.cost_per_record for e in learner.estimates().values())
    assert learned == pytest.approx(cost, rel=1e-6)
