"""The micro-batch dispatch gate's policy (no Spark): order, bound, pools, frontiers, cpu-share pools."""

from __future__ import annotations

import threading
import time

import pytest

from strata.dispatch import WorkUnit
from strata.model import Job
from strata.spark.engine import share_pools
from strata.spark.gate import URGENT_POOL, Gate, GateConfig, GateCore, batch_frontier


def unit(job: str, frontier: float, target: float, cost: float, seq: int, arrival: float = 0.0) -> WorkUnit:
    return WorkUnit(job, frontier, target, cost, 0.0, arrival, seq)


def test_least_laxity_releases_the_batch_with_the_least_slack_first():
    core = GateCore(GateConfig(max_running=1))
    # deadlines t_MF + L − C: bulk 100 + 30 − 1 = 129; alerts 110 + 2 − 0.5 = 111.5; other 105 + 10 − 0 = 115
    core.arrive(unit("bulk", 100.0, 30.0, 1.0, 0))
    core.arrive(unit("alerts", 110.0, 2.0, 0.5, 1))
    core.arrive(unit("other", 105.0, 10.0, 0.0, 2))
    order = []
    while core.waiting:
        job = core.next_release(0.0)
        core.release(job, 0.0)
        order.append(job)
        assert core.next_release(0.0) is None  # the bound: one at a time
        core.finish(job)
    assert order == ["alerts", "other", "bulk"]


def test_fifo_and_edf_orders_differ_from_least_laxity():
    units = [unit("a", 0.0, 10.0, 9.0, 0, arrival=3.0), unit("b", 1.0, 5.0, 0.0, 1, arrival=1.0)]
    orders = {}
    for name in ("cameo", "edf", "fifo"):
        core = GateCore(GateConfig(strategy=name, max_running=1))
        for u in units:
            core.arrive(u)
        orders[name] = core.next_release(0.0)
    # laxity a: 0 + 10 − 9 = 1 < b: 6;  EDF a: 10 > b: 6;  FIFO by arrival: b (1.0) before a (3.0)
    assert orders == {"cameo": "a", "edf": "b", "fifo": "b"}


def test_bound_counts_running_batches_of_all_queries():
    core = GateCore(GateConfig(max_running=2))
    for i, job in enumerate("xyz"):
        core.arrive(unit(job, float(i), 1.0, 0.0, i))
    core.release(core.next_release(0.0), 0.0)
    core.release(core.next_release(0.0), 0.0)
    assert core.next_release(0.0) is None
    core.finish("x")
    assert core.next_release(0.0) == "z"
    core.arrive(unit("late", -10.0, 1.0, 0.0, 3))  # already past its deadline: released over the bound
    assert core.next_release(0.0) == "late"
    with pytest.raises(ValueError, match="already has a batch"):
        core.arrive(unit("y", 0.0, 1.0, 0.0, 9))


def test_pool_is_urgent_when_laxity_is_short_else_the_jobs_share_pool():
    core = GateCore(GateConfig(urgent_laxity_s=1.0))
    u = unit("a", 100.0, 2.0, 0.5, 0)  # deadline 101.5
    assert core.pool(u, "w2", now=100.0) == "w2"  # slack 101.5 − 100 = 1.5
    assert core.pool(u, "w2", now=100.6) == URGENT_POOL  # slack 0.9
    assert core.pool(u, "w2", now=102.0) == URGENT_POOL  # already late


def test_frontier_of_a_windowed_job_is_the_next_firing():
    job = Job.model_validate(
        {
            "id": "w",
            "rank": 1,
            "templates": [
                {
                    "name": "t",
                    "operators": [
                        {"name": "s", "kind": "source", "source": {"rate": 1}},
                        {"name": "a", "kind": "window_aggregate", "window": {"size_s": 10, "watermark_s": 2}},
                        {"name": "o", "kind": "sink"},
                    ],
                    "streams": [{"from": "s", "to": "a"}, {"from": "a", "to": "o"}],
                }
            ],
        }
    )
    # a record at 13 s: window [10, 20) fires at 22; one at 21 s still holds back [10, 20)'s firing at 22
    assert batch_frontier(job, "t", 13.0) == 22.0
    assert batch_frontier(job, "t", 21.0) == 22.0
    assert batch_frontier(job, "t", 23.0) == 32.0


