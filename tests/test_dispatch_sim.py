"""Dispatch policies driving the simulator through the DispatchPolicy hook (Cameo, NSDI'21)."""

from __future__ import annotations

import itertools

import pytest

from strata.dispatch import Priors, dispatcher, model_demand, slot_dispatcher
from strata.model import Scenario
from strata.sim import SimOptions, Simulation


def shared_node() -> Scenario:
    """One 2-core node: a light alert query (L = 0.5 s) next to bursty bulk work (L = 60 s)."""

    def job(name: str, rate: float, cost: float, target: float, arrivals: dict) -> dict:
        return {
            "id": name,
            "rank": 1,
            "target_latency_s": target,
            "templates": [
                {
                    "operators": [
                        {
                            "name": "src",
                            "kind": "source",
                            "cost_per_record": 1e-5,
                            "source": {"rate": rate, "arrivals": arrivals, "seed": len(name)},
                        },
                        {"name": "work", "kind": "map", "cost_per_record": cost},
                        {"name": "out", "kind": "sink", "cost_per_record": 1e-5},
                    ],
                    "streams": [{"from": "src", "to": "work"}, {"from": "work", "to": "out"}],
                }
            ],
        }

    bursts = {"process": "onoff", "period_s": 10.0, "on_s": 2.0, "burst_factor": 4.0}
    return Scenario.model_validate(
        {
            "cluster": {"nodes": [{"name": "n0", "cores": 2}]},
            "jobs": [
                job("alert", 20.0, 1e-3, 0.5, {"process": "poisson"}),
                job("bulk", 500.0, 2.4e-3, 60.0, bursts),
            ],  # 1.2 cores on average, 4.8 in a burst
        }
    )


@pytest.fixture(scope="module")
def runs() -> dict[str, Simulation]:
    scenario = shared_node()
    factories = {
        "fifo": None,
        "cameo": dispatcher("cameo", Priors.from_scenario(scenario)),
        "slots": slot_dispatcher(model_demand(scenario)),
    }
    runs = {name: Simulation(scenario, SimOptions(seed=3, dispatch=f)) for name, f in factories.items()}
    return {name: sim.run(40.0, drain=60.0) for name, sim in runs.items()}


def test_every_record_is_accounted_for_under_every_policy(runs):
    for sim in runs.values():
        assert sim.metrics.conservation()["balanced"].all()
        assert sim.metrics.summary()["delivered"] == sim.metrics.summary()["generated"]


def test_cameo_keeps_the_alert_query_within_its_target_where_fifo_does_not(runs):
    lat = {name: sim.metrics.latency().set_index("job") for name, sim in runs.items()}
    assert lat["fifo"].loc["alert", "miss_rate"] > 0.1  # bursts queue alerts behind bulk work
    assert lat["cameo"].loc["alert", "miss_rate"] == 0.0
    assert lat["cameo"].loc["alert", "p99"] < lat["fifo"].loc["alert", "p99"] / 10


def test_slots_cap_each_dataflow_at_its_cores(runs):
    node = runs["slots"].nodes[0]
    assert node.policy.slots == {"alert": 1, "bulk": 1}
    # bulk needs 1.2 cores on average but owns one: it falls behind, where FIFO lends it the alert's idle core
    bulk = runs["slots"].metrics.latency().set_index("job").loc["bulk"]
    assert bulk["p99"] > 5 * runs["fifo"].metrics.latency().set_index("job").loc["bulk", "p99"]


def test_profiled_costs_converge_from_wrong_priors_to_the_true_service_times():
    """Deterministic service: moving averages reach cost_per_record, C_path the sum downstream."""
    scenario = shared_node()
    wrong = Priors.from_scenario(scenario)
    wrong = Priors({pe: 10 * c for pe, c in wrong.cost.items()}, wrong.downstream, wrong.windows)
    sim = Simulation(scenario, SimOptions(seed=3, dispatch=dispatcher("cameo", wrong))).run(5.0)
    node = sim.nodes[0].policy
    assert node.estimate("bulk.work")[0] == pytest.approx(2.4e-3)
    assert node.estimate("bulk.work")[1] == pytest.approx(1e-5)  # the sink
    assert node.estimate("alert.src") == pytest.approx((1e-5, 1e-3 + 1e-5))


