"""The micro-batch dispatch gate's policy (L2, pure): order, bound, pools, frontiers, batch costs, strategy switch."""

from __future__ import annotations

import pytest

from strata.dispatch import STRATEGIES, URGENT_POOL, GateConfig, GateCore, WorkUnit, batch_frontier
from strata.model import Job


def unit(job: str, frontier: float, target: float, cost: float, seq: int, arrival: float = 0.0) -> WorkUnit:
    return WorkUnit(job, frontier, target, cost, 0.0, arrival, seq)


def test_least_laxity_releases_the_batch_with_the_least_slack_first():
    core = GateCore(GateConfig(max_running=1))
    # deadlines t_MF + L − C: bulk 100 + 30 − 1 = 129; alerts 110 + 2 − 0.5 = 111.5; other 105 + 10 − 0 = 115
    core.enqueue(unit("bulk", 100.0, 30.0, 1.0, 0))
    core.enqueue(unit("alerts", 110.0, 2.0, 0.5, 1))
    core.enqueue(unit("other", 105.0, 10.0, 0.0, 2))
    order = []
    while core.waiting:
        job = core.next_release(0.0)
        core.take(job, 0.0)
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
            core.enqueue(u)
        orders[name] = core.next_release(0.0)
    # laxity a: 0 + 10 − 9 = 1 < b: 6;  EDF a: 10 > b: 6;  FIFO by arrival: b (1.0) before a (3.0)
    assert orders == {"cameo": "a", "edf": "b", "fifo": "b"}


def test_bound_counts_running_batches_of_all_queries():
    core = GateCore(GateConfig(max_running=2))
    for i, job in enumerate("xyz"):
        core.enqueue(unit(job, float(i), 1.0, 0.0, i))
    core.take(core.next_release(0.0), 0.0)
    core.take(core.next_release(0.0), 0.0)
    assert core.next_release(0.0) is None
    core.finish("x")
    assert core.next_release(0.0) == "z"
    core.enqueue(unit("late", -10.0, 1.0, 0.0, 3))  # past its deadline (−9 < 0): after z, which can still meet its 3
    assert core.next_release(0.0) == "z"
    core.take("z", 0.0)
    assert core.next_release(0.0) == "late"  # the bound is full (y, z), but an overdue batch is urgent: over it
    with pytest.raises(ValueError, match="already has a batch"):
        core.enqueue(unit("y", 0.0, 1.0, 0.0, 9))


def test_a_latency_critical_batch_never_waits_for_a_bulk_batch_to_end():
    # Issue 29: FAIR pools by hand start a critical batch at once; the gate held it for the running bulk batch
    for critical_s, expected in ((0.0, None), (2.0, "alerts")):
        core = GateCore(GateConfig(max_running=1, urgent_laxity_s=1.0, critical_s=critical_s))
        core.enqueue(unit("bulk", 100.0, 30.0, 1.0, 0))
        core.take(core.next_release(0.0), 0.0)  # the slot is the bulk batch's
        core.enqueue(unit("alerts", 100.0, 2.0, 0.2, 1))  # deadline 101.8 at t = 0: slack 101.8 s, not urgent
        assert core.next_release(0.0) == expected
    core.take("alerts", 0.0)
    assert core.running == {"bulk", "alerts"} and core.urgent_running == set()
    # a bulk batch still waits for the slot (the critical batch holds one too), however the keys order them
    core.finish("bulk")
    core.enqueue(unit("other", 0.0, 30.0, 0.0, 2))
    assert core.next_release(0.0) is None
    core.finish("alerts")
    assert core.next_release(0.0) == "other"


def test_of_two_waiting_critical_batches_the_more_pressing_goes_first_even_behind_a_bulk_key():
    core = GateCore(GateConfig(max_running=1, critical_s=2.0))
    core.enqueue(unit("bulk", -50.0, 30.0, 0.0, 0))  # deadline −20: the least slack of all, but bulk
    core.enqueue(unit("a", 10.0, 2.0, 0.0, 1))  # deadline 12
    core.enqueue(unit("b", 9.0, 2.0, 0.0, 2))  # deadline 11
    assert core.next_release(0.0) == "b"


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


def test_a_batch_with_slack_waits_while_an_urgent_batch_runs_until_its_slack_shrinks():
    core = GateCore(GateConfig(max_running=2, urgent_laxity_s=1.0, hold_laxity_s=5.0))
    core.enqueue(unit("alerts", 0.0, 2.0, 1.5, 0))  # slack 0.5 at t=0: urgent
    core.take(core.next_release(0.0), 0.0)
    core.enqueue(unit("bulk", 0.0, 30.0, 2.0, 1))  # slack 28 at t=0
    assert core.next_release(0.0) is None  # a slot is free, but the urgent batch runs
    assert core.next_release(23.5) == "bulk"  # slack 4.5 < 5: it goes
    core.finish("alerts")
    assert core.next_release(0.0) == "bulk"  # no urgent batch running


def _plain_job(jid: str, target: float) -> Job:
    return Job.model_validate(
        {
            "id": jid,
            "rank": 1,
            "target_latency_s": target,
            "templates": [
                {
                    "name": "t",
                    "operators": [
                        {"name": "s", "kind": "source", "source": {"rate": 1}},
                        {"name": "o", "kind": "sink"},
                    ],
                    "streams": [{"from": "s", "to": "o"}],
                }
            ],
        }
    )


