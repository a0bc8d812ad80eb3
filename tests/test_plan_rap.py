"""The separable RAP across components: Fox's greedy vs DP vs brute force (SODA §4.1)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from strata.plan import rap
from strata.plan.curves import Curve


def curve(budgets, values) -> Curve:
    b = np.array(budgets, dtype=float)
    return Curve(("pe",), b, np.array(values, dtype=float), [{"pe": float(x)} for x in b], exact=True)


def random_concave(rng: np.random.Generator, step: float) -> Curve:
    n = int(rng.integers(2, 6))
    widths = rng.integers(1, 5, size=n) * step
    slopes = np.sort(rng.uniform(0, 10, size=n))[::-1]
    start = float(rng.integers(0, 3) * step)
    budgets = np.concatenate([[start], start + np.cumsum(widths)])
    values = rng.uniform(0, 5) + np.concatenate([[0.0], np.cumsum(widths * slopes)])
    return curve(budgets, values)


def brute(curves, budget, step):
    grids = [np.arange(c.minimum, c.saturation + step / 2, step) for c in curves]
    best = -np.inf
    for pick in itertools.product(*grids):
        if sum(pick) <= budget + 1e-9:
            best = max(best, sum(c.value_at(b) for c, b in zip(curves, pick, strict=True)))
    return best


@pytest.mark.parametrize("seed", range(20))
def test_greedy_equals_dp_equals_brute_force_on_concave_curves(seed):
    rng = np.random.default_rng(seed)
    step = 0.25
    curves = [random_concave(rng, step) for _ in range(3)]
    assert all(c.concave for c in curves)
    budget = sum(c.minimum for c in curves) + float(rng.integers(0, 16)) * step
    g = rap.total(curves, rap.greedy(curves, budget))
    d = rap.total(curves, rap.dynamic(curves, budget, step))
    assert g == pytest.approx(d, abs=1e-9)
    assert g == pytest.approx(brute(curves, budget, step), abs=1e-9)


def test_dp_beats_greedy_on_a_non_concave_curve():
    # a: nothing until 2 cores, then 10 (an economy of scale); b: concave, 3 per core up to 2 cores.
    a = curve([0, 1, 2], [0, 0, 10])
    b = curve([0, 2], [0, 6])
    assert not a.concave
    assert rap.total([a, b], rap.dynamic([a, b], 2.0, 0.5)) == pytest.approx(10.0)
    assert rap.total([a, b], rap.greedy([a, b], 2.0)) < 10.0


def test_greedy_fills_steepest_segments_first():
    a = curve([0, 1, 3], [0, 5, 7])  # slopes 5, 1
    b = curve([0, 2], [0, 6])  # slope 3
    # 2 cores: 1 to a (slope 5) then 1 to b (slope 3) → 5 + 3 = 8
    assert rap.greedy([a, b], 2.0) == pytest.approx([1.0, 1.0])
    assert rap.total([a, b], [1.0, 1.0]) == pytest.approx(8.0)
