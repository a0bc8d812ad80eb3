"""One input definition per spec (strata.model.inputs), known answers on BOTH engines' generators.

"Spark" below is the pure-function generator Spark's source runs (``Timeline`` +
``record_columns``, no Spark needed); "sim" is the simulator's ``SourceStream``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from strata.model import SourceSpec
from strata.model.inputs import (
    VALUE_LEVELS,
    Timeline,
    Workload,
    drifted_key,
    drifted_keys,
    expected_counts,
    rate_at,
    rate_factor,
    record_columns,
    value_share_above,
    values_of,
    zipf_cdf,
    zipf_ranks,
)
from strata.sim.workload import SourceStream

N = 200_000


def spark_rows(spec: SourceSpec, n: int = N, tick_s: float = 0.1) -> dict[str, np.ndarray]:
    w = Workload.of(spec)
    tl = Timeline(w, tick_s)
    tl.tick_of_row(n - 1)
    return record_columns(w, tick_s, tl.segments(0, n), 0, n)


def sim_values(spec: SourceSpec, n: int = N) -> np.ndarray:
    stream = SourceStream(spec, seed=5, index=0)
    return np.array([stream.value() for _ in range(n)])


def sim_keys(spec: SourceSpec, t: float, n: int = N) -> np.ndarray:
    stream = SourceStream(spec, seed=5, index=0)
    return np.array([stream.key(t) for _ in range(n)])


def binomial_tol(p: float, n: int, sigmas: float = 4.0) -> float:
    return sigmas * math.sqrt(p * (1 - p) / n)


# ------------------------------------------------------------------ values


def test_the_value_distribution_is_the_dyadic_grid():
    u = np.array([0.0, 0.5 / 1024, 1 / 1024, 0.95, 0.9999999999])
    np.testing.assert_array_equal(values_of(u), [0.0, 0.0, 1 / 1024, 972 / 1024, 1023 / 1024])
    # value > x keeps the levels above ⌊1024 x⌋
    assert value_share_above(0.95) == 51 / 1024
    assert value_share_above(0.5) == 511 / 1024
    assert value_share_above(0.9) == 102 / 1024


@pytest.mark.parametrize("engine", ["spark", "sim"])
def test_values_have_the_grid_support_and_mean_and_a_95_filter_keeps_51_of_1024(engine):
    spec = SourceSpec(rate=5000, seed=2)
    v = spark_rows(spec)["value"] if engine == "spark" else sim_values(spec)
    levels = v * VALUE_LEVELS
    assert np.all(levels == np.floor(levels)) and levels.min() >= 0 and levels.max() <= VALUE_LEVELS - 1
    assert len(np.unique(levels)) == VALUE_LEVELS  # 200k draws hit every level
    sd = math.sqrt((VALUE_LEVELS**2 - 1) / 12) / VALUE_LEVELS
    assert v.mean() == pytest.approx(1023 / 2048, abs=4 * sd / math.sqrt(len(v)))
    p = 51 / 1024
    assert np.mean(v > 0.95) == pytest.approx(p, abs=binomial_tol(p, len(v)))
    assert np.mean(v > 0.5) == pytest.approx(511 / 1024, abs=binomial_tol(0.5, len(v)))


@pytest.mark.parametrize("engine", ["spark", "sim"])
def test_value_sums_are_exact_in_any_order(engine):
    spec = SourceSpec(rate=5000, seed=4)
    v = spark_rows(spec, 50_000)["value"] if engine == "spark" else sim_values(spec, 50_000)
    total = math.fsum(v)  # the exactly rounded sum
    assert sum(v.tolist()) == total
    assert sum(reversed(v.tolist())) == total
    assert sum(3 * x for x in v.tolist()) == 3 * total  # records × value, as the simulator accumulates


# ------------------------------------------------------------------ keys


@pytest.mark.parametrize("engine", ["spark", "sim"])
@pytest.mark.parametrize("zipf_s", [0.0, 1.1])
def test_keys_follow_the_one_zipf_cdf(engine, zipf_s):
    count = 100
    spec = SourceSpec(rate=5000, keys={"count": count, "zipf_s": zipf_s}, seed=7)
    keys = spark_rows(spec)["key"] if engine == "spark" else sim_keys(spec, 0.0)
    expected = np.diff(np.concatenate(([0.0], zipf_cdf(count, zipf_s)))) * len(keys)
    observed = np.bincount(keys, minlength=count)
    chi2 = float(((observed - expected) ** 2 / expected).sum())
    assert chi2 < stats.chi2.ppf(0.9999, count - 1)
    for rank in range(5):  # the top ranks, one by one
        p = expected[rank] / len(keys)
        assert observed[rank] / len(keys) == pytest.approx(p, abs=binomial_tol(p, len(keys)))


def test_ranks_invert_the_cdf():
    w = Workload.of(SourceSpec(rate=1, keys={"count": 10, "zipf_s": 1.0}))
    cdf = zipf_cdf(10, 1.0)
    u = np.concatenate((cdf[:-1] - 1e-12, cdf[:-1], [0.0, 0.999999999]))
    np.testing.assert_array_equal(zipf_ranks(w, u), [*range(9), *range(1, 10), 0, 9])


def test_drift_maps_the_same_rank_to_the_same_key_at_the_same_time():
    w = Workload.of(SourceSpec(rate=1, keys={"count": 37, "drift_period_s": 2.5, "drift_step": 4}))
    ranks = np.arange(37)
    for t in [0.0, 2.4999999, 2.5, 7.5, 12.3, 1000.0, 2.5 * 401]:
        vector = drifted_keys(w, ranks, np.full(37, t))
        scalar = [drifted_key(w, int(r), t) for r in ranks]
        np.testing.assert_array_equal(vector, scalar)
        np.testing.assert_array_equal(vector, (ranks + 4 * math.floor(t / 2.5)) % 37)


def test_both_engines_move_the_hot_key_the_same_way():
    # zipf_s = 4: rank 0 is 92% of the records; every 10 s the hot key moves 5 keys on
    spec = SourceSpec(rate=2000, keys={"count": 100, "zipf_s": 4.0, "drift_period_s": 10, "drift_step": 5}, seed=1)
    rows = spark_rows(spec, 100_000, tick_s=0.1)  # 50 s of records
    for period in range(5):
        t = period * 10 + 5.0
        spark_hot = np.bincount(rows["key"][(rows["t"] >= t - 5) & (rows["t"] < t + 5)]).argmax()
        sim_hot = np.bincount(sim_keys(spec, t, 2000)).argmax()
        assert spark_hot == sim_hot == (5 * period) % 100


# ------------------------------------------------------------------ λ(t)

ONOFF = {"process": "onoff", "period_s": 10, "on_s": 2, "burst_factor": 4}
EXPECTED_ONOFF = 200 * 1000 * (1 + 3 * 2 / 10)  # ∫0^200 λ: 1000/s, ×4 for 2 s of every 10 s


def test_rate_is_the_curve_times_the_modulation():
    w = Workload.of(SourceSpec(rate=7, rate_curve=[(0, 100), (10, 300)], arrivals=ONOFF))
    np.testing.assert_allclose(
        rate_factor(w, np.array([0.0, 1.0, 2.0, 5.0, 11.0, 25.0])), [400, 480, 140, 200, 1200, 300]
    )
    assert w.rate_max == 1200
    d = Workload.of(SourceSpec(rate=100, arrivals={"process": "diurnal", "period_s": 40, "amplitude": 0.5}))
    np.testing.assert_allclose(rate_factor(d, np.array([0.0, 10.0, 30.0])), [100, 150, 50])
    assert expected_counts(d, 0, 400, 0.1).sum() == pytest.approx(4000, rel=1e-9)  # one whole period


def test_onoff_rate_integrates_to_the_expected_count_on_both_engines():
    spec = SourceSpec(rate=1000, arrivals=ONOFF, seed=3)
    w = Workload.of(spec)
    assert expected_counts(w, 0, 2000, 0.1).sum() == pytest.approx(EXPECTED_ONOFF, rel=1e-12)
    tol = 4 * math.sqrt(EXPECTED_ONOFF)  # Poisson counts
    tl = Timeline(w, 0.1)
    assert tl.rows_before_tick(2000) == pytest.approx(EXPECTED_ONOFF, abs=tol)
    stream = SourceStream(spec, seed=3, index=0)
    times = []
    while (t := stream.next_time()) < 200.0:
        times.append(t)
    assert len(times) == pytest.approx(EXPECTED_ONOFF, abs=tol)
    # and in the right places: 8000 of every 16000 records of a period fall in its 2 s burst
    times = np.array(times)
    rows = spark_rows(spec, tl.rows_before_tick(2000))
    for t in (times, rows["t"]):
        assert np.mean(np.mod(t, 10) < 2) == pytest.approx(0.5, abs=binomial_tol(0.5, len(t)))


def test_constant_arrivals_follow_the_integral_on_both_engines():
    # ∫0^125 λ = 100 s at 250 → 750/s (mean 500) + 25 s at 750/s
    spec = SourceSpec(rate=1000, rate_curve=[(0, 250), (100, 750)], arrivals={"process": "constant"})
    total = 100 * 500 + 25 * 750
    assert abs(Timeline(Workload.of(spec), 0.1).rows_before_tick(1250) - total) <= 1  # floor of the integral
    stream = SourceStream(spec, seed=1, index=0, batch=5)
    n = 0
    while stream.next_time() < 125.0:
        n += 5
    # whole messages of 5 records, and the simulator's 10 ms left-rule steps under a slope of 5/s²: ≤ ½·5·0.01·100 = 2.5
    assert abs(n - total) < 5 + 2.5


def test_the_simulator_reads_its_inputs_from_the_shared_definition():
    spec = SourceSpec(rate=300, rate_curve=[(0, 300), (60, 900)], arrivals=ONOFF, keys={"count": 9, "zipf_s": 0.5})
    stream = SourceStream(spec, seed=1, index=0)
    assert stream.inputs == Workload.of(spec)
    assert stream.rate_max == Workload.of(spec).rate_max == 3600
    for t in (0.0, 1.9, 2.0, 30.0, 61.0):
        assert stream.rate(t) == pytest.approx(rate_factor(stream.inputs, np.array([t]))[0], rel=1e-12)


@pytest.mark.parametrize(
    "arrivals",
    [{"process": "constant"}, {"process": "poisson"}, ONOFF, {"process": "diurnal", "period_s": 7, "amplitude": 1.0}],
)
@pytest.mark.parametrize("curve", [None, [(0, 0), (3, 90), (20, 10), (40, 0)]])
def test_the_scalar_rate_is_the_vector_rate(arrivals, curve):
    w = Workload.of(SourceSpec(rate=50, rate_curve=curve, arrivals=arrivals))
    t = np.concatenate((np.linspace(-1, 60, 6101), [0.0, 2.0, 3.0, 10.0, 12.0, 20.0, 40.0]))
    np.testing.assert_allclose([rate_at(w, x) for x in t], rate_factor(w, t), rtol=1e-12, atol=1e-9)
    assert rate_factor(w, t).max() <= w.rate_max + 1e-9
