"""Features, the window score and the selector on synthetic windows with known answers."""

import pytest

from strata.adapt import (
    ChangeDetector,
    Composition,
    Features,
    FeatureTracker,
    Fixed,
    Selector,
    window_score,
    yields,
)
from strata.adapt.features import learning_reward, unit_costs
from strata.adapt.selector import predicted_winner
from strata.model import Scenario
from strata.protocol.engine import InstanceLoad, KeyGroupLoad, LatencyStats, Observation, WindowStats


def scenario(selectivity=1.0):
    return Scenario.model_validate(
        {
            "name": "s",
            "cluster": {"nodes": [{"name": "n0", "cores": 2}]},
            "jobs": [
                {
                    "id": jid,
                    "rank": 1,
                    "target_latency_s": 1.0,
                    "templates": [
                        {
                            "operators": [
                                {"name": "src", "kind": "source", "source": {"rate": 100}},
                                {"name": "f", "kind": "filter", "selectivity": selectivity},
                                {"name": "sink", "kind": "sink"},
                            ],
                            "streams": [{"from": "src", "to": "f"}, {"from": "f", "to": "sink"}],
                        }
                    ],
                }
                for jid in ("a", "b")
            ],
        }
    )


def obs(now, *, ingest=None, latency=None, instances=(), key_groups=()):
    w = WindowStats(
        now=now,
        start=now - 5.0,
        key_groups=tuple(key_groups),
        instances=tuple(instances),
        node_utilisation={},
        queue_lengths={},
        latency=latency or {},
        rates={},
        ingest=ingest or {},
        routing={},
        placement={},
        migrating=(),
        dropped={},
    )
    return Observation(w)


def test_window_score_counts_late_and_missing_outputs():
    # a: 100 rec/s × 5 s = 500 expected, 400 out of which 25% late → 300 on time → 0.6.
    # b: 500 expected, nothing out at all → 0. Mean 0.3.
    o = obs(5.0, ingest={"a.src": 100.0, "b.src": 100.0}, latency={"a": LatencyStats(400, 0.1, 0.5, 0.9, 1.5, 0.25)})
    sources = {"a.src": "a", "b.src": "b"}
    assert window_score(o, {"a": 1.0, "b": 1.0}, sources) == pytest.approx(0.3)
    assert window_score(obs(5.0, ingest={"a.src": 0.0}), {"a": 1.0}, sources) is None
    assert yields(scenario(0.5)) == {"a": pytest.approx(0.5), "b": pytest.approx(0.5)}


def test_features_known_answers_and_the_skew_of_a_trickle():
    tr = FeatureTracker(history=2)
    inst = [InstanceLoad("a.f", 0, "n0", 100, 0.5, 0, 0), InstanceLoad("a.f", 1, "n0", 300, 1.5, 0, 0)]
    kgs = [KeyGroupLoad("a.k", g, 0, 10, b, 0.0) for g, b in enumerate([4.0, 1.0, 1.0, 1.0, 1.0])]
    tr.update(obs(5.0, ingest={"a.src": 100.0}))
    f = tr.update(obs(10.0, ingest={"a.src": 300.0}, instances=inst, key_groups=kgs))
    assert f.unit_s == pytest.approx(2.0 / 400)
    assert f.burstiness == pytest.approx(0.5)  # std 100 / mean 200
    assert f.skew == pytest.approx(4.0 / 1.6)
    # Keyed work 0.08 of 2.0 busy core-seconds (< 10%): one hot group in a trickle is no skew.
    trickle = [KeyGroupLoad("a.k", g, 0, 1, b, 0.0) for g, b in enumerate([0.08, 0.0, 0.0, 0.0])]
    assert tr.update(obs(15.0, ingest={"a.src": 300.0}, instances=inst, key_groups=trickle)).skew == 1.0


def test_change_detector_needs_two_windows_away_and_ignores_a_spike():
    d = ChangeDetector(threshold=0.5, confirm=2)
    fine, coarse = Features(0.001, 0.0, 1.0), Features(0.05, 0.0, 1.0)  # log10 unit sizes −3 and −1.3
    assert [d.update(f) for f in (fine, fine, Features(0.001, 0.0, 20.0), fine)] == [False] * 4  # one spike
    assert [d.update(f) for f in (coarse, coarse)] == [False, True]
    assert d.previous == pytest.approx([-3.0, 0.0]) and d.centroid == pytest.approx([-1.30103, 0.0])
    assert not d.update(Features(0.0, 0.0, 1.0))  # nothing processed: no measurement


