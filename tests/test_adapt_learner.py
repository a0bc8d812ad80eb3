"""Bandits with known-mean arms: regret, tracking a change of the best arm, contexts, determinism."""

import numpy as np
import pytest

from strata.adapt import Composition, ContextualBandit, DiscountedUCB, SlidingWindowUCB, compositions


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


def test_contexts_keep_separate_learners_and_same_seed_same_choices():
    cb = ContextualBandit(lambda: DiscountedUCB(2, gamma=1.0, c=0.1, seed=0))
    for _ in range(50):
        for ctx, good in (("fine", 0), ("coarse", 1)):
            a = cb.select(ctx)
            cb.update(ctx, a, 1.0 if a == good else 0.0)
    assert cb.select("fine") == 0 and cb.select("coarse") == 1
    runs = [play(DiscountedUCB(4, gamma=0.9, seed=7), lambda t: [0.5] * 4, 200)[0] for _ in range(2)]
    assert (runs[0] == runs[1]).all()


def test_compositions_space_and_parsing():
    space = compositions()
    assert len(space) == 45 and len(set(space)) == 45
    assert Composition.parse("sjf/aggressive/greedy") == Composition("sjf", "aggressive", "greedy")
    with pytest.raises(ValueError, match="dispatch"):
        Composition("random")
