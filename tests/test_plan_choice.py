"""The exact multiple-choice MILP of macroQ (admission and template choice), against the exact reference."""

from __future__ import annotations

import pytest

from strata.plan import Options, plan
from strata.plan import choice as mc
from strata.plan.exact import exact_macro_q
from strata.plan.macro_q import macro_q
from tests.test_plan_cases import multiple_choice
from tests.test_plan_macro_q import _two_step_templates


@pytest.mark.parametrize("cores, value, template", [(0.85, 15.0, "full"), (0.75, 11.0, "light"), (0.45, 6.0, "light")])
def test_hand_computed_template_choice_with_step_values(cores, value, template):
    q = macro_q(_two_step_templates(), 10.0, capacity=cores)
    assert q.status == "optimal"
    assert q.importance == pytest.approx(value, abs=1e-6)
    assert q.templates["a"] == template


@pytest.mark.parametrize("seed", range(4))
def test_random_multiple_choice_instances_reach_the_exact_optimum(seed):
    s = multiple_choice(seed)
    e = exact_macro_q(s, time_limit=30)
    assert e.status == "optimal"
    q = macro_q(s, 10.0)
    assert q.status == "optimal", q.detail
    assert q.importance >= 0.99 * e.value
    assert q.importance == pytest.approx(e.value, rel=1e-6, abs=1e-6)
    ranks = {j.id: j.rank for j in s.jobs}
    free_in = [ranks[j] for j in q.admitted if not s.job[j].required]
    free_out = [ranks[j] for j in q.rejected]
    assert not free_in or not free_out or max(free_in) <= min(free_out)
    assert {j.id for j in s.jobs if j.required} <= set(q.admitted)


def test_the_full_plan_keeps_macro_qs_exact_answer():
    s = multiple_choice(1)
    e = exact_macro_q(s, time_limit=30)
    p = plan(s, options=Options(budget_s=5.0, rounds=3))
    assert p.phases[0].status == "optimal"
    assert p.importance >= 0.99 * e.value


@pytest.mark.parametrize("seed", range(2))
def test_options_with_lp_curves_reach_the_exact_optimum_too(monkeypatch, seed):
    # Too many template PEs to copy them all: options per cluster, LP components by their curves.
    s = multiple_choice(seed)
    every = sum(len(t.operators) for j in s.jobs for t in j.templates)
    monkeypatch.setattr(mc, "MAX_GATED_PES", every - 1)
    q = macro_q(s, 10.0)
    assert q.status == "optimal" and "options: LP components by their exact curves" in q.detail, q.detail
    assert q.importance == pytest.approx(exact_macro_q(s, time_limit=30).value, rel=1e-6, abs=1e-6)


def test_beyond_its_limits_the_heuristic_runs_and_says_so(monkeypatch):
    monkeypatch.setattr(mc, "MAX_OPTIONS", 3)
    monkeypatch.setattr(mc, "MAX_GATED_PES", 10)
    q = macro_q(multiple_choice(0), 5.0)
    assert "fallback to the heuristic search" in q.detail
    assert any("heuristic search (not proven optimal)" in n for n in q.notes)
    assert q.status != "optimal"


def test_linked_jobs_form_one_cluster_with_subset_options():
    s = multiple_choice(2)
    assert all(len(c) == 1 for c in mc.clusters(s))  # independent chains
