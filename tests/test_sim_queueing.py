"""Known answers from queueing theory: M/M/1, M/D/1 sojourn times and M/M/c (Erlang C) waits."""

from __future__ import annotations

import math

import pytest

from strata.sim import FifoDispatch, Simulation
from strata.sim.scenarios import single_queue


def _sojourn(sim: Simulation) -> float:
    return float(sim.metrics.latency().set_index("job").loc["q", "mean"])


def test_mm1_mean_sojourn_time():
    mu, lam = 1000.0, 500.0  # ρ = 0.5
    scenario, placement = single_queue(rate=lam, cost=1 / mu)
    sim = Simulation(scenario, seed=3, placement=placement, service={"q.src": "exponential"}, network_latency=0)
    sim.run(200.0)
    expected = 1 / (mu - lam)
    assert _sojourn(sim) == pytest.approx(expected, rel=0.03)


def test_md1_mean_sojourn_time():
    mu, lam = 1000.0, 700.0  # ρ = 0.7
    scenario, placement = single_queue(rate=lam, cost=1 / mu)
    sim = Simulation(scenario, seed=4, placement=placement, network_latency=0)
    sim.run(150.0)
    rho = lam / mu
    expected = 1 / mu + rho / (2 * mu * (1 - rho))  # Pollaczek–Khinchine
    assert _sojourn(sim) == pytest.approx(expected, rel=0.03)


class _WaitRecorder(FifoDispatch):
    """FIFO that records each message's wait (pop time − arrival) at one PE."""

    waits: list[float]

    def __init__(self, view) -> None:
        super().__init__(view)
        self.waits = []

    def pop(self, now):
        msg = super().pop(now)
        if msg is not None and msg.pe == "q.src":
            self.waits.append(now - msg.created)
        return msg


def erlang_c(c: int, a: float) -> float:
    """Probability of waiting in M/M/c with offered load a = λ/μ."""
    top = a**c / math.factorial(c) / (1 - a / c)
    return top / (sum(a**k / math.factorial(k) for k in range(c)) + top)


def test_mmc_waiting_time_erlang_c():
    mu, lam, c = 1000.0, 1500.0, 3  # ρ = 0.5
    scenario, placement = single_queue(rate=lam, cost=1 / mu, cores=c)
    policies = []

    def factory(view):
        policies.append(_WaitRecorder(view))
        return policies[-1]

    sim = Simulation(
        scenario, seed=5, placement=placement, dispatch=factory, service={"q.src": "exponential"}, network_latency=0
    )
    sim.run(200.0)
    waits = [w for p in policies for w in p.waits]
    expected = erlang_c(c, lam / mu) / (c * mu - lam)
    assert sum(waits) / len(waits) == pytest.approx(expected, rel=0.03)
    assert len(waits) > 280_000


def test_erlang_c_textbook_value():
    # c = 2, a = 1 (ρ = 0.5): C = 1/3.
    assert erlang_c(2, 1.0) == pytest.approx(1 / 3)


def test_an_instance_held_to_its_share_sheds_what_its_share_cannot_process():
    # src (200 records/s) → op1 (0.01 core·s per record: 2 cores for all of it) held to 1 core: SODA's PE
    # processes the 100 records/s its cpu buys. With a 0.5 s buffer the rest is dropped on arrival, and a
    # record waits at most about that long; without one the backlog (and the wait) grows by 0.5 s a second.
    from strata.sim.scenarios import chain

    sc = chain([{"kind": "map", "cost_per_record": 0.01}], rate=200.0, nodes=2, cores=4)
    placement = {"c.src": {"n0": 0.5}, "c.op1": {"n0": 1.0}, "c.sink": {"n1": 0.5}}
    shed = Simulation(sc, seed=2, placement=placement, enforce_shares=True, shed_after_s=0.5)
    shed.run(30.0)
    assert shed.metrics.mean_rates(5.0)["c.op1"] == pytest.approx(100.0, rel=0.03)
    assert shed.pes["c.op1"].dropped["overflow"] == pytest.approx(100.0 * 30.0, rel=0.1)
    assert float(shed.metrics.latency().set_index("job").loc["c", "max"]) < 0.7
    held = Simulation(sc, seed=2, placement=placement, enforce_shares=True)
    held.run(30.0)
    assert "overflow" not in held.pes["c.op1"].dropped
    assert float(held.metrics.latency().set_index("job").loc["c", "max"]) > 10.0
    with pytest.raises(ValueError, match="shed_after_s"):
        Simulation(sc, placement=placement, shed_after_s=0.5)


def test_with_shedding_a_pe_planned_with_no_cpu_processes_nothing():
    from strata.sim.scenarios import chain

    sc = chain([{"kind": "map", "cost_per_record": 0.001}], rate=200.0, nodes=2, cores=4)
    placement = {"c.src": {"n0": 0.5}, "c.op1": {"n0": 0.0}, "c.sink": {"n1": 0.0}}
    shed = Simulation(sc, seed=2, placement=placement, enforce_shares=True, shed_after_s=0.5)
    shed.run(10.0)
    assert shed.metrics.mean_rates(1.0)["c.op1"] == 0.0
    assert shed.pes["c.op1"].dropped["overflow"] == shed.pes["c.op1"].arrived
    held = Simulation(sc, seed=2, placement=placement, enforce_shares=True)  # no shedding: it runs unshared
    held.run(10.0)
    assert held.metrics.mean_rates(1.0)["c.op1"] == pytest.approx(200.0, rel=0.1)
