"""The simulator's metrics do not grow with the simulated duration (issue 16, deliverable 3)."""

from __future__ import annotations

import re
import time
import tracemalloc

import numpy as np
import pytest
from typer.testing import CliRunner

from strata.cli import app
from strata.model import load_scenario
from strata.sim import SimOptions, Simulation
from strata.sim import metrics as M

from .conftest import EXAMPLES

runner = CliRunner()


def _run(sim: Simulation, until: float) -> None:
    while sim.now < until - 1e-9:
        sim.run(min(until, sim.now + 5.0))
        sim.metrics.latency_so_far()


def test_memory_flat_in_duration(monkeypatch):
    monkeypatch.setattr(M, "MAX_BINS", 64)
    monkeypatch.setattr(M, "RAW_OUTPUTS", 20_000)  # folded into histograms well inside the run
    sim = Simulation(load_scenario(EXAMPLES / "pipeline.yaml"), SimOptions(seed=3, batch=20))
    tracemalloc.start()
    _run(sim, 100.0)
    early = tracemalloc.get_traced_memory()[0]
    _run(sim, 400.0)
    late, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    m = sim.metrics
    assert m.bin_s > 1.0 and len(sim.nodes[0].busy_bins) <= M.MAX_BINS  # coarsened, not grown
    assert sum(m.lat_base.values()) > 0 and max(len(a) for a in m.lat.values()) <= 2 * m._raw_cap
    assert late < early * 1.25 + 2**20, (early, late, peak)
    # every table still answers, consistent with the exact counters
    lat = m.latency().set_index("job")
    assert int(lat.records.sum()) == m.summary()["delivered"] > 0
    ts = m.timeseries()
    assert ts[ts.job == "alerts"].t.diff().dropna().eq(m.bin_s).all()
    gen = sum(pe.generated for pe in sim.pes.values() if pe.stream is not None)
    assert ts.ingest.sum() * m.bin_s == pytest.approx(gen, rel=1e-9)


def test_histogram_percentiles_within_the_stated_error(monkeypatch):
    monkeypatch.setattr(M, "RAW_OUTPUTS", 1000)
    sim = Simulation(load_scenario(EXAMPLES / "pipeline.yaml"), SimOptions(seed=1))
    m = sim.metrics
    rng = np.random.default_rng(7)
    job = "counts"
    lat = rng.lognormal(mean=0.0, sigma=1.5, size=50_000)
    n = rng.integers(1, 20, size=lat.size)
    for x, k in zip(lat, n, strict=True):
        m.lat[job].append(float(x))
        m.lat_n[job].append(int(k))
        if len(m.lat[job]) > m._raw_cap:
            m._fold(job)
    assert m.lat_base[job] > 40_000
    row = m.latency().set_index("job").loc[job]
    order = np.argsort(lat)
    cum = np.cumsum(n[order])
    for p, col in ((0.5, "p50"), (0.95, "p95"), (0.99, "p99")):
        exact = lat[order][np.searchsorted(cum, p * cum[-1], side="left")]
        assert abs(row[col] - exact) <= M.PERCENTILE_REL_ERROR * exact + 1e-12, (col, row[col], exact)
    assert M.PERCENTILE_REL_ERROR < 0.006
    assert row["max"] == lat.max() and row.records == n.sum()
    assert row["mean"] == pytest.approx((lat * n).sum() / n.sum(), rel=1e-9)
    target = sim.scenario.job[job].target_latency_s
    assert row.miss_rate == pytest.approx(n[lat > target].sum() / n.sum(), rel=1e-9)


def test_simulate_states_the_run_time_up_front():
    start = time.perf_counter()
    result = runner.invoke(app, ["simulate", str(EXAMPLES / "pipeline.yaml"), "--duration", "4", "--no-control"])
    assert result.exit_code == 0, result.output
    assert "calibration:" in result.output and "events/s" in result.output and "will take about" in result.output
    assert not re.search(r"(?<![\d,])0 ev/s", result.output)  # a rate of zero, not one that ends in a 0
    assert time.perf_counter() - start < 60


def test_a_long_duration_is_stated_not_refused(monkeypatch):
    import strata.sim.terminal as terminal

    monkeypatch.setattr(terminal.Calibration, "estimate", lambda self, d: 5 * 3600.0)

    def stop(*a, **k):
        raise ValueError("stopped after the estimate")

    monkeypatch.setattr("strata.runners.sim_loop.simulate", stop)
    result = runner.invoke(app, ["simulate", str(EXAMPLES / "pipeline.yaml"), "--duration", "1e9"])
    assert "will take about 5 h 0 min" in result.output and "note this run will take about 5 h" in result.output
