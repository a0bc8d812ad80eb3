"""Known answers for the simulator's network: NICs, racks and their uplinks."""

from __future__ import annotations

import numpy as np
import pytest

from strata.model import Scenario
from strata.sim import SimOptions, Simulation
from strata.sim.scenarios import chain

PLACE = {"c.src": "n0", "c.op1": "n1", "c.sink": "n1"}  # one stream crosses from n0 to n1


def _racked(uplink: float, same_rack: bool = False) -> Scenario:
    doc = chain([{"kind": "map"}], rate=500, arrivals="constant", nodes=2).model_dump(mode="json")
    doc["cluster"] = {
        "nodes": [
            {"name": "n0", "cores": 4, "rack": "r0"},
            {"name": "n1", "cores": 4, "rack": "r0" if same_rack else "r1"},
        ],
        "racks": [{"name": "r0", "uplink": uplink}, {"name": "r1", "uplink": uplink}],
    }
    return Scenario.model_validate(doc)


def _latency(sim: Simulation) -> np.ndarray:
    return np.frombuffer(sim.metrics.lat["c"], dtype=float)


def test_an_inter_rack_message_pays_the_uplink_and_the_rack_latency():
    # 100-byte records every 2 ms through a 100 kB/s uplink: 1 ms each, never queued.
    flat = Simulation(_racked(1e5, same_rack=True), SimOptions(placement=PLACE)).run(10.0)
    racked = Simulation(_racked(1e5), SimOptions(placement=PLACE, rack_latency=2e-4)).run(10.0)
    extra = _latency(racked) - _latency(flat)
    assert extra == pytest.approx(np.full(len(extra), 100 / 1e5 + 2e-4), abs=1e-9)
    net = racked.metrics.network()
    assert net.remote_bytes.sum() > 0
    assert net.inter_rack_bytes.sum() == pytest.approx(net.remote_bytes.sum())
    assert flat.metrics.network().inter_rack_bytes.sum() == 0


def test_a_saturated_uplink_caps_the_throughput():
    # 500 records/s × 100 bytes = 50 kB/s offered to a 40 kB/s uplink: 400 records/s get through.
    sim = Simulation(_racked(4e4), SimOptions(placement=PLACE)).run(30.0)
    ts = sim.metrics.timeseries()
    assert ts[(ts.t >= 5) & (ts.t < 29)].throughput.mean() == pytest.approx(400, rel=0.01)