def test_learning_reward_credits_the_share_of_a_backlog_drained():
    assert learning_reward(0.0, 1000, 600) == pytest.approx(0.4)
    assert learning_reward(0.5, 1000, 0) == pytest.approx(1.0)
    assert learning_reward(0.5, 1000, 1500) == pytest.approx(0.5)  # a growing backlog adds nothing
    assert learning_reward(0.7, 0, 0) == pytest.approx(0.7)


def test_fixed_scores_the_same_way():
    sc = scenario()
    f = Fixed(sc, Composition("edf"))
    for step in range(3):
        o = obs(5.0 * (step + 1), ingest={"a.src": 100.0}, latency={"a": LatencyStats(500, 0.1, 0.2, 0.3, 0.4, 0.5)})
        assert f.select(o) == Composition("edf")
    assert [c.reward for c in f.choices] == [0.5, 0.5, None]


def test_a_horizon_sums_outputs_over_windows_as_micro_batches_commit():
    sc = scenario()
    lat = {"a": LatencyStats(500, 0.1, 0.2, 0.3, 0.4, 0.0)}
    windows = [obs(5.0), obs(10.0, ingest={"a.src": 100.0}), obs(15.0, ingest={"a.src": 100.0}, latency=lat)]
    scores = {}
    for horizon in (1, 2):
        f = Fixed(sc, Composition("edf"), horizon=horizon)
        for o in windows:
            f.select(o)
        scores[horizon] = [c.reward for c in f.choices[:2]]
    # 500 expected per window. Alone: nothing committed (0), then 500 on time (1). Summed over 2 windows: 500 of
    # 1000 expected (0.5).
    assert scores[1] == [0.0, 1.0]
    assert scores[2] == [0.0, 0.5]


def window(sel, step, miss, unit=0.001, ran=None):
    """One 5-second window of job a (500 records, ``miss`` of them late) at ``unit`` s per record."""
    o = obs(
        5.0 * (step + 1),
        ingest={"a.src": 100.0},
        latency={"a": LatencyStats(500, 0.1, 0.2, 0.3, 0.4, miss)},
        instances=[InstanceLoad("a.f", 0, "n0", 100, 100 * unit, 0, 0)],
    )
    return sel.select(o, ran)


def play(sel, phases, reward):
    """Run ``phases`` (a unit size per window); the window that just ended ran the last choice."""
    chosen, picks = None, []
    for step, unit in enumerate(phases):
        miss = 1.0 - reward(chosen, unit) if chosen is not None else 0.5
        chosen = window(sel, step, miss, unit)
        picks.append(chosen)
    return picks


def test_the_default_is_kept_while_no_trial_wins_by_more_than_its_noise():
    # Every composition scores the same: trials find no gain, the default (the levels' own) stays in force.
    cands = [Composition("llf"), Composition("edf"), Composition("fair"), Composition("edf", "off")]
    sel = Selector(scenario(), cands)
    picks = play(sel, [0.001] * 40, lambda c, u: 0.8)
    assert sel.segment.incumbent == Composition() == Composition("edf", "threshold", "planner")
    trials = [p for p in picks if p != Composition()]
    # The model predicts no order better on one job (``away``): only balancing is tried.
    assert set(trials) == {Composition("edf", "off")}
    # Bounded exploration: trial windows never exceed 20% of the windows run.
    assert 0 < len(trials) <= 0.2 * len(picks)
    assert sel.budget.spent == len(trials)


def test_a_level_is_credited_by_its_own_effect_and_the_incumbent_moves_one_level_at_a_time():
    # Reward = 0.5 + 0.3 if dispatch is fair + 0.1 if balancing is off: the effects add; the best is fair/off.
    cands = [Composition(d, b) for d in ("llf", "fair") for b in ("threshold", "off")]

    def reward(c, unit):
        return 0.5 + 0.3 * (c.dispatch == "fair") + 0.1 * (c.balancing == "off")

    # The synthetic rewards are no queueing outcome (one job: the model would say the dispatch order cannot matter):
    # measured credit alone.
    sel = Selector(scenario(), cands, explore=0.5, blocks_prior=(), model=False)
    play(sel, [0.001] * 40, reward)
    assert sel.segment.incumbent == Composition("fair", "off")
    # Each level's effect was measured with the other held: dispatch fair +0.3 (re-based: llf −0.3 from fair).
    credit = sel.segment.credit.effects
    assert credit[0]["llf"].mean == pytest.approx(-0.3)
    assert credit[1]["threshold"].mean == pytest.approx(-0.1)


