"""microQ's paced LP and microW's change-limited flow against hand-computed answers (SODA §4.3–§4.4)."""

from __future__ import annotations

import networkx as nx
import pytest

from strata.model import Cluster, joined_graph
from strata.plan.curves import component_model, lp_curve
from strata.plan.micro_q import micro_q
from strata.plan.micro_w import Limits, micro_w
from tests.test_plan_cases import chain, scenario


def curves_of(s):
    g = joined_graph(s)
    return [lp_curve(component_model(g, sorted(c))) for c in sorted(nx.weakly_connected_components(g), key=min)]


def test_micro_q_shrinks_a_component_to_its_candidates_with_pacing():
    # One chain, 0.011 core·s per record; macroQ (2 cores in all) gave it saturation 1.1 cores,
    # but both PEs were placed on n0 with 0.55 cores: pacing keeps the 1:10 split → 50 rec/s.
    s = scenario([chain("a", 100, [0.001, 0.01])], nodes=2, cores=0.55)
    (c,) = curves_of(s)
    q = micro_q(s.cluster, [c], [1.1], {"a.src": ["n0"], "a.p1": ["n0"], "a.sink": ["n0"]}, deadline_s=5)
    assert q.value == pytest.approx(50.0, rel=1e-6)
    assert q.goals["a.src"] == pytest.approx(0.05, rel=1e-6)
    assert q.goals["a.p1"] == pytest.approx(0.5, rel=1e-6)
    assert sum(q.split["a.p1"].values()) <= 0.55 + 1e-9


def test_micro_q_spreads_over_two_candidates():
    # With p1 allowed on both nodes the chain gets its full 1.1 cores (0.55 per node).
    s = scenario([chain("a", 100, [0.001, 0.01])], nodes=2, cores=0.55)
    (c,) = curves_of(s)
    q = micro_q(s.cluster, [c], [1.1], {"a.src": ["n0"], "a.p1": ["n0", "n1"], "a.sink": ["n1"]}, 5)
    assert q.value == pytest.approx(100.0, rel=1e-6)
    for node in ("n0", "n1"):
        assert sum(parts.get(node, 0.0) for parts in q.split.values()) <= 0.55 + 1e-9


CLUSTER = Cluster(nodes=[{"name": f"n{i}", "cores": 2} for i in range(3)])


def test_micro_w_without_previous_keeps_the_reference_split():
    ref = {"p": {"n0": 1.0, "n1": 0.5}, "q": {"n2": 1.0}}
    out = micro_w(CLUSTER, {"p": 1.5, "q": 1.0}, {"p": ["n0", "n1"], "q": ["n2"]}, ref, None, Limits(), 5)
    for pe, parts in ref.items():
        assert out.assignment[pe] == pytest.approx(parts)
    assert out.change == pytest.approx(0.0)


def test_micro_w_moves_only_what_the_goals_force():
    prev = {"p": {"n0": 1.0}, "q": {"n1": 1.0}}
    # p grows from 1 to 1.5 cores; n0 has 2 cores, so it simply grows in place: change 0.5.
    out = micro_w(CLUSTER, {"p": 1.5, "q": 1.0}, {"p": ["n0", "n1"], "q": ["n1"]}, prev, prev, Limits(), 5)
    assert out.assignment["p"] == pytest.approx({"n0": 1.5})
    assert out.change == pytest.approx(0.5)
    assert out.shortfall == pytest.approx(0.0)


def test_micro_w_total_change_limit_binds_and_reports_unmet_goals():
    prev = {"p": {"n0": 1.0}}
    out = micro_w(CLUSTER, {"p": 1.8}, {"p": ["n0"]}, prev, prev, Limits(total=0.3), 5)
    assert out.assignment["p"]["n0"] == pytest.approx(1.3)
    assert out.shortfall == pytest.approx(0.5)
    assert "unmet" in out.detail


def test_micro_w_per_pe_and_node_limits():
    prev = {"p": {"n0": 1.0}, "q": {"n1": 1.0}, "r": {"n2": 1.0}}
    goals = {"p": 1.5, "q": 1.5, "r": 1.2}
    cands = {"p": ["n0"], "q": ["n1"], "r": ["n2"]}
    per_pe = micro_w(CLUSTER, goals, cands, prev, prev, Limits(per_pe=0.25), 5)
    assert per_pe.assignment["p"]["n0"] == pytest.approx(1.25)
    assert per_pe.assignment["r"]["n2"] == pytest.approx(1.2)
    nodes = micro_w(CLUSTER, goals, cands, prev, prev, Limits(nodes=2), 5)
    assert nodes.nodes_touched == 2
    # The two nodes with the largest needed change (n0, n1: +0.5 each) are the ones touched.
    assert nodes.assignment["r"]["n2"] == pytest.approx(1.0)
    assert nodes.assignment["p"]["n0"] == pytest.approx(1.5)
