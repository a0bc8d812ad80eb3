"""Bulk batch sizes as a decision of the levels (issue 29 item 2): known answers by hand."""

from __future__ import annotations

import pytest

from strata.control.estimation import Estimate
from strata.control.micro_batches import (
    BatchSize,
    BatchSizing,
    BulkBatches,
    TaskTimes,
    alone_batch_s,
    batch_sizes,
    critical_slack,
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


def test_bulk_batches_are_as_large_as_the_slack_allows():
    bulk = {
        # 0.9 s × 2 tasks / 0.003 = 600 records; at 250/s that is 2.4 s of input, under its 4 s trigger
        "scoring": BulkBatches(cost_s=0.003, width=2, offered=250.0, trigger_s=4.0),
        # 0.9 × 2 / 0.03 = 60 records = 0.24 s of input: the trigger stays at 0.5 s, the batch at 60 (120/s)
        "heavy": BulkBatches(cost_s=0.03, width=2, offered=250.0, trigger_s=4.0),
        # 180,000 records: the job's own 4 s trigger binds
        "light": BulkBatches(cost_s=1e-5, width=2, offered=250.0, trigger_s=4.0),
        "unlearned": BulkBatches(cost_s=0.0, width=2, offered=250.0, trigger_s=4.0),
    }
    sizes = batch_sizes(0.9, bulk)
    assert sizes["scoring"] == BatchSize(pytest.approx(2.4), pytest.approx(600.0))
    assert sizes["scoring"].rate == pytest.approx(250.0)
    assert sizes["scoring"].files(40.0) == 15
    assert sizes["heavy"].trigger_s == 0.5 and sizes["heavy"].rate == pytest.approx(120.0)
    assert sizes["heavy"].files(100.0) == 1  # at least one file
    assert sizes["light"].trigger_s == 4.0 and sizes["light"].rate == pytest.approx(45_000.0)
    assert "unlearned" not in sizes
    assert batch_sizes(None, bulk) == {}  # no critical job with a known slack: nothing sized


def test_caps_from_the_learned_model_size_the_bulk_jobs_only():
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
    # bulk: 0.4 × 2 / 0.004 = 200 records = 0.2 s at 1000/s (sized trigger 0.5 s, 400/s); its query runs with
    # its 4 s trigger, so the cap holds a batch to 200 records at that trigger: 50/s
    caps = BatchSizing(cores=2, critical_s=5.0, triggers=triggers).caps(model, templates, est, ingest)
    assert caps == {"bulk.input": pytest.approx(50.0)}
    shorter = BatchSizing(cores=2, critical_s=5.0, triggers={"bulk": 0.5})
    assert shorter.caps(model, templates, est, ingest) == {"bulk.input": pytest.approx(400.0)}
    # alerts polling every 0.8 s: slack min(0.5, 0.2) − 0.1 = 0.1 s → 50 records a batch, 12.5/s at 4 s
    polled = BatchSizing(cores=2, critical_s=5.0, triggers={**triggers, "alerts": 0.8})
    assert polled.caps(model, templates, est, ingest) == {"bulk.input": pytest.approx(12.5)}
    # measured: bulk's tasks ran 0.008 s a record (a loaded machine): 0.4 × 2 / 0.008 = 100 records, 25/s; a
    # measurement under the core-seconds (0.001) is not believed below them
    sizing = BatchSizing(cores=2, critical_s=5.0, triggers=triggers)
    assert sizing.caps(model, templates, est, ingest, {"bulk": 0.008}) == {"bulk.input": pytest.approx(25.0)}
    assert sizing.caps(model, templates, est, ingest, {"bulk": 0.001}) == {"bulk.input": pytest.approx(50.0)}
    # bulk's costs not learned yet, its tasks measured from its first batch: sized on the measurement alone
    early = {k: v for k, v in est.items() if not k.startswith("bulk.")}
    assert sizing.caps(model, templates, early, ingest, {"bulk": 0.008}) == {"bulk.input": pytest.approx(25.0)}
    assert sizing.caps(model, templates, early, ingest) == {}  # neither learned nor measured: not sized
    # without the critical job's estimate there is no slack to size against
    unlearned = {k: v for k, v in est.items() if k != "alerts.query"}
    assert BatchSizing(cores=2, critical_s=5.0, triggers=triggers).caps(model, templates, unlearned, ingest) == {}


def test_the_controller_sizes_bulk_batches_from_what_it_learned_when_asked():
    from strata.control.controller import Controller, HierarchyConfig
    from strata.protocol.engine import InstanceLoad, Observation, WindowStats

    query = {"kind": "map", "cost_per_record": 0.001}
    sc = on_one_node(
        2,
        chain_job("alerts", query, target_latency_s=1.0),
        chain_job("bulk", query, rank=2, target_latency_s=60.0),
    )

    def window(k: int) -> WindowStats:
        # three windows on the lines busy = 0.19 + 0.001 × records (alerts) and 0.004 × records (bulk)
        loads = (
            InstanceLoad("alerts.query", 0, "n0", 100 * k, 0.19 + 0.1 * k, 0, 0),
            InstanceLoad("bulk.query", 0, "n0", 1000 * k, 4.0 * k, 0, 0),
        )
        ingest = {"alerts.input": 100.0, "bulk.input": 1000.0}
        return WindowStats(2.0 * k, 2.0 * k - 2, (), loads, {}, {}, {}, {}, ingest, {}, {}, (), {})

    caps = {}
    for size, runs in ((False, {}), (True, {}), (True, {"bulk": TaskRun(8.0, 1000)})):
        ctl = Controller(sc, HierarchyConfig(epoch_s=1000.0, window_s=2.0, pacing="plan", size_batches=size))
        ctl.start(0.0)
        caps[size, bool(runs)] = [
            ctl.step(Observation(window(k), task_run=runs)).rate_limits["bulk.input"] for k in (1, 2, 3)
        ]
    # alerts alone: 0.19 / (2 − 0.001 × 100) = 0.1 s; it polls every 0.05 × 1 s, so the slack is min(1/2, 0.95)
    # − 0.1 = 0.4 s; bulk at 0.004 core-s a record: 200 records a batch, at its 4 s trigger (60 s / 15) 50/s.
    # Nothing before three windows have fitted the lines.
    assert caps[True, False] == [None, None, pytest.approx(50.0)]
    # its tasks measured at 8 s of wall time per 1000 records: 0.4 × 2 / 0.008 = 100 records a batch, 25/s
    assert caps[True, True] == [None, None, pytest.approx(25.0)]
    assert caps[False, False] == [None, None, None]  # the plan's own pacing does not cap bulk here