def test_a_new_workload_starts_from_the_default_and_a_returning_one_resumes_its_incumbent():
    good = {0.001: Composition("llf"), 0.1: Composition("fair")}
    cands = [Composition("llf"), Composition("fair")]
    sel = Selector(scenario(), cands, explore=0.3, n_min=1, model=False)  # measured credit alone, one sample
    picks = play(sel, [0.001] * 20 + [0.1] * 30 + [0.001] * 20, lambda c, u: 1.0 if c == good[u] else 0.2)
    # Step 20, the first coarse window, lies away from the segment: the default runs while the change is unconfirmed.
    # Step 21 confirms it; the two confirming windows ran the default, the new segment's baseline: fair is tried at
    # once, and adopted on its gain bracketed by the default's windows before and after it.
    assert picks[20:23] == [Composition("llf"), Composition("fair"), Composition("llf")]
    assert all(p == Composition("fair") for p in picks[23:50])
    # Back to the fine workload: the default while unconfirmed (step 50), then its stored segment resumes with llf.
    assert all(p == Composition("llf") for p in picks[50:])
    assert [c.context for c in sel.choices[49:52]] == [1, 1, 2] and len(sel.stored) == 1
    coarse = sel.stored[0]
    assert coarse.incumbent == Composition("fair")
    assert coarse.credit.effects[0]["llf"].mean == pytest.approx(-0.8)  # re-based on fair when it was adopted


def test_a_resumed_segments_baseline_holds_only_the_windows_its_incumbent_ran():
    good = {0.001: Composition("llf"), 0.1: Composition("fair")}
    cands = [Composition("llf"), Composition("fair")]
    sel = Selector(scenario(), cands, explore=0.3, model=False)
    play(sel, [0.001] * 20 + [0.1] * 30 + [0.001] * 2, lambda c, u: 1.0 if c == good[u] else 0.2)
    # Of the two windows that confirmed the return to the fine workload, the first ran the coarse segment's fair
    # (0.2), the second the default llf (1.0): the resumed segment's incumbent, llf, is credited with its own only.
    assert sel.segment.incumbent == Composition("llf")
    assert list(sel._recent) == [1.0]


def test_a_lookahead_decides_without_live_trials_and_is_asked_once_per_segment():
    cands = [Composition("llf"), Composition("edf"), Composition("fair"), Composition("llf", "off")]
    asked = []

    def lookahead(comps, windows):
        asked.append(list(comps))
        # The same arrivals on every fork: fair wins every window by 0.3, edf loses by 0.1.
        return {c: [{"llf": 0.5, "edf": 0.4, "fair": 0.8}[c.dispatch]] * windows for c in comps}

    sel = Selector(scenario(), cands, lookahead=lookahead, explore=0.0)
    picks = play(sel, [0.001] * 6, lambda c, u: 0.8 if c.dispatch == "fair" else 0.5)
    # Dispatch alternatives only: a balancing mode acts over windows, beyond a short fork.
    assert asked == [[Composition("edf"), Composition("fair"), Composition("llf")]]  # the default edf first
    assert picks == [Composition("fair")] * 6
    assert sel.budget.spent == 0


def test_a_declined_lookahead_is_asked_again_and_teaches_nothing():
    calls = []

    def declined(comps, windows):
        calls.append(len(comps))

    sel = Selector(scenario(), [Composition("llf"), Composition("fair")], lookahead=declined, explore=0.0)
    play(sel, [0.001] * 3, lambda c, u: 0.5)
    assert calls == [2, 2, 2] and sel.lookahead_calls == 0
    assert sel.segment.credit.effects == [{}, {}, {}]


def test_windows_without_evidence_keep_the_composition_and_teach_nothing():
    sc = scenario()
    cands = [Composition("llf"), Composition("fifo"), Composition("edf")]
    sel = Selector(sc, cands, horizon=2, explore=0.5)
    lat = {"a": LatencyStats(500, 0.1, 0.2, 0.3, 0.4, 0.0)}
    # Three windows with no input (no score), then a first scored window whose 2-window horizon still holds one
    # without: none is evidence, so the default is kept, no trial starts and nothing is filed.
    for step in range(4):
        ingest = {"a.src": 100.0} if step == 3 else None
        assert sel.select(obs(5.0 * (step + 1), ingest=ingest, latency=lat if ingest else None)) == Composition()
    assert sel.segment.noise.n == 0 and sel.budget.spent == 0


