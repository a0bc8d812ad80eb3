"""macroQ's dynamic programme on a cpu grid against brute force and the MILP (SODA §4.1, NSDP)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from strata.model import Scenario, importance, joined_graph, propagate
from strata.plan.curves import better_of, component_model, grid_curve
from strata.plan.tree_dp import dp_curve, is_out_tree
from tests.test_plan_cases import chain, scenario


def fan_out() -> Scenario:
    """src → a → {b → sink1 (step value), c → sink2 (convex value)}; a has a convex resource table."""
    ops = [
        {"name": "src", "kind": "source", "source": {"rate": 400}, "cost_per_record": 0.0005},
        {
            "name": "a",
            "kind": "map",
            "cpu_min": 0.05,
            "resource": {"kind": "table", "points": [[0, 0], [0.2, 20], [0.4, 300]]},
        },
        {"name": "b", "kind": "filter", "selectivity": 0.5, "cost_per_record": 0.002, "cpu_max": 0.3},
        {"name": "c", "kind": "map", "cost_per_record": 0.001},
        {"name": "sink1", "kind": "sink"},
        {"name": "sink2", "kind": "sink"},
    ]
    streams = [
        {"from": "src", "to": "a"},
        {"from": "a", "to": "b"},
        {"from": "a", "to": "c"},
        {"from": "b", "to": "sink1", "weight": 2.0, "value": {"kind": "step", "steps": [[40, 50], [100, 200]]}},
        {
            "from": "c",
            "to": "sink2",
            "weight": 1.0,
            "value": {"kind": "piecewise_linear", "points": [[0, 0], [100, 10], [300, 400]]},
        },
    ]
    job = {"id": "t", "rank": 1, "templates": [{"name": "default", "operators": ops, "streams": streams}]}
    return scenario([job], nodes=1, cores=4.0)


def brute_force(graph, model, steps: int) -> list[float]:
    """Best importance with at most e grid steps above the minimum, for every e, by enumeration."""
    pes = list(model.ops)
    step = (model.saturation - model.minimum) / steps
    limit = {pe: min(steps, int(np.floor((op.cpu_max - op.cpu_min) / step + 1e-9))) for pe, op in model.ops.items()}
    best = [-np.inf] * (steps + 1)
    for ks in itertools.product(*[range(limit[pe] + 1) for pe in pes]):
        used = sum(ks)
        if used > steps:
            continue
        cpu = {pe: model.ops[pe].cpu_min + k * step for pe, k in zip(pes, ks, strict=True)}
        value = importance(graph, propagate(graph, cpu))
        best[used] = max(best[used], value)
    return list(np.maximum.accumulate(best))


@pytest.mark.parametrize("points", [3, 5])
def test_dp_matches_brute_force_on_a_tree_with_step_values_and_a_convex_table(points):
    s = fan_out()
    graph = joined_graph(s)
    pes = tuple(sorted(graph))
    assert is_out_tree(graph, pes)
    model = component_model(graph, pes)
    assert not model.linear  # step value and convex table: the LP does not apply
    curve = dp_curve(graph, model, points)
    expected = brute_force(graph, model, points - 1)
    assert curve.values == pytest.approx(expected, rel=1e-9, abs=1e-9)
    # Every allocation is on budget and worth what the curve says.
    for b, alloc, v in zip(curve.budgets, curve.allocs, curve.values, strict=True):
        assert sum(alloc.values()) <= b + 1e-9
        assert importance(graph, propagate(graph, alloc)) == pytest.approx(v, rel=1e-9, abs=1e-9)


def test_dp_never_beats_the_continuous_milp_and_matches_it_where_the_grid_holds_the_optimum():
    # A chain whose step value is reached exactly at grid budgets: DP and MILP agree there.
    s = scenario([chain("a", 100, [0.001, 0.01], value={"kind": "step", "steps": [[50, 10], [90, 30]]})])
    graph = joined_graph(s)
    pes = tuple(sorted(graph))
    model = component_model(graph, pes)
    dp = dp_curve(graph, model, 9)
    milp = grid_curve(component_model(graph, pes), 9, lambda: 10.0)
    assert np.all(dp.values <= milp.values + 1e-6)
    assert dp.values[-1] == pytest.approx(milp.values[-1])
    assert dp.values[-1] == pytest.approx(30.0)


def test_fan_in_is_not_a_tree():
    s = scenario([chain("a", 100, [0.001, 0.01]), chain("b", 100, [0.001, 0.01])])
    doc = s.model_dump(mode="json")
    doc["jobs"][1]["templates"][0]["streams"].append({"from": "a.src", "to": "p1"})
    graph = joined_graph(Scenario.model_validate(doc))
    assert not is_out_tree(graph, tuple(sorted(graph)))


def test_better_of_keeps_the_higher_value_and_its_allocation_at_every_budget():
    s = fan_out()
    graph = joined_graph(s)
    pes = tuple(sorted(graph))
    dp = dp_curve(graph, component_model(graph, pes), 5)
    milp = grid_curve(component_model(graph, pes), 5, lambda: 10.0)
    both = better_of(dp, milp)
    assert np.all(both.values == np.maximum(dp.values, milp.values))
    for alloc, v in zip(both.allocs, both.values, strict=True):
        assert importance(graph, propagate(graph, alloc)) == pytest.approx(v, rel=1e-6, abs=1e-6)
