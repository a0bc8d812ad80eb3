"""Known answers for the traffic model the plan and the simulator share (SimOptions(routing="local"))."""

from __future__ import annotations

import pytest

from strata.model.traffic import apportion, key_group_owners, key_group_shares, local_share, transport
from strata.plan.quality import stream_affinity
from strata.sim import SimOptions, Simulation, reference
from strata.sim.scenarios import chain

STREAMS = [("c.src", "c.op1", 1.0), ("c.op1", "c.sink", 1.0)]  # equal bytes: selectivity 1, 100 bytes a record


def _affinity(sim: Simulation) -> float:
    return sim.metrics.summary()["stream_affinity"]


def test_transport_keeps_the_smaller_share_local_and_meets_both_ends():
    flow = transport({"a": 0.7, "b": 0.3}, {"a": 0.3, "b": 0.7})
    assert flow == pytest.approx({("a", "a"): 0.3, ("a", "b"): 0.4, ("b", "b"): 0.3})
    flow = transport({"a": 0.5, "b": 0.5}, {"b": 0.2, "c": 0.3, "d": 0.5})
    assert sum(x for (n, _), x in flow.items() if n == "a") == pytest.approx(0.5)
    for m, need in {"b": 0.2, "c": 0.3, "d": 0.5}.items():
        assert sum(x for (_, k), x in flow.items() if k == m) == pytest.approx(need)
    assert flow[("b", "b")] == pytest.approx(0.2)


def test_key_groups_are_apportioned_by_cpu_share():
    assert apportion(128, [0.3, 0.7]) == [38, 90]
    assert key_group_owners(5, [1, 1, 2]) == [0, 1, 2, 2, 2]
    assert key_group_shares(128, {"n0": 0.3, "n1": 0.7}) == {"n0": 38 / 128, "n1": 90 / 128}
    assert local_share({"n0": 0.7, "n1": 0.3}, {"n0": 0.25, "n1": 0.75}, keyed=True) == pytest.approx(0.4)
    assert local_share({"n0": 0.7, "n1": 0.3}, {"n0": 0.3, "n1": 0.7}, keyed=False) == pytest.approx(0.6)


def test_an_even_split_keeps_every_byte_local():
    half = {"n0": 1.0, "n1": 1.0}
    placement = {"c.src": half, "c.op1": half, "c.sink": half}
    local = Simulation(chain([{"kind": "map"}], rate=2000), SimOptions(placement=placement, routing="local")).run(10.0)
    assert _affinity(local) == 1.0
    assert stream_affinity(placement, STREAMS) == 1.0
    # Today's round-robin sends half of every stream across.
    rr = Simulation(chain([{"kind": "map"}], rate=2000), SimOptions(placement=placement)).run(10.0)
    assert _affinity(rr) == pytest.approx(0.5, abs=0.01)


def test_a_70_30_to_30_70_split_keeps_exactly_0_6_local():
    # op1 → sink is split alike (all local), so src → op1 keeps 2 × affinity − 1.
    up, down = {"n0": 0.7, "n1": 0.3}, {"n0": 0.3, "n1": 0.7}
    placement = {"c.src": up, "c.op1": down, "c.sink": down}
    sim = Simulation(chain([{"kind": "map"}], rate=2000), SimOptions(placement=placement, routing="local")).run(20.0)
    assert stream_affinity(placement, STREAMS) == pytest.approx(0.8)
    assert 2 * _affinity(sim) - 1 == pytest.approx(0.6, abs=0.002)
    # every instance receives its cpu share of the stream
    op1 = sim.pes["c.op1"].instances
    assert op1[1].records / (op1[0].records + op1[1].records) == pytest.approx(0.7, abs=0.002)


def test_a_keyed_stream_keeps_the_key_group_share_local():
    up, down = {"n0": 0.7, "n1": 0.3}, {"n0": 0.3, "n1": 0.7}
    placement = {"c.src": up, "c.op1": down, "c.sink": down}
    scenario = chain([{"kind": "keyed_stateful"}], rate=2000, keys={"count": 100000})
    sim = Simulation(scenario, SimOptions(placement=placement, routing="local")).run(20.0)
    planned = stream_affinity(placement, STREAMS, {"c.op1": 128})
    g0 = 38 / 128  # key groups on n0
    formula = (0.7 * g0 + 0.3 * (1 - g0) + min(g0, 0.3) + min(1 - g0, 0.7)) / 2
    assert planned == pytest.approx(formula)
    assert _affinity(sim) == pytest.approx(planned, abs=0.005)
    assert sim.pes["c.op1"].route.count(0) == 38


def test_local_routing_is_exactly_once():
    up, down = {"n0": 0.7, "n1": 0.3}, {"n0": 0.3, "n1": 0.7}
    ops = [{"kind": "map"}, {"kind": "keyed_stateful"}, {"kind": "filter", "selectivity": 0.5}]
    scenario = chain(ops, rate=1500, nodes=2, keys={"count": 500})
    placement = {"c.src": up, "c.op1": down, "c.op2": up, "c.op3": {"n0": 0.5, "n1": 0.5}, "c.sink": down}
    sim = Simulation(scenario, SimOptions(placement=placement, routing="local", record_inputs=True, batch=4))
    sim.run(10.0, drain=30.0)
    assert sim.metrics.sink_totals() == reference.sink_totals(sim)
    assert sum(pe.generated for pe in sim.pes.values()) > 10_000


def test_routing_is_checked():
    with pytest.raises(ValueError, match="routing"):
        Simulation(chain([{"kind": "map"}]), SimOptions(routing="nearest"))


def test_simulate_plan_prints_planned_and_realised_side_by_side(tmp_path):
    from typer.testing import CliRunner

    from strata.cli import app
    from strata.sim.scenarios import chain as make

    spec = tmp_path / "chain.yaml"
    spec.write_text(make([{"kind": "map"}], rate=500).model_dump_json())
    plan_path = tmp_path / "plan.json"
    half = {"n0": 0.5, "n1": 0.5}
    plan_path.write_text(
        '{"admitted": ["c"], "templates": {"c": "default"}, "affinity": 1.0, "importance": 10.0, '
        f'"assignment": {{"c.src": {half}, "c.op1": {half}, "c.sink": {half}}}}}'.replace("'", '"')
    )
    result = CliRunner().invoke(app, ["simulate", str(spec), "--duration", "4", "--plan", str(plan_path)])
    assert result.exit_code == 0, result.output
    assert "plan vs simulation" in result.output
    # planned 1, realised 1 (a 50/50 split kept local), ratio 1.000
    assert any("stream affinity" in line and "1.000" in line for line in result.output.splitlines()), result.output
