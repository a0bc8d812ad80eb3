"""The epoch driver end to end: feasibility, JSON round trip, determinism, incremental re-plans, CLI."""

from __future__ import annotations

import json

import networkx as nx
import pytest
from typer.testing import CliRunner

from strata.cli import app
from strata.generators import lsd
from strata.model import Scenario, joined_graph
from strata.plan import Options, Plan, plan, replan
from strata.plan.baselines import rand, rr
from strata.plan.plan import STATUSES
from tests.test_plan_cases import chain, scenario

SMALL = Scenario.model_validate(lsd(seed=3, nodes=4, jobs=8, pes=40, demand_cores=24))
FAST = Options(budget_s=3.0, rounds=3)


@pytest.fixture(scope="module")
def small_plan() -> Plan:
    return plan(SMALL, options=FAST)


def test_plan_is_feasible(small_plan):
    p = small_plan
    graph = joined_graph(SMALL, p.templates)
    assert set(p.assignment) == set(graph.nodes)
    for pe, parts in p.assignment.items():
        assert set(parts) <= set(p.candidates[pe])
    cores = {n.name: n.cores for n in SMALL.cluster.all_nodes}
    for node, load in p.node_load().items():
        assert load <= cores[node] + 1e-6
    assert set(p.admitted) | set(p.rejected) == {j.id for j in SMALL.jobs}
    assert [ph.name for ph in p.phases] == ["macroQ", "macroW", "microQ", "microW"]
    assert all(ph.status in STATUSES for ph in p.phases)
    assert 0.0 <= p.affinity <= 1.0


def test_plan_round_trips_through_json(small_plan, tmp_path):
    path = tmp_path / "plan.json"
    small_plan.to_json(path)
    back = Plan.load(path)
    assert back == small_plan


def test_same_inputs_same_plan_when_the_budget_does_not_bind():
    s = scenario([chain("a", 100, [0.001, 0.004, 0.004]), chain("b", 80, [0.001, 0.002, 0.006])], nodes=3, cores=0.5)
    one, two = plan(s, options=Options(budget_s=30, rounds=5)), plan(s, options=Options(budget_s=30, rounds=5))
    assert one.assignment == two.assignment
    assert one.candidates == two.candidates


def test_replanning_an_unchanged_scenario_moves_little(small_plan):
    again = plan(SMALL, previous=small_plan, options=FAST)
    moved = [pe for pe in small_plan.candidates if set(small_plan.candidates[pe]) != set(again.candidates[pe])]
    assert len(moved) <= max(1, int(0.1 * len(small_plan.candidates)))
    assert again.importance >= 0.98 * small_plan.importance


def test_soda_keeps_more_traffic_on_node_than_rr_and_rand(small_plan):
    assert small_plan.affinity > rr(SMALL).affinity
    assert small_plan.affinity > rand(SMALL).affinity
    assert small_plan.importance > rr(SMALL).importance


def test_cli_plan_writes_json_and_reads_it_back(tmp_path):
    spec = tmp_path / "s.yaml"
    runner = CliRunner()
    assert (
        runner.invoke(
            app,
            [
                "generate",
                "lsd",
                "--set",
                "nodes=4",
                "--set",
                "jobs=6",
                "--set",
                "pes=30",
                "--set",
                "demand_cores=20",
                "-o",
                str(spec),
            ],
        ).exit_code
        == 0
    )
    out = tmp_path / "p.json"
    res = runner.invoke(app, ["plan", str(spec), "--budget", "2s", "--json", str(out)])
    assert res.exit_code == 0, res.output
    assert json.loads(out.read_text())["planner"] == "soda"
    res = runner.invoke(app, ["plan", str(spec), "--budget", "2s", "--previous", str(out)])
    assert res.exit_code == 0, res.output


def test_cli_rejects_bad_input_with_exit_2(tmp_path):
    runner = CliRunner()
    spec = tmp_path / "s.yaml"
    import yaml

    jobs = [
        chain("a", 100, [0.001, 0.01], required=True, cpu_min=0.4),
        chain("b", 100, [0.001, 0.01], required=True, cpu_min=0.4),
    ]
    spec.write_text(yaml.safe_dump({"cluster": {"nodes": [{"name": "n0", "cores": 1}]}, "jobs": jobs}))
    res = runner.invoke(app, ["plan", str(spec)])
    assert res.exit_code == 2
    assert "total cpu" in res.output
    res = runner.invoke(app, ["plan", str(spec), "--budget", "fast"])
    assert res.exit_code == 2
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    ok = tmp_path / "ok.yaml"
    ok.write_text(yaml.safe_dump({"cluster": {"nodes": [{"name": "n0", "cores": 1}]}, "jobs": jobs[:1]}))
    res = runner.invoke(app, ["plan", str(ok), "--previous", str(bad)])
    assert res.exit_code == 2
    assert "bad.json" in res.output


def test_replan_touches_only_the_affected_component(small_plan):
    # Double job0's source rate; re-plan its component only.
    doc = SMALL.model_dump(by_alias=True)
    src = next(op for op in doc["jobs"][0]["templates"][0]["operators"] if op["kind"] == "source")
    src["source"]["rate"] *= 2
    changed = Scenario.model_validate(doc)
    out = replan(changed, small_plan, {"job0"})
    graph = joined_graph(SMALL, small_plan.templates)
    comp = next(c for c in nx.weakly_connected_components(graph) if "job0.src" in c)
    touched_jobs = {pe.split(".")[0] for pe in comp}
    for pe, parts in small_plan.assignment.items():
        if pe.split(".")[0] not in touched_jobs:
            assert out.assignment[pe] == parts
    cores = {n.name: n.cores for n in SMALL.cluster.all_nodes}
    for node, load in out.node_load().items():
        assert load <= cores[node] + 1e-6
    assert out.notes and "job0" in out.notes[0]


