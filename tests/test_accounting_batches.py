"""Bulk batch sizes as a decision of the levels (issue 29 item 2): known answers by hand."""

from __future__ import annotations

import pytest

from strata.control.estimation import Estimate
from strata.control.micro_batches import (
    BatchSize,
    BatchSizing,
    BulkBatches,
    alone_batch_s,
    batch_sizes,
    critical_slack,
)
from tests.test_accounting import chain_job, on_one_node


def test_a_batch_alone_holds_what_arrived_during_the_one_before():
    # T = 0.19 / (2 − 0.001 × 100) = 0.1 s
    assert alone_batch_s(0.19, 0.001, 100.0, 2) == pytest.approx(0.1)
    assert alone_batch_s(0.19, 0.001, 2000.0, 2) is None  # 2 cores of work at 2000/s: it cannot keep up alone


def test_the_slack_is_the_least_over_the_critical_jobs_and_none_when_one_misses_alone():
    assert critical_slack({"a": 1.0, "b": 2.0}, {"a": 0.1, "b": 0.5}) == pytest.approx(0.9)
    assert critical_slack({"a": 1.0, "b": 2.0}, {"a": 0.1, "b": None}) == pytest.approx(0.9)
    assert critical_slack({"a": 1.0}, {"a": 1.2}) is None
    assert critical_slack({}, {}) is None


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
        # alerts: 0.19 core-s a batch + 0.001 per record at 100/s on 2 cores → 0.1 s alone, slack 0.9 s
        "alerts.query": Estimate("alerts.query", 0.0029, 0.19, 0.001, 0.5, 5),
        # bulk: 0.003 per record at the query + 0.002 per record at the sink, which gets 0.5 of them → 0.004
        "bulk.query": Estimate("bulk.query", 0.003, 0.0, 0.003, 0.5, 5),
        "bulk.out": Estimate("bulk.out", 0.002, 0.0, 0.002, 1.0, 5),
        "must.query": Estimate("must.query", 0.003, 0.0, 0.003, 0.5, 5),
    }
    ingest = {"alerts.input": 100.0, "bulk.input": 1000.0, "must.input": 1000.0}
    templates = {"alerts": "default", "bulk": "default", "must": "default"}
    triggers = {"bulk": 4.0, "must": 4.0}
    # bulk: 0.9 × 2 / 0.004 = 450 records = 0.45 s at 1000/s (sized trigger 0.5 s, 900/s); its query runs with
    # its 4 s trigger, so the cap holds a batch to 450 records at that trigger: 112.5/s
    caps = BatchSizing(cores=2, critical_s=5.0, triggers=triggers).caps(model, templates, est, ingest)
    assert caps == {"bulk.input": pytest.approx(112.5)}
    shorter = BatchSizing(cores=2, critical_s=5.0, triggers={"bulk": 0.5})
    assert shorter.caps(model, templates, est, ingest) == {"bulk.input": pytest.approx(900.0)}
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
    for size in (False, True):
        ctl = Controller(sc, HierarchyConfig(epoch_s=1000.0, window_s=2.0, pacing="plan", size_batches=size))
        ctl.start(0.0)
        caps[size] = [ctl.step(Observation(window(k))).rate_limits["bulk.input"] for k in (1, 2, 3)]
    # alerts alone: 0.19 / (2 − 0.001 × 100) = 0.1 s, slack 0.9 s; bulk at 0.004 core-s a record: 450 records a
    # batch, at its 4 s trigger (60 s / 15) 112.5/s. Nothing before three windows have fitted the lines.
    assert caps[True] == [None, None, pytest.approx(112.5)]
    assert caps[False] == [None, None, None]  # the plan's own pacing does not cap bulk here