def test_a_window_is_filed_under_the_composition_that_ran_not_the_choice_not_yet_enacted():
    cands = [Composition("llf", "threshold", "planner"), Composition("llf", "threshold", "greedy")]
    for ran, filed in ((cands[0], 4), (None, 1)):
        sel = Selector(scenario(), cands, explore=0.0)
        window(sel, 0, 0.0, ran=cands[0])
        for step in range(1, 4):
            sel.choices[-1].arm = 1  # greedy chosen; the plan in force is still the planner's
            window(sel, step, 0.0, ran=ran)
        # Told what ran, every window is the incumbent's; without, the last choice (greedy) is taken to have run,
        # and its windows are neither the incumbent's nor a trial's.
        assert sel.segment.noise.n == filed
        assert sel.segment.credit.effects == [{}, {}, {}]


def test_the_unit_size_is_the_workloads_whatever_the_schedule_processed():
    # Job a (1 ms per record) and b (100 ms) each ingest 100 records/s. One window processes mostly a's records, the
    # next mostly b's (as shortest-first, then deadline order, might): the processed mix moves by 30×, the unit
    # size offered does not: (100 × 0.001 + 100 × 0.1) / 200 = 0.0505 s.
    tr = FeatureTracker(job_of={"a.src": "a", "a.f": "a", "b.src": "b", "b.f": "b"})
    ingest = {"a.src": 100.0, "b.src": 100.0}
    units = []
    for a_records, b_records in ((990, 10), (10, 990), (1000, 0)):
        inst = [
            InstanceLoad("a.f", 0, "n0", a_records, a_records * 0.001, 0, 0),
            InstanceLoad("b.f", 0, "n0", b_records, b_records * 0.1, 0, 0),
        ]
        units.append(tr.update(obs(5.0, ingest=ingest, instances=inst)).unit_s)
    # The third window processed none of b's records: b's last measured size stands in.
    assert units == pytest.approx([0.0505] * 3)
    # Without the job map every PE is one job: the processed mix.
    mix = FeatureTracker().update(obs(5.0, ingest=ingest, instances=[InstanceLoad("a.f", 0, "n0", 990, 0.99, 0, 0)]))
    assert mix.unit_s == pytest.approx(0.001)


def test_unit_costs_are_each_operators_cost_per_source_record():
    # src → f (1e-5 core-s per record, selectivity 0.5) → sink (1e-5 per record, offered half of them).
    assert unit_costs(scenario(0.5)) == {"a": pytest.approx(1.5e-5), "b": pytest.approx(1.5e-5)}


def test_a_new_workload_starts_from_the_default_whatever_ran_before():
    # The stored segment's incumbent was sjf; an unseen workload starts from the default (llf, the first candidate):
    # while its change was unconfirmed the default ran (one window's loads are one draw, no evidence).
    sel = Selector(scenario(), [Composition("llf"), Composition("sjf")])
    sel.segment.incumbent = Composition("sjf")
    sel._enter([-3.0, 0.0], [-1.0, 0.0])
    assert sel.segment.incumbent == Composition("llf") and sel.stored[0].incumbent == Composition("sjf")


def first_trial(sel: Selector, errors, foreseen: dict[str, float]) -> Composition:
    """The composition ``sel`` tries first with a budget of 10 windows, the incumbent scoring 0.5 in its last two,
    the model's score errors ``errors`` and its predictions over the horizon ``foreseen``."""
    sel.budget.windows = 10
    sel._recent.extend([0.5, 0.5])
    for err in errors:
        sel.model_error.add(err)
    sel._foreseen = foreseen
    sel._start_trial()
    return sel._trial[2]


def test_a_dispatch_block_predicted_to_tie_is_left_untried_only_when_the_model_is_confident_of_it():
    # The incumbent runs llf, not the default's edf: ``away`` does not hold the trial back.
    cands = [Composition("llf"), Composition("edf"), Composition("llf", "off")]
    for errors, edf, trial in (
        ((0.4, -0.4), 0.5, Composition("edf")),  # off by 0.4: a predicted tie is no confident one; dispatch first
        ((0.4, -0.4), 0.6, Composition("edf")),  # nor is a predicted gain of 0.1
        ((0.004, -0.004), 0.5, Composition("llf", "off")),  # 0 + 1 × 0.004 ≤ 0.01: confidently no better
        ((0.004, -0.004), 0.6, Composition("edf")),
    ):
        sel = Selector(scenario(), cands, default=Composition("edf"), explore=0.5)
        sel.segment.incumbent = Composition("llf")
        assert first_trial(sel, errors, {"llf": 0.5, "edf": edf}) == trial


