"""The resource-function learner: fits with known answers, attribution, refined scenarios."""

from __future__ import annotations

import numpy as np
import pytest

from strata.control.estimation import ResourceLearner, attribute
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
    refined = learner.refine(SCENARIO, prior={"j.src": 321.0})  # no offer observed yet: the prior rate
    ops = refined.job["j"].templates[0].operator
    assert ops["m"].cost_per_record == pytest.approx(5e-4)
    assert ops["m"].selectivity == pytest.approx(0.4)
    assert ops["f"].cost_per_record == 1e-4  # no estimate: prior kept
    assert ops["src"].source.rate == 321.0
    assert SCENARIO.job["j"].templates[0].operator["m"].cost_per_record == 3e-4  # the input is not changed


def test_mean_offered_rate_of_onoff_bursts():
    from strata.control.estimation import mean_offered_rates

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


def test_admitted_ingest_is_the_bottleneck_rate_divided_by_the_gain_in_front_of_it():
    from strata.plan.pacing import admitted_ingest

    # src 100 rec/s → f (selectivity 0.5, 1e-4 s/rec) → m (3e-4 s/rec) → out (no cpu: sinks never limit)
    # one core each: m processes 1 / 3e-4 = 3333 rec/s, fed at half the source rate: 6667 rec/s (above the offer)
    plenty = {"j.src": 1.0, "j.f": 1.0, "j.m": 1.0}
    assert admitted_ingest(SCENARIO, {"j": "t"}, plenty, {"j.src": 100.0}) == pytest.approx({"j.src": 20000 / 3})
    # f processes 1e-3 / 1e-4 = 10 rec/s of its input: 10 rec/s at the source
    tight_f = {**plenty, "j.f": 1e-3}
    assert admitted_ingest(SCENARIO, {"j": "t"}, tight_f, {"j.src": 100.0})["j.src"] == pytest.approx(10.0)
    # m processes 3e-3 / 3e-4 = 10 rec/s, which f feeds at half the source rate: 20 rec/s
    tight_m = {**plenty, "j.m": 3e-3}
    assert admitted_ingest(SCENARIO, {"j": "t"}, tight_m, {"j.src": 100.0})["j.src"] == pytest.approx(20.0)
    # the source itself (1e-5 s/rec) with 5e-4 cores: 50 rec/s; an offered rate under every capacity is kept
    assert admitted_ingest(SCENARIO, {"j": "t"}, {**plenty, "j.src": 5e-4}, {"j.src": 100.0})["j.src"] == pytest.approx(
        50.0
    )
    assert admitted_ingest(SCENARIO, {"j": "t"}, tight_m, {"j.src": 15.0})["j.src"] == pytest.approx(20.0)  # not 15


def test_rate_caps_hold_while_offered_load_or_backlog_exceeds_the_admitted_rate():
    from strata.plan.pacing import rate_caps

    admitted = {"a.s": 2420.0, "b.s": 400.0, "c.s": 1000.0, "d.s": 400.0}
    offered = {"a.s": 4500.0, "b.s": 460.0, "c.s": 900.0, "d.s": 420.0}
    # b: 15% over its rate (random arrivals, within tolerance); c: under its rate now but 5 s behind, so it
    # drains at the cap; d: within tolerance over its rate and 12 s behind: lifting the cap would read the
    # whole backlog in one batch, so it stays (the backlog is the Controller's shortfall signal)
    backlog = {"a.s": 0, "b.s": 100, "c.s": 5000, "d.s": 5000}
    caps = rate_caps(admitted, offered, backlog, catch_up_s=2.0, tolerance=0.2, step=50.0)
    assert caps == {"a.s": 2400.0, "b.s": None, "c.s": 1000.0, "d.s": 400.0}
    assert rate_caps(admitted, offered, {"c.s": 1999}, catch_up_s=2.0)["c.s"] is None  # under 2 s behind
    # with idle cores, a backlog drains faster while the offer is below the admitted rate (c), not otherwise (d)
    drain = {"a.s": 5000.0, "c.s": 2460.0, "d.s": 900.0}
    caps = rate_caps(admitted, offered, backlog, catch_up_s=2.0, drain=drain)
    assert caps == {"a.s": 2400.0, "b.s": None, "c.s": 2450.0, "d.s": 400.0}
    assert rate_caps({"a.s": 2399.9999999999854}, {}, {}) == {"a.s": 2400.0}  # a float sum's shortfall
    assert rate_caps({"a.s": 20.0}, {"a.s": 100.0}, {}, step=50.0) == {"a.s": 50.0}  # never below one step
    # nothing observed yet (the plan's first window): capped at the admitted rate from the first batch
    assert rate_caps(admitted, {"b.s": 460.0}, {}) == {"a.s": 2400.0, "b.s": None, "c.s": 1000.0, "d.s": 400.0}
    with pytest.raises(ValueError, match="tolerance"):
        rate_caps(admitted, offered, backlog, tolerance=1.5)


def test_observe_window_feeds_each_pe_its_records_output_and_busy_time():
    from strata.protocol.window import InstanceLoad, WindowStats

    window = WindowStats(
        now=2.0,
        start=0.0,
        key_groups=(),
        instances=(
            InstanceLoad("j.f", 0, "n", 300, 0.02, 0, 0),
            InstanceLoad("j.f", 1, "n", 100, 0.02, 0, 0),
        ),
        node_utilisation={},
        queue_lengths={},
        latency={},
        rates={"j.f": 100.0},  # 200 records out over the 2 s window
        ingest={},
        routing={},
        placement={},
        migrating=(),
        dropped={},
    )
    learner = ResourceLearner(decay=1.0, min_samples=1)
    learner.observe_window(window)
    e = learner.estimate("j.f")
    assert e.cost_per_record == pytest.approx(0.04 / 400)
    assert e.selectivity == pytest.approx(0.5)
