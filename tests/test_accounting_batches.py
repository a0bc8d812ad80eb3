"""Bulk task sizes as a decision of the levels (issue 29 item 2): known answers by hand."""

from __future__ import annotations

import pytest

from strata.control.estimation import Estimate
from strata.control.micro_batches import (
    BatchSizing,
    TaskTimes,
    alone_batch_s,
    critical_slack,
    fewest_records,
    records_per_task,
)
from strata.protocol.engine import TaskRun
from tests.test_accounting import chain_job, on_one_node


def test_a_batch_alone_holds_what_arrived_during_the_one_before():
    # T = 0.19 / (2 − 0.001 × 100) = 0.1 s
    assert alone_batch_s(0.19, 0.001, 100.0, 2) == pytest.approx(0.1)
    assert alone_batch_s(0.19, 0.001, 2000.0, 2) is None  # 2 cores of work at 2000/s: it cannot keep up alone


def test_the_slack_is_the_least_over_the_critical_jobs_and_none_when_one_misses_alone():
    polls = {"a": 0.25, "b": 0.5}
    # a: min(1/2, 1 − 0.25) − 0.1 = 0.4; b: min(2/2, 2 − 0.5) − 0.5 = 0.5
    assert critical_slack({"a": 1.0, "b": 2.0}, {"a": 0.1, "b": 0.5}, polls) == pytest.approx(0.4)
    assert critical_slack({"a": 1.0, "b": 2.0}, {"a": 0.1, "b": None}, polls) == pytest.approx(0.4)
    assert critical_slack({"b": 2.0}, {"b": 0.5}, polls) == pytest.approx(0.5)
    assert critical_slack({"a": 1.0}, {"a": 0.6}, {}) is None  # 0.5 − 0.6: it misses even so
    assert critical_slack({}, {}, {}) is None


def test_a_record_waits_out_two_blocked_batches_or_the_poll_and_one():
    # the demo's alerts: target 2 s, poll 0.5 s, 0.15 s alone: a 0.85 s task delays a record arriving just after
    # a batch started by (0.85 + 0.15) (that batch) + (0.85 + 0.15) (its own) = 2.0 s
    assert critical_slack({"alerts": 2.0}, {"alerts": 0.15}, {"alerts": 0.5}) == pytest.approx(0.85)
    # a poll over half the target binds instead: 1.5 + (0.35 + 0.15) = 2.0 s
    assert critical_slack({"alerts": 2.0}, {"alerts": 0.15}, {"alerts": 1.5}) == pytest.approx(0.35)
    assert critical_slack({"alerts": 2.0}, {"alerts": 0.15}, {"alerts": 1.9}) is None  # 2 − 1.9 − 0.15 < 0


def test_task_times_are_wall_seconds_per_record_weighted_to_the_latest_windows():
    times = TaskTimes(decay=0.9)
    times.observe({"scoring": TaskRun(3.0, 9000), "sessions": TaskRun(0.3, 9000)})
    assert times.per_record() == {"scoring": pytest.approx(3.0 / 9000), "sessions": pytest.approx(0.3 / 9000)}
    times.observe({"scoring": TaskRun(2.0, 3000)})
    # (0.9 × 3 + 2) / (0.9 × 9000 + 3000) = 4.7 / 11,100; sessions had no batch: unchanged
    assert times.per_record()["scoring"] == pytest.approx(4.7 / 11_100)
    assert times.per_record()["sessions"] == pytest.approx(0.3 / 9000)


def test_bulk_tasks_hold_as_many_records_as_the_slack_allows():
    held = {"scoring": 0.008, "light": 1e-5, "unlearned": 0.0}
    # 0.4 s / 8 ms = 50 records a task, down to the step 2^(22/4) = 45.25; 0.4 / 1e-5 = 40,000 → 2^(61/4) = 38,967.6
    assert records_per_task(0.4, held) == {"scoring": 45, "light": 38_967}
    assert records_per_task(0.4, {"scoring": 0.004}) == {"scoring": 90}  # 100 → 2^(26/4) = 90.5: on a step
    assert records_per_task(1e-4, {"scoring": 0.008}) == {"scoring": 1}  # at least one record
    assert records_per_task(None, held) == {}  # no critical job with a known slack: nothing sized
    # a floor from the per-task cost wins over the slack: 45 → 100
    assert records_per_task(0.4, {"scoring": 0.008}, {"scoring": 100}) == {"scoring": 100}


def test_a_split_keeps_each_tasks_fixed_cost_within_its_share_of_the_work():
    # 0.05 core-s a task within 10% of 5e-4 core-s a record: 1,000 records → up to the step 2^(40/4) = 1,024
    assert fewest_records(5e-4, 0.05, 0.1) == 1024
    assert fewest_records(0.05 / (0.1 * 1024), 0.05, 0.1) == 1024  # on a step: not one step up
    assert fewest_records(1e-3, 0.05, 0.1) == 512  # 500 → 2^(36/4)
    assert fewest_records(0.0, 0.05, 0.1) == 1  # cost unknown: no floor
    assert fewest_records(5e-4, 0.0, 0.1) == 1  # no per-task cost: no floor
    assert fewest_records(1.0, 0.05, 0.1) == 1  # a record outweighs a task's cost many times over


