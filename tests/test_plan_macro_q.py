"""macroQ against hand-computed optima, the exact MILP and rank legality (SODA §4.1)."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strata.model import importance, joined_graph, propagate
from strata.plan import PlanError
from strata.plan.curves import component_model, lp_curve
from strata.plan.exact import exact_macro_q
from strata.plan.macro_q import macro_q
from tests.test_plan_cases import chain, scenario


def test_single_chain_hand_computed():
    # src 100 rec/s at 0.001 core-s, p1 at 0.01: every record costs 0.011 cores·s.
    # 0.55 cores → 50 rec/s reach the sink (identity value, weight 1) → importance 50.
    s = scenario([chain("a", 100, [0.001, 0.01])], nodes=1, cores=0.55)
    q = macro_q(s, deadline_s=10)
    assert q.importance == pytest.approx(50.0, rel=1e-6)
    assert q.goals["a.src"] == pytest.approx(0.05, rel=1e-6)
    assert q.goals["a.p1"] == pytest.approx(0.5, rel=1e-6)
    assert q.status == "optimal"


def test_curve_is_linear_then_flat_for_a_chain():
    s = scenario([chain("a", 100, [0.001, 0.01])], nodes=1, cores=5)
    g = joined_graph(s)
    curve = lp_curve(component_model(g, g.nodes))
    # Saturation at 100 × 0.011 = 1.1 cores, where importance is 100; linear before.
    assert curve.saturation == pytest.approx(1.1)
    assert curve.value_at(0.55) == pytest.approx(50.0)
    assert curve.value_at(1.1) == pytest.approx(100.0)
    assert curve.value_at(3.0) == pytest.approx(100.0)


def test_curve_matches_fresh_lp_solves_and_dual_slopes():
    # Two sinks with different weights and a concave piecewise value: several breakpoints.
    knee = {"kind": "piecewise_linear", "points": [[0, 0], [40, 40], [400, 60]]}
    s = scenario(
        [chain("a", 100, [0.001, 0.01], weight=2.0, value=knee), chain("b", 80, [0.002, 0.005], weight=1.0)],
        nodes=1,
        cores=5,
    )
    g = joined_graph(s)
    for comp in nx.weakly_connected_components(g):
        model = component_model(g, comp)
        curve = lp_curve(model)
        assert curve.concave
        for b in np.linspace(curve.minimum, curve.saturation, 7):
            fresh = component_model(g, comp)
            fresh.prog.set_row_bounds(fresh.cols.budget_row, -1e30, float(b))
            assert curve.value_at(float(b)) == pytest.approx(fresh.prog.solve().objective, rel=1e-6, abs=1e-6)


def test_admission_trades_cpu_min_against_importance():
    # Both jobs rank 1 (so either may be left out); 1 core in all.
    # a: needs cpu_min 0.3 per PE (0.6 total), worth 1 per rec/s; b: no cpu_min, worth 3 per rec/s.
    # Admitting a leaves 0.4 cores for b's 0.01 core-s/rec → 40 rec/s → 120, a gets 0 extra → a worth
    # min(100, 0.3/0.001, 0.3/0.01=30) = 30 → 150 total. Without a: b gets 1 core → 100 rec/s → 300.
    s = scenario(
        [chain("a", 100, [0.001, 0.01], cpu_min=0.3), chain("b", 100, [0.0, 0.01], weight=3.0)], nodes=1, cores=1.0
    )
    q = macro_q(s, deadline_s=10)
    assert q.admitted == ["b"]
    assert q.importance == pytest.approx(300.0, rel=1e-6)
    assert "a" in q.rejected and "lowers projected importance" in q.rejected["a"]
    assert exact_macro_q(s).value == pytest.approx(300.0, rel=1e-6)


def test_template_choice_prefers_the_lighter_template_when_overloaded():
    # heavy costs twice as much per record; with 0.5 cores, light delivers 2× the records.
    s = scenario([chain("a", 100, [], templates=[("heavy", [0.0, 0.01]), ("light", [0.0, 0.005])])], nodes=1, cores=0.5)
    q = macro_q(s, deadline_s=10)
    assert q.templates == {"a": "light"}
    assert q.importance == pytest.approx(100.0, rel=1e-6)


def test_required_jobs_that_cannot_fit_name_the_binding_constraint():
    s = scenario(
        [
            chain("a", 100, [0.001, 0.01], required=True, cpu_min=0.4),
            chain("b", 100, [0.001, 0.01], required=True, cpu_min=0.4),
        ],
        nodes=1,
        cores=1.0,
    )
    with pytest.raises(PlanError, match="total cpu"):
        macro_q(s, deadline_s=5)


def _random_case(seed: int, jobs: int = 5):
    rng = np.random.default_rng(seed)
    out = []
    for j in range(jobs):
        n = int(rng.integers(2, 5))
        costs = [float(rng.uniform(0, 0.002))] + [float(rng.uniform(0.002, 0.02)) for _ in range(n - 1)]
        tpls = None
        if rng.random() < 0.4:
            tpls = [("full", costs), ("light", [c * 0.6 for c in costs[:-1]])] if n > 2 else None
        value = None
        if rng.random() < 0.4:
            k = float(rng.uniform(10, 80))
            value = {"kind": "piecewise_linear", "points": [[0, 0], [k, k], [10 * k, 1.5 * k]]}
        out.append(
            chain(
                f"j{j}",
                float(rng.uniform(50, 200)),
                costs,
                rank=int(rng.integers(1, 4)),
                required=j == 0,
                cpu_min=float(rng.choice([0.0, 0.05, 0.1])),
                weight=float(rng.uniform(0.5, 2)),
                value=value,
                sel=float(rng.uniform(0.5, 1)),
                templates=tpls,
            )
        )
    return scenario(out, nodes=2, cores=float(rng.uniform(0.4, 1.2)))


@pytest.mark.parametrize("seed", range(8))
def test_macro_q_matches_the_exact_milp(seed):
    s = _random_case(seed)
    q = macro_q(s, deadline_s=20)
    e = exact_macro_q(s, time_limit=20)
    assert e.status == "optimal"
    assert q.importance == pytest.approx(e.value, rel=1e-6, abs=1e-6)
    assert e.realised == pytest.approx(e.value, rel=1e-6, abs=1e-6)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000))
def test_admission_is_rank_legal_and_keeps_required_jobs(seed):
    s = _random_case(seed, jobs=6)
    try:
        q = macro_q(s, deadline_s=5)
    except PlanError:
        return  # the required job alone does not fit: reported, not planned
    admitted = set(q.admitted)
    rank = {j.id: j.rank for j in s.jobs}
    assert {j.id for j in s.jobs if j.required} <= admitted
    free_in = [rank[j] for j in admitted if not s.job[j].required]
    free_out = [rank[j.id] for j in s.jobs if j.id not in admitted]
    if free_in and free_out:
        assert max(free_in) <= min(free_out), (sorted(free_in), sorted(free_out))
    assert sum(q.goals.values()) <= s.cluster.total_cores + 1e-6
    for pe, c in q.goals.items():
        op = joined_graph(s, q.templates).nodes[pe]["op"]
        assert op.cpu_min - 1e-9 <= c <= op.cpu_max + 1e-9


def test_step_values_use_the_dp_and_match_the_exact_milp():
    # A step value is worth 10 once 50 rec/s reach the sink. Greedy marginal allocation would
    # spread cpu; the DP puts 0.5 cores into one job to clear its step.
    step = {"kind": "step", "steps": [[50, 10.0]]}
    s = scenario(
        [chain("a", 100, [0.0, 0.01], value=step), chain("b", 100, [0.0, 0.01], value=step)], nodes=1, cores=0.8
    )
    q = macro_q(s, deadline_s=10, exact=False)
    assert "DP" in q.detail
    assert q.importance == pytest.approx(10.0)
    q = macro_q(s, deadline_s=10)
    assert q.status == "optimal" and "multiple-choice MILP" in q.detail
    assert q.importance == pytest.approx(10.0)
    assert exact_macro_q(s).value == pytest.approx(10.0)


def test_linear_value_with_negative_intercept_is_handled_exactly():
    # a is worth 2r − 60 once r > 30 (0 below), b is worth r; 0.8 cores at 0.01 core·s per record.
    # Splitting x rec/s to a and 80 − x to b is worth x + 20 for x ≥ 30: all 80 to a → 100.
    val = {"kind": "linear", "slope": 2.0, "intercept": -60.0}
    s = scenario([chain("a", 100, [0.0, 0.01], value=val), chain("b", 100, [0.0, 0.01])], nodes=1, cores=0.8)
    q = macro_q(s, deadline_s=10)
    assert q.importance == pytest.approx(100.0, rel=1e-6)
    assert q.goals["a.p1"] == pytest.approx(0.8, rel=1e-6)


def test_a_curve_cut_short_is_a_lower_bound_of_the_exact_one():
    knee = {"kind": "piecewise_linear", "points": [[0, 0], [40, 40], [400, 60]]}
    s = scenario([chain("a", 100, [0.001, 0.01], weight=2.0, value=knee)], nodes=1, cores=5)
    g = joined_graph(s)
    exact = lp_curve(component_model(g, g.nodes))
    cut = lp_curve(component_model(g, g.nodes), deadline=0.0, clock=lambda: 1.0)
    assert not cut.exact and exact.exact
    assert len(cut.budgets) == 2 < len(exact.budgets)
    for b in np.linspace(exact.minimum, exact.saturation, 9):
        assert cut.value_at(float(b)) <= exact.value_at(float(b)) + 1e-9
    assert cut.value_at(cut.saturation) == pytest.approx(exact.value_at(exact.saturation))


@pytest.mark.parametrize(
    ("cores", "goals", "value"),
    [
        # room for both: every PE at the cpu its rate needs (src 100 × 0.001, p1 100 × 0.004), importance 200
        (1.0, {"a.src": 0.1, "a.p1": 0.4, "b.src": 0.1, "b.p1": 0.4}, 200.0),
        # 0.6 cores: a (required) gets its minimum 0.2 (worth 25: p1 at 0.1 cores passes 25 rec/s), then its chord
        # to 0.5 (75 more for 0.3 cores: 250/core) beats b's (100 for 0.5: 200/core); b gets the 0.1 left, a
        # fifth of its need on each PE: 20 rec/s reach its sink. 100 + 20 = 120.
        (0.3, {"a.src": 0.1, "a.p1": 0.4, "b.src": 0.02, "b.p1": 0.08}, 120.0),
    ],
)
def test_a_deadline_before_the_first_answer_plans_each_component_on_its_chord(cores, goals, value):
    # The clock jumps past the deadline after the first reading: no curve may be computed, yet macroQ
    # returns a feasible rank-legal answer that gives the components cpu (not every PE at cpu_min, 0 for
    # b: admitted with no throughput), and says so.
    ticks = iter([0.0])

    def clock() -> float:
        return next(ticks, 100.0)

    s = scenario(
        [chain("a", 100, [0.001, 0.004], cpu_min=0.1, required=True), chain("b", 100, [0.001, 0.004], rank=2)],
        nodes=2,
        cores=cores,
    )
    q = macro_q(s, 1.0, clock=clock)
    assert q.status == "time-limit"
    assert "2 components planned on the chord from their minimum cpu to their need" in q.detail
    assert q.admitted == ["a", "b"]
    assert {pe: c for pe, c in q.goals.items() if not pe.endswith(".sink")} == pytest.approx(goals)
    assert q.importance == pytest.approx(value)


def _two_step_templates():
    """a: full (0.01 core·s/record, worth 10 at 50/s) or light (0.005, worth 6 at 80/s); b: worth 5 at 30/s (0.01)."""
    a = chain(
        "a",
        100,
        [0.0, 0.01],
        value={"kind": "step", "steps": [[50, 10.0]]},
        templates=[("full", [0.0, 0.01]), ("light", [0.0, 0.005])],
    )
    a["templates"][1]["streams"][-1]["value"] = {"kind": "step", "steps": [[80, 6.0]]}
    b = chain("b", 100, [0.0, 0.01], value={"kind": "step", "steps": [[30, 5.0]]})
    return scenario([a, b], nodes=1, cores=1.0)


@pytest.mark.parametrize(
    "cores, value, template",
    [
        (0.85, 15.0, "full"),  # full 0.5 + b 0.3 fit
        (0.75, 11.0, "light"),  # full + b do not fit; light 0.4 + b 0.3 do
        (0.45, 6.0, "light"),  # one step only: light's 6 beats b's 5
    ],
)
def test_exact_reference_handles_several_templates_with_step_values(cores, value, template):
    # Every template of ``a`` has a step value: the step rows of the template not chosen must not
    # demand a positive rate (they once did, and the MILP was infeasible).
    e = exact_macro_q(_two_step_templates(), capacity=cores)
    assert e.status == "optimal"
    assert e.value == pytest.approx(value, abs=1e-6)
    assert e.realised == pytest.approx(value, abs=1e-6)
    assert e.templates["a"] == template


def test_the_exact_reference_credits_only_the_templates_it_runs():
    # Every stream into a sink is worth 10 + 0.1 × rate (a positive intercept: worth 10 even at rate 0).
    # a (two templates) and b fit in 1 core: 10 + 0.1·100 each. c needs cpu_min 5 cores and is not admitted.
    # The copies of a's other template and c's copy run nothing and must earn nothing (their value rows once
    # allowed the intercept at rate 0): optimum 2 × 20 = 40.
    line = {"kind": "linear", "slope": 0.1, "intercept": 10.0}
    a = chain("a", 100, [0.0, 0.001], value=line, templates=[("one", [0.0, 0.001]), ("two", [0.0, 0.002])])
    for t in a["templates"]:
        t["streams"][-1]["value"] = line
    b = chain("b", 100, [0.0, 0.001], value=line, rank=2)
    c = chain("c", 100, [0.0, 0.001], value=line, rank=3, cpu_min=5.0)
    e = exact_macro_q(scenario([a, b, c], nodes=1, cores=1.0))
    assert e.status == "optimal"
    assert sorted(e.admitted) == ["a", "b"]
    assert e.value == pytest.approx(40.0, abs=1e-6)
    assert e.realised == pytest.approx(40.0, abs=1e-6)


def test_soda_s_search_claims_only_what_its_allocation_earns():
    # a earns 10 once p1 processes 97 of its 100 records/s (0.97 cores); b earns 1 per record/s (1 core for
    # all 100). With 1.9 cores, a's step curve is known on a grid (0, 0.125, …, 1.0 cores): a budget of 0.9
    # lies between 0.875 (worth 0) and 1.0 (worth 10). A chord there would credit a with 1.8 next to b's 100,
    # a step no allocation of 0.9 cores earns. The search's value must be what its allocation propagates to.
    import time

    from strata.plan.macro_q import _Evaluator

    a = chain("a", 100, [0.0, 0.01], value={"kind": "step", "steps": [[97, 10.0]]})
    b = chain("b", 100, [0.0, 0.01], rank=2)
    s = scenario([a, b], nodes=1, cores=1.9)
    ev = _Evaluator(s, 1.9, s.cluster.total_memory, time.perf_counter() + 30.0, time.perf_counter)
    alloc = ev.allocate({"a": "default", "b": "default"})
    assert alloc is not None and not alloc.concave
    goals: dict[str, float] = {}
    for curve, budget in zip(alloc.curves, alloc.budgets, strict=True):
        goals.update(curve.alloc_at(budget))
    graph = joined_graph(s, alloc.templates)
    assert alloc.value == pytest.approx(importance(graph, propagate(graph, goals)), rel=1e-9)
    assert alloc.value == pytest.approx(100.0, rel=1e-6)
