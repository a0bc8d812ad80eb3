"""Priors only seed the estimator (issue 29 item 1): a job not observed yet is neither capped nor given a cpu share
below what it is offered; the floor of a latency-critical job from the accounted batches. Known answers by hand."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from strata.control.controller import Controller, HierarchyConfig
from strata.control.estimation import BatchAccount, batch_floor, offered_demand
from strata.model import Scenario
from strata.protocol.engine import Observation, WindowStats
from strata.runners.live import Floors
from tests.test_accounting import chain_job, on_one_node


def one_core() -> Scenario:
    # a Python job's declaration has no rate of its own: its spec carries PythonJob's default prior of 100 rec/s.
    # Demand at the priors: alerts 100 × 0.004 = 0.4 cores, bulk 100 × 0.01 = 1.0 core: 1.4 on 1 core
    return on_one_node(
        1,
        chain_job("alerts", {"kind": "map", "cost_per_record": 0.004, "selectivity": 0.5}, target_latency_s=1.0),
        chain_job("bulk", {"kind": "map", "cost_per_record": 0.01, "selectivity": 0.5}, rank=2, target_latency_s=60.0),
    )


def window(now: float, ingest: dict[str, float]) -> WindowStats:
    return WindowStats(
        now=now,
        start=now - 2.0,
        key_groups=(),
        instances=(),
        node_utilisation={},
        queue_lengths={},
        latency={},
        rates={},
        ingest=ingest,
        routing={},
        placement={},
        migrating=(),
        dropped={},
    )


def test_offered_demand_is_records_in_times_cost_through_the_chain():
    demand = offered_demand(one_core(), {"alerts": "default", "bulk": "default"})
    assert demand == pytest.approx({"alerts": 0.4, "bulk": 1.0})


def test_an_unobserved_job_gets_no_cap_and_at_least_its_offered_demand():
    # (learned costs lifting it: tests/test_first_plan.py)
    ctl = Controller(one_core(), HierarchyConfig(epoch_s=1000.0, window_s=2.0, pacing="plan"))
    first = ctl.start(0.0)
    # the plan on priors cannot give both their 1.4 cores on 1: before, it capped the sources at what it admitted
    assert sum(ctl.plan.cpu().values()) <= 1.0 + 1e-6
    assert first.rate_limits == {"alerts.input": None, "bulk.input": None}
    assert first.cpu_share["alerts"] >= 0.4 - 1e-9
    assert first.cpu_share["bulk"] >= 1.0 - 1e-9
    # alerts observed at its prior (no re-plan: the plan stands on an observation now); bulk still unobserved
    ctl.step(Observation(window(2.0, {"alerts.input": 100.0})))
    later = ctl.step(Observation(window(4.0, {"alerts.input": 100.0})))
    assert later.rate_limits["bulk.input"] is None
    assert ctl._pools()["bulk"] >= 1.0 - 1e-9
    # bulk's ingest observed at 500/s: re-planned on it, and still neither capped nor given less than its offer
    # needs (500 × 0.01 = 5 cores): its costs are not learned yet (no window accounted any of its work)
    seen = ctl.step(Observation(window(6.0, {"alerts.input": 100.0, "bulk.input": 500.0})))
    assert "bulk" in seen.replan
    assert seen.rate_limits["bulk.input"] is None
    assert ctl._pools()["bulk"] >= 5.0 - 1e-9


def test_the_floor_is_the_work_on_idle_cores_plus_the_least_contended_driver_time():
    # work: 0.4 core-s over width 4 on 2 cores = 0.2 s; 0.9 / min(2, 1) = 0.9 s; 0.3 / 2 = 0.15 s → median 0.2 s
    # driver: 0.5 − 0.8 / 2 = 0.1; 1.5 − 1.0 / 1 = 0.5; 0.6 − 0.6 / 2 = 0.3 → lowest (3 batches: the 10% is the
    # least) 0.1 s
    batches = [BatchAccount(0.4, 4, 0.8, 0.5), BatchAccount(0.9, 1, 1.0, 1.5), BatchAccount(0.3, 2, 0.6, 0.6)]
    assert batch_floor(batches, cores=2) == pytest.approx(0.3)
    assert batch_floor([BatchAccount(0.0, 0, 0.0, 0.2)], cores=2) is None
    assert batch_floor([], cores=2) is None


def test_the_report_shows_the_floor_beside_the_p99():
    import pandas as pd

    from strata.report import comparison

    row = {"job": "alerts", "rank": 1, "target_s": 2.0, "outputs": 10, "misses": 0, "throughput": 5.0}
    summary = pd.DataFrame(
        [
            {**row, "mode": "baseline", "p50_s": 1.0, "p99_s": 3.0, "importance": 1.0, "floor_s": 0.81},
            {**row, "mode": "strata", "p50_s": 0.5, "p99_s": 1.0, "importance": 1.0, "floor_s": 0.79},
        ]
    )
    rows = {(r["job"], r["metric"]): r for r in comparison(summary, pd.DataFrame())}
    assert (rows[("alerts", "floor s")]["baseline"], rows[("alerts", "floor s")]["strata"]) == ("0.81", "0.79")
    assert "floor s" not in {
        m for _, m in {(r["job"], r["metric"]) for r in comparison(summary.drop(columns="floor_s"), pd.DataFrame())}
    }


def test_the_live_views_floors_are_recomputed_at_most_every_few_seconds():
    class Engine:  # what Floors reads of a SparkEngine
        spark = SimpleNamespace(sparkContext=SimpleNamespace(defaultParallelism=2))
        reads = 0

        def batch_observations(self):
            self.reads += 1
            # 0.6 core-s over 2 cores: 0.3 s of work; 0.5 s batch less 0.4 s of tasks over 2 cores: 0.3 s of driver
            return [{"job": "alerts", "cpu_s": 0.4, "python_s": 0.2, "width": 2, "run_s": 0.4, "batch_ms": 500.0}]

    engine = Engine()
    floors = Floors(engine, every_s=3600.0)
    assert floors() == pytest.approx({"alerts": 0.6})
    assert floors() == pytest.approx({"alerts": 0.6}) and engine.reads == 1
    assert Floors(engine, every_s=0.0)() == pytest.approx({"alerts": 0.6}) and engine.reads == 2