def test_task_sizes_from_the_learned_model_and_measured_task_times_size_the_bulk_jobs_only():
    query = {"kind": "map", "selectivity": 0.5}
    alerts, bulk = chain_job("alerts", query, target_latency_s=1.0), chain_job("bulk", query, target_latency_s=60.0)
    model = on_one_node(2, alerts, bulk, chain_job("must", query, target_latency_s=60.0, required=True))
    est = {
        # alerts: 0.19 core-s a batch + 0.001 per record at 100/s on 2 cores → 0.1 s alone; with no poll the slack
        # is min(1/2, 1 − 0) − 0.1 = 0.4 s
        "alerts.query": Estimate("alerts.query", 0.0029, 0.19, 0.001, 0.5, 5),
        # bulk: 0.003 per record at the query + 0.002 per record at the sink, which gets 0.5 of them → 0.004
        "bulk.query": Estimate("bulk.query", 0.003, 0.0, 0.003, 0.5, 5),
        "bulk.out": Estimate("bulk.out", 0.002, 0.0, 0.002, 1.0, 5),
        "must.query": Estimate("must.query", 0.003, 0.0, 0.003, 0.5, 5),
    }
    ingest = {"alerts.input": 100.0, "bulk.input": 1000.0, "must.input": 1000.0}
    templates = {"alerts": "default", "bulk": "default", "must": "default"}
    triggers = {"bulk": 4.0, "must": 4.0}
    sizing = BatchSizing(cores=2, critical_s=5.0, triggers=triggers)
    # bulk: 0.4 s / 0.004 = 100 records a task (step 90); must is required: never sized
    assert sizing.tasks(model, templates, est, ingest) == {"bulk.input": 90}
    # alerts polling every 0.8 s: slack min(0.5, 0.2) − 0.1 = 0.1 s → 25 records a task (step 22)
    polled = BatchSizing(cores=2, critical_s=5.0, triggers={**triggers, "alerts": 0.8})
    assert polled.tasks(model, templates, est, ingest) == {"bulk.input": 22}
    # measured: bulk's tasks ran 0.008 s a record (a loaded machine): 0.4 / 0.008 = 50 records (step 45); a
    # measurement under the core-seconds (0.001) is not believed below them
    assert sizing.tasks(model, templates, est, ingest, {"bulk": 0.008}) == {"bulk.input": 45}
    assert sizing.tasks(model, templates, est, ingest, {"bulk": 0.001}) == {"bulk.input": 90}
    # bulk's costs not learned yet, its tasks measured from its first batch: sized on the measurement alone
    early = {k: v for k, v in est.items() if not k.startswith("bulk.")}
    assert sizing.tasks(model, templates, early, ingest, {"bulk": 0.008}) == {"bulk.input": 45}
    # neither learned nor measured: on the model's prior, 1e-5 core-s a record (an operator's default) at the
    # query, 0 at the sink: 0.4 / 1e-5 = 40,000 records a task (step 2^(61/4) = 38,967.6)
    assert sizing.tasks(model, templates, early, ingest) == {"bulk.input": 38_967}
    # the critical job neither learned nor measured: its prior has no per-batch part, so its batch alone takes 0 s
    # and the slack is min(1/2, 1 − 0) = 0.5 s → 0.5 / 0.008 = 62.5 records of bulk a task (step 2^(23/4) = 53.8)
    unlearned = {k: v for k, v in est.items() if k != "alerts.query"}
    assert sizing.tasks(model, templates, unlearned, ingest, {"bulk": 0.008}) == {"bulk.input": 53}
    # ... measured only (1 ms of task time a record, polling every 0.5 s): one poll's 50 records over 2 cores take
    # 0.025 s, slack min(0.5, 1 − 0.5) − 0.025 = 0.475 s → 59.4 records of bulk a task (step 2^(23/4) = 53.8)
    measured = BatchSizing(cores=2, critical_s=5.0, triggers={**triggers, "alerts": 0.5})
    assert measured.tasks(model, templates, unlearned, ingest, {"bulk": 0.008, "alerts": 0.001}) == {"bulk.input": 53}