def firing_window(
    fire: float = 0.05, insert: float = 1e-3, sum_stage: bool = False
) -> tuple[Scenario, dict[str, float]]:
    """One core, 8 records/s of one key into a 1 s tumbling sum (→ a 1 ms sum stage) → sink; firing costs most."""
    ops = [
        {
            "name": "src",
            "kind": "source",
            "cost_per_record": 0.0,
            "source": {"rate": 8.0, "keys": {"count": 1}, "arrivals": {"process": "constant"}},
        },
        {
            "name": "win",
            "kind": "window_aggregate",
            "window": {"size_s": 1.0, "watermark_s": 0.0},
            "aggregate": {"fn": "sum", "column": "value"},
            "cost_per_record": insert,
        },
        *([{"name": "sum", "kind": "keyed_stateful", "cost_per_record": 1e-3}] if sum_stage else []),
        {"name": "out", "kind": "sink", "cost_per_record": 1e-3 if sum_stage else 0.0},
    ]
    streams = [{"from": a["name"], "to": b["name"]} for a, b in itertools.pairwise(ops)]
    scenario = Scenario.model_validate(
        {
            "cluster": {"nodes": [{"name": "n0", "cores": 1}]},
            "jobs": [
                {"id": "q", "rank": 1, "target_latency_s": 1.0, "templates": [{"operators": ops, "streams": streams}]}
            ],
        }
    )
    return scenario, {"q.win": fire}


@pytest.mark.parametrize("policy", ["fifo", "cameo"])
def test_a_window_firing_costs_its_records_times_fire_cost_and_loses_nothing(policy):
    from strata.sim.reference import sink_totals

    scenario, fire = firing_window()
    factory = None if policy == "fifo" else dispatcher("cameo", Priors.from_scenario(scenario))
    sim = Simulation(
        scenario,
        SimOptions(seed=1, dispatch=factory, watermark_interval=0.25, fire_cost=fire, record_inputs=True),
    )
    sim.run(1.9)
    first = [t for _, _, t, _, _, _ in sim.inputs if t < 1.0]
    # The window [0, 1) fires at the tick at t = 1 and its one result needs len(first) × 0.05 s of the only core
    # (plus at most one 1 ms insert of a record arriving at t = 1 itself).
    done = 1.0 + 0.05 * len(first)
    assert list(sim.metrics.lat["q"]) == [pytest.approx(done - max(first), abs=1.5e-3)]
    sim.run(8.0, drain=10.0)
    assert sim.metrics.sink_totals() == sink_totals(sim)
    assert sim.metrics.conservation()["balanced"].all()


def test_cameo_profiles_a_window_firing_apart_from_the_records_it_aggregates():
    scenario, fire = firing_window()
    sim = Simulation(
        scenario,
        SimOptions(
            seed=1,
            dispatch=dispatcher("cameo", Priors.from_scenario(scenario)),
            watermark_interval=0.25,
            fire_cost=fire,
            record_inputs=True,
        ),
    ).run(5.9)
    expected = None  # the moving average (alpha 0.2) of the five firings' costs: records in the window × 0.05
    for w in range(5):
        cost = 0.05 * sum(1 for r in sim.inputs if w <= r[2] < w + 1)
        expected = cost if expected is None else expected + 0.2 * (cost - expected)
    policy = sim.nodes[0].policy
    per_record, _ = policy.estimate("q.win")
    assert per_record == pytest.approx(1e-3)  # the window's per-record cost, not polluted by its firings
    assert policy.estimate_state_work("q.win") == pytest.approx(expected)


@pytest.mark.parametrize("policy", ["fifo", "cameo", "edf"])
def test_after_a_firing_the_deadline_strategies_finish_the_result_before_the_next_windows_records(policy):
    # The window [0, 1) fires at t = 1 and its result is computed by t = 1 + 0.05 n (n its records). Records of the
    # next window arriving meanwhile wait behind the firing; under FIFO their 20 ms window inserts are queued ahead
    # of the result's sink message (the result reaches the sum stage first, then the sink at the tail), so the
    # result waits for all of them. Cameo and EDF run the result's sum and sink first: those messages are due at its
    # records' event time + L, the next window's records only when that window is due, a second later.
    scenario, fire = firing_window(insert=0.02, sum_stage=True)
    factory = None if policy == "fifo" else dispatcher(policy, Priors.from_scenario(scenario))
    sim = Simulation(
        scenario,
        SimOptions(seed=1, dispatch=factory, watermark_interval=0.25, fire_cost=fire, record_inputs=True),
    )
    sim.run(1.9)
    first = [t for _, _, t, _, _, _ in sim.inputs if t < 1.0]
    computed = 1.0 + 0.05 * len(first)
    waiting = sum(1 for _, _, t, _, _, _ in sim.inputs if 1.0 <= t < computed)
    done = computed + 2e-3 + (0.02 * waiting if policy == "fifo" else 0.0)
    assert waiting >= 3  # records of the next window that arrived while the result was computed
    assert list(sim.metrics.lat["q"]) == [pytest.approx(done - max(first))]
