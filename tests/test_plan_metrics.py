"""SODA's six placement metrics and stream affinity on a hand-computed case (SODA §4.2, §5.1)."""

from __future__ import annotations

import pytest

from strata.model import Cluster
from strata.plan.quality import Weights, evaluate

# u runs on n0 with 1 core; v is split evenly over n0 and n1 (0.5 core each); stream u→v carries 100 B/s.
# Kept on n0: min(f_u,n0 = 1, f_v,n0 = 0.5) = 0.5 → affinity 0.5, 50 B/s cross n0 → n1.
ASSIGNMENT = {"u": {"n0": 1.0}, "v": {"n0": 0.5, "n1": 0.5}}
TRAFFIC = [("u", "v", 100.0)]


def test_single_switch_metrics():
    cluster = Cluster(nodes=[{"name": "n0", "cores": 2, "nic": 100}, {"name": "n1", "cores": 2, "nic": 100}])
    m = evaluate(cluster, ASSIGNMENT, TRAFFIC)
    assert m["affinity"] == pytest.approx(0.5)
    assert m["cross_bytes"] == pytest.approx(50.0)
    assert m["avg_cpu"] == pytest.approx(0.5)  # (1.5 / 2 + 0.5 / 2) / 2
    assert m["max_cpu"] == pytest.approx(0.75)
    assert m["max_nic"] == pytest.approx(0.5)  # n0 sends 50 of 100; n1 receives 50
    assert m["avg_nic"] == pytest.approx(0.25)  # ((50 + 0) / 200 + (0 + 50) / 200) / 2
    assert m["avg_link"] == m["max_link"] == pytest.approx(0.25)  # 50 / (100 + 100)
    # default weights: 1 × 0.75 + 4 × 0.25 + 1 × 0.25 + 1 × 0.25 + 1 × 0.5
    assert m["objective"] == pytest.approx(2.75)
    assert evaluate(
        cluster, ASSIGNMENT, TRAFFIC, Weights(max_cpu=0, avg_link=0, max_link=0, avg_nic=0, max_nic=0, avg_cpu=1)
    )["objective"] == pytest.approx(0.5)


def test_rack_uplinks_are_the_links():
    cluster = Cluster(
        nodes=[
            {"name": "n0", "cores": 2, "nic": 100, "rack": "r0"},
            {"name": "n1", "cores": 2, "nic": 100, "rack": "r1"},
        ],
        racks=[{"name": "r0", "uplink": 100}, {"name": "r1", "uplink": 400}],
    )
    m = evaluate(cluster, ASSIGNMENT, TRAFFIC)
    assert m["max_link"] == pytest.approx(0.5)  # r0 sends 50 over a 100 B/s uplink
    assert m["avg_link"] == pytest.approx((50 / 200 + 50 / 800) / 2)


def test_zero_cpu_pes_count_by_their_nodes():
    cluster = Cluster(nodes=[{"name": "n0", "cores": 2, "nic": 100}, {"name": "n1", "cores": 2, "nic": 100}])
    m = evaluate(cluster, {"u": {"n0": 0.0}, "v": {"n1": 0.0}}, TRAFFIC)
    assert m["affinity"] == pytest.approx(0.0)
    assert m["max_cpu"] == pytest.approx(0.0)