def test_before_anything_is_measured_bulk_tasks_are_sized_on_the_priors():
    # the demo's shape: alerts (2 s, polling every 0.5 s) at 400 records/s, a bulk job at a prior 6e-4 core-s a
    # record; no estimate, no measurement
    alerts = chain_job("alerts", {"kind": "filter", "selectivity": 0.1, "cost_per_record": 1e-4}, target_latency_s=2)
    bulk = chain_job("bulk", {"kind": "map", "cost_per_record": 6e-4}, target_latency_s=30.0)
    templates = {"alerts": "default", "bulk": "default"}
    sizing = BatchSizing(cores=2, critical_s=5.0, triggers={"alerts": 0.5, "bulk": 2.0})
    ingest = {"alerts.input": 400.0, "bulk.input": 2400.0}
    # alerts alone on its prior: no per-batch part, 0 s; slack min(2/2, 2 − 0.5) = 1 s → 1 / 6e-4 = 1,666.7
    # records a task (step 2^(42/4) = 1,448.2)
    assert sizing.tasks(on_one_node(2, alerts, bulk), templates, {}, ingest) == {"bulk.input": 1448}
    # a task costing 0.2 core-s, within 10% of its records at 6e-4: 3,333.3 → the step 2^(47/4) = 3,444.3, up
    floored = BatchSizing(cores=2, critical_s=5.0, triggers=sizing.triggers, task_overhead_s=0.2, overhead_share=0.1)
    assert floored.tasks(on_one_node(2, alerts, bulk), templates, {}, ingest) == {"bulk.input": 3445}
    # a prior by which alerts cannot keep up alone (6e-3 × 400 = 2.4 cores of 2): it misses even so, not sized
    heavy = chain_job("alerts", {"kind": "filter", "cost_per_record": 6e-3}, target_latency_s=2.0)
    assert sizing.tasks(on_one_node(2, heavy, bulk), templates, {}, ingest) == {}


def _alerts_beside_bulk():
    """A 1 s alerts job and a 60 s bulk job on two cores, and their windows k = 1, 2, 3 on the lines busy =
    0.19 + 0.001 × records (alerts) and 0.004 × records (bulk)."""
    from strata.protocol.engine import InstanceLoad, WindowStats

    query = {"kind": "map", "cost_per_record": 0.001}
    sc = on_one_node(
        2, chain_job("alerts", query, target_latency_s=1.0), chain_job("bulk", query, rank=2, target_latency_s=60.0)
    )

    def window(k: int) -> WindowStats:
        loads = (
            InstanceLoad("alerts.query", 0, "n0", 100 * k, 0.19 + 0.1 * k, 0, 0),
            InstanceLoad("bulk.query", 0, "n0", 1000 * k, 4.0 * k, 0, 0),
        )
        ingest = {"alerts.input": 100.0, "bulk.input": 1000.0}
        return WindowStats(2.0 * k, 2.0 * k - 2, (), loads, {}, {}, {}, {}, ingest, {}, {}, (), {})

    return sc, window


def test_the_controller_sizes_bulk_batches_from_what_it_learned_when_asked():
    from strata.control.controller import Controller, HierarchyConfig
    from strata.protocol.engine import Observation

    sc, window = _alerts_beside_bulk()
    sizes = {}
    for size, runs in ((False, {}), (True, {}), (True, {"bulk": TaskRun(8.0, 1000)})):
        ctl = Controller(sc, HierarchyConfig(epoch_s=1000.0, window_s=2.0, pacing="plan", size_batches=size))
        d = ctl.start(0.0)
        steps = [d] + [ctl.step(Observation(window(k), task_run=runs)) for k in (1, 2, 3)]
        sizes[size, bool(runs)] = [(d.task_records or {}).get("bulk.input") for d in steps]
        assert all(d.rate_limits["bulk.input"] is None for d in steps)  # split finer, never read less
    # at the start and until three windows have fitted the lines, on the priors: alerts' 0.001 core-s a record
    # has no per-batch part (0 s alone), it polls every 0.05 × 1 s, so the slack is min(1/2, 0.95) = 0.5 s; bulk
    # at its prior 0.001 core-s a record: 500 records a task (step 2^(35/4) = 430.5). Then learned: alerts alone
    # 0.19 / (2 − 0.001 × 100) = 0.1 s, slack min(1/2, 0.95) − 0.1 = 0.4 s; bulk at 0.004 core-s a record: 100
    # records a task (step 90).
    assert sizes[True, False] == [430, 430, 430, 90]
    # its tasks measured at 8 s of wall time per 1000 records from the first window: 0.5 / 0.008 = 62.5 (step
    # 53) on alerts' prior, 0.4 / 0.008 = 50 records a task (step 45) once alerts is learned
    assert sizes[True, True] == [430, 53, 53, 45]
    assert sizes[False, False] == [None, None, None, None]


def test_in_cells_only_a_bulk_job_beside_a_critical_job_is_split():
    from strata.control.cells import CellConfig
    from strata.control.controller import Controller, HierarchyConfig
    from strata.protocol.engine import Observation

    sc, window = _alerts_beside_bulk()
    last = {}
    for name, cells in (("one cell", CellConfig(max_cells=1)), ("apart", CellConfig(pins=(("alerts", "own"),)))):
        cfg = HierarchyConfig(epoch_s=1000.0, window_s=2.0, pacing="plan", size_batches=True, cells=cells)
        ctl = Controller(sc, cfg)
        ctl.start(0.0)
        last[name] = [ctl.step(Observation(window(k))) for k in (1, 2, 3)][-1].task_records["bulk.input"]
    # as in one application (90 records a task: see above); in a cell of its own, the OS preempts between them
    assert last == {"one cell": 90, "apart": None}
