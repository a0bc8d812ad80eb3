"""AutoFlow in the simulator: live migration under traffic, back-to-back moves, empty instances, exactly once."""

from __future__ import annotations

from collections import defaultdict

import pytest

from strata.balance import BalanceConfig
from strata.balance.autoflow import AutoFlow
from strata.control import loop
from strata.model import Scenario
from strata.protocol.engine import Decisions
from strata.runners.autoflow import actor_scenario, run
from strata.sim import FifoDispatch, Kind, Move, SimOptions, Simulation
from strata.sim.adapter import SimEngine
from strata.sim.reference import sink_totals
from strata.sim.runtime import EV_DELIVER
from strata.sim.semantics import key_group

AGG = "k.agg"
MAP = "k.map"


def _fan_in(groups: int = 16, rate: float = 2000.0, zipf_s: float = 1.2, keys: int = 200) -> Scenario:
    """src (2 instances) → map (3) → agg (4, keyed) → sink, one one-core node per instance."""
    ops = [
        {
            "name": "src",
            "kind": "source",
            "instances": 2,
            "cost_per_record": 1e-5,
            "source": {"rate": rate, "keys": {"count": keys, "zipf_s": zipf_s}},
        },
        {"name": "map", "kind": "map", "instances": 3, "cost_per_record": 2e-4},
        {
            "name": "agg",
            "kind": "keyed_stateful",
            "instances": 4,
            "key_groups": groups,
            "cost_per_record": 2e-4,
            "aggregate": {"fn": "sum"},
            "state_bytes": 4e6,
        },
        {"name": "out", "kind": "sink", "cost_per_record": 1e-6},
    ]
    streams = [{"from": "src", "to": "map"}, {"from": "map", "to": "agg"}, {"from": "agg", "to": "out"}]
    return Scenario.model_validate(
        {
            "cluster": {"node_groups": [{"prefix": "n", "count": 10, "cores": 1}]},
            "jobs": [{"id": "k", "rank": 1, "templates": [{"operators": ops, "streams": streams}]}],
        }
    )


class _Order(FifoDispatch):
    """FIFO that logs, per node, the (PE, instance, upstream gid, uid, key) of every DATA message it runs."""

    log: list[tuple[str, int, int, int, int]]

    def __init__(self, view) -> None:
        super().__init__(view)
        self.log = []

    def pop(self, now):
        msg = super().pop(now)
        if msg is not None and msg.kind is Kind.DATA:
            self.log.append((msg.pe, msg.instance, msg.upstream, msg.uid, msg.key))
        return msg


def _exactly_once(sim: Simulation) -> None:
    assert sim.metrics.conservation().balanced.all()
    assert sim.metrics.drop_totals() == {}
    assert sim.metrics.sink_totals() == sink_totals(sim)


def _owners(sim: Simulation, pe: str, group: int) -> list[int]:
    return [i.index for i in sim.pes[pe].instances if group in i.state]


@pytest.mark.parametrize("mode", ["live", "handover"])
def test_live_move_while_records_of_the_group_are_in_flight_on_every_channel(mode):
    policies: list[_Order] = []

    def factory(view):
        policies.append(_Order(view))
        return policies[-1]

    sim = Simulation(_fan_in(), SimOptions(seed=5, dispatch=factory, network_latency=0.02, record_inputs=True))
    sim.run(1.0)
    agg = sim.pes[AGG]
    hot = key_group(0, agg.groups)  # Zipf rank 0 is key 0: the hottest key's group
    src = agg.route[hot]
    dst = (src + 1) % len(agg.instances)
    in_flight = {
        msg.upstream
        for _, _, code, _, msg in sim.pending()
        if code == EV_DELIVER and msg.kind is Kind.DATA and msg.pe == AGG and msg.key_group == hot
    }
    assert in_flight == {u.gid for u in agg.upstream}  # the precondition: every channel carries some
    sim.apply(Decisions(0, moves=[Move(AGG, hot, dst, mode)]))
    sim.run(3.0, drain=30.0)

    [mig] = sim.metrics.migrations().itertuples()
    assert (mig.src, mig.dst, mig.mode) == (src, dst, mode)
    assert 1.0 < mig.shipped <= mig.installed < 3.0
    assert agg.route[hot] == dst and _owners(sim, AGG, hot) == [dst]
    _exactly_once(sim)
    # Per upstream, the group's records run at agg in the order that upstream emitted them (map runs
    # on one core per instance, emitting as it completes), across the move from src to dst.
    gid = {i.index: i.gid for i in sim.pes[MAP].instances}
    emitted, ran = defaultdict(list), defaultdict(list)
    ran_on = set()
    for policy in policies:
        for pe, inst, upstream, uid, key in policy.log:
            if key_group(key, agg.groups) != hot:
                continue
            if pe == MAP:
                emitted[gid[inst]].append(uid)
            elif pe == AGG:
                ran[upstream].append(uid)
                ran_on.add(inst)
    assert ran_on == {src, dst}
    assert set(ran) == set(gid.values())
    for upstream, uids in ran.items():
        assert uids == emitted[upstream]


