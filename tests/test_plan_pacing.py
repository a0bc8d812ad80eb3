"""L0 pacing and the plan's traffic when a plan runs only part of a job: known answers by hand."""

from __future__ import annotations

import pytest

from strata.model import Scenario, joined_graph
from strata.model.traffic import runs
from strata.plan.pacing import admitted_ingest
from strata.plan.quality import flows, stream_affinity

# s (100 rec/s, 1e-3 s/rec) → a (1e-2 s/rec) → out1; s → b (1e-2 s/rec) → c (1e-2 s/rec) → out2; t (100 rec/s) → c.
# Every stream 100 bytes per record, every selectivity 1.
OPS = [
    {"name": "s", "kind": "source", "cost_per_record": 1e-3, "source": {"rate": 100}},
    {"name": "t", "kind": "source", "cost_per_record": 1e-3, "source": {"rate": 100}},
    {"name": "a", "kind": "map", "cost_per_record": 1e-2},
    {"name": "b", "kind": "map", "cost_per_record": 1e-2},
    {"name": "c", "kind": "map", "cost_per_record": 1e-2},
    {"name": "out1", "kind": "sink", "cost_per_record": 1e-6},
    {"name": "out2", "kind": "sink", "cost_per_record": 1e-6},
]
EDGES = [("s", "a"), ("a", "out1"), ("s", "b"), ("b", "c"), ("t", "c"), ("c", "out2")]
SCENARIO = Scenario.model_validate(
    {
        "cluster": {"nodes": [{"name": "n0", "cores": 8}, {"name": "n1", "cores": 8}]},
        "jobs": [
            {
                "id": "j",
                "rank": 1,
                "templates": [
                    {
                        "name": "t",
                        "operators": OPS,
                        "streams": [{"from": u, "to": v, "bytes_per_record": 100} for u, v in EDGES],
                    }
                ],
            }
        ],
    }
)
PLENTY = {"j.s": 0.1, "j.t": 0.1, "j.a": 1.0, "j.b": 1.0, "j.c": 2.0}  # 100 rec/s each; c 200 rec/s


def test_a_pe_the_plan_does_not_run_limits_no_source():
    tpl = {"j": "t"}
    # everything run: s and t at their 100 rec/s (c processes the 200 rec/s b and t send it)
    assert admitted_ingest(SCENARIO, tpl, PLENTY, {}) == pytest.approx({"j.s": 100.0, "j.t": 100.0})
    # b given no cpu is not run: it held s at 0 (and starved a's branch); now s is paced by a (100 rec/s), and c
    # receives only t's records, so c at 1 core (100 rec/s) admits all of t (it admitted 50 with b's 100 in)
    no_b = {**PLENTY, "j.b": 0.0, "j.c": 1.0}
    assert admitted_ingest(SCENARIO, tpl, no_b, {}) == pytest.approx({"j.s": 100.0, "j.t": 100.0})
    # a run PE still paces: a at 0.5 core processes 50 rec/s, so s is read at 50
    assert admitted_ingest(SCENARIO, tpl, {**no_b, "j.a": 0.5}, {})["j.s"] == pytest.approx(50.0)
    # c at 0.5 core (50 rec/s) with b not run: t is read at 50, s (paced by a alone) at 100
    assert admitted_ingest(SCENARIO, tpl, {**no_b, "j.c": 0.5}, {}) == pytest.approx({"j.s": 100.0, "j.t": 50.0})
    # a source the plan does not run is read at 0
    assert admitted_ingest(SCENARIO, tpl, {**no_b, "j.t": 0.0}, {})["j.t"] == 0.0


def test_runs_follows_what_the_cpu_buys():
    graph = joined_graph(SCENARIO, {"j": "t"})
    op = graph.nodes["j.b"]["op"]
    assert runs(op, 0.01) and not runs(op, 0.0)
    assert runs(graph.nodes["j.out1"]["op"], 0.0)  # sinks are budgeted no cpu and run
    assert runs(op.model_copy(update={"cost_per_record": 0.0}), 0.0)  # a free PE processes everything


def test_the_plan_counts_no_traffic_into_a_pe_it_does_not_run():
    graph = joined_graph(SCENARIO, {"j": "t"})
    rates = {"j.s": 100.0, "j.t": 100.0, "j.a": 100.0, "j.b": 0.0, "j.c": 100.0}
    cpu = {**PLENTY, "j.b": 0.0, "j.c": 1.0}
    assert sorted(flows(graph, rates, cpu)) == [
        ("j.a", "j.out1", 10_000.0),
        ("j.c", "j.out2", 10_000.0),
        ("j.s", "j.a", 10_000.0),
        ("j.t", "j.c", 10_000.0),
    ]
    # s → b (10 kB/s) is not traffic: of the 4 streams that carry bytes, s → a crosses (3/4 local); counted as
    # traffic, s → b sat on b's listed node n0 beside s and claimed 4/5
    assignment = {
        "j.s": {"n0": 0.1},
        "j.t": {"n0": 0.1},
        "j.a": {"n1": 1.0},
        "j.b": {"n0": 0.0},
        "j.c": {"n0": 1.0},
        "j.out1": {"n1": 0.0},
        "j.out2": {"n0": 0.0},
    }
    assert stream_affinity(assignment, flows(graph, rates, cpu)) == pytest.approx(3 / 4)
    assert stream_affinity(assignment, flows(graph, {**rates, "j.b": 0.0})) == pytest.approx(4 / 5)