def test_a_trials_cost_is_measured_and_a_level_whose_trials_do_not_pay_back_is_not_tried():
    # fair scores 0.3 where the incumbent llf scores 0.8: its one-window trial finds no gain (−0.5 on the incumbent's
    # windows around it) and costs 0.5 (its window 0.5 below the level before) plus the transient it leaves, charged
    # over the incumbent's next 4 windows: here llf scores 0.6 in the first two after it (0.2 + 0.2 more).
    ran = []

    def reward(c, unit):
        ran.append(c.dispatch)
        return 0.3 if c.dispatch == "fair" else 0.6 if "fair" in ran[-3:-1] else 0.8

    sel = Selector(scenario(), [Composition("llf"), Composition("fair")], explore=0.5, n_min=1, model=False)
    play(sel, [0.001] * 12, reward)
    assert sel.explored[0] == [(0.0, pytest.approx(0.9))]
    # Found, it is the gain: fair scores 0.9 (+0.1, noiseless) and is adopted; its trial window cost −0.1 (it gained
    # while it ran), the incumbent's window after it 0, and the 3 windows left of the transient, fair's, −0.1 each.
    sel = Selector(scenario(), [Composition("llf"), Composition("fair")], explore=0.5, n_min=1, model=False)
    play(sel, [0.001] * 12, lambda c, u: 0.9 if c.dispatch == "fair" else 0.8)
    assert sel.segment.incumbent == Composition("fair")
    assert sel.explored[0] == [(pytest.approx(0.1), pytest.approx(-0.4))]
    cands = [Composition("llf"), Composition("fair"), Composition("llf", "off")]
    for record, now, trial in (
        ([(0.0, 0.4), (0.0, 0.2)], 100.0, Composition("llf", "off")),  # dispatch trials never found a gain
        ([(0.25, 0.5), (0.0, 0.5)], 15.0, Composition("llf", "off")),  # found 0.125 a window: 3 windows repay 0.375
        ([(0.25, 0.5), (0.0, 0.5)], 25.0, Composition("fair")),  # 5 windows repay 0.625: dispatch is tried first
    ):
        sel = Selector(scenario(), cands, explore=0.5, n_min=1, model=False)
        sel.budget.windows, sel._now, sel._span = 10, now, 5.0
        sel._recent.extend([0.5, 0.5])
        sel.explored[0] = record
        sel._start_trial()
        assert sel._trial[2] == trial


def test_the_models_error_leaves_out_windows_another_levels_trial_ran_or_left():
    # The model predicts dispatch blocks only. A window run under the incumbent's dispatch but another balancing
    # mode (a balancing trial) is no sample of its error, nor are the incumbent's windows after such a trial (the
    # one that brackets it, and those of the transient charged to its cost: migrations the trial started); the
    # incumbent's own windows, and those after a dispatch trial, are. No trial starts by itself (explore 0): the
    # windows' compositions are given.
    inc, other = Composition("llf"), Composition("llf", "off")
    sel = Selector(scenario(), [inc, other], explore=0.0)
    window(sel, 0, 0.0)
    predicted = sel._predicted["llf"]
    assert predicted is not None
    window(sel, 1, 0.2, ran=other)
    assert sel.model_error.n == 0
    window(sel, 2, 0.2, ran=inc)
    assert sel.model_error.n == 1 and sel.model_error.mean == pytest.approx(0.8 - predicted)
    for level, counted in ((1, 0), (0, 1)):
        n = sel.model_error.n
        sel._pending = (level, "off" if level else "edf", [0.5], [0.8], [])
        window(sel, 3 + level, 0.2, ran=inc)
        assert sel.model_error.n == n + counted
        sel._pending = sel._transient = None  # the trial's transient, charged after it, is the next loop's case
    sel.explored = [[(0.0, 0.0)] for _ in range(3)]
    for level, counted in ((1, 0), (0, 1)):
        n = sel.model_error.n
        sel._transient = (level, 0, 0.8, 2)
        window(sel, 5 + level, 0.2, ran=inc)
        assert sel.model_error.n == n + counted
        assert sel.explored[level] == [(0.0, pytest.approx(0.0))]  # charged: 0.8 before, 0.8 now
        sel._transient = None


