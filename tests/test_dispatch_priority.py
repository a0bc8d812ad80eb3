"""Cameo's priority math and cost profiling against hand-computed values (Xu et al., NSDI'21)."""

from __future__ import annotations

import pytest

from strata.dispatch import (
    CostProfile,
    LinearCost,
    ReplyContexts,
    critical_path,
    deadline,
    frontier,
    next_due,
    window_routes,
)


def test_deadline_is_latest_start_that_meets_the_target():
    # event at t=10, target 5 s, 0.5 s here, 2 s still to go downstream: start by 12.5
    assert deadline(10.0, 5.0, 0.5, 2.0) == pytest.approx(12.5)


WINDOWS = {"w1": (10.0, 10.0, 1.0), "w2": (60.0, 30.0, 0.0)}


def test_window_routes_find_the_windows_a_record_waits_for():
    # src → parse → w1 → out;  src → alert → out;  parse → w2 → out
    down = {
        "src": ("parse", "alert"),
        "parse": ("w1", "w2"),
        "alert": ("out",),
        "w1": ("out",),
        "w2": ("out",),
        "out": (),
    }
    routes = window_routes(down, WINDOWS)
    assert routes == {
        "src": (),
        "alert": (),
        "out": (),
        "parse": (WINDOWS["w1"], WINDOWS["w2"]),
        "w1": (WINDOWS["w1"],),
        "w2": (WINDOWS["w2"],),
    }


def test_window_routes_stop_at_the_nearest_window():
    down = {"a": ("w1",), "w1": ("w2",), "w2": ("out",), "out": ()}
    assert window_routes(down, WINDOWS) == {
        "a": (WINDOWS["w1"],),
        "w1": (WINDOWS["w1"],),
        "w2": (WINDOWS["w2"],),
        "out": (),
    }


@pytest.mark.parametrize(
    ("event_time", "t_mf"),
    [
        (3.0, 11.0),  # w1 [0, 10) fires at 11; w2 [-30, 30) at 30
        (10.5, 11.0),  # in w1's [10, 20), but it holds back the watermark that fires [0, 10) at 11
        (11.5, 21.0),
        (25.0, 30.0),  # w1's next firing is at 31, w2 [-30, 30) fires at 30: the earlier counts
    ],
)
def test_frontier_before_windows_is_the_first_firing_held_back(event_time, t_mf):
    waits = (WINDOWS["w1"], WINDOWS["w2"])
    assert frontier(event_time, event_time, waits) == pytest.approx(t_mf)
    assert frontier(event_time, 7.0, ()) == 7.0  # a direct route keeps the engine's frontier


@pytest.mark.parametrize(
    ("t", "timing", "due"),
    [
        (3.0, (10.0, 10.0, 0.0), 10.0),
        (10.0, (10.0, 10.0, 0.0), 10.0),  # the watermark reaching 10 fires [0, 10)
        (10.1, (10.0, 10.0, 0.0), 20.0),
        (23.0, (10.0, 5.0, 0.0), 25.0),  # sliding: firings at 20, 25, 30, ...
        (20.5, (10.0, 10.0, 2.0), 22.0),  # [10, 20) with 2 s of lateness fires at 22
    ],
)
def test_next_due_is_the_first_firing_at_or_after_the_event(t, timing, due):
    assert next_due(t, *timing) == pytest.approx(due)


def test_critical_path_takes_the_most_expensive_chain_to_the_sink():
    # src → a → c → out and src → b → out; costs a=1, b=5, c=2, out=0.5
    down = {"src": ("a", "b"), "a": ("c",), "b": ("out",), "c": ("out",), "out": ()}
    cost = {"src": 0.1, "a": 1.0, "b": 5.0, "c": 2.0, "out": 0.5}
    path = critical_path(down, cost)
    assert path == pytest.approx({"out": 0.0, "c": 0.5, "b": 0.5, "a": 2.5, "src": 5.5})


def test_moving_average_tracks_measurements_and_starts_from_the_prior():
    prof = CostProfile(alpha=0.5, prior={"op": 3.0})
    assert prof["op"] == 3.0 and not prof.observed("op")
    assert prof.observe("op", 2.0) == 2.0  # first measurement replaces the prior
    assert prof.observe("op", 4.0) == pytest.approx(3.0)
    assert prof.observe("op", 4.0) == pytest.approx(3.5)
    assert prof["unknown"] == 0.0


def test_alpha_out_of_range_is_rejected():
    with pytest.raises(ValueError, match="alpha"):
        CostProfile(alpha=0.0)


def test_reply_contexts_carry_costs_upstream_hop_by_hop():
    down = {"src": ("a",), "a": ("out",), "out": ()}
    replies = ReplyContexts(down, {"src": 0.0, "a": 1.0, "out": 1.0})
    assert replies.path("src") == pytest.approx(2.0)  # from the priors
    replies.report("out", 3.0, ())  # the sink got slower
    assert replies.path("src") == pytest.approx(2.0)  # not known upstream until a replies again
    assert replies.report("a", 1.0, ("out",)) == pytest.approx(3.0)
    assert replies.report("src", 0.0, ("a",)) == pytest.approx(4.0)
    assert replies.cost("out") == 3.0


def test_linear_cost_recovers_fixed_and_per_record_parts():
    model = LinearCost(decay=1.0)
    for size in (100, 400, 250, 1000):
        model.observe(size, 0.5 + 0.002 * size)
    fixed, per_record = model.coefficients()
    assert fixed == pytest.approx(0.5) and per_record == pytest.approx(0.002)
    assert model.predict(2000) == pytest.approx(4.5)


def test_linear_cost_with_one_size_is_proportional_and_forgets_old_batches():
    model = LinearCost(decay=0.5)
    assert model.predict(10) == 0.0
    model.observe(100, 1.0)
    assert model.coefficients() == pytest.approx((0.0, 0.01))
    for _ in range(40):  # the batch got three times slower per record
        model.observe(100, 3.0)
    assert model.predict(200) == pytest.approx(6.0, rel=1e-6)
