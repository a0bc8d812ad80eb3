"""The queueing model of strata.adapt.overload on cases with hand-computed answers, and the selector's use of it."""

import math
from dataclasses import replace

import pytest

from strata.adapt import Composition, FeatureTracker, Selector, overload
from strata.adapt.features import declared_rates
from strata.adapt.overload import (
    JobLoad,
    NodeLoads,
    PredictedScores,
    on_time_share,
    on_time_within,
    predicted_score,
    with_declared,
)
from strata.protocol.engine import InstanceLoad, KeyGroupLoad, LatencyStats, Observation
from tests.test_adapt_selector import obs, scenario


def test_md1_on_time_share_matches_the_exponential_tail_and_is_near_erlangs_exact_answer():
    # M/D/1: λ = 0.5/s, S = 1 s on one core, ρ = 0.5. Pollaczek–Khinchine: mean wait ρS / 2(1 − ρ) = 0.5 s.
    # Target S + ln 2: P(wait ≤ ln 2) ≈ 1 − ρ e^{−ρ ln 2 / 0.5} = 1 − 0.5 × 0.5 = 0.75.
    share = on_time_share([JobLoad("a", 0.5, 1.0, 1.0 + math.log(2))], 1.0, "arrival")["a"]
    assert share == pytest.approx(0.75)
    # Erlang's exact M/D/1 distribution for t < S: P(W ≤ t) = (1 − ρ) e^{λt} = 0.5 √2 = 0.7071.
    assert abs(share - 0.5 * math.sqrt(2)) < 0.05
    assert on_time_within(-0.1, 0.5, 0.5) == 0.0 and on_time_within(0.2, 0.0, 0.0) == 1.0


def test_under_overload_deadline_order_serves_overdue_work_last_and_keeps_the_short_job_as_shortest_first_does():
    # One core. urgent: 4/s × 50 ms (ρ 0.2), target 0.5 s; bulk: 10/s × 100 ms (ρ 1.0), target 10 s, 50 records
    # queued and all overdue. Total load 1.2.
    urgent = JobLoad("urgent", 4.0, 0.05, 0.5)
    bulk = JobLoad("bulk", 10.0, 0.1, 10.0, queued=50, overdue=1.0)
    sjf = on_time_share([urgent, bulk], 1.0, "shortest")
    # Shortest first: urgent sees only its own load (0.2) and no backlog. R = (4 × 0.05² + 10 × 0.1²) / 2 = 0.055;
    # mean wait R / (1 × 0.8) = 0.06875; slack 0.5 − 0.05 = 0.45: 1 − 0.2 e^{−0.2 × 0.45 / 0.06875} = 0.94599.
    assert sjf["urgent"] == pytest.approx(1 - 0.2 * math.exp(-0.2 * 0.45 / 0.06875))
    assert sjf["bulk"] == 0.0
    # Deadline order: bulk's overdue 5 s of work runs after every record that can still meet its deadline (select14;
    # before, first: the domino, urgent 0), so urgent sees only its own load too — the same 0.94599. bulk's own load
    # with urgent's ahead of it is 1.2 ≥ 1, but its arrivals still get the capacity urgent leaves, 0.8 of their load
    # 1.0, served while they can meet the deadline (select15; shortest first starves it: 0).
    deadline = on_time_share([urgent, bulk], 1.0, "deadline")
    assert deadline == {"urgent": sjf["urgent"], "bulk": pytest.approx((1 - 0.2) / (1.2 - 0.2))}
    # Not yet overdue, the same backlog (a looser target than urgent's) is not ahead of urgent's records either.
    assert on_time_share([urgent, replace(bulk, overdue=0.0)], 1.0, "deadline") == deadline
    # Without the overdue backlog and below overload, deadline order keeps both on time (bulk's target is loose).
    calm = on_time_share([urgent, JobLoad("bulk", 5.0, 0.1, 10.0)], 1.0, "deadline")
    assert calm["urgent"] > 0.9 and calm["bulk"] > 0.9
    with pytest.raises(ValueError, match="discipline"):
        on_time_share([urgent], 1.0, "lottery")