def test_the_predicted_winner_known_answers():
    assert predicted_winner("llf", {"llf": 0.2, "sjf": 0.45, "fair": 0.3}, 0.01) == "sjf"
    assert predicted_winner("llf", {"llf": 0.2, "sjf": 0.205, "fair": 0.1}, 0.01) is None  # within the margin
    assert predicted_winner("llf", {"llf": None, "sjf": 0.9}, 0.01) is None
    assert predicted_winner("llf", {"llf": 0.2, "sjf": None, "edf": 0.5, "fair": 0.5}, 0.01) == "fair"
    # A tie is no evidence for either: the default's block (``prefer``) before the last by name.
    assert predicted_winner("fair", {"fair": 0.2, "llf": 0.5, "edf": 0.5}, 0.01) == "llf"
    assert predicted_winner("fair", {"fair": 0.2, "llf": 0.5, "edf": 0.5}, 0.01, prefer="edf") == "edf"
    assert predicted_winner("fair", {"fair": 0.2, "llf": 0.6, "edf": 0.5}, 0.01, prefer="edf") == "llf"


def test_after_a_change_of_workload_the_dispatch_level_is_reevaluated_on_the_models_point_prediction():
    # The dispatch level's past trials never found a gain (they do not pay back) and the model's error, 0.4, is
    # larger than any predicted gain: no dispatch trial, a balancing one. In the ``reopen`` windows after a change,
    # each alternative the model predicts better is tried in turn, the best first (sjf +0.25, then fair +0.1),
    # whatever the past trials found, and what was measured of it before is dropped; a predicted gain within
    # ``margin`` tries nothing, and a window of the ``reopen`` is spent.
    # The incumbent runs llf, not the default's edf (which has no prediction here): ``away`` holds nothing back.
    cands = [Composition("llf"), Composition("sjf"), Composition("fair"), Composition("llf", "off"), Composition("edf")]
    for reopen, foreseen, trials, left in (
        (0, {"llf": 0.2, "sjf": 0.45, "fair": 0.3}, [Composition("llf", "off")], 0),
        (3, {"llf": 0.2, "sjf": 0.45, "fair": 0.3}, [Composition("sjf"), Composition("fair")], 3),
        (3, {"llf": 0.2, "sjf": 0.205, "fair": 0.1}, [Composition("llf", "off")], 2),
    ):
        sel = Selector(scenario(), cands, default=Composition("edf"), explore=0.5)
        sel.segment.incumbent = Composition("llf")
        sel.budget.windows, sel._now, sel._span = 10, 100.0, 5.0
        sel.explored[0] = [(0.0, 0.4), (0.0, 0.2)]
        sel.segment.credit.record(0, "sjf", -0.3)
        for err in (0.4, -0.4):
            sel.model_error.add(err)
        sel._foreseen, sel._reopen = foreseen, reopen
        for trial in trials:
            sel._recent.extend([0.2, 0.2])
            sel._trial = None
            sel._start_trial()
            assert sel._trial[2] == trial
        assert sel._reopen == left and sel.reopened == (2 if left == 3 else 0)
        assert ("sjf" in sel.segment.credit.effects[0]) == (left != 3)
    # The exploration budget still bounds it: none left, no trial.
    sel = Selector(scenario(), cands, explore=0.1)
    sel._recent.extend([0.2, 0.2])
    sel._foreseen, sel._reopen = {"llf": 0.2, "sjf": 0.45, "fair": 0.2}, 3
    sel._start_trial()
    assert sel._trial is None and sel.reopened == 0


def test_a_change_of_segment_reopens_the_dispatch_level():
    # A stretch of small units, then units 50× larger: the second window of them confirms a new segment, which
    # reopens the dispatch level for ``reopen`` windows with nothing re-evaluated yet; until then it stays closed.
    sel = Selector(scenario(), [Composition("llf"), Composition("sjf"), Composition("llf", "off")], explore=0.0)
    for k in range(4):
        window(sel, k, 0.2)
    assert sel._reopen == 0 and sel._segments == 0
    sel._reevaluated = {"sjf"}
    window(sel, 4, 0.2, unit=0.05)
    assert sel._reopen == 0 and sel._segments == 0
    window(sel, 5, 0.2, unit=0.05)
    # Its confirming windows are the new incumbent's baseline: the same window's re-evaluation found no order
    # predicted better, and spent one window of the ``reopen``.
    assert sel._segments == 1 and sel._reevaluated == set() and sel._reopen == sel.reopen - 1


