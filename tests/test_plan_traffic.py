"""Known answers for the plan's rate model of window aggregates (strata.model.traffic): one result per key
per window, as the engines emit, not selectivity × input."""

from __future__ import annotations

import math

import networkx as nx
import pytest

from strata.adapt.features import yields
from strata.model import OperatorKind, joined_graph, scenario_importance
from strata.model.traffic import as_emitted, flows
from strata.plan import Options, plan
from strata.plan.pacing import admitted_ingest
from strata.sim import SimOptions, Simulation
from strata.sim.scenarios import chain

WINDOW = {"kind": "window_aggregate", "window": {"size_s": 2}, "selectivity": 0.2}


def _window_rate(scenario, batch: int = 1) -> float:
    return flows(joined_graph(scenario), batch)["c.op1"].records


def test_a_window_emits_the_expected_distinct_keys_per_window():
    # 1 record/s over 2 uniform keys, 2 s windows: N = 2 arrivals a window, a key is present with
    # probability 1 − e^(−N/2) = 1 − e^(−1); two keys, one window per 2 s.
    sc = chain([WINDOW], rate=1.0, keys={"count": 2})
    assert _window_rate(sc) == pytest.approx(2 * (1 - math.exp(-1)) / 2)
    # 1000 records/s over 10 keys: every key in every window (10 results per 2 s), not 0.2 × 1000.
    assert _window_rate(chain([WINDOW], rate=1000.0, keys={"count": 10})) == pytest.approx(5.0)


def test_a_batch_of_records_carries_one_key():
    # 16 records/s in messages of 16: one message (one key) a second, as at 1 record/s.
    sc = chain([WINDOW], rate=16.0, keys={"count": 2})
    assert _window_rate(sc, batch=16) == pytest.approx(1 - math.exp(-1))


def test_a_diamond_does_not_count_its_keys_twice():
    # src → op1 (filter 0.5) → op3 and src → op3 directly: batches of 16 survive the filter (8 records each),
    # so the window sees each source message's key on both paths and its distinct keys are those of src alone.
    sc = chain([{"kind": "filter", "selectivity": 0.5}, {"kind": "map"}, WINDOW], rate=16.0, keys={"count": 2})
    doc = sc.model_dump(by_alias=True)
    doc["jobs"][0]["templates"][0]["streams"].append({"from": "src", "to": "op3", "bytes_per_record": 100})
    sc = type(sc).model_validate(doc)
    f = flows(joined_graph(sc), 16)
    assert f["c.op2"].records == pytest.approx(8.0)
    assert f["c.op3"].records == pytest.approx(1 - math.exp(-1))


def test_a_window_after_an_aligned_window_emits_each_key_it_receives():
    sc = chain([WINDOW, {"kind": "filter", "selectivity": 0.5}, WINDOW], rate=1000.0, keys={"count": 10})
    f = flows(joined_graph(sc), 1)
    # 10 keys every 2 s; the filter keeps each result with probability 1/2; the second window
    # emits the ones that arrive, once each.
    assert f["c.op1"].records == pytest.approx(5.0)
    assert f["c.op3"].records == pytest.approx(2.5)


def test_the_plan_projects_the_window_output_the_simulator_realises():
    # Zipf keys, batches of 4: the plan's window output (hence importance at the sink) against a run.
    sc = chain(
        [{"kind": "map"}, {**WINDOW, "window": {"size_s": 5}}, {"kind": "map"}],
        rate=400.0,
        keys={"count": 300, "zipf_s": 1.0},
    )
    emitted = as_emitted(sc, batch=4)
    window = emitted.job["c"].templates[0].operator["op2"]
    assert window.kind is OperatorKind.WINDOW_AGGREGATE
    assert window.selectivity < 0.2  # fewer distinct keys than selectivity × input
    p = plan(sc, options=Options(budget_s=2.0, batch=4))
    sim = Simulation(sc, SimOptions(seed=3, placement=p.assignment, batch=4, routing="local")).run(103.0)
    # From 3 s to 103 s: window k fires at 5k + 6 s (its end plus 1 s of lateness), 20 of them in the span.
    rates = sim.metrics.mean_rates(3.0)
    projected = window.selectivity * 400.0
    assert rates["c.op2"] == pytest.approx(projected, rel=0.03)
    assert sim.metrics.mean_importance(3.0) == pytest.approx(p.importance, rel=0.03)
    # and without a window the scenario is unchanged
    plain = chain([{"kind": "map"}])
    assert as_emitted(plain, 16) is plain
    assert nx.is_directed_acyclic_graph(joined_graph(emitted))


# One traffic model: every projection outside the epoch (the scenario's importance, L0's pacing, the adaptive
# level's expected outputs) counts a window at what it emits. 1000 records/s over 10 keys, 2 s windows: every
# key in every window, 10 results per 2 s = 5 records/s (not selectivity 0.2 × 1000 = 200).


def test_scenario_importance_counts_a_window_at_what_it_emits():
    sc = chain([WINDOW], rate=1000.0, keys={"count": 10})
    _, _, data = next(e for e in joined_graph(sc).edges(data=True) if e[0] == "c.op1")
    assert scenario_importance(sc) == pytest.approx(data["weight"] * data["stream"].value(5.0))
    assert scenario_importance(sc) != pytest.approx(data["weight"] * data["stream"].value(200.0))


def test_pacing_admits_what_the_plan_s_cpu_processes_behind_a_window():
    # op2 (cost 0.1 s/record) gets 0.25 cores: 2.5 records/s. It receives the window's 5 records/s at
    # 1000 offered, so the source is admitted at 1000 × 2.5 / 5 = 500 records/s (with selectivity 0.2 it
    # would receive 200 and admit 12.5).
    sc = chain([WINDOW, {"kind": "map", "cost_per_record": 0.1}], rate=1000.0, keys={"count": 10})
    cpu = {"c.src": 4.0, "c.op1": 4.0, "c.op2": 0.25}
    admitted = admitted_ingest(sc, {"c": sc.jobs[0].templates[0].name}, cpu, {})
    assert admitted["c.src"] == pytest.approx(500.0)


def test_the_adaptive_level_expects_the_outputs_a_window_emits():
    assert yields(chain([WINDOW], rate=1000.0, keys={"count": 10}))["c"] == pytest.approx(5.0 / 1000.0)
