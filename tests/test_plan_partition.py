"""METIS's start for miniW (strata.plan.partition): constraints after post-fixing, the planted cut, fallbacks."""

from __future__ import annotations

import builtins

import numpy as np
import pytest

from strata.model import Scenario, joined_graph, propagate
from strata.plan import mini_w, partition
from strata.plan.macro_w import macro_w
from strata.plan.occupancy import Occupancy
from strata.plan.placement import Group, PlacementProblem, build_problem
from strata.plan.quality import Weights
from tests.test_plan_cases import constrained


def planted(n: int = 40, cross: int = 3, seed: int = 0) -> PlacementProblem:
    """Two halves of n/2 one-core PEs, each pair inside a half linked with probability 1/2, joined by
    ``cross`` streams; 2 nodes of n/2 cores. Cutting the ``cross`` streams is optimal."""
    rng = np.random.default_rng(seed)
    half = n // 2
    edges = {(b + i, b + j) for b in (0, half) for i in range(half) for j in range(i + 1, half) if rng.random() < 0.5}
    edges |= {(i, half + i) for i in range(cross)}
    streams = [(a, b, 1000.0) for a, b in sorted(edges)]
    nbrs: list[list[tuple[int, float]]] = [[] for _ in range(n)]
    for a, b, t in streams:
        nbrs[a].append((b, t))
        nbrs[b].append((a, t))
    cluster = Scenario.model_validate(
        {"cluster": {"node_groups": [{"prefix": "n", "count": 2, "cores": half}]}, "jobs": []}
    ).cluster
    return PlacementProblem(
        cluster=cluster,
        names=["n0", "n1"],
        cores=np.array([half, half], dtype=float),
        memory=np.array([2.0**40] * 2),
        nic=np.array([n.nic for n in cluster.all_nodes], dtype=float),
        rack=np.array([-1, -1]),
        uplink=np.zeros(0),
        groups=[Group((f"v{i}",), 1.0, 0.0, 0.0, [0, 1], 1, 1) for i in range(n)],
        group_of={f"v{i}": i for i in range(n)},
        streams=streams,
        exclude=[set() for _ in range(n)],
        weights=Weights(),
        neighbours=nbrs,
    )


def test_metis_finds_the_planted_bisection():
    p = planted()
    where, why = partition.metis_start(p)
    assert where is not None, why
    st = Occupancy(p, where)
    assert st.cross == pytest.approx(3 * 1000.0)
    assert list(st.load) == [20.0, 20.0]


def test_mini_w_reports_its_metis_start():
    p = planted()
    found = mini_w.search(p, deadline=1e18, rounds=2)
    assert found.partitioner.startswith("METIS start objective")
    assert Occupancy(p, found.where).cross == pytest.approx(3000.0)


def test_without_pymetis_mini_w_keeps_its_own_starts_and_says_so(monkeypatch):
    real = builtins.__import__

    def no_pymetis(name, *args, **kwargs):
        if name == "pymetis":
            raise ImportError("no module named pymetis")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pymetis)
    p = planted()
    found = mini_w.search(p, deadline=1e18, rounds=2)
    assert "no METIS start: pymetis unavailable" in found.partitioner
    assert found.start != "METIS"


def test_a_failing_metis_leaves_mini_w_in_charge(monkeypatch):
    import pymetis

    def boom(*a, **k):
        raise RuntimeError("metis crashed")

    monkeypatch.setattr(pymetis, "part_graph", boom)
    found = mini_w.search(planted(), deadline=1e18, rounds=2)
    assert "METIS failed (RuntimeError: metis crashed)" in found.partitioner


def test_too_few_groups_for_metis_leave_it_out():
    where, why = partition.metis_start(planted(n=2, cross=1))
    assert where is None and "too few" in why


def test_post_fixing_keeps_sodas_constraints():
    s = constrained([0.001, 0.004, 0.004, 0.004, 0.004, 0.004, 0.004])
    g = joined_graph(s)
    p = build_problem(s.cluster, g, {pe: 0.2 for pe in g}, propagate(g), Weights())
    where, why = partition.metis_start(p)
    assert where is not None, why
    node = {pe: [p.names[n] for n in where[p.group_of[pe]]] for pe in g}
    assert node["a.src"] == ["n2"]
    assert set(node["a.p1"]) <= {"n0", "n1"}
    assert not set(node["a.p1"]) & set(node["a.p2"])
    assert node["a.p2"] == node["a.sink"]
    w = macro_w(s.cluster, g, {pe: 0.2 for pe in g}, propagate(g), deadline_s=2, milp_share=0.0)
    assert "METIS" in w.detail