def test_an_incumbent_that_keeps_nothing_on_time_gives_way_to_the_best_supported_alternative():
    # Job a's windows: all late (score 0), half on time (0.5), then all late for three windows in a row. The first
    # window is filed under nobody (nothing had been chosen); the half window resets the count; the third 0 in a row
    # (step 5) gives up llf for the alternative measured best above 0 (+0.15: insignificant, one sample, noise
    # 0.3) among those the model's point prediction puts above llf by more than ``margin``: sjf (predicted +0.2),
    # not fair (measured −0.2); fair (+0.15) over sjf (+0.05) when both are predicted better; with sjf measured
    # better but predicted within the margin (+0.005), or nothing measured above 0 (fair predicted +0.3), llf
    # stays.
    cands = [Composition("llf"), Composition("sjf"), Composition("fair")]
    misses = [1.0, 1.0, 0.5, 1.0, 1.0, 1.0, 1.0]
    for effects, foreseen, after in (
        ({"sjf": 0.15, "fair": -0.2}, {"llf": 0.1, "sjf": 0.3, "fair": 0.3}, Composition("sjf")),
        ({"sjf": 0.05, "fair": 0.15}, {"llf": 0.1, "sjf": 0.3, "fair": 0.3}, Composition("fair")),
        ({"sjf": 0.15, "fair": -0.2}, {"llf": 0.1, "sjf": 0.105, "fair": 0.4}, Composition("llf")),
        ({"fair": -0.2}, {"llf": 0.1, "sjf": 0.105, "fair": 0.4}, Composition("llf")),
    ):
        sel = Selector(scenario(), cands, explore=0.0, model=False)
        for value, gain in effects.items():
            sel.segment.credit.record(0, value, gain, floor=0.09)
        sel._foreseen = foreseen
        picks = [window(sel, step, miss) for step, miss in enumerate(misses)]
        assert picks[:5] == [Composition("llf")] * 5
        assert picks[5:] == [after] * 2
        assert sel.abandoned == (after != Composition("llf"))
        # The count restarts with the new incumbent: its first window (step 6, 0) is one.
        assert sel._starved == (1 if after != Composition("llf") else 4)


def test_a_new_incumbents_first_windows_are_its_transient_and_no_trials_baseline():
    # sjf's one sample (+0.5, noise 0) is significant: the first window adopts it. Its windows carry the backlog
    # llf left for ``transient`` (4) windows: only after the fourth (step 4) is a trial (sjf/off, balancing: the
    # dispatch alternative llf is measured −0.5) compared with its last two windows. Without the hold (transient
    # 0) the trial starts once two windows are filed (step 2).
    cands = [Composition("llf"), Composition("sjf"), Composition("sjf", "off")]
    for transient, first in ((4, 4), (0, 2)):
        sel = Selector(scenario(), cands, explore=0.5, n_min=1, model=False, transient=transient)
        sel.segment.credit.record(0, "sjf", 0.5)
        picks = [window(sel, step, 0.2) for step in range(first + 1)]
        assert picks == [Composition("sjf")] * first + [Composition("sjf", "off")]
        assert sel._trial_baseline == [0.8]  # ``bracket`` (1) of the two windows before it


def test_a_persistent_one_window_prediction_borne_out_by_the_incumbent_starts_a_trial_of_it():
    # The model's error: +0.1 and −0.1, rms 0.1 (z 1, margin 0.01). Predicted for the window llf ran: llf 0.2, sjf
    # 0.6 (+0.4 − 0.1 > 0.01: confident), fair 0.35 (+0.15 − 0.1: confident, smaller): sjf, while llf scored below
    # 0.6 − 0.01; three windows in a row make a count of 3. llf scoring 0.6 does not bear it out (no count); sjf
    # predicted 0.25 (+0.05 − 0.1: not confident) leaves fair, and the count restarts at 1.
    cands = [Composition("llf"), Composition("sjf"), Composition("fair"), Composition("llf", "off")]
    sel = Selector(scenario(), cands, explore=0.5)
    for err in (0.1, -0.1):
        sel.model_error.add(err)
    sel._predicted = {"llf": 0.2, "sjf": 0.6, "fair": 0.35}
    for n in (1, 2, 3):
        sel._behind = sel._outpredicted(0.1)
        assert sel._behind == ("sjf", n)
    assert sel._outpredicted(0.6) is None
    sel._predicted = {"llf": 0.2, "sjf": 0.25, "fair": 0.35}
    assert sel._outpredicted(0.1) == ("fair", 1)
    # The dispatch level's past trials found nothing (they do not pay back): with a count of ``persist`` (3) sjf
    # is tried all the same; with 2, with the rule off, or with sjf tried ``n_max`` (3) times in the segment
    # already, the balancing trial llf/off starts as before. Starting a trial clears the count.
    for behind, persist, tried, trial in (
        (("sjf", 3), 3, 0, Composition("sjf")),
        (("sjf", 2), 3, 0, Composition("llf", "off")),
        (("sjf", 3), 0, 0, Composition("llf", "off")),
        (("sjf", 3), 3, 3, Composition("llf", "off")),
    ):
        sel = Selector(scenario(), cands, explore=0.5, persist=persist)
        sel.budget.windows, sel._now, sel._span = 10, 100.0, 5.0
        sel.explored[0] = [(0.0, 0.4), (0.0, 0.2)]
        for _ in range(tried):
            sel.segment.credit.record(0, "sjf", 0.3)
        sel._recent.extend([0.2, 0.2])
        sel._behind = behind
        sel._start_trial()
        assert sel._trial[2] == trial
        assert sel.outpredicted == (trial == Composition("sjf"))
        assert sel._behind is None


