"""Known answers from queueing theory: M/M/1, M/D/1 sojourn times and M/M/c (Erlang C) waits."""

from __future__ import annotations

import math

import pytest

from strata.sim import FifoDispatch, SimOptions, Simulation
from strata.sim.scenarios import single_queue


def _sojourn(sim: Simulation) -> float:
    return float(sim.metrics.latency().set_index("job").loc["q", "mean"])


def test_mm1_mean_sojourn_time():
    mu, lam = 1000.0, 500.0  # ρ = 0.5
    scenario, placement = single_queue(rate=lam, cost=1 / mu)
    sim = Simulation(
        scenario,
        SimOptions(seed=3, placement=placement, service={"q.src": "exponential"}, network_latency=0),
    )
    sim.run(200.0)
    expected = 1 / (mu - lam)
    assert _sojourn(sim) == pytest.approx(expected, rel=0.03)


def test_md1_mean_sojourn_time():
    mu, lam = 1000.0, 700.0  # ρ = 0.7
    scenario, placement = single_queue(rate=lam, cost=1 / mu)
    sim = Simulation(scenario, SimOptions(seed=4, placement=placement, network_latency=0))
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
        scenario,
        SimOptions(seed=5, placement=placement, dispatch=factory, service={"q.src": "exponential"}, network_latency=0),
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
    shed = Simulation(sc, SimOptions(seed=2, placement=placement, enforce_shares=True, shed_after_s=0.5))
    shed.run(30.0)
    assert shed.metrics.mean_rates(5.0)["c.op1"] == pytest.approx(100.0, rel=0.03)
    assert shed.pes["c.op1"].dropped["overflow"] == pytest.approx(100.0 * 30.0, rel=0.1)
    assert float(shed.metrics.latency().set_index("job").loc["c", "max"]) < 0.7
    held = Simulation(sc, SimOptions(seed=2, placement=placement, enforce_shares=True))
    held.run(30.0)
    assert "overflow" not in held.pes["c.op1"].dropped
    assert float(held.metrics.latency().set_index("job").loc["c", "max"]) > 10.0
    with pytest.raises(ValueError, match="shed_after_s"):
        Simulation(sc, SimOptions(placement=placement, shed_after_s=0.5))


def test_a_pe_placed_with_no_cpu_is_not_run_and_watermarks_pass_it():
    # src (200 records/s) → op1 (cpu 0 on its node, as a plan lists a PE it gives no cpu) → w, and src → w:
    # op1 is not run, with or without shedding — nothing is sent to it (dropped["no_cpu"], no bytes on the
    # stream), it sends nothing — while its watermarks still reach the window w, which fires on src's records
    # alone. A source placed with no cpu generates nothing.
    from strata.model import Scenario

    ops = [
        {"name": "src", "kind": "source", "cost_per_record": 1e-6, "source": {"rate": 200.0}},
        {"name": "op1", "kind": "map", "cost_per_record": 1e-3},
        {"name": "w", "kind": "window_aggregate", "cost_per_record": 1e-5, "window": {"size_s": 1}},
        {"name": "out", "kind": "sink", "cost_per_record": 1e-6},
    ]
    streams = [
        {"from": "src", "to": "op1", "bytes_per_record": 100},
        {"from": "op1", "to": "w", "bytes_per_record": 100},
        {"from": "src", "to": "w", "bytes_per_record": 10},
        {"from": "w", "to": "out", "bytes_per_record": 100},
    ]
    doc = {
        "cluster": {"nodes": [{"name": "n0", "cores": 4}, {"name": "n1", "cores": 4}]},
        "jobs": [{"id": "c", "rank": 1, "templates": [{"operators": ops, "streams": streams}]}],
    }
    sc = Scenario.model_validate(doc)
    placement = {"c.src": {"n0": 0.5}, "c.op1": {"n1": 0.0}, "c.w": {"n0": 0.5}, "c.out": {"n0": 0.0}}
    for kwargs in ({}, {"enforce_shares": True, "shed_after_s": 0.5}):
        sim = Simulation(sc, SimOptions(seed=2, placement=placement, **kwargs))
        sim.run(10.0)
        op1 = sim.pes["c.op1"]
        assert op1.arrived == 0 and op1.done == 0 and op1.produced == 0
        assert op1.dropped["no_cpu"] == sim.pes["c.src"].produced > 0
        # no data crossed to n1 (200 records/s × 100 bytes would): only the watermarks through op1, 64 bytes
        # each way 5 times a second
        assert op1.sent == 0 and sum(sim.metrics.remote) <= 2 * 64 * 5 * 10
        assert sim.pes["c.w"].produced > 0 and sim.metrics.summary()["delivered"] > 0
        assert sim.metrics.conservation()["balanced"].all()
    idle = Simulation(sc, SimOptions(seed=2, placement={**placement, "c.src": {"n0": 0.0}}))
    idle.run(5.0)
    assert idle.pes["c.src"].generated == 0 and idle.metrics.summary()["delivered"] == 0


def test_borrow_idle_runs_each_share_first_and_gives_idle_cores_to_work_beyond_it():
    # One node of 2 cores: a.p (0.01 core·s per record) offered 100 records/s with a share of 1 core (all it
    # needs), b.p offered 200 records/s (2 cores of work) with 0.5 core: 3 cores of work on 2.
    # - FIFO, shares advisory: the cores go by arrival, 1/3 to a: a.p 66.7, b.p 133.3 records/s;
    # - shares enforced: a.p 100, b.p 50 (0.5 core idle);
    # - shares enforced, borrow_idle: a.p its 100, b.p its 50 plus the idle 0.5 core's 50: 100.
    from strata.model import Scenario

    def job(name: str, rate: float) -> dict:
        ops = [
            {"name": "src", "kind": "source", "cost_per_record": 1e-6, "source": {"rate": rate}},
            {"name": "p", "kind": "map", "cost_per_record": 0.01},
            {"name": "out", "kind": "sink", "cost_per_record": 1e-6},
        ]
        streams = [{"from": "src", "to": "p"}, {"from": "p", "to": "out"}]
        return {"id": name, "rank": 1, "templates": [{"operators": ops, "streams": streams}]}

    sc = Scenario.model_validate(
        {"cluster": {"nodes": [{"name": "n0", "cores": 2}]}, "jobs": [job("a", 100.0), job("b", 200.0)]}
    )
    placement = {"a.src": {"n0": 0.01}, "b.src": {"n0": 0.01}, "a.p": {"n0": 1.0}, "b.p": {"n0": 0.5}}
    placement |= {"a.out": {"n0": 0.0}, "b.out": {"n0": 0.0}}
    expected = {
        "fifo": ({}, 200 / 3, 400 / 3),
        "enforced": ({"enforce_shares": True}, 100.0, 50.0),
        "borrow": ({"enforce_shares": True, "borrow_idle": True}, 100.0, 100.0),
    }
    for name, (kwargs, a, b) in expected.items():
        sim = Simulation(sc, SimOptions(seed=4, placement=placement, **kwargs))
        sim.run(40.0)
        rates = sim.metrics.mean_rates(10.0)
        assert rates["a.p"] == pytest.approx(a, rel=0.04), name
        assert rates["b.p"] == pytest.approx(b, rel=0.04), name
        assert sim.metrics.conservation()["balanced"].all()
    with pytest.raises(ValueError, match="borrow_idle"):
        Simulation(sc, SimOptions(placement=placement, borrow_idle=True))