def test_batches_are_priced_with_the_learned_cost_and_released_with_their_pool():
    core = GateCore(GateConfig(max_running=1, urgent_laxity_s=1.0))
    job = _plain_job("q", 10.0)
    for rows, seconds in ((100, 1.0), (200, 1.5), (400, 2.5)):  # 0.5 s + 5 ms per record
        core.learn("q", rows, seconds)
    core.arrive("q", job, "t", oldest_event_time=50.0, rows=300, now=55.0)
    assert core.waiting["q"].unit.own_cost == pytest.approx(2.0)
    assert core.next_release(55.0) == "q"
    r = core.release("q", "w2", now=55.0)  # deadline 50 + 10 − 2 = 58: slack 3 s
    assert (r.frontier, r.deadline, r.predicted_cost, r.pool) == (50.0, 60.0, pytest.approx(2.0), "w2")
    assert (r.cost_fixed, r.cost_per_record) == (pytest.approx(0.5), pytest.approx(0.005))
    core.finish("q")
    core.arrive("q", job, "t", oldest_event_time=50.0, rows=300, now=57.5)
    assert core.release("q", "w2", now=57.5).pool == URGENT_POOL  # slack 0.5 s
    core.forget("q")
    assert not core.running and "q" not in core.costs


def test_use_switches_the_strategy_and_an_unknown_one_names_the_choices():
    core = GateCore(GateConfig(strategy="cameo"))
    core.use("fifo")
    assert core.strategy == "fifo" and core.config.strategy == "fifo"
    with pytest.raises(ValueError, match="unknown dispatch strategy 'nope'") as err:
        core.use("nope")
    assert all(name in str(err.value) for name in STRATEGIES)
    assert core.strategy == "fifo"  # unchanged


def looks(core: GateCore, times) -> list[str | None]:
    """The gate's answer at each of ``times`` (the Spark gate asks every 0.05 s while a batch waits)."""
    return [core.next_release(t) for t in times]


def test_a_bound_that_held_batches_back_most_of_a_period_widens_by_one_and_narrows_when_unused():
    # Issue 29: at local[2]'s bound of 1, sessions waited up to 13.6 s a batch behind scoring's 8 s batches
    core = GateCore(GateConfig(max_running=1, widen_after_s=10.0, widen_share=0.8))
    core.enqueue(unit("scoring", 1000.0, 30.0, 0.0, 0))
    core.take(core.next_release(0.0), 0.0)
    core.enqueue(unit("sessions", 1000.0, 30.0, 0.0, 1))  # slack 1030 s: never urgent here
    assert looks(core, [1.0, 5.0, 9.0]) == [None, None, None]
    assert core.bound == 1
    # held back from 0 to 10 s: 10 ≥ 0.8 × 10 → the bound widens at this look, and the batch goes
    assert core.next_release(10.0) == "sessions" and core.bound == 2
    core.take("sessions", 10.0)  # two at once: the widened slot is used
    core.finish("sessions")
    core.enqueue(unit("sessions", 1000.0, 30.0, 0.0, 2))
    assert core.next_release(20.0) == "sessions" and core.bound == 2  # peak 2 from 10 to 20 s: it stays
    core.take("sessions", 20.0)
    core.finish("sessions")
    core.finish("scoring")
    for start in (22.0, 31.0):  # from here one query alone, one batch at a time
        core.enqueue(unit("scoring", 1000.0, 30.0, 0.0, int(start)))
        assert core.next_release(start) == "scoring" and core.bound == 2  # 20-31 s: peak 2 (at 20 s), it stays
        core.take("scoring", start)
        core.finish("scoring")
    # from 31 to 41 s one batch at most (peak 1 < 2): the widened slot was never used, and it goes
    core.enqueue(unit("scoring", 1000.0, 30.0, 0.0, 41))
    assert core.next_release(41.0) == "scoring" and core.bound == 1


def test_a_bound_that_held_batches_back_less_than_the_share_stays():
    core = GateCore(GateConfig(max_running=1, widen_after_s=10.0, widen_share=0.8))
    core.enqueue(unit("a", 1000.0, 30.0, 0.0, 0))
    core.take(core.next_release(0.0), 0.0)
    core.enqueue(unit("b", 1000.0, 30.0, 0.0, 1))
    assert looks(core, [1.0, 4.0, 7.0]) == [None, None, None]  # held back 7 s
    core.finish("a")
    assert core.next_release(7.0) == "b"  # nothing held back from here on
    core.take("b", 7.0)
    core.enqueue(unit("a", 1000.0, 30.0, 0.0, 2))
    assert core.next_release(10.0) is None  # held back 7 + 0 of 10 s < 8: the bound stays 1
    assert core.bound == 1
    never = GateCore(GateConfig(max_running=1, widen_after_s=0.0))
    never.enqueue(unit("a", 1000.0, 30.0, 0.0, 0))
    never.take(never.next_release(0.0), 0.0)
    never.enqueue(unit("b", 1000.0, 30.0, 0.0, 1))
    assert looks(never, [5.0, 10.0, 100.0]) == [None, None, None] and never.bound == 1


@pytest.mark.parametrize(("name", "at_0", "at_1_5"), [("cameo", "a", "b"), ("edf", "a", "b"), ("fifo", "a", "a")])
def test_a_deadline_order_releases_a_batch_past_its_latest_start_after_one_that_is_not(name, at_0, at_1_5):
    # a: latest start 0 + 2 − 1 = 1, due 2; b: latest start 5 + 2 − 0.5 = 6.5, due 7; a arrived first
    core = GateCore(GateConfig(strategy=name, max_running=1))
    core.enqueue(unit("a", 0.0, 2.0, 1.0, 0, arrival=0.0))
    core.enqueue(unit("b", 5.0, 2.0, 0.5, 1, arrival=0.5))
    assert (core.next_release(0.0), core.next_release(1.5)) == (at_0, at_1_5)
