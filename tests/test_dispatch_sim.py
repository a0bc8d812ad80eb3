"""Dispatch policies driving the simulator through the DispatchPolicy hook (Cameo, NSDI'21)."""

from __future__ import annotations

import pytest

from strata.dispatch import Priors, dispatcher, model_demand, slot_dispatcher
from strata.model import Scenario
from strata.sim import Simulation


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
    return {name: Simulation(scenario, seed=3, dispatch=f).run(40.0, drain=60.0) for name, f in factories.items()}


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
    sim = Simulation(scenario, seed=3, dispatch=dispatcher("cameo", wrong)).run(5.0)
    node = sim.nodes[0].policy
    assert node.estimate("bulk.work")[0] == pytest.approx(2.4e-3)
    assert node.estimate("bulk.work")[1] == pytest.approx(1e-5)  # the sink
    assert node.estimate("alert.src") == pytest.approx((1e-5, 1e-3 + 1e-5))