def test_replanning_after_node_loss_moves_work_off_the_lost_node(small_plan):
    doc = SMALL.model_dump(by_alias=True)
    group = doc["cluster"]["node_groups"][0]
    group["count"] -= 1  # the last node (n3) is gone
    smaller = Scenario.model_validate(doc)
    lost = f"{group['prefix']}{group['count']}"
    assert any(lost in parts for parts in small_plan.assignment.values())
    again = plan(smaller, previous=small_plan, options=FAST)
    assert all(lost not in parts for parts in again.assignment.values())
    assert all(lost not in c for c in again.candidates.values())
    cores = {n.name: n.cores for n in smaller.cluster.all_nodes}
    for node, load in again.node_load().items():
        assert load <= cores[node] + 1e-6


def test_headroom_holds_cpu_above_the_planned_rate_and_pacing_reads_the_same_model():
    # src (100 records/s) → p1 (0.01 core·s per record: 1 core for all of it) → sink, 4 cores. With 25%
    # headroom p1 holds 1.25 cores for the same 100 records/s (utilisation 0.8), the projection is unchanged,
    # and the pacing admits 100 records/s on those 1.25 cores (not the 125 they would buy at the bare cost).
    from strata.plan.epoch import with_headroom
    from strata.plan.pacing import admitted_ingest

    s = scenario([chain("a", 100, [0.0, 0.01])], nodes=1, cores=4.0)
    bare = plan(s, options=Options(budget_s=2.0))
    held = plan(s, options=Options(budget_s=2.0, headroom=0.25))
    assert bare.cpu()["a.p1"] == pytest.approx(1.0, rel=1e-6)
    assert held.cpu()["a.p1"] == pytest.approx(1.25, rel=1e-6)
    assert held.importance == pytest.approx(bare.importance) == pytest.approx(100.0)
    assert held.source_rates == bare.source_rates == pytest.approx({"a.src": 100.0})  # the plan reads all of it
    tpl = {"a": "default"}
    assert admitted_ingest(s, tpl, held.cpu(), {}, headroom=0.25)["a.src"] == pytest.approx(100.0, rel=1e-6)
    assert admitted_ingest(s, tpl, held.cpu(), {})["a.src"] == pytest.approx(125.0, rel=1e-6)
    assert with_headroom(s, 0.0) is s
    with pytest.raises(ValueError, match="headroom"):
        with_headroom(s, -0.1)
    with pytest.raises(ValueError, match="headroom"):
        with_headroom(s, float("nan"))


def test_cli_headroom_plans_with_held_cpu_and_rejects_bad_values(tmp_path):
    # the chain above through `strata plan --headroom 0.25`: p1 holds 1.25 cores for its 100 records/s
    import yaml

    runner = CliRunner()
    spec = tmp_path / "s.yaml"
    doc = {"cluster": {"nodes": [{"name": "n0", "cores": 4}]}, "jobs": [chain("a", 100, [0.0, 0.01])]}
    spec.write_text(yaml.safe_dump(doc))
    out = tmp_path / "p.json"
    res = runner.invoke(app, ["plan", str(spec), "--budget", "2s", "--headroom", "0.25", "--json", str(out)])
    assert res.exit_code == 0, res.output
    assert Plan.load(out).cpu()["a.p1"] == pytest.approx(1.25, rel=1e-6)
    for bad in ("-0.1", "nan", "inf"):
        for command in (["plan", str(spec)], ["simulate", str(spec), "--duration", "1"]):
            res = runner.invoke(app, [*command, "--headroom", bad])
            assert res.exit_code == 2, (command, bad, res.output)
            assert "--headroom: expected a share ≥ 0" in res.output
    res = runner.invoke(app, ["plan", str(spec), "--headroom", "lots"])
    assert res.exit_code == 2 and "--headroom" in res.output
    # a given plan runs as it was made: --headroom is for the controller's plans
    res = runner.invoke(app, ["simulate", str(spec), "--duration", "1", "--plan", str(out), "--headroom", "0.25"])
    assert res.exit_code == 2 and "strata plan --headroom" in res.output


def test_a_replan_re_plans_a_job_whose_template_in_force_is_no_longer_offered():
    import dataclasses
    from pathlib import Path

    from strata.model import load_scenario

    sc = load_scenario(Path(__file__).parents[1] / "examples" / "pipeline.yaml")
    first = plan(sc, options=Options(budget_s=0.5))
    counts = sc.job["counts"]
    second = counts.templates[1].name
    forced = dataclasses.replace(first, templates={**first.templates, "counts": second})
    only_first = counts.model_copy(update={"templates": counts.templates[:1]})
    held = Scenario(name=sc.name, cluster=sc.cluster, jobs=[only_first if j.id == "counts" else j for j in sc.jobs])
    out = replan(held, forced, set(), Options(budget_s=0.5))
    assert out.templates.get("counts") == counts.templates[0].name
