"""Bandits with known-mean arms: regret, tracking a change, factored arms, floors, segments, determinism."""

import itertools

import numpy as np
import pytest

from strata.adapt import Composition, DiscountedUCB, FactoredUCB, SegmentMemory, SlidingWindowUCB, compositions


def play(bandit, means_at, steps, seed=0):
    rng = np.random.default_rng(seed)
    picks, regret = [], 0.0
    for t in range(steps):
        means = means_at(t)
        arm = bandit.select()
        bandit.update(arm, float(rng.random() < means[arm]))
        picks.append(arm)
        regret += max(means) - means[arm]
    return np.array(picks), regret


def test_stationary_arms_regret_is_small_and_the_best_arm_dominates():
    means = [0.3, 0.5, 0.8, 0.45]
    picks, regret = play(DiscountedUCB(4, gamma=1.0, c=0.5), lambda t: means, 3000)
    assert np.mean(picks[-1000:] == 2) > 0.9
    # Uniform play would cost 3000 × mean gap (0.3125 per step ≈ 937); UCB's regret grows like log T.
    assert regret < 120
    _, regret_short = play(DiscountedUCB(4, gamma=1.0, c=0.5), lambda t: means, 1000)
    assert regret - regret_short < regret_short  # the second 2000 steps cost less than the first 1000


def test_discounting_tracks_a_change_of_the_best_arm_where_plain_ucb_lags():
    def means(t):
        return [0.8, 0.2, 0.3] if t < 1500 else [0.2, 0.3, 0.8]

    picks_d, regret_d = play(DiscountedUCB(3, gamma=0.97, c=0.5), means, 2500)
    picks_u, regret_u = play(DiscountedUCB(3, gamma=1.0, c=0.5), means, 2500)
    assert np.mean(picks_d[1600:] == 2) > 0.8
    assert np.mean(picks_d[1600:] == 2) > np.mean(picks_u[1600:] == 2)
    assert regret_d < regret_u
    picks_w, _ = play(SlidingWindowUCB(3, window=100, c=0.5), means, 2500)
    assert np.mean(picks_w[1700:] == 2) > 0.8


def test_every_arm_is_tried_first_and_rewards_are_clipped():
    b = DiscountedUCB(3, gamma=0.9, seed=3)
    first = []
    for _ in range(3):
        a = b.select()
        first.append(a)
        b.update(a, 5.0)
    assert sorted(first) == [0, 1, 2]
    assert np.allclose(b.means(), 1.0)


def test_same_seed_same_choices():
    runs = [play(DiscountedUCB(4, gamma=0.9, seed=7), lambda t: [0.5] * 4, 200)[0] for _ in range(2)]
    assert (runs[0] == runs[1]).all()


def test_factored_arms_share_evidence_through_their_blocks():
    # Reward = dispatch effect + balancing effect: 15 arms, 8 block values. Sharing through the blocks finds the
    # best arm (b, y) with less than half the regret of D-UCB over the 15 arms, on every seed.
    f = {"a": 0.2, "b": 0.5, "c": 0.3, "d": 0.1, "e": 0.25}
    g = {"x": 0.0, "y": 0.4, "z": 0.1}
    arms = list(itertools.product(f, g))
    means = [f[d] + g[b] for d, b in arms]
    for seed in range(4):
        regret = []
        for learner in (FactoredUCB(arms, gamma=1.0, seed=seed), DiscountedUCB(len(arms), gamma=1.0, seed=seed)):
            rng = np.random.default_rng(seed)
            total = 0.0
            for _ in range(40):
                arm = learner.select()
                learner.update(arm, means[arm] + rng.normal(0, 0.05))
                total += max(means) - means[arm]
            regret.append(total)
        assert regret[0] < 0.5 * regret[1]