def test_share_pools_are_powers_of_two_relative_to_the_smallest_share():
    assert share_pools({"a": 0.1, "b": 0.2, "c": 0.8, "d": 5.0}) == {"a": "w1", "b": "w2", "c": "w8", "d": "w8"}
    assert share_pools({"a": 0.0, "b": 0.3}) == {"a": "w1", "b": "w1"}


class _Query:
    lastProgress = None


class _Pipeline:
    """Just what the gate reads from a pipeline."""

    def __init__(self, job: Job, spark) -> None:
        from strata.spark.pipelines import PipelineOptions

        self.name, self.job, self.template = job.id, job, job.templates[0]
        self.chain = job.templates[0].operators
        self.options = PipelineOptions(epoch=0.0)
        self.rate_cap = None
        self.query = _Query()
        self.spark = spark


class _Context:
    def __init__(self) -> None:
        self.props: dict[str, str] = {}

    def setLocalProperty(self, key: str, value: str) -> None:
        self.props[threading.get_ident()] = value


class _Spark:
    def __init__(self) -> None:
        self.sparkContext = _Context()


def _job(jid: str, target: float) -> Job:
    return Job.model_validate(
        {
            "id": jid,
            "rank": 1,
            "target_latency_s": target,
            "templates": [
                {
                    "operators": [
                        {"name": "s", "kind": "source", "source": {"rate": 100}},
                        {"name": "o", "kind": "sink"},
                    ],
                    "streams": [{"from": "s", "to": "o"}],
                }
            ],
        }
    )


def test_gate_blocks_the_second_query_until_a_slot_frees_then_releases_by_laxity():
    spark = _Spark()
    gate = Gate(GateConfig(max_running=1), clock=lambda: 0.0)  # at the epoch: nobody is urgent yet
    slow, urgent, relaxed = (_Pipeline(_job(j, t), spark) for j, t in (("slow", 30), ("urgent", 2), ("relaxed", 60)))
    released: list[str] = []
    gate.on_release = lambda row: released.append(row["query"])
    gate.before(slow, 0)  # takes the only slot
    threads = [threading.Thread(target=gate.before, args=(p, 0)) for p in (relaxed, urgent)]
    for th in threads:
        th.start()
    time.sleep(0.3)
    assert released == ["slow"]  # both wait
    gate.after(slow, {"released": 0.0, "finished": 1.0})
    time.sleep(0.3)
    assert released == ["slow", "urgent"]  # same frontier (epoch 0): the 2 s target has least slack
    gate.after(urgent, {"released": 0.0, "finished": 1.0})
    for th in threads:
        th.join(timeout=5)
    assert released == ["slow", "urgent", "relaxed"]


def test_a_batch_with_slack_waits_while_an_urgent_batch_runs_until_its_slack_shrinks():
    core = GateCore(GateConfig(max_running=2, urgent_laxity_s=1.0, hold_laxity_s=5.0))
    core.arrive(unit("alerts", 0.0, 2.0, 1.5, 0))  # slack 0.5 at t=0: urgent
    core.release(core.next_release(0.0), 0.0)
    core.arrive(unit("bulk", 0.0, 30.0, 2.0, 1))  # slack 28 at t=0
    assert core.next_release(0.0) is None  # a slot is free, but the urgent batch runs
    assert core.next_release(23.5) == "bulk"  # slack 4.5 < 5: it goes
    core.finish("alerts")
    assert core.next_release(0.0) == "bulk"  # no urgent batch running