def test_fair_share_shelters_a_light_job_from_a_backlogged_one():
    # One core. light: 2/s × 0.1 s (ρ 0.2), target 1 s; heavy: 9/s × 0.1 s (ρ 0.9) with 100 records queued.
    light, heavy = JobLoad("light", 2.0, 0.1, 1.0), JobLoad("heavy", 9.0, 0.1, 1.0, queued=100)
    fair = on_time_share([light, heavy], 1.0, "fair")
    # light is the lower demand: nothing ahead of it, heavy competes at light's rate: own load 0.4; its fair share
    # 1/2 > 0.2 and no backlog of its own. R = (2 + 9) × 0.01 / 2 = 0.055, mean wait 0.055 / 0.6; slack 0.9.
    assert fair["light"] == pytest.approx(1 - 0.4 * math.exp(-0.4 * 0.9 / (0.055 / 0.6)))
    assert fair["heavy"] == 0.0  # its load with light's ahead is 1.1
    # First come first served: light queues behind heavy's backlog and the node is over 1: nothing is on time.
    assert on_time_share([light, heavy], 1.0, "arrival") == {"light": 0.0, "heavy": 0.0}


def test_over_a_horizon_a_draining_backlog_recovers_and_a_growing_one_does_not():
    # One class at ρ 0.5 (5/s × 0.1 s, one core), 50 records queued: 5 s of work draining at 0.5 → 10 s.
    # Target 1.1 s: an arrival now waits 10 s (0); one at t ≥ 9 s is on time with probability ≥ 1 − ρ = 0.5.
    job = JobLoad("a", 5.0, 0.1, 1.1, queued=50)
    assert on_time_share([job], 1.0, "arrival")["a"] == 0.0
    # Over 20 s, 16 arrival times (k + 0.5) × 20 / 16: the 9 from 9.375 s on count, each between 0.5 and 1.
    share = on_time_share([job], 1.0, "arrival", horizon=20.0)["a"]
    assert 9 * 0.5 / 16 <= share <= 9 / 16
    # At ρ ≥ 1 nothing drains, however long the horizon.
    assert on_time_share([JobLoad("a", 10.0, 0.1, 1.1, queued=50)], 1.0, "arrival", horizon=20.0)["a"] == 0.0


def test_arrivals_after_the_backlog_has_drained_wait_for_none_of_it():
    # One class at ρ 0.5 (5/s × 0.1 s, one core), 10 records queued: 1 s of work draining at 0.5 → 2 s. Slack
    # 2.0 s, mean wait R / (1 − ρ) = (5 × 0.01 / 2) / 0.5 = 0.05 s. Over 4 s the 16 arrival times are 0.125 …
    # 3.875 s: one at t < 2 s has t of slack left (1 − 0.5 e^{−10 t}), the 8 after 2 s all of it (1 − 0.5 e^{−20}).
    job = JobLoad("a", 5.0, 0.1, 2.1, queued=10)
    times = [4.0 * (k + 0.5) / 16 for k in range(16)]
    expected = sum(1 - 0.5 * math.exp(-10 * (t if t < 2 else 2.0)) for t in times) / 16
    assert on_time_share([job], 1.0, "arrival", horizon=4.0)["a"] == pytest.approx(expected)
    # Each call's answer is the caller's own: changing one does not change the next (the shares are memoised).
    first = on_time_share([job], 1.0, "arrival", horizon=4.0)
    first["a"] = -1.0
    assert on_time_share([job], 1.0, "arrival", horizon=4.0)["a"] == pytest.approx(expected)


