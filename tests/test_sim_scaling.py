"""Scale-out at runtime (a placement listing more instances, strata.sim.scaling): exactly once, groups spread."""

from __future__ import annotations

import pytest

from strata.protocol.engine import Decisions
from strata.sim import SimOptions, Simulation
from strata.sim.reference import sink_totals
from strata.sim.scenarios import chain


def _scenario():
    return chain(
        [
            {"kind": "map", "instances": 1},
            {"kind": "keyed_stateful", "instances": 2},
            {"kind": "window_aggregate", "window": {"size_s": 2}, "aggregate": {"fn": "sum"}, "instances": 1},
        ],
        keys={"count": 300, "zipf_s": 0.8},
        rate=1500,
        nodes=3,
    )


def _placed(nodes: dict[str, list[str]]) -> Decisions:
    """A placement of every instance on ``nodes``, no cpu shares."""
    return Decisions(0, placement={pe: [(n, 0.0) for n in where] for pe, where in nodes.items()})


def test_scaling_out_keyed_and_unkeyed_pes_is_exactly_once():
    sim = Simulation(_scenario(), SimOptions(seed=4, record_inputs=True))
    # Round-robin placement: op1 on n1, op2 on n2 and n0, op3 on n1; the new instances on the least loaded nodes.
    grown = {"c.op1": ["n1", "n0", "n1"], "c.op2": ["n2", "n0", "n2", "n0"], "c.op3": ["n1", "n1"]}
    sim.apply(_placed(grown), at=6.0)
    sim.run(15.0, drain=30.0)
    assert sim.metrics.sink_totals() == sink_totals(sim)
    assert sim.metrics.drop_totals() == {}
    assert sim.metrics.conservation().balanced.all()
    inst = sim.metrics.instances().set_index(["pe", "instance"])
    for pe, n in (("c.op1", 3), ("c.op2", 4), ("c.op3", 2)):
        assert [inst.records[pe, i] > 0 for i in range(n)] == [True] * n  # every new instance got work
    route = sim.pes["c.op2"].route
    # Group g moved to g mod 4 when that is a new instance (2 or 3); the others stayed at g mod 2.
    assert list(route) == [g % 4 if g % 4 >= 2 else g % 2 for g in range(128)]
    migs = sim.metrics.migrations()
    # Half the groups of each keyed PE moved: op2 2 → 4 instances, the window op3 1 → 2.
    assert migs.groupby("pe").size().to_dict() == {"c.op2": 64, "c.op3": 64}
    assert (migs["mode"] == "live").all() and migs.installed.notna().all()


def test_scale_in_and_unknown_pes_are_refused():
    sim = Simulation(_scenario(), SimOptions(seed=1))
    with pytest.raises(ValueError, match="scale-in"):
        sim.apply(_placed({"c.op2": ["n0"]}))
    with pytest.raises(ValueError, match="expected a PE"):
        sim.apply(_placed({"c.nope": ["n0", "n1", "n2"]}))
    with pytest.raises(ValueError, match="expected a node"):
        sim.apply(_placed({"c.op2": ["n2", "n0", "n9"]}))
    with pytest.raises(ValueError, match="recovery"):
        Simulation(_scenario(), SimOptions(recovery="replay")).apply(_placed({"c.op2": ["n2", "n0", "n1"]}))
    with pytest.raises(ValueError, match="adapter"):
        sim.apply(Decisions(0, admitted={"c": "t"}))
