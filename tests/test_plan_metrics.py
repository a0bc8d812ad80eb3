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


def test_keyed_streams_count_as_routed_by_key_group():
    # u split evenly over n0/n1 sends half from each; v is keyed with 3 key groups over the same split,
    # apportioned 2 on n0 and 1 on n1 (largest remainder), so g_v = (2/3, 1/3) and every sender
    # instance sends each key group's records to its owner: kept = 0.5·2/3 + 0.5·1/3 = 0.5 (unkeyed,
    # locality first, would keep min(0.5, 0.5) on each node: all of it).
    cluster = Cluster(nodes=[{"name": "n0", "cores": 2, "nic": 100}, {"name": "n1", "cores": 2, "nic": 100}])
    split = {"u": {"n0": 0.5, "n1": 0.5}, "v": {"n0": 0.5, "n1": 0.5}}
    unkeyed = evaluate(cluster, split, TRAFFIC)
    assert unkeyed["affinity"] == pytest.approx(1.0)
    assert unkeyed["cross_bytes"] == pytest.approx(0.0)
    m = evaluate(cluster, split, TRAFFIC, key_groups={"v": 3})
    assert m["affinity"] == pytest.approx(0.5)
    assert m["cross_bytes"] == pytest.approx(50.0)
    # n0 → n1: 0.5 · 1/3 of 100 B/s; n1 → n0: 0.5 · 2/3.
    assert m["max_nic"] == pytest.approx((100 / 3) / 100)  # n0 receives 33.3 (and sends 16.7)
    assert m["avg_nic"] == pytest.approx(((50 / 3 + 100 / 3) / 200 + (100 / 3 + 50 / 3) / 200) / 2)
    assert m["max_link"] == pytest.approx(50 / 200)


def test_uplinks_carry_the_locality_first_flows():
    # Racks r0 = {n0, n1}, r1 = {n2, n3}. u sends half from n0 and half from n2; v needs 1/4 on n1 and 3/4
    # on n3; no node holds both, so each sender's surplus is split over the deficits in proportion:
    # n0 → n1 1/8, n0 → n3 3/8, n2 → n1 1/8, n2 → n3 3/8 (strata.model.traffic.transport, what the
    # simulator routes). Out of r0: 3/8 of 100 B/s; into r0: 1/8.
    nodes = [{"name": f"n{i}", "cores": 4, "nic": 1000, "rack": "r0" if i < 2 else "r1"} for i in range(4)]
    cluster = Cluster(nodes=nodes, racks=[{"name": "r0", "uplink": 100}, {"name": "r1", "uplink": 100}])
    m = evaluate(cluster, {"u": {"n0": 1.0, "n2": 1.0}, "v": {"n1": 1.0, "n3": 3.0}}, TRAFFIC)
    assert m["affinity"] == pytest.approx(0.0)
    assert m["max_link"] == pytest.approx(0.375)
    assert m["avg_link"] == pytest.approx(((37.5 + 12.5) / 200 + (12.5 + 37.5) / 200) / 2)
