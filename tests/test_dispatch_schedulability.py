"""Textbook single-core schedulability through the ``DispatchPolicy`` protocol (Liu & Layland 1973; Buttazzo).

A tiny harness (not the simulator) drives one node with one core in unit time
steps. A task instance of cost C is released as C messages of cost 1 — Cameo's
premise that messages are small enough for non-preemptive dispatch to act like
preemptive scheduling at message boundaries; with integer parameters, EDF at
unit boundaries is exactly preemptive EDF, so Liu & Layland's bound holds:
a periodic task set with implicit deadlines is schedulable iff U ≤ 1.
"""

from __future__ import annotations

from fractions import Fraction
from math import lcm

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strata.dispatch import Strategy, WorkUnit, dispatcher
from strata.protocol.units import DispatchFactory, Message, NodeView

# (arrival, job, cost in unit messages, deadline)
Release = tuple[int, str, int, int]


def run_one_core(
    factory: DispatchFactory, releases: list[Release], latency: dict[str, float], horizon: int
) -> dict[tuple[str, int], int]:
    """Finish time of each released instance (job, arrival); instances unfinished by ``horizon`` are absent."""
    view = NodeView(name="core", cores=1, pes=tuple(f"{j}.op" for j in latency), target_latency=latency)
    node = factory(view)
    by_time: dict[int, list[Release]] = {}
    for r in releases:
        by_time.setdefault(r[0], []).append(r)
    left: dict[tuple[str, int], int] = {}
    finish: dict[tuple[str, int], int] = {}
    seq = 0
    for t in range(horizon):
        for arrival, job, cost, due in by_time.get(t, ()):
            left[(job, arrival)] = cost
            for _ in range(cost):
                seq += 1
                # frontier + L = the instance's absolute deadline
                node.push(
                    Message(
                        seq=seq,
                        job=job,
                        pe=f"{job}.op",
                        instance=0,
                        upstream=-1,
                        created=t,
                        event_time=arrival,
                        frontier=due - latency[job],
                        payload=arrival,
                    ),
                    t,
                )
        msg = node.pop(t)
        if msg is None:
            continue
        node.completed(msg, 1.0, t + 1)
        instance = (msg.job, msg.payload)
        left[instance] -= 1
        if left[instance] == 0:
            finish[instance] = t + 1
    return finish


def periodic(tasks: dict[str, tuple[int, int]]) -> tuple[list[Release], dict[str, float], int]:
    """Releases of periodic tasks name → (C, T) over one hyperperiod, implicit deadlines."""
    hyper = lcm(*(period for _, period in tasks.values()))
    releases = [
        (k * period, name, cost, (k + 1) * period)
        for name, (cost, period) in tasks.items()
        for k in range(hyper // period)
    ]
    return releases, {name: float(period) for name, (_, period) in tasks.items()}, hyper


def misses(factory: DispatchFactory, releases: list[Release], latency: dict[str, float], horizon: int) -> int:
    finish = run_one_core(factory, releases, latency, horizon)
    return sum(1 for arrival, job, _, due in releases if finish.get((job, arrival), horizon + 1) > due)


class RateMonotonic(Strategy):
    """Static priority by period (here each task's L is its period): shorter period first."""

    def key(self, unit: WorkUnit) -> float:
        return unit.target_latency


TASK_SETS = st.dictionaries(
    st.sampled_from("abcd"),
    st.sampled_from([2, 3, 4, 6, 8, 12]).flatmap(lambda t: st.tuples(st.integers(1, t), st.just(t))),
    min_size=1,
    max_size=4,
)


def utilisation(tasks: dict[str, tuple[int, int]]) -> Fraction:
    return sum((Fraction(c, t) for c, t in tasks.values()), Fraction(0))


@settings(max_examples=80, deadline=None)
@given(TASK_SETS.filter(lambda ts: utilisation(ts) <= 1))
@pytest.mark.parametrize("name", ["edf", "cameo"])
def test_edf_and_least_laxity_meet_every_deadline_when_utilisation_at_most_one(name, tasks):
    releases, latency, hyper = periodic(tasks)
    assert misses(dispatcher(name), releases, latency, hyper) == 0


@settings(max_examples=40, deadline=None)
@given(TASK_SETS.filter(lambda ts: utilisation(ts) > 1))
def test_any_strategy_misses_when_utilisation_exceeds_one(tasks):
    releases, latency, hyper = periodic(tasks)
    assert misses(dispatcher("edf"), releases, latency, hyper) > 0


def test_utilisation_exactly_one_meets_every_deadline_under_edf():
    releases, latency, hyper = periodic({"a": (1, 2), "b": (1, 3), "c": (1, 6)})  # 1/2 + 1/3 + 1/6
    assert misses(dispatcher("edf"), releases, latency, hyper) == 0


def test_edf_succeeds_where_rate_monotonic_fails():
    """Buttazzo's example: τ1 = (2, 5), τ2 = (4, 7), U = 34/35; RM misses τ2's first deadline at 7."""
    releases, latency, hyper = periodic({"t1": (2, 5), "t2": (4, 7)})
    assert misses(dispatcher("edf"), releases, latency, hyper) == 0
    finish = run_one_core(dispatcher(RateMonotonic), releases, latency, hyper)
    # RM: τ1 0–2, τ2 2–5, τ1 (released at 5) 5–7, τ2's last unit 7–8 > 7.
    assert finish[("t2", 0)] == 8
    assert misses(dispatcher(RateMonotonic), releases, latency, hyper) > 0


def test_edf_succeeds_where_fifo_fails():
    """A long lax job arrives first, a short urgent one right after (hand-computed schedules)."""
    releases = [(0, "bulk", 4, 10), (1, "urgent", 1, 3)]
    latency = {"bulk": 10.0, "urgent": 2.0}
    assert run_one_core(dispatcher("fifo"), releases, latency, 12) == {("bulk", 0): 4, ("urgent", 1): 5}
    assert run_one_core(dispatcher("edf"), releases, latency, 12) == {("bulk", 0): 5, ("urgent", 1): 2}
    assert misses(dispatcher("fifo"), releases, latency, 12) == 1
    assert misses(dispatcher("edf"), releases, latency, 12) == 0
