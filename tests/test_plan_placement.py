"""macroW: miniW and the MILP against brute force; constraints; the fallback path (SODA §4.2)."""

from __future__ import annotations

import itertools

import pytest

from strata.model import Scenario, joined_graph, propagate
from strata.plan import Options, PlanError, mini_w, plan
from strata.plan import macro_w as macro_w_module
from strata.plan.macro_w import macro_w, solve_milp
from strata.plan.occupancy import Occupancy
from strata.plan.placement import assignment_of, build_problem
from strata.plan.quality import Weights, evaluate, flows
from tests.test_plan_cases import chain, constrained, scenario


def two_pipelines(**node) -> Scenario:
    return scenario(
        [chain("a", 100, [0.001, 0.004, 0.004]), chain("b", 100, [0.001, 0.004, 0.004])], nodes=3, cores=1.0, **node
    )


def brute_force(p):
    """The best placement over every node set of every group (equal shards, within its limits)."""
    options = [
        [list(c) for k in range(g.shards, g.limit + 1) for c in itertools.combinations(g.eligible, k)] for g in p.groups
    ]
    best = None
    for choice in itertools.product(*options):
        st = Occupancy(p, choice)
        if all(st.mem[n] <= p.memory[n] for n in range(len(p.names))) and not any(
            p.exclude[g] & (st.occ[n] - {g}) for g, nodes in enumerate(choice) for n in nodes
        ):
            val = st.objective()
            if best is None or val < best[0] - 1e-12:
                best = (val, choice)
    return best


@pytest.mark.parametrize(
    ("jobs", "max_candidates"),
    [
        # Two pipelines, one node per PE: 3^8 placements.
        ([chain("a", 100, [0.001, 0.004, 0.004]), chain("b", 100, [0.001, 0.004, 0.004])], 1),
        # One pipeline, any node set per PE: 7^4 placements, spreading pairs alike included.
        ([chain("a", 100, [0.001, 0.004, 0.004])], 3),
    ],
)
def test_mini_w_finds_the_brute_force_optimum(jobs, max_candidates):
    s = scenario(jobs, nodes=3, cores=1.0)
    g = joined_graph(s)
    goals = {pe: 0.3 for pe in g}
    rates = propagate(g)
    p = build_problem(s.cluster, g, goals, rates, Weights(), max_candidates=max_candidates)
    best, _ = brute_force(p)
    found = mini_w.search(p, deadline=float("inf"), rounds=20)
    assert found.complete
    assert found.objective == pytest.approx(best, rel=1e-9)
    # The incremental objective agrees with the reference metrics on the same placement.
    metrics = evaluate(s.cluster, assignment_of(p, found.where, goals), flows(g, rates), Weights())
    assert metrics["objective"] == pytest.approx(found.objective, rel=1e-9)


def test_milp_is_at_least_as_good_as_any_single_node_placement():
    s = two_pipelines()
    g = joined_graph(s)
    goals = {pe: 0.3 for pe in g}
    rates = propagate(g)
    p = build_problem(s.cluster, g, goals, rates, Weights(), max_candidates=1)
    status, shares, _ = solve_milp(p, time_limit=20)
    assert status == "optimal"
    milp = evaluate(s.cluster, assignment_of(p, shares, goals), flows(g, rates), Weights())["objective"]
    assert milp <= brute_force(p)[0] + 1e-6


def test_constraints_hold_in_the_placement():
    s = constrained([0.001, 0.004, 0.004])
    g = joined_graph(s)
    w = macro_w(s.cluster, g, {pe: 0.2 for pe in g}, propagate(g), deadline_s=2)
    c = w.candidates
    assert c["a.src"] == ["n2"]
    assert set(c["a.p1"]) <= {"n0", "n1"}
    assert not set(c["a.p1"]) & set(c["a.p2"])
    assert c["a.p2"] == c["a.sink"]


def test_a_pe_that_fits_no_node_is_named_with_its_constraint():
    job = chain("a", 100, [0.001, 0.004])
    job["templates"][0]["operators"][1]["memory"] = "64GiB"
    s = scenario([job], nodes=8, cores=1.0, memory="16GiB")  # 128 GiB in all, 16 GiB per node
    with pytest.raises(PlanError, match=r"a\.p1 fits no node: memory"):
        plan(s, options=Options(budget_s=2))