def test_predicted_scores_are_computed_only_when_read_and_equal_predicted_score(monkeypatch):
    loads, cores = hazard(), {"n0": 2.0}
    what_if = with_declared(loads, {"a": 100.0}, 2.5)
    read: list[str] = []
    real = overload.predicted_score

    def counted(loads, cores, block, min_rate, horizon):
        read.append(block)
        return real(loads, cores, block, min_rate, horizon)

    monkeypatch.setattr(overload, "predicted_score", counted)
    scores = PredictedScores(("llf", "sjf", "fair"), what_if, cores, 2.5, 2.0)
    assert list(scores) == ["llf", "sjf", "fair"] and len(scores) == 3 and read == []
    assert scores["sjf"] == scores.get("sjf") == real(what_if, cores, "sjf", 2.5, 2.0) > 0.4
    assert read == ["sjf"]  # once, however often read
    assert scores.get("fifo") is None and "fifo" not in scores  # not a block it scores
    assert dict(scores) == {v: real(what_if, cores, v, 2.5, 2.0) for v in ("llf", "sjf", "fair")}
    assert read == ["sjf", "llf", "fair"]


def test_node_loads_count_what_is_offered_and_skip_free_operators_and_lost_nodes():
    nl = NodeLoads({"a.src": "a", "a.f": "a", "b.f": "b"}, {"a": 1.0, "b": 2.0}, {"n0": 2.0, "n1": 2.0})
    first = [
        InstanceLoad("a.src", 0, "n0", 120, 0.0, 0, 0),  # a source: records in no time, not work
        InstanceLoad("a.f", 0, "n0", 100, 2.0, 10, 0),  # 100 done + 10 more queued than before: 110 arrived
        InstanceLoad("b.f", 0, "n1", 50, 1.0, 0, 0),
    ]
    late = {"a": LatencyStats(100, 0.1, 0.5, 0.9, 1.5, 0.25)}
    loads = nl.update(obs(5.0, instances=first, ingest={"a.src": 24.0}, latency=late))
    assert loads["n0"] == [JobLoad("a", 110 / 5, 0.02, 1.0, 10, 1.0, 0.25)]
    assert loads["n1"] == [JobLoad("b", 10.0, 0.02, 2.0, 0, 1.0, 0.0)]
    # Next window: a processed nothing (its last service time holds), its queue grew by 5; n1 is lost.
    second = [InstanceLoad("a.f", 0, "n0", 0, 0.0, 15, 0), InstanceLoad("b.f", 0, "n1", 0, 0.0, 3, 0)]
    loads = nl.update(Observation(obs(10.0, instances=second, ingest={"a.src": 1.0}).window, frozenset({"n1"})))
    assert loads == {"n0": [JobLoad("a", 1.0, 0.02, 1.0, 15, 1.0, 1.0)]}  # a queue and no output: all overdue
    # A job arriving below the score's floor loads the node but is not scored.
    assert predicted_score(loads, {"n0": 2.0}, "llf", min_rate=2.0) is None


def test_skew_is_judged_on_the_work_offered_not_on_the_backlog_processed():
    # A keyed job trickles (0.1 rec/s) while its backlog is processed: its skew must not count (it would move with
    # the dispatch in force); once it is offered most of the work, it does.
    tr = FeatureTracker(job_of={"k.src": "k", "k.w": "k", "m.src": "m", "m.w": "m"})
    inst = [InstanceLoad("k.w", 0, "n0", 100, 4.0, 0, 4), InstanceLoad("m.w", 0, "n0", 100, 1.0, 0, 0)]
    kgs = [KeyGroupLoad("k.w", g, 0, 25, b, 0.0) for g, b in enumerate([2.5, 0.5, 0.5, 0.5])]
    trickle = obs(5.0, instances=inst, ingest={"k.src": 0.1, "m.src": 20.0}, key_groups=kgs)
    assert tr.update(trickle).skew == 1.0
    offered = obs(10.0, instances=inst, ingest={"k.src": 20.0, "m.src": 20.0}, key_groups=kgs)
    assert tr.update(offered).skew == pytest.approx(2.5)