def test_factored_untried_blocks_credit_to_what_ran_and_own_evidence():
    arms = [("llf", "on"), ("fifo", "on"), ("fifo", "off")]
    b = FactoredUCB(arms, gamma=1.0, c=0.0, seed=0)
    b.update(1, 0.2)
    b.update(1, 1.0, ran=("llf", "off"))  # fifo/on chosen, llf/off ran (no arm): the blocks learn llf and off
    assert np.isnan(b.means()[[0, 2]]).all() and b.means()[1] == pytest.approx(0.6)
    # overall mean 0.6; llf +0.4, on −0.4 → 0.6; fifo −0.4, off +0.4 → 0.6 (c = 0: no bonus).
    assert b.index() == pytest.approx([0.6, 0.6, 0.6])  # fifo/on was chosen twice: its own mean, 0.6
    b.update(2, 0.0)
    assert b.index()[2] == pytest.approx(0.0)
    assert np.isinf(FactoredUCB(arms).index()).all()  # nothing tried: every arm untried


def test_a_floor_keeps_a_bad_arm_from_being_tried_again_and_again():
    def retries(floor):
        b = DiscountedUCB(2, gamma=0.95, c=0.3, floor=floor)
        b.update(0, 0.0)
        picks = []
        for _ in range(300):
            arm = b.select()
            b.update(arm, 0.0 if arm == 0 else 0.9)
            picks.append(arm)
        return picks[1:].count(0)

    assert retries(0.0) >= 5  # D-UCB: arm 0's count fades, its bonus grows, it is tried again every so often
    assert retries(1.0) == 0  # bonus ≤ 0.3 · sqrt(0.5 ln 20) ≈ 0.37: 0 + 0.37 never beats 0.9


def test_segments_resume_a_known_workload_and_warm_start_a_new_one():
    first = DiscountedUCB(2, gamma=1.0)
    for _ in range(10):
        first.update(0, 1.0)
        first.update(1, 0.0)
    mem = SegmentMemory(first, radius=0.3, prior=1.0)
    assert not mem.switch(np.array([0.0, 0.0]), np.array([2.0, 0.0]))
    warm = mem.current
    assert warm is not first and warm.n.tolist() == [1.0, 1.0] and warm.means().tolist() == [1.0, 0.0]
    assert mem.switch(np.array([2.0, 0.0]), np.array([0.1, 0.1]))  # back within 0.3 of the first segment
    assert mem.current is first


def test_segments_can_start_from_what_was_known_before_any_play():
    first = DiscountedUCB(2, gamma=1.0)
    first.update(0, 1.0)
    mem = SegmentMemory(first, radius=0.3, start=lambda: DiscountedUCB(2, gamma=1.0))
    assert not mem.switch(np.array([0.0, 0.0]), np.array([2.0, 0.0]))
    assert mem.current.n.tolist() == [0.0, 0.0]
    assert mem.switch(np.array([2.0, 0.0]), np.array([0.0, 0.2]))
    assert mem.current is first


def test_compositions_space_and_parsing():
    space = compositions()
    assert len(space) == 45 and len(set(space)) == 45
    assert Composition.parse("sjf/aggressive/greedy") == Composition("sjf", "aggressive", "greedy")
    with pytest.raises(ValueError, match="dispatch"):
        Composition("random")


def test_a_prior_spares_a_block_known_poor_until_evidence_overrules_it():
    arms = [("llf", "on"), ("fifo", "on")]

    def fifo_plays(reward_llf, prior):
        b = FactoredUCB(arms, gamma=1.0, c=0.3, seed=0, prior=prior)
        plays = 0
        for _ in range(30):
            arm = b.select()
            plays += arm == 1
            b.update(arm, reward_llf if arm == 0 else 0.6)
        return plays

    # llf earns 0.9: fifo's prior 0.5 plus its bonus (≤ 0.4 at 30 plays) stays below llf's index, so it is
    # never tried; without a prior it is untried (∞) and is played.
    assert fifo_plays(0.9, [{"llf": 1.0, "fifo": 0.5}]) == 0
    assert fifo_plays(0.9, []) >= 1
    # llf earns 0.2: evidence overrules the prior and fifo (0.6) takes over.
    assert fifo_plays(0.2, [{"llf": 1.0, "fifo": 0.5}]) >= 20
    with pytest.raises(ValueError):
        FactoredUCB(arms, prior=[{}, {}, {}])
