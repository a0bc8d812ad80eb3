"""Templates whose graph is not one weak component: two independent chains, a PE with no streams.

macroQ once cached a component's curve under (jobs, templates) only, so a job's second weak
component reused the first's curve and its PEs never got a goal (``KeyError`` in ``epoch.finish``
or ``minimum budgets … exceed …`` in ``rap.greedy``).
"""

from __future__ import annotations

from typing import Any

import pytest

from strata.model import Scenario, joined_graph
from strata.plan import Options, plan
from strata.plan.exact import exact_macro_q
from strata.plan.macro_q import macro_q

FAST = Options(budget_s=5.0, rounds=3)


def _op(name: str, kind: str = "map", cost: float = 0.0, **kw: Any) -> dict[str, Any]:
    return {"name": name, "kind": kind, "cost_per_record": cost, **kw}


def _scenario(operators: list[dict], streams: list[dict], cores: float, nodes: int = 1, **job: Any) -> Scenario:
    return Scenario.model_validate(
        {
            "name": "shapes",
            "cluster": {"node_groups": [{"prefix": "n", "count": nodes, "cores": cores}]},
            "jobs": [
                {"id": "j", "rank": 1, **job, "templates": [{"name": "t", "operators": operators, "streams": streams}]}
            ],
        }
    )


def two_chains(cores: float = 3.0, nodes: int = 1) -> Scenario:
    """s1 (1000/s) → f1 (1e-3 core·s) → o1, weight 1;  s2 (2000/s) → f2 (2e-3 core·s) → o2, weight 3."""
    ops = [
        _op("s1", "source", source={"rate": 1000}),
        _op("f1", cost=1e-3),
        _op("o1", "sink"),
        _op("s2", "source", source={"rate": 2000}),
        _op("f2", cost=2e-3),
        _op("o2", "sink"),
    ]
    streams = [
        {"from": "s1", "to": "f1"},
        {"from": "f1", "to": "o1", "weight": 1},
        {"from": "s2", "to": "f2"},
        {"from": "f2", "to": "o2", "weight": 3},
    ]
    return _scenario(ops, streams, cores, nodes)


def lone_pe(cores: float = 1.0) -> Scenario:
    """s1 (1000/s) → f1 (1e-3) → o1, weight 1, and a PE ``lone`` with no streams holding cpu_min 0.5."""
    ops = [
        _op("s1", "source", source={"rate": 1000}),
        _op("f1", cost=1e-3),
        _op("o1", "sink"),
        _op("lone", cost=1e-3, cpu_min=0.5),
    ]
    streams = [{"from": "s1", "to": "f1"}, {"from": "f1", "to": "o1", "weight": 1}]
    return _scenario(ops, streams, cores)


def test_two_chains_have_two_components_with_their_own_curves():
    s = two_chains()
    q = macro_q(s, 5.0)
    assert sorted(len(c) for c in q.components) == [3, 3]
    assert set(q.goals) == set(joined_graph(s, q.templates).nodes)
    # 3 cores: f2 earns 3 × 500/s per core = 1500 per core, f1 1000 per core; f2 takes all 3 (it saturates at 4).
    assert q.importance == pytest.approx(4500.0, rel=1e-6)
    assert q.goals["j.f2"] == pytest.approx(3.0, rel=1e-6)
    assert exact_macro_q(s).value == pytest.approx(4500.0, rel=1e-6)


@pytest.mark.parametrize("cores, expected", [(3.0, 4500.0), (6.0, 1000.0 + 6000.0)])
def test_two_chains_plan_places_every_pe(cores, expected):
    s = two_chains(cores / 2, nodes=2)
    p = plan(s, options=FAST)
    pes = set(joined_graph(s, p.templates).nodes)
    assert set(p.assignment) == pes and set(p.candidates) == pes
    assert all(p.candidates[pe] for pe in pes)
    assert p.importance == pytest.approx(expected, rel=1e-4)


def test_a_pe_with_no_streams_is_planned_at_its_minimum():
    s = lone_pe()
    p = plan(s, options=FAST)
    assert set(p.assignment) == {"j.s1", "j.f1", "j.o1", "j.lone"}
    assert sum(p.assignment["j.lone"].values()) == pytest.approx(0.5, rel=1e-6)
    # 1 core less lone's 0.5 goes to f1: 500 records/s of weight 1.
    assert p.importance == pytest.approx(500.0, rel=1e-4)


def test_two_chains_with_unequal_minimums_fit_exactly():
    """f1 holds cpu_min 1.0, f2 none: 1.5 cores fit both minima only if each component keeps its own curve."""
    s = two_chains()
    ops = s.jobs[0].templates[0].model_dump(by_alias=True)
    for op in ops["operators"]:
        if op["name"] == "f1":
            op["cpu_min"] = 1.0
    s = _scenario(ops["operators"], ops["streams"], 1.5)
    q = macro_q(s, 5.0)
    # f1 runs at its 1.0 minimum (1000/s, weight 1); the other 0.5 core buys f2 250/s of weight 3.
    assert q.importance == pytest.approx(1000.0 + 750.0, rel=1e-6)
    p = plan(s, options=FAST)
    assert p.importance == pytest.approx(1750.0, rel=1e-4)