def test_the_model_switches_dispatch_only_as_far_as_it_has_predicted_what_ran():
    cands = [Composition("llf"), Composition("sjf")]
    sel = Selector(scenario(), cands)
    sel._foreseen = {"llf": 0.0, "sjf": 0.5}
    # Two windows on which the model was off by 0.05 (rms 0.05): a predicted gain of 0.5 clears 1 × 0.05 + 0.01.
    for err in (0.05, -0.05):
        sel.model_error.add(err)
    # While a change is unconfirmed the default runs unless a block is predicted to beat it by more than the error:
    # of several, the largest gain; none within the error.
    assert sel._model_pick("llf", {"llf": 0.0, "sjf": 0.5, "fair": 0.3}) == "sjf"
    assert sel._model_pick("llf", {"llf": 0.0, "sjf": 0.05}) is None
    # A switch on the prediction alone waits until it has put sjf ahead in ``persist`` (3) windows in a row.
    sel._ahead = ("sjf", 2)
    sel._adopt()
    assert sel.segment.incumbent == Composition("llf") and sel.model_switches == 0
    sel._ahead = ("sjf", 3)
    sel._adopt()
    assert sel.segment.incumbent == Composition("sjf") and sel.model_switches == 1 and sel._ahead is None
    # The prediction is filed as one sample of sjf's effect; re-based on sjf, llf's is its negation.
    assert sel.segment.credit.effects[0]["llf"].mean == pytest.approx(-0.5)
    # The model's error restarts with the new incumbent: until it has predicted it twice, no further switch.
    sel._foreseen = {"llf": 0.9, "sjf": 0.0}
    sel._adopt()
    assert sel.segment.incumbent == Composition("sjf")
    # A model off by 0.6 on what ran is not trusted with a predicted gain of 0.5; nor is one never checked.
    other = Selector(scenario(), cands)
    other._foreseen = {"llf": 0.0, "sjf": 0.5}
    assert other._model_pick("llf", other._foreseen) is None
    for err in (0.6, -0.6):
        other.model_error.add(err)
    assert other._model_pick("llf", other._foreseen) is None
    # Without the model the rule is the measured one alone.
    blind = Selector(scenario(), cands, model=False)
    blind._foreseen = {"llf": 0.0, "sjf": 0.5}
    for err in (0.0, 0.0):
        blind.model_error.add(err)
    blind._adopt()
    assert blind.segment.incumbent == Composition("llf")


def test_node_loads_see_the_dispatch_queue_at_sources_and_do_not_count_a_drained_backlog_as_arrivals():
    # Records a source has yet to pass on wait for a core as the job's own do; a job none of whose records has had a
    # turn yet (b) is a class all the same, at its declared service time until one is measured.
    nl = NodeLoads(
        {"a.src": "a", "a.f": "a", "b.src": "b", "b.f": "b"},
        {"a": 1.0, "b": 2.0},
        {"n0": 2.0},
        sources={"a.src": "a", "b.src": "b"},
        costs={"a": 0.03, "b": 0.1},
    )

    def window(now, *per_pe):  # (records, busy core-seconds, queued) of a.src, a.f, b.src, b.f in turn
        pes = ("a.src", "a.f", "b.src", "b.f")
        return obs(
            now, instances=[InstanceLoad(pe, 0, "n0", r, b, q, 0) for pe, (r, b, q) in zip(pes, per_pe, strict=True)]
        )

    loads = nl.update(window(5.0, (100, 0.0, 40), (100, 2.0, 10), (0, 0.0, 30), (0, 0.0, 0)))
    # a: 100 done + 10 + 40 more queued = 150 in 5 s; 0.02 s measured; 50 queued. b: 30 in, all queued, 0.1 s.
    assert loads["n0"] == [JobLoad("a", 30.0, 0.02, 1.0, 50, 1.0, 1.0), JobLoad("b", 6.0, 0.1, 2.0, 30, 1.0, 1.0)]
    loads = nl.update(window(10.0, (60, 0.0, 0), (110, 2.2, 0), (50, 0.0, 0), (50, 4.0, 0)))
    # Conservation: a processed 110 while its queues shrank by 50, so 60 arrived (12/s, not the 22/s it drained);
    # b processed 50 while 30 of them were queued before: 20 arrived; its service is now measured (0.08 s).
    assert loads["n0"] == [JobLoad("a", 12.0, 0.02, 1.0, 0, 1.0, 0.0), JobLoad("b", 4.0, 0.08, 2.0, 0, 1.0, 0.0)]