def test_solver_failure_falls_back_to_mini_w_and_still_plans(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("solver unavailable")

    monkeypatch.setattr(macro_w_module, "solve_milp", broken)
    s = two_pipelines()
    result = plan(s, options=Options(budget_s=2))
    phase = next(p for p in result.phases if p.name == "macroW")
    assert phase.status == "fallback-to-miniW"
    assert "solver unavailable" in phase.detail
    load = result.node_load()
    assert all(load.get(n.name, 0.0) <= n.cores + 1e-6 for n in s.cluster.all_nodes)
    assert set(result.assignment) == set(joined_graph(s, result.templates).nodes)
    assert result.importance > 0


def test_micro_q_failure_keeps_a_feasible_plan(monkeypatch):
    from strata.plan import epoch

    def broken(*args, **kwargs):
        raise RuntimeError("microQ LP failed")

    monkeypatch.setattr(epoch, "micro_q", broken)
    s = two_pipelines()
    result = plan(s, options=Options(budget_s=2))
    phase = next(p for p in result.phases if p.name == "microQ")
    assert phase.status == "feasible" and "scaled into node cores" in phase.detail
    load = result.node_load()
    assert all(load.get(n.name, 0.0) <= n.cores + 1e-6 for n in s.cluster.all_nodes)
    assert result.importance > 0


def test_max_pes_per_node_is_respected():
    s = two_pipelines()  # 8 PEs on 3 nodes
    result = plan(s, options=Options(budget_s=2, max_pes_per_node=3))
    per_node: dict[str, int] = {}
    for nodes in result.candidates.values():
        for n in nodes:
            per_node[n] = per_node.get(n, 0) + 1
    assert max(per_node.values()) <= 3


def test_neighbourhood_milp_finds_the_best_re_placement_of_its_groups():
    # Pipeline b stays where it is; a's groups, all on node 0, are re-placed within nodes {0, 1}.
    # The restricted MILP, with b as its context, must find what brute force over those moves finds.
    s = two_pipelines()
    g = joined_graph(s)
    goals = {pe: 0.3 for pe in g}
    rates = propagate(g)
    p = build_problem(s.cluster, g, goals, rates, Weights(), max_candidates=1)
    start = [[0] if pe[0].startswith("a.") else [1 + i % 2] for i, pe in enumerate(grp.pes for grp in p.groups)]
    free = [i for i, grp in enumerate(p.groups) if grp.pes[0].startswith("a.")]
    best = None
    for choice in itertools.product([0, 1], repeat=len(free)):
        where = [list(w) for w in start]
        for i, n in zip(free, choice, strict=True):
            where[i] = [n]
        val = Occupancy(p, where).objective()
        best = val if best is None else min(best, val)
    st = Occupancy(p, start)
    sub, ctx, _ = macro_w_module._restrict(st, [0, 1], free)
    status, shares, _ = solve_milp(sub, time_limit=20, context=ctx)
    assert status == "optimal"
    where = [list(w) for w in start]
    for i, sh in zip(free, shares, strict=True):
        where[i] = [n for n, f in sh.items() if f > 1e-6]
    assert Occupancy(p, where).objective() == pytest.approx(best, rel=1e-6)


def test_large_instances_improve_mini_w_by_neighbourhood_milps_never_for_the_worse(monkeypatch):
    monkeypatch.setattr(macro_w_module, "MILP_MAX_BINARIES", 0)  # every instance counts as large
    s = two_pipelines()
    g = joined_graph(s)
    goals = {pe: 0.3 for pe in g}
    rates = propagate(g)
    p = build_problem(s.cluster, g, goals, rates, Weights())
    bad = [[i % 3] for i in range(len(p.groups))]  # round robin: every stream crosses nodes
    where, tried, _, _ = macro_w_module.improve_by_milp(p, bad, deadline=float("inf"), clock=lambda: 0.0)
    assert tried >= 1
    assert Occupancy(p, where).objective() < Occupancy(p, bad).objective()
    w = macro_w(s.cluster, g, goals, rates, deadline_s=2)
    assert w.detail.startswith(("won: miniW;", "won: miniW+MILP neighbourhoods;"))
    assert "neighbourhoods" in w.detail


def test_a_failing_solver_on_a_large_instance_leaves_mini_w_in_charge(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("solver unavailable")

    monkeypatch.setattr(macro_w_module, "MILP_MAX_BINARIES", 0)
    monkeypatch.setattr(macro_w_module, "solve_milp", broken)
    result = plan(two_pipelines(), options=Options(budget_s=2))
    phase = next(p for p in result.phases if p.name == "macroW")
    assert phase.status == "fallback-to-miniW" and "solver unavailable" in phase.detail
    assert result.importance > 0


def test_mini_w_counts_a_keyed_stream_as_routed_by_key_group():
    # src → op1 (keyed, 4 key groups) → sink; src and op1 each split evenly over n0 and n1. Routed by key
    # group, 1/2 · 1/2 of the stream stays on each node (half of it crosses), where locality-first routing
    # of an unkeyed stream would keep all of it: miniW's objective is the six metrics' ruler on it.
    from strata.sim.scenarios import chain as sim_chain

    sc = sim_chain([{"kind": "keyed_stateful", "key_groups": 4}], rate=1000.0, nodes=2, cores=4)
    graph = joined_graph(sc)
    rates = propagate(graph)
    goals = {pe: 0.5 for pe in graph}
    p = build_problem(sc.cluster, graph, goals, rates, Weights(), max_candidates=2)
    g = {pe: p.group_of[pe] for pe in graph}
    where = [[0] for _ in p.groups]
    where[g["c.src"]] = [0, 1]
    where[g["c.op1"]] = [0, 1]
    st = Occupancy(p, where)
    assignment = assignment_of(p, where, goals)
    ruler = evaluate(sc.cluster, assignment, flows(graph, rates), Weights(), {"c.op1": 4})
    assert st.objective() == pytest.approx(ruler["objective"], rel=1e-9)
    # src → op1: half of 1000 records/s of 100 B crosses; op1 → sink (on n0, unkeyed): op1's half on n1.
    assert st.cross == pytest.approx(0.5 * 1000.0 * 100 + 0.5 * 1000.0 * 100)
    assert ruler["cross_bytes"] == pytest.approx(st.cross)
