"""``SimOptions(actor_turns=True)``: an operator instance runs one message at a time (Orleans' turns).

Known answers on one node by hand (a backlogged instance, Orleans' round-robin
of ready activations, Cameo's two-level queue passing over a running
activation), then exactly-once checks against the offline reference under
FIFO and Cameo with turns, with a window's firing work, key-group moves and a
node failure with replay.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from strata.dispatch import Priors, dispatcher, model_demand, slot_dispatcher
from strata.model import Scenario
from strata.protocol.units import DispatchFactory, Message, TurnPolicy
from strata.sim import SimOptions, Simulation, fifo, turn_fifo
from strata.sim.reference import sink_totals
from strata.sim.scenarios import chain
from tests.test_sim_migration import _exact, _keyed, _random_moves
from tests.test_sim_recovery import _exactly_once
from tests.test_sim_recovery import _scenario as _recoverable


class Turns:
    """Wraps a turn policy: records each completion as (PE, time) and checks that turns never overlap."""

    def __init__(self, inner: TurnPolicy, done: list[tuple[str, float]]) -> None:
        self.inner, self.done, self.running = inner, done, set()

    def push(self, msg: Message, now: float) -> None:
        self.inner.push(msg, now)

    def pop(self, now: float) -> Message | None:
        msg = self.inner.pop(now)
        assert msg is None or (msg.pe, msg.instance) not in self.running
        return msg

    def completed(self, msg: Message, service: float, now: float) -> None:
        self.done.append((msg.pe, now))
        self.inner.completed(msg, service, now)

    def hold(self, pe: str, instance: int) -> None:
        assert (pe, instance) not in self.running
        self.running.add((pe, instance))
        self.inner.hold(pe, instance)

    def free(self, pe: str, instance: int, now: float) -> None:
        self.running.remove((pe, instance))
        self.inner.free(pe, instance, now)

    def __len__(self) -> int:
        return len(self.inner)

    def __getattr__(self, name: str) -> object:  # optional hooks (``withdraw``) exactly when the inner policy has them
        return getattr(self.inner, name)


def recorded(factory: DispatchFactory, done: list[tuple[str, float]]) -> DispatchFactory:
    return lambda view: Turns(factory(view), done)


def by_hand(tmp_path: Path, arrivals: dict[str, list[float]], cores: int, targets: dict[str, float]) -> Scenario:
    """One job per entry of ``arrivals``: a trace source on node ``src`` → ``work`` (1 s per record) → sink.

    Every ``work`` and sink runs on node ``n0`` with ``cores`` cores; sources and
    sinks cost nothing, so ``n0``'s cores only ever spend time on ``work``.
    """
    jobs = []
    for job, times in arrivals.items():
        trace = tmp_path / f"{job}.csv"
        trace.write_text("t\n" + "\n".join(map(str, times)) + "\n")
        source = {"rate": 1, "keys": {"count": 1}, "arrivals": {"process": "trace", "path": str(trace)}}
        ops = [
            {"name": "src", "kind": "source", "cost_per_record": 0.0, "source": source},
            {"name": "work", "kind": "map", "cost_per_record": 1.0},
            {"name": "out", "kind": "sink", "cost_per_record": 0.0},
        ]
        streams = [{"from": a["name"], "to": b["name"]} for a, b in itertools.pairwise(ops)]
        jobs.append(
            {
                "id": job,
                "rank": 1,
                "target_latency_s": targets[job],
                "templates": [{"operators": ops, "streams": streams}],
            }
        )
    nodes = [{"name": "n0", "cores": cores}, {"name": "src", "cores": 4}]
    return Scenario.model_validate({"cluster": {"nodes": nodes}, "jobs": jobs})


def run_by_hand(scenario: Scenario, factory: DispatchFactory, turns: bool) -> list[tuple[str, float]]:
    """Completion (job, time) of every ``work`` message, in order."""
    done: list[tuple[str, float]] = []
    placement = {f"{j.id}.{op}": "src" if op == "src" else "n0" for j in scenario.jobs for op in ("src", "work", "out")}
    sim = Simulation(
        scenario,
        SimOptions(dispatch=recorded(factory, done), placement=placement, network_latency=0.0, actor_turns=turns),
    )
    sim.run(20.0)
    return [(pe.split(".")[0], round(t, 4)) for pe, t in done if pe.endswith(".work")]


def cameo(scenario: Scenario) -> DispatchFactory:
    return dispatcher("cameo", Priors.from_scenario(scenario))


@pytest.mark.parametrize("policy", ["fifo", "cameo"])
def test_one_instance_with_four_queued_messages_uses_one_core_at_a_time(tmp_path, policy):
    scenario = by_hand(tmp_path, {"a": [0.0] * 4}, cores=2, targets={"a": 10.0})
    factory = turn_fifo if policy == "fifo" else cameo(scenario)
    # Records reach n0 through the source node's NIC (bytes / bandwidth, 2e-6 s): rounded away.
    assert run_by_hand(scenario, factory, turns=True) == [("a", 1.0), ("a", 2.0), ("a", 3.0), ("a", 4.0)]
    assert run_by_hand(scenario, factory, turns=False) == [("a", 1.0), ("a", 1.0), ("a", 2.0), ("a", 2.0)]


def test_fifo_turns_alternate_between_ready_activations(tmp_path):
    # One core. a's three records arrive at 0, b's two at 0.5. In arrival order (the default FIFO, any instance's
    # message on any core) a's run first;
    # Orleans' scheduler instead puts an activation with mail left at the back of the ready queue after each turn:
    # a1 [0, 1], then b (ready since 0.5) b1 [1, 2], a2 [2, 3], b2 [3, 4], a3 [4, 5]. The sinks' zero-cost turns
    # interleave without taking time.
    scenario = by_hand(tmp_path, {"a": [0.0] * 3, "b": [0.5] * 2}, cores=1, targets={"a": 10.0, "b": 10.0})
    assert run_by_hand(scenario, turn_fifo, turns=True) == [("a", 1.0), ("b", 2.0), ("a", 3.0), ("b", 4.0), ("a", 5.0)]
    assert run_by_hand(scenario, fifo, turns=False) == [("a", 1.0), ("a", 2.0), ("a", 3.0), ("b", 4.0), ("b", 5.0)]


def test_cameo_passes_over_a_running_activation_to_the_next_most_urgent(tmp_path):
    # Two cores; a (L = 10 s: latest start 9 s, never overdue here) is always more urgent than b (L = 100 s).
    # Without turns a's three records take both cores at 0 and b waits: a 1, 1, 2; b 2, 3. With turns a runs one at a
    # time and the second core takes b, the most urgent activation not running: a 1, 2, 3; b 1.001, 2.001.
    scenario = by_hand(tmp_path, {"a": [0.0] * 3, "b": [0.001] * 2}, cores=2, targets={"a": 10.0, "b": 100.0})
    with_turns = run_by_hand(scenario, cameo(scenario), turns=True)
    assert sorted(with_turns, key=lambda d: d[1]) == [("a", 1.0), ("b", 1.001), ("a", 2.0), ("b", 2.001), ("a", 3.0)]
    without = run_by_hand(scenario, cameo(scenario), turns=False)
    assert without == [("a", 1.0), ("a", 1.0), ("a", 2.0), ("b", 2.0), ("b", 3.0)]


def every_kind() -> Scenario:
    """Filter, keyed state, map, a window at the end (so it may carry a firing cost); 2-core nodes."""
    return chain(
        [
            {"kind": "filter", "selectivity": 0.7, "instances": 2},
            {"kind": "keyed_stateful", "instances": 3},
            {"kind": "map", "selectivity": 1.5, "instances": 2},
            {"kind": "window_aggregate", "window": {"size_s": 1}, "aggregate": {"fn": "sum"}, "instances": 3},
        ],
        keys={"count": 200, "zipf_s": 1.2},
        rate=1500,
        nodes=3,
        cores=2,
    )


@pytest.mark.parametrize("policy", ["fifo", "cameo", "edf"])
@pytest.mark.parametrize("fire", [0.0, 2e-4])
def test_turns_deliver_exactly_the_reference_totals(policy, fire):
    scenario = every_kind()
    inner = turn_fifo if policy == "fifo" else dispatcher(policy, Priors.from_scenario(scenario))
    done: list[tuple[str, float]] = []
    sim = Simulation(
        scenario,
        SimOptions(
            seed=5,
            dispatch=recorded(inner, done),
            record_inputs=True,
            actor_turns=True,
            fire_cost={"c.op4": fire} if fire else {},
        ),
    ).run(10.0, drain=30.0)
    assert sim.metrics.sink_totals() == sink_totals(sim)
    cons = sim.metrics.conservation()
    assert cons.balanced.all() and (cons.waiting == 0).all()
    assert sim.metrics.drop_totals() == {}
    assert len(done) > 10_000


@pytest.mark.parametrize(
    ("mode", "policy"),
    [
        # Handover under Cameo (no ``withdraw``) is its precopy fallback (fixed in fb3e97e: crossing moves deadlocked).
        *itertools.product(["live", "precopy", "handover", "stop"], ["fifo", "cameo"]),
    ],
)
def test_key_group_moves_under_turns_are_exactly_once(mode, policy):
    scenario = _keyed(window=True)
    inner = turn_fifo if policy == "fifo" else cameo(scenario)
    done: list[tuple[str, float]] = []
    sim = Simulation(
        scenario,
        SimOptions(seed=1, record_inputs=True, network_latency=0.005, dispatch=recorded(inner, done), actor_turns=True),
    )
    _random_moves(sim, "c.op2", 0.5, 8.0, mode)
    sim.run(8.0, drain=20.0)
    _exact(sim)
    assert (sim.metrics.migrations().src != sim.metrics.migrations().dst).sum() > 20


def test_handover_withdraws_queued_records_from_the_turn_fifo_exactly_once():
    # Overloaded 1-core windows, as in test_sim_migration: every old owner has a queue to hand over.
    scenario = _keyed(nodes=4, window=True, cores=1, cost_per_record=1.3e-3)
    sim = Simulation(scenario, SimOptions(seed=4, record_inputs=True, network_latency=0.002, actor_turns=True))
    _random_moves(sim, "c.op2", 0.4, 6.0, "handover", seed=2)
    sim.run(6.0, drain=60.0)
    _exact(sim)
    assert sum(m.handed for m in sim.migrations.log) > 100


def test_node_loss_with_replay_under_turns_is_exactly_once():
    sim = Simulation(
        _recoverable(),
        SimOptions(
            seed=7,
            record_inputs=True,
            recovery="replay",
            checkpoint_interval=2.0,
            failures=[("n0", 7.7, 12.0), ("n2", 17.1, None)],
            actor_turns=True,
        ),
    )
    _exactly_once(sim)
    assert sim.metrics.summary()["replayed"] > 0


def test_a_policy_without_hold_and_free_is_refused():
    scenario = every_kind()
    with pytest.raises(ValueError, match="actor_turns: the dispatch policy SlotDispatch has no hold/free"):
        Simulation(scenario, SimOptions(dispatch=slot_dispatcher(model_demand(scenario)), actor_turns=True))
    with pytest.raises(ValueError, match="FifoDispatch"):
        Simulation(scenario, SimOptions(dispatch=fifo, actor_turns=True))


def test_cameo_runs_records_past_their_latest_start_after_those_that_can_still_meet_theirs(tmp_path):
    # The same arrivals with a's L = 0.1 s: a's records (1 s of work each) are past their latest start (0 + 0.1 − 1)
    # from the moment they arrive. At 0 nothing else waits, so two of them take both cores (a 1, 1); at 1 b's two
    # (latest start 0.001 + 100 − 1) can still meet theirs and go first (b 2, 2); a's third waits until then (a 3).
    scenario = by_hand(tmp_path, {"a": [0.0] * 3, "b": [0.001] * 2}, cores=2, targets={"a": 0.1, "b": 100.0})
    assert run_by_hand(scenario, cameo(scenario), turns=False) == [
        ("a", 1.0),
        ("a", 1.0),
        ("b", 2.0),
        ("b", 2.0),
        ("a", 3.0),
    ]
