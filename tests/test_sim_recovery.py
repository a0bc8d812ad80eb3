"""recovery="replay": a node lost mid-run loses no record (strata.sim.recovery)."""

from __future__ import annotations

import math

import pytest

from strata.model import Scenario
from strata.protocol.engine import Decisions
from strata.sim import Move, SimOptions, Simulation
from strata.sim.reference import sink_totals
from strata.sim.scenarios import chain

PLACEMENT = {"c.op2": ["n0", "n1", "n2"]}  # keyed_stateful instance j on node j


def _scenario() -> Scenario:
    return chain(
        [
            {"kind": "filter", "selectivity": 0.7, "instances": 2},
            {"kind": "keyed_stateful", "instances": 3, "state_bytes": 4e6},
            {"kind": "map", "selectivity": 1.5, "instances": 2},
            {"kind": "window_aggregate", "window": {"size_s": 3}, "aggregate": {"fn": "sum"}, "instances": 2},
            {"kind": "join", "selectivity": 0.9},
        ],
        keys={"count": 200, "zipf_s": 1.2},
        rate=1000,
        nodes=3,
    )


def _exactly_once(sim: Simulation, until: float = 20.0, drain: float = 60.0) -> None:
    sim.run(until, drain=drain)
    assert sim.now < until + drain  # drained by itself: nothing stalled
    assert sim.metrics.sink_totals() == sink_totals(sim)
    assert sim.metrics.drop_totals() == {}
    assert sim.metrics.conservation().balanced.all()


@pytest.mark.parametrize(
    "failures",
    [
        [("n1", 10.3, None)],  # lost for good
        [("n0", 7.7, 12.0), ("n2", 17.1, None)],  # down and up, then another node
        [("n0", 5.0, None), ("n1", 5.0, None)],  # two at once: everything restored on n2
    ],
)
def test_node_loss_with_replay_is_exactly_once(failures):
    sim = Simulation(
        _scenario(),
        SimOptions(seed=7, record_inputs=True, recovery="replay", checkpoint_interval=2.0, failures=failures),
    )
    _exactly_once(sim)
    rec = sim.metrics.recovery()
    failed = {n for n, _, _ in failures}
    assert set(rec.node) == failed and (rec.to != rec.node).all()
    assert (rec.checkpoint <= rec.failed_at).all() and (rec.failed_at - rec.checkpoint < 2.0 + 1e-9).all()
    summary = sim.metrics.summary()
    assert summary["replayed"] == rec.replayed.sum() > 0
    assert summary["duplicates"] > 0  # outputs computed again after the restores were discarded downstream


def test_without_recovery_the_same_failure_loses_records():
    sim = Simulation(_scenario(), SimOptions(seed=7, record_inputs=True, failures=[("n1", 10.3, None)]))
    sim.run(30.0, drain=60.0)
    assert sim.metrics.drop_totals()["failure"] > 0
    assert sim.metrics.sink_totals() != sink_totals(sim)
    assert "restored" not in sim.metrics.summary() and sim.metrics.recovery().empty


@pytest.mark.parametrize(
    ("mode", "node", "after"),
    [
        ("live", "n0", 1e-4),  # the old owner, before its markers arrive
        ("live", "n1", 1e-4),  # the new owner, while it buffers the groups' records
        ("live", "n0", 0.1),  # the old owner, with the state on the wire (4 MB over a slow NIC)
        ("live", "n1", 0.1),  # the new owner, with the state on the wire
        ("precopy", "n0", 1e-4),  # the old owner, with the snapshot on the wire
        ("precopy", "n1", 0.1),
        ("stop", "n0", 1e-4),  # stop-the-world: the old owner, before it drains
        ("stop", "n1", 0.1),
    ],
)
def test_node_loss_during_a_key_group_migration(mode, node, after):
    moves = [Move("c.op2", g, 1, mode) for g in range(0, 128, 3)]
    sim = Simulation(
        _scenario(),
        SimOptions(
            seed=3,
            record_inputs=True,
            placement=PLACEMENT,
            recovery="replay",
            checkpoint_interval=3.0,
            failures=[(node, 10.0 + after, None)],
        ),
    )
    for n in sim.nodes:
        n.nic = 8e6  # bytes/s: a group's ~100 kB state takes ~10 ms, all moved groups over 0.2 s
    sim.apply(Decisions(0, moves=moves), at=10.0)
    _exactly_once(sim)
    migs = sim.metrics.migrations()
    moved = migs[migs.src != migs.dst]
    assert len(moved) > 10 and moved.installed.notna().all()
    assert (moved.installed > 10.0 + after).any()  # the failure came while moves were in flight
    route = sim.pes["c.op2"].route
    assert all(route[m.key_group] == 1 for m in moves)


def test_node_loss_during_a_relocation():
    sim = Simulation(
        _scenario(),
        SimOptions(
            seed=5,
            record_inputs=True,
            placement=PLACEMENT,
            recovery="replay",
            failures=[("n2", 12.0005, None)],
        ),
    )
    sim.apply(Decisions(0, placement={"c.op2": [("n0", 0.0), ("n2", 0.0), ("n1", 0.0)]}), at=12.0)
    _exactly_once(sim)
    assert "n2" not in sim.metrics.instances().node.tolist()


def test_a_controller_places_restored_instances():
    sim = Simulation(
        _scenario(),
        SimOptions(
            seed=2,
            record_inputs=True,
            placement=PLACEMENT,
            recovery="replay",
            checkpoint_interval=2.0,
            failures=[("n1", 8.3, None)],
        ),
    )
    # After the loss of n1 a controller chooses where its instances run (instead of the default node).
    placement = {"c.op2": [("n0", 0.0), ("n2", 0.0), ("n2", 0.0)], "c.op1": [("n0", 0.0), ("n2", 0.0)]}
    sim.apply(Decisions(0, placement=placement), at=9.0)
    _exactly_once(sim)
    nodes = sim.metrics.instances().set_index(["pe", "instance"]).node
    assert [nodes["c.op2", i] for i in range(3)] == ["n0", "n2", "n2"]
    assert [nodes["c.op1", i] for i in range(2)] == ["n0", "n2"]


def test_replay_runs_are_deterministic_and_default_counts_are_unchanged():
    def run(**kw: object) -> dict:
        sim = Simulation(_scenario(), SimOptions(seed=11, failures=[("n1", 6.1, None)], **kw)).run(15.0)
        return {"summary": sim.metrics.summary(), "lat": list(sim.metrics.lat["c"])}

    assert run(recovery="replay") == run(recovery="replay")
    off = run()
    assert off["summary"]["dropped"]["failure"] > 0 and "replayed" not in off["summary"]


def test_recovery_arguments_are_checked():
    with pytest.raises(ValueError, match="recovery"):
        Simulation(_scenario(), SimOptions(recovery="restart"))
    with pytest.raises(ValueError, match="checkpoint_interval"):
        Simulation(_scenario(), SimOptions(recovery="replay", checkpoint_interval=0))
    assert math.isfinite(Simulation(_scenario(), SimOptions(recovery="replay")).recovery.interval)
