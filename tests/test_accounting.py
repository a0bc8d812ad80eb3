"""Spark's accounting of a micro-batch, the pure parts (issue 29 item 1): hand-computed answers."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from strata.model import Scenario
from strata.spark.accounting import BatchCost, batch_of, combine, python_cpu_seconds, runs_tasks, spread, tree_cpu


def chain_job(jid: str, query: dict, source: dict | None = None, **job) -> dict:
    """One job's spec, the chain a Python job declares: input → query → out (``job``: rank, target, …)."""
    ops = [
        {"name": "input", "kind": "source", "cost_per_record": 0.0, "source": source or {"rate": 100, "seed": 1}},
        {"name": "query", **query},
        {"name": "out", "kind": "sink", "cost_per_record": 0.0},
    ]
    streams = [{"from": "input", "to": "query"}, {"from": "query", "to": "out"}]
    return {"id": jid, "rank": 1, **job, "templates": [{"operators": ops, "streams": streams}]}


def on_one_node(cores: int, *jobs: dict) -> Scenario:
    return Scenario.model_validate({"name": "t", "cluster": {"nodes": [{"name": "n0", "cores": cores}]}, "jobs": jobs})


def test_the_batch_id_is_read_from_a_streaming_job_description():
    assert batch_of("alerts\nid = 1a50\nrunId = 0adf\nbatch = 17") == 17
    assert batch_of("\nid = 1a50\nrunId = 0adf\nbatch = 0") == 0
    assert batch_of("collect at foo.py:3") is None
    assert batch_of(None) is None


def test_a_batch_cost_sums_its_stages_and_skipped_stages_add_nothing():
    # (cpu ns, run ms, tasks): a skipped stage reports its tasks but ran none
    cost = combine([(24_000_000, 138, 2), (0, 0, 2), (3_000_000, 12, 1)])
    assert cost == BatchCost(cpu_s=0.027, run_s=0.15, tasks=3, width=2)
    assert combine([]) == BatchCost(0.0, 0.0, 0, 0)


def test_a_total_is_spread_in_proportion_to_weights():
    assert spread(3.0, {1: 1.0, 2: 2.0}) == {1: 1.0, 2: 2.0}
    assert spread(1.0, {1: 0.0, 2: 0.0}) == {1: 0.5, 2: 0.5}
    assert spread(2.0, {1: -1.0, 2: 1.0}) == {1: 0.0, 2: 2.0}
    assert spread(1.0, {}) == {}


def test_python_cpu_counts_the_daemon_and_the_workers_forked_from_it():
    procs = {
        10: (1, 50.0),  # the JVM: its own CPU is the task metrics' business
        11: (10, 4.0),  # the PySpark daemon: reaped workers' CPU is in here
        12: (11, 1.5),  # live forked workers
        13: (11, 0.5),
        14: (10, 2.0),  # a Python data source's planner, not a task (not a root)
        20: (1, 9.0),  # another application's daemon
    }
    assert tree_cpu(procs, [11]) == pytest.approx(6.0)
    assert tree_cpu(procs, [11, 20]) == pytest.approx(15.0)
    assert tree_cpu(procs, [99]) == 0.0
    assert tree_cpu(procs, []) == 0.0


def test_python_cpu_of_a_process_without_pyspark_workers_is_zero():
    assert python_cpu_seconds(os.getpid()) == 0.0


def test_the_tasks_daemon_is_told_from_the_planners_by_its_worker_module():
    py = "/venv/bin/python"
    assert runs_tasks([py, "-m", "strata.spark.worker_daemon", "pyspark.worker"], "strata.spark.worker_daemon")
    assert runs_tasks([py, "-m", "pyspark.daemon"])  # an older PySpark names no worker module
    assert runs_tasks([py, "-m", "pyspark.daemon", "pyspark.worker"])
    assert runs_tasks([py, "-m", "pyspark.daemon", "team.worker"], worker="team.worker")
    # Spark's planners of Python data sources run under PySpark's daemon module with a planner's module
    assert not runs_tasks([py, "-m", "pyspark.daemon", "pyspark.sql.worker.plan_data_source_read"])
    assert not runs_tasks([py, "-m", "pyspark.daemon", "pyspark.worker"], "strata.spark.worker_daemon")
    assert not runs_tasks([py, "-m", "pyspark.sql.streaming.python_streaming_source_runner"])
    assert not runs_tasks([py, "-c", "pass", "pyspark.daemon"])
    assert not runs_tasks([])


def test_python_cpu_is_read_from_the_tasks_daemon_under_the_given_process(tmp_path):
    # a child of this process run as Spark runs the tasks' daemon (``python -m <module> pyspark.worker``) that burns
    # 0.3 s of CPU, then sleeps: counted under its module, not under PySpark's
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3:\n    pass\nprint(flush=True)\n"
    (tmp_path / "burner_daemon.py").write_text(burn + "time.sleep(30)\n")
    command = [sys.executable, "-m", "burner_daemon", "pyspark.worker"]
    child = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE)
    try:
        child.stdout.readline()  # the burn is over
        assert python_cpu_seconds(os.getpid(), "burner_daemon") == pytest.approx(0.3, abs=0.1)
        assert python_cpu_seconds(os.getpid()) == 0.0
    finally:
        child.kill()
        child.wait()
