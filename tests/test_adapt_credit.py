"""Per-level credit, the safe-default rule and the exploration budget on hand-built samples with known answers."""

import math

import pytest

from strata.adapt import Effect, ExplorationBudget, LevelCredit, differences, pays_back, significant


def test_effect_mean_variance_and_the_noise_floor():
    e = Effect()
    for x, floor in ((0.1, 0.0), (0.3, 0.0), (0.2, 0.0)):
        e.add(x, floor)
    assert e.mean == pytest.approx(0.2) and e.variance == pytest.approx(0.01)
    assert e.se == pytest.approx(math.sqrt(0.01 / 3))
    one = Effect()
    one.add(0.2, floor=0.04)  # one sample: no sample variance, the measured noise stands in
    assert one.variance == pytest.approx(0.04) and one.se == pytest.approx(0.2)
    assert Effect().se == math.inf


def test_a_switch_needs_a_gain_beyond_its_noise_and_enough_samples():
    e = Effect()
    e.add(0.2, floor=0.04)
    assert not significant(e, z=1.0)  # 0.2 − 1 × 0.2 = 0: no gain beyond the noise
    assert significant(e, z=0.5)  # 0.2 − 0.1 = 0.1 > 0.01
    assert not significant(e, z=0.5, n_min=2)  # too little evidence
    small = Effect(5, 0.005, 0.0, 0.0)
    assert not significant(small, z=1.0)  # noiseless but below the margin


def test_level_credit_picks_the_largest_significant_gain_and_rebases_on_adoption():
    credit = LevelCredit(3)
    for gain in (0.30, 0.34, 0.32):
        credit.record(0, "fair", gain)  # dispatch fair vs the incumbent's llf: +0.32 ± 0.012
    for gain in (0.05, 0.07, 0.06):
        credit.record(0, "edf", gain)  # +0.06
    for gain in (0.5, -0.3):
        credit.record(1, "off", gain)  # +0.1 but noisy (se 0.4): not significant
    assert credit.best(z=1.0) == (0, "fair")
    credit.adopt(0, "fair", "llf")
    d = credit.effects[0]
    assert set(d) == {"edf", "llf"}
    assert d["llf"].mean == pytest.approx(-0.32) and d["llf"].n == 3
    assert d["edf"].mean == pytest.approx(0.06 - 0.32)  # edf vs fair: its gain over llf minus fair's
    assert d["edf"].se == pytest.approx(math.hypot(0.01 / math.sqrt(3), 0.02 / math.sqrt(3)))
    assert credit.effects[1]["off"].mean == pytest.approx(0.1)  # another level's effect is kept
    assert credit.best(z=1.0) is None


def test_exploration_budget_never_exceeds_its_share():
    b = ExplorationBudget(0.2)
    trial_windows = 0
    for _ in range(100):
        trial = b.allows(2) and trial_windows == 0
        if trial:
            trial_windows = 2
        b.tick(trial_windows > 0)
        trial_windows = max(0, trial_windows - 1)
        assert b.spent <= 0.2 * b.windows + 1e-9 + 1  # within one window of the share while a trial runs
    assert b.spent == 20 and b.windows == 100
    with pytest.raises(ValueError):
        ExplorationBudget(1.0)


def test_paired_differences_skip_unscored_windows():
    assert differences([0.8, None, 0.6], [0.5, 0.5, None]) == pytest.approx([0.3])
    with pytest.raises(ValueError):
        differences([0.1], [0.1, 0.2])


def test_a_trial_starts_when_what_trials_found_pays_for_what_they_cost_over_the_horizon():
    assert pays_back([0.0], [0.9], horizon=1.0)  # one past trial: nothing known yet, the trial starts
    found, costs = [0.1, 0.0], [0.2, 0.3]  # found 0.05 a window on average; cost 0.25
    assert pays_back(found, costs, horizon=6.0)  # 0.05 × 6 = 0.30 ≥ 0.25
    assert not pays_back(found, costs, horizon=4.0)  # 0.20 < 0.25
    assert not pays_back([0.0, 0.0], [0.1, 0.1], horizon=1e6)  # trials never found a gain: no horizon repays them
    assert pays_back([0.0, 0.0], [-0.1, -0.3], horizon=1.0)  # trials that gained while they ran cost nothing
