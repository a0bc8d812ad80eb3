"""The resource-function learner: fits with known answers, attribution, refined scenarios."""

from __future__ import annotations

import numpy as np
import pytest

from strata.learning import ResourceLearner, attribute
from strata.model import Scenario

SCENARIO = Scenario.model_validate(
    {
        "cluster": {"nodes": [{"name": "n", "cores": 2}]},
        "jobs": [
            {
                "id": "j",
                "rank": 1,
                "templates": [
                    {
                        "name": "t",
                        "operators": [
                            {"name": "src", "kind": "source", "source": {"rate": 100}, "cost_per_record": 1e-5},
                            {
                                "name": "f",
                                "kind": "filter",
                                "predicate": "value > 0.5",
                                "selectivity": 0.5,
                                "cost_per_record": 1e-4,
                            },
                            {"name": "m", "kind": "map", "expressions": ["id"], "cost_per_record": 3e-4},
                            {"name": "out", "kind": "sink", "cost_per_record": 0.0},
                        ],
                        "streams": [{"from": "src", "to": "f"}, {"from": "f", "to": "m"}, {"from": "m", "to": "out"}],
                    }
                ],
            }
        ],
    }
)


def test_exact_linear_data_gives_the_line_and_the_ratio():
    learner = ResourceLearner(decay=1.0, min_samples=3)
    for n in (100, 250, 400, 900):
        learner.observe("j.m", n, 0.3 * n, 0.2 + 0.001 * n)
    e = learner.estimate("j.m")
    assert e.fixed_s == pytest.approx(0.2)
    assert e.marginal_s == pytest.approx(0.001)
    assert e.selectivity == pytest.approx(0.3)
    # average cost: Σ busy / Σ in = (4 × 0.2 + 0.001 × 1650) / 1650
    assert e.cost_per_record == pytest.approx((0.8 + 1.65) / 1650)
    assert e.samples == 4


def test_least_squares_on_noisy_data_matches_numpy():
    rng = np.random.default_rng(3)
    n = rng.integers(50, 2000, size=40).astype(float)
    busy = 0.1 + 5e-4 * n + rng.normal(0, 0.01, size=40)
    learner = ResourceLearner(decay=1.0)
    for x, y in zip(n, busy, strict=True):
        learner.observe("p", x, x, y)
    slope, intercept = np.polyfit(n, busy, 1)
    e = learner.estimate("p")
    assert e.marginal_s == pytest.approx(slope, rel=1e-9)
    assert e.fixed_s == pytest.approx(intercept, rel=1e-9)


def test_decay_tracks_a_change_in_cost():
    learner = ResourceLearner(decay=0.5)
    for _ in range(20):
        learner.observe("p", 100, 100, 1.0)
    for _ in range(20):
        learner.observe("p", 100, 100, 3.0)
    assert learner.estimate("p").cost_per_record == pytest.approx(0.03, rel=1e-5)


def test_no_estimate_before_min_samples_and_empty_units_are_skipped():
    learner = ResourceLearner(min_samples=2)
    learner.observe("p", 10, 5, 0.1)
    learner.observe("p", 0, 0, 0.3)
    assert learner.estimate("p") is None
    with pytest.raises(ValueError, match="negative"):
        learner.observe("p", 10, -1, 0.1)


def test_attribute_splits_busy_by_prior_cost_and_matches_output():
    tpl = SCENARIO.job["j"].templates[0]
    parts = attribute("j", tpl, 1000, 200, 1.2)
    names = [p[0] for p in parts]
    assert names == ["j.src", "j.f", "j.m", "j.out"]
    flows = {pe: (i, o) for pe, i, o, _ in parts}
    assert flows["j.src"] == (1000, 1000)
    assert flows["j.f"] == (1000, 500)  # prior selectivity 0.5
    assert flows["j.m"] == (500, 200)  # scaled to the observed output
    busy = {pe: b for pe, _, _, b in parts}
    weights = {"j.src": 1e-5 * 1000, "j.f": 1e-4 * 1000, "j.m": 3e-4 * 500, "j.out": 0.0}
    total = sum(weights.values())
    for pe, w in weights.items():
        assert busy[pe] == pytest.approx(1.2 * w / total)
    assert sum(busy.values()) == pytest.approx(1.2)


def test_refine_writes_estimates_and_ingest_into_the_scenario():
    learner = ResourceLearner(decay=1.0, min_samples=1)
    learner.observe("j.m", 100, 40, 0.05)
    refined = learner.refine(SCENARIO, ingest={"j.src": 321.0})
    ops = refined.job["j"].templates[0].operator
    assert ops["m"].cost_per_record == pytest.approx(5e-4)
    assert ops["m"].selectivity == pytest.approx(0.4)
    assert ops["f"].cost_per_record == 1e-4  # no estimate: prior kept
    assert ops["src"].source.rate == 321.0
    assert SCENARIO.job["j"].templates[0].operator["m"].cost_per_record == 3e-4  # the input is not changed


def test_mean_offered_rate_of_onoff_bursts():
    from strata.learning import mean_offered_rates

    bursty = SCENARIO.model_dump(by_alias=True)
    bursty["jobs"][0]["templates"][0]["operators"][0]["source"]["arrivals"] = {
        "process": "onoff",
        "period_s": 20,
        "on_s": 5,
        "burst_factor": 3,
    }
    # 100 rec/s, tripled a quarter of the time: 100 × (1 + 2 × 5/20) = 150
    assert mean_offered_rates(Scenario.model_validate(bursty)) == {"j.src": pytest.approx(150.0)}
    assert mean_offered_rates(SCENARIO) == {"j.src": 100.0}