def test_one_trials_gain_is_not_enough_to_switch_two_are():
    # fair measured 0.3 above llf with a noise of 0.01 (variance 1e-4): 0.3 − 1 × 0.01 > 0.01 clears the rule, but on
    # one sample the effect has no spread of its own (n_min 2); a second sample alike: se √(1e-4 / 2), fair adopted.
    sel = Selector(scenario(), [Composition("llf"), Composition("fair")], model=False)
    sel.segment.credit.record(0, "fair", 0.3, 1e-4)
    sel._adopt()
    assert sel.segment.incumbent == Composition("llf")
    sel.segment.credit.record(0, "fair", 0.3, 1e-4)
    sel._adopt()
    assert sel.segment.incumbent == Composition("fair")


def test_away_from_the_defaults_dispatch_block_a_trial_needs_a_confident_predicted_gain():
    # The incumbent runs the default's edf. The model's error is 0.1 (root mean square of ±0.1), z 1, margin 0.01:
    # sjf predicted 0.08 above edf is within 0.08 − 0.1 < 0.01, held back, and balancing is tried instead; 0.15
    # above clears 0.15 − 0.1 = 0.05 > 0.01 and sjf is tried; with one error sample (n_model 2) nothing is
    # confident and sjf is held whatever its prediction. ``away`` off: sjf, untried, is tried first, as before.
    cands = [Composition("edf"), Composition("sjf"), Composition("edf", "off")]
    for errors, sjf, away, trial in (
        ((0.1, -0.1), 0.58, True, Composition("edf", "off")),
        ((0.1, -0.1), 0.65, True, Composition("sjf")),
        ((0.1,), 0.9, True, Composition("edf", "off")),
        ((0.1, -0.1), 0.58, False, Composition("sjf")),
    ):
        assert (
            first_trial(Selector(scenario(), cands, explore=0.5, away=away), errors, {"edf": 0.5, "sjf": sjf}) == trial
        )
    # Nor is an order re-evaluated after a change of workload on a point prediction the model is not confident of.
    sel = Selector(scenario(), cands, explore=0.5)
    sel._reopen = 3
    assert first_trial(sel, (0.1, -0.1), {"edf": 0.5, "sjf": 0.58}) == Composition("edf", "off")
    assert sel.reopened == 0


def test_a_predicted_gain_is_held_to_what_past_dispatch_trials_measured_against_their_prediction():
    # A dispatch trial predicted +0.2 measures 0.3 against the incumbent's 0.5 on either side: −0.2, 0.4 below its
    # prediction, one sample of the model's error on a gain.
    cands = [Composition("edf"), Composition("sjf"), Composition("edf", "off")]
    sel = Selector(scenario(), cands)
    sel._trial_gain, sel._pending = 0.2, (0, "sjf", [0.3], [0.5], [0.5])
    sel._credit_pending()
    assert (sel.gain_error.n, sel.gain_error.mean) == (1, pytest.approx(-0.4))
    # The model's error on the score is 0.1 (±0.1) and sjf is predicted 0.15 above edf: 0.15 − 0.1 > 0.01 alone,
    # but past trials' gains were 0.4 off (0.15 − 0.4 ≤ 0.01): held, balancing is tried; had they been off by
    # ±0.05 (root mean square 0.05: 0.15 − 0.05 = 0.10 > 0.01), sjf is tried.
    for gain_errors, trial in (((-0.4,), Composition("edf", "off")), ((0.05, -0.05), Composition("sjf"))):
        sel = Selector(scenario(), cands, explore=0.5)
        for err in gain_errors:
            sel.gain_error.add(err)
        assert first_trial(sel, (0.1, -0.1), {"edf": 0.5, "sjf": 0.65}) == trial
        # The trial started carries its predicted gain, 0.15, for its credit (none for a balancing trial).
        assert sel._trial_gain == (pytest.approx(0.15) if trial.dispatch == "sjf" else None)