def hazard():
    """n0 (2 cores): job b with 300 records of 40 ms just queued (6 s of the node, none overdue yet) and 0.8 of its
    cores in arrivals; job a, 1 ms records, trickling (0.1/s, below a 5-record floor over 2 s)."""
    return {"n0": [JobLoad("a", 0.1, 0.001, 1.0), JobLoad("b", 40.0, 0.04, 1.0, queued=300)]}


def test_the_what_if_of_idle_jobs_at_their_declared_rate_tells_apart_orders_the_workload_now_cannot():
    assert declared_rates(scenario()) == {"a": 100.0, "b": 100.0}
    loads, cores = hazard(), {"n0": 2.0}
    what_if = with_declared(loads, {"a": 100.0, "b": 100.0}, min_rate=2.5)
    # a arrives at its declared 100/s (one node); b, arriving, as measured; every backlog as measured.
    assert what_if["n0"][0] == JobLoad("a", 100.0, 0.001, 1.0)
    assert what_if["n0"][1] == loads["n0"][1]
    # Now only b is scored, late under every order (its backlog of 6 s outlasts its 1 s target): a tie at 0.
    assert {v: predicted_score(loads, cores, v, 2.5) for v in ("llf", "sjf")} == {"llf": 0.0, "sjf": 0.0}
    # Should a start: deadline order serves b's backlog first (a's target is b's, and b's records came first: earlier
    # deadlines; a: 0 on time), shortest-first serves a's
    # 1 ms records ahead of it: a on time but for its Cobham wait, 1 − 0.05 e^{−0.05 × 0.999 / W} with
    # W = R / 0.95 and R = (100 × 0.001² + 40 × 0.04²) / (2 × 2²) = 0.0080125 s: 0.999866; b late either way.
    assert predicted_score(what_if, cores, "llf", 2.5) == 0.0
    w = 0.0080125 / 0.95
    assert predicted_score(what_if, cores, "sjf", 2.5) == pytest.approx((1 - 0.05 * math.exp(-0.05 * 0.999 / w)) / 2)
    # A job arriving above the floor is as measured, and a job declared nowhere stays idle.
    assert with_declared(loads, {}, 2.5) == loads and with_declared(loads, {"a": 100.0}, 0.05) == loads


def test_orders_never_told_apart_on_the_workload_are_hedged_on_the_what_if():
    # Arrival order serves b's backlog first (6 s of it, ahead of a's records should a start: a 0 on time, b 0);
    # shortest first serves a's ahead of it (0.49993, as above).
    cands = [Composition("fifo"), Composition("sjf")]

    def hedged(sel, told_apart=()):
        sel._loads, sel._cores, sel._min_rate, sel._span = hazard(), {"n0": 2.0}, 2.5, 2.0
        sel._foreseen = {v: 0.0 for v in ("fifo", "llf", "sjf")}
        sel._told_apart = set(told_apart)
        for err in (0.05, -0.05):
            sel.model_error.add(err)
        sel._adopt()
        return sel.segment.incumbent

    for told_apart, hedge, incumbent in (
        (set(), True, Composition("sjf")),  # tied so far: sjf is confidently better should a start
        ({"sjf"}, True, Composition("fifo")),  # the model once predicted them apart: the workload decides
        (set(), False, Composition("fifo")),  # no hedging
    ):
        sel = Selector(scenario(), cands, hedge=hedge)
        assert hedged(sel, told_apart) == incumbent and sel.hedge_switches == int(incumbent.dispatch == "sjf")
    # A deadline order serves overdue work last (select14): the what-if puts b's 6 s backlog, not yet overdue, ahead
    # of a's records (0 on time), but within b's 1 s target it is overdue and runs after them — no backlog outlasts
    # the switch, the hazard hedged against — and the order is kept.
    deadline = Selector(scenario(), [Composition("llf"), Composition("sjf")])
    assert hedged(deadline) == Composition("llf") and deadline.hedge_switches == 0
    # A measured effect outweighs the what-if: sjf measured no better here is not hedged to.
    sel = Selector(scenario(), cands)
    sel.segment.credit.record(0, "sjf", -0.1, 0.01)
    assert hedged(sel) == Composition("fifo")