@pytest.mark.parametrize("mode", ["live", "precopy", "handover", "stop"])
def test_two_moves_of_the_same_group_back_to_back(mode):
    sim = Simulation(_fan_in(), SimOptions(seed=6, network_latency=0.01, record_inputs=True))
    sim.run(1.0)
    agg = sim.pes[AGG]
    hot = key_group(0, agg.groups)
    home = agg.route[hot]
    away = (home + 2) % len(agg.instances)
    sim.apply(Decisions(0, moves=[Move(AGG, hot, away, mode)]))
    # and straight back, requested before the first finished
    sim.apply(Decisions(0, moves=[Move(AGG, hot, home, mode)]))
    sim.run(3.0, drain=30.0)

    first, second = sim.metrics.migrations().itertuples()
    assert (first.src, first.dst, second.src, second.dst) == (home, away, away, home)
    assert second.started >= first.installed  # the second waited for the first
    assert agg.route[hot] == home and _owners(sim, AGG, hot) == [home]
    _exactly_once(sim)


def test_an_instance_without_key_groups_receives_load():
    # Uniform keys over 6 groups on 4 instances; after a stop move of g3 to instance 0,
    # instance 3 owns nothing: loads ≈ 3 | 2 | 1 | 0 groups.
    scenario = _fan_in(groups=6, zipf_s=0.0, keys=600, rate=1500.0)
    balancer = AutoFlow(BalanceConfig(threshold=1.1, cooldown_s=0.0), mode="live")
    engine = SimEngine(scenario, SimOptions(seed=7, record_inputs=True))
    engine.apply(balancer.start(0.0))
    sim = engine.sim
    sim.apply(Decisions(0, moves=[Move(AGG, 3, 0, "stop")]), at=0.01)
    sim.run(0.5)
    assert [sum(1 for r in sim.pes[AGG].route if r == i) for i in range(4)] == [3, 2, 1, 0]
    loop.run(engine, balancer, window_s=1.0, until=4.0, start=False)
    sim.run(4.0, drain=30.0)

    first = balancer.rounds[0]
    assert first.imbalance > 1.5 and first.moves >= 1
    moved = sim.metrics.migrations()
    assert (moved[moved["mode"] == "live"].dst == 3).any()
    assert 3 in sim.pes[AGG].route
    _exactly_once(sim)


@pytest.mark.parametrize("mode", ["live", "precopy", "handover", "stop"])
def test_autoflow_under_hot_key_drift_is_exactly_once_and_balances(mode):
    scenario, placement = actor_scenario(
        1.0, drift_period_s=4.0, instances=4, rate=1200.0, keys=2000, key_groups=32, load=0.6
    )
    static = run("static", scenario, placement, 12.0, window_s=1.0)
    balanced = run(mode, scenario, placement, 12.0, window_s=1.0, config=BalanceConfig(threshold=1.08), smoothing=0.5)
    for r in (static, balanced):
        assert r.exactly_once and r.conserved
    assert balanced.summary(warmup=0.0)["migrations"] > 0
    mean = lambda r: sum(w.imbalance for w in r.windows[2:]) / len(r.windows[2:])  # noqa: E731
    assert mean(balanced) < mean(static)


@pytest.mark.parametrize("mode", ["live", "handover", "stop"])
def test_early_rounds_on_an_instance_falling_behind_stay_exactly_once(mode):
    # At load 0.85 each drift step overloads an instance: AutoFlow, looking every 0.25 s, rounds early.
    scenario, placement = actor_scenario(
        1.0, drift_period_s=4.0, instances=4, rate=1200.0, keys=2000, key_groups=32, load=0.85
    )
    static = run("static", scenario, placement, 12.0, window_s=1.0)
    balanced = run(
        mode, scenario, placement, 12.0, window_s=1.0, config=BalanceConfig(threshold=1.08), smoothing=0.5, tick_s=0.25
    )
    assert balanced.exactly_once and balanced.conserved
    assert any(r.trigger == "overload" for r in balanced.balancer.rounds)
    mean = lambda r: sum(w.imbalance for w in r.windows[2:]) / len(r.windows[2:])  # noqa: E731
    assert mean(balanced) < mean(static)


def test_a_traced_run_is_the_same_run_and_logs_every_message_of_the_keyed_operator():
    scenario, placement = actor_scenario(
        1.0, drift_period_s=4.0, instances=4, rate=1200.0, keys=2000, key_groups=32, load=0.6
    )
    config = BalanceConfig(threshold=1.08)
    plain = run("live", scenario, placement, 8.0, window_s=1.0, config=config)
    log: list[tuple[float, ...]] = []
    traced = run("live", scenario, placement, 8.0, window_s=1.0, config=config, trace=log)
    assert list(traced.latency) == list(plain.latency)
    assert len(log) == traced.sim.pes["skewed0.agg"].done  # one record per message
    moves = traced.sim.metrics.migrations()
    moves = moves[moves.src != moves.dst]
    held = [(group, arrived, pushed) for _, _, group, _, arrived, pushed, _ in log if pushed > arrived]
    assert held  # records buffered at a new owner until their group's state arrived
    for group, arrived, pushed in held:
        mine = moves[moves.key_group == group]
        assert ((mine.started <= arrived) & (mine.installed == pushed)).any()
