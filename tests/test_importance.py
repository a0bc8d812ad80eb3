"""Importance over small DAGs against hand-computed values (SODA §3)."""

from __future__ import annotations

import pytest

from strata.model import (
    Cluster,
    Job,
    PiecewiseLinearCapacity,
    PiecewiseLinearValue,
    Scenario,
    StepValue,
    joined_graph,
    offered_rates,
    propagate,
    scenario_importance,
)
from strata.model.functions import LinearValue


def diamond(value_out: dict, weights=(1.0, 2.0)) -> Scenario:
    """src(100/s) → a (sel 0.5) → b (sel 0.4) → sink; src → c (sel 1, cost 0.01) → sink."""
    job = {
        "id": "j",
        "rank": 1,
        "templates": [
            {
                "operators": [
                    {"name": "src", "kind": "source", "source": {"rate": 100}, "cost_per_record": 0},
                    {"name": "a", "kind": "filter", "selectivity": 0.5, "cost_per_record": 0.001},
                    {"name": "b", "kind": "map", "selectivity": 0.4, "cost_per_record": 0.002},
                    {"name": "c", "kind": "map", "selectivity": 1.0, "cost_per_record": 0.01},
                    {"name": "out", "kind": "sink", "cost_per_record": 0},
                ],
                "streams": [
                    {"from": "src", "to": "a"},
                    {"from": "a", "to": "b"},
                    {"from": "b", "to": "out", "weight": weights[0], "value": value_out},
                    {"from": "src", "to": "c"},
                    {"from": "c", "to": "out", "weight": weights[1]},
                ],
            }
        ],
    }
    return Scenario(cluster=Cluster(nodes=[{"name": "n", "cores": 4}]), jobs=[Job.model_validate(job)])


def test_unlimited_cpu_identity_values():
    # b: 100 × 0.5 × 0.4 = 20; c: 100. Importance = 1×20 + 2×100.
    assert scenario_importance(diamond({"kind": "identity"})) == pytest.approx(220.0)


def test_cpu_limits_and_non_concave_value():
    # Step value on b's stream: worth 7 once its rate reaches 15, 0 below.
    s = diamond({"kind": "step", "steps": [[15, 7.0], [30, 9.0]]})
    cpu = {"j.src": 0, "j.a": 0.1, "j.b": 1.0, "j.c": 0.5, "j.out": 1}
    # a: capacity 0.1/0.001 = 100 ≥ 100 → out 50; b: cap 500 → out 20 → step(20) = 7
    # c: capacity 0.5/0.01 = 50 < 100 → out 50. Importance = 1×7 + 2×50 = 107.
    assert scenario_importance(s, cpu=cpu) == pytest.approx(107.0)
    # Starve a: capacity 0.06/0.001 = 60 → a out 30 → b out 12 → below the first step.
    cpu["j.a"] = 0.06
    assert scenario_importance(s, cpu=cpu) == pytest.approx(100.0)


def test_rates_propagate_in_topological_order():
    s = diamond({"kind": "identity"})
    rates = propagate(joined_graph(s), {"j.src": 0, "j.a": 0.02, "j.b": 1, "j.c": 1, "j.out": 1})
    assert rates == pytest.approx({"j.src": 100, "j.a": 10, "j.b": 4, "j.c": 100, "j.out": 104})


def test_value_functions():
    convex = PiecewiseLinearValue(points=[(0, 0), (10, 1), (20, 10)])
    assert convex(15) == pytest.approx(5.5) and not convex.concave
    assert PiecewiseLinearValue(points=[(0, 0), (10, 8), (20, 10)]).concave
    assert StepValue(steps=[(5, 1.0)])(4.99) == 0 and StepValue(steps=[(5, 1.0)])(5) == 1
    assert LinearValue(slope=2, intercept=-4)(1) == 0 and LinearValue(slope=2, intercept=-4)(3) == 2


def test_piecewise_capacity_inverts():
    rf = PiecewiseLinearCapacity(points=[(0, 0), (1, 100), (2, 150)])
    assert rf.capacity(1.5, 0) == pytest.approx(125)
    assert rf.cpu_for(125, 0) == pytest.approx(1.5)
    assert rf.cpu_for(200, 0) == float("inf")
    assert rf.concave


def test_shared_stream_joins_jobs():
    producer = {
        "id": "p",
        "rank": 1,
        "templates": [
            {
                "operators": [
                    {"name": "src", "kind": "source", "source": {"rate": 10}},
                    {"name": "f", "kind": "filter", "selectivity": 0.5},
                    {"name": "out", "kind": "sink"},
                ],
                "streams": [{"from": "src", "to": "f"}, {"from": "f", "to": "out"}],
            }
        ],
    }
    consumer = {
        "id": "c",
        "rank": 2,
        "templates": [
            {
                "operators": [{"name": "m", "kind": "map"}, {"name": "out", "kind": "sink"}],
                "streams": [{"from": "p.f", "to": "m"}, {"from": "m", "to": "out", "weight": 3}],
            }
        ],
    }
    s = Scenario(
        cluster=Cluster(nodes=[{"name": "n", "cores": 1}]),
        jobs=[Job.model_validate(producer), Job.model_validate(consumer)],
    )
    assert scenario_importance(s) == pytest.approx(5 + 3 * 5)
    # Without the producer, the consumer sees nothing.
    assert scenario_importance(s, templates={"c": "default"}) == 0


def test_offered_rates_are_what_each_pe_receives():
    s = diamond({"kind": "identity"})
    graph = joined_graph(s)
    # src offers its primal 100/s; a and c receive 100; b receives a's 50; out receives 20 + 100.
    assert offered_rates(graph) == pytest.approx({"j.src": 100, "j.a": 100, "j.b": 50, "j.c": 100, "j.out": 120})
