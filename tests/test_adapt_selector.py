"""Features, the window score and the selector on synthetic windows with known answers."""

import pytest

from strata.adapt import ChangeDetector, Composition, Features, FeatureTracker, Fixed, Selector, window_score, yields
from strata.adapt.features import learning_reward
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


def test_selector_finds_each_phase_best_composition_and_remembers_a_returning_phase():
    sc = scenario()
    good = {"fine": Composition("llf"), "coarse": Composition("fair")}
    cands = [Composition("llf"), Composition("fair"), Composition("fifo")]
    sel = Selector(sc, cands, gamma=0.95, c=0.3, seed=1)
    picks = {"fine": [], "coarse": []}
    chosen = None
    for step, phase in enumerate(["fine"] * 40 + ["coarse"] * 40 + ["fine"] * 40):
        unit = 0.001 if phase == "fine" else 0.1
        # The window that just ended ran the composition chosen a step ago: on time iff it suited that phase.
        miss = 0.0 if chosen == good[phase] else 0.8
        o = obs(
            5.0 * (step + 1),
            ingest={"a.src": 100.0},
            latency={"a": LatencyStats(500, 0.1, 0.2, 0.3, 0.4, miss)},
            instances=[InstanceLoad("a.f", 0, "n0", 100, 100 * unit, 0, 0)],
        )
        chosen = sel.select(o)
        picks[phase].append(chosen)
    assert sum(c == good["fine"] for c in picks["fine"][5:40]) >= 30
    assert sum(c == good["coarse"] for c in picks["coarse"][5:]) >= 30
    # Back in the first workload the change detector finds the stored segment: the learner resumes on its answer.
    assert all(c == good["fine"] for c in picks["fine"][41:50])  # from the window that confirms the change
    assert sum(c == good["fine"] for c in picks["fine"][40:]) >= 36
    rewards = [c.reward for c in sel.choices if c.reward is not None]
    assert len(rewards) == 119 and all(r == pytest.approx(1.0) or r == pytest.approx(0.2) for r in rewards)


def test_fixed_scores_the_same_way():
    sc = scenario()
    f = Fixed(sc, Composition("edf"))
    for step in range(3):
        o = obs(5.0 * (step + 1), ingest={"a.src": 100.0}, latency={"a": LatencyStats(500, 0.1, 0.2, 0.3, 0.4, 0.5)})
        assert f.select(o) == Composition("edf")
    assert [c.reward for c in f.choices] == [0.5, 0.5, None]


def test_slow_blocks_dwell_while_dispatch_may_change_every_window():
    sc = scenario()
    cands = [Composition("llf", "off"), Composition("edf", "off"), Composition("llf", "threshold")]
    held = Selector(sc, cands, dwell=3, seed=0)
    free = Selector(sc, cands, dwell=1, seed=0)
    for sel in (held, free):
        for step in range(4):
            lat = {"a": LatencyStats(500, 0.1, 0.2, 0.3, 0.4, 0.0)}
            sel.select(obs(5.0 * (step + 1), ingest={"a.src": 100.0}, latency=lat))
    # Untried arms have infinite index: without a dwell all three are tried in the first three windows, both
    # balancing modes among them; with it the first three share their balancing mode.
    assert len({cands[c.arm].balancing for c in held.choices[:3]}) == 1
    assert len({cands[c.arm].balancing for c in free.choices[:3]}) == 2


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


def test_windows_without_evidence_keep_the_composition_and_teach_nothing():
    sc = scenario()
    cands = [Composition("llf"), Composition("fifo"), Composition("edf")]
    sel = Selector(sc, cands, horizon=2, seed=0)
    lat = {"a": LatencyStats(500, 0.1, 0.2, 0.3, 0.4, 0.0)}
    # Three windows with no input (no score), then a first scored window whose 2-window horizon still holds one
    # without: none is evidence, so the composition in force (fifo) is kept and nothing is credited.
    for step in range(3):
        assert sel.select(obs(5.0 * (step + 1)), ran=cands[1]) == cands[1]
    assert sel.select(obs(20.0, ingest={"a.src": 100.0}, latency=lat), ran=cands[1]) == cands[1]
    assert sel.memory.current.whole.n.sum() == 0
    sel.select(obs(25.0, ingest={"a.src": 100.0}, latency=lat), ran=cands[1])
    assert sel.memory.current.whole.n[1] == pytest.approx(1.0)


def test_a_window_is_credited_to_the_composition_that_ran_not_to_the_choice_not_yet_enacted():
    sc = scenario()
    cands = [Composition("llf", "threshold", "planner"), Composition("llf", "threshold", "greedy")]
    sel = Selector(sc, cands, seed=0, blocks_prior=())
    lat = {"a": LatencyStats(500, 0.1, 0.2, 0.3, 0.4, 0.0)}
    sel.select(obs(5.0, ingest={"a.src": 100.0}, latency=lat), ran=cands[0])
    sel.choices[-1].arm = 1  # greedy chosen; the plan in force is still the planner's
    sel.select(obs(10.0, ingest={"a.src": 100.0}, latency=lat), ran=cands[0])
    assert sel.memory.current.whole.n.tolist() == [1.0, 0.0]


@pytest.mark.parametrize("warm_start", [False, True])
def test_windows_draining_the_backlog_left_by_a_change_of_workload_count_half(warm_start):
    sc = scenario()
    sel = Selector(sc, [Composition("llf")], gamma=1.0, seed=0, warm_start=warm_start)
    lat = {"a": LatencyStats(500, 0.1, 0.2, 0.3, 0.4, 0.0)}
    # Unit size 1 ms for 3 windows, then 100 ms (the change is confirmed on its 2nd window, 200 records
    # queued); half of that drains two windows later. Credited weights: 1, 1, 1, 1, then 0.5 until the
    # window that ends with ≤ 100 queued, then 1 again.
    units, queued = [0.001] * 3 + [0.1] * 5, [0, 0, 0, 150, 200, 150, 90, 80]
    plays = []
    for step, (unit, q) in enumerate(zip(units, queued, strict=True)):
        inst = [InstanceLoad("a.f", 0, "n0", 100, 100 * unit, q, 0)]
        sel.select(obs(5.0 * (step + 1), ingest={"a.src": 100.0}, latency=lat, instances=inst))
        plays.append(float(sel.memory.current.whole.n.sum()))
    assert sel._segments == 1
    # The new segment starts from no play (the stated prior only), or warm from the old learner weakened to
    # 1 play; then +0.5, +0.5 (drained), +1.
    start = 1.0 if warm_start else 0.0
    assert plays[4:] == pytest.approx([start, start + 0.5, start + 1.0, start + 2.0])
