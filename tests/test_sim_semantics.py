"""Known answers for the simulator's dataflow semantics, conservation and determinism."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from strata.model import Scenario
from strata.protocol.engine import Decisions
from strata.sim import SimOptions, Simulation
from strata.sim.reference import sink_totals
from strata.sim.scenarios import chain
from strata.sim.semantics import window_starts
from strata.sim.workload import SourceStream


def test_tandem_with_selectivity_delivers_expected_rate():
    scenario = chain(
        [{"kind": "filter", "selectivity": 0.3}, {"kind": "map"}, {"kind": "filter", "selectivity": 0.5}],
        rate=2000,
        arrivals="constant",
    )
    sim = Simulation(scenario, SimOptions(seed=1)).run(40.0)
    ts = sim.metrics.timeseries()
    steady = ts[(ts.t >= 5) & (ts.t < 39)]
    assert steady.ingest.mean() == pytest.approx(2000, rel=0.001)
    assert steady.throughput.mean() == pytest.approx(2000 * 0.3 * 0.5, rel=0.03)
    # Importance = weight 1 × identity value of the stream into the sink = the rate the last op emits.
    imp = sim.metrics.importance()
    assert imp[(imp.t >= 5) & (imp.t < 39)].importance.mean() == pytest.approx(2000 * 0.3 * 0.5, rel=0.03)


def test_network_bytes_and_stream_affinity():
    scenario = chain([{"kind": "map"}], rate=500, arrivals="constant", nodes=2)
    together = Simulation(scenario, SimOptions(placement={"c.src": "n0", "c.op1": "n0", "c.sink": "n0"})).run(10.0)
    assert together.metrics.summary()["stream_affinity"] == 1.0
    apart = Simulation(scenario, SimOptions(placement={"c.src": "n0", "c.op1": "n1", "c.sink": "n1"})).run(10.0)
    net = apart.metrics.network()
    # Two streams of 100-byte records at 500/s: one crosses nodes, one stays.
    assert net.remote_bytes.sum() == pytest.approx(500 * 10 * 100, rel=0.01)
    assert apart.metrics.summary()["stream_affinity"] == pytest.approx(0.5, abs=0.01)


def test_windowed_count_equals_offline_count():
    scenario = chain(
        [
            {
                "kind": "window_aggregate",
                "window": {"size_s": 5, "watermark_s": 1},
                "aggregate": {"fn": "count"},
                "instances": 3,
            }
        ],
        keys={"count": 50, "zipf_s": 1.0},
        rate=800,
    )
    sim = Simulation(scenario, SimOptions(seed=2, record_inputs=True)).run(40.0, drain=30.0)
    offline = Counter((math.floor(t / 5), key) for _, _, t, key, _, _ in sim.inputs)
    per_key_windows = Counter(key for _, key in offline)
    per_key_records = Counter()
    for (_, key), n in offline.items():
        per_key_records[key] += n
    got = sim.metrics.sink_totals()["c.sink"]
    # Each output is one (window, key) result whose value is its count.
    assert {k: int(v[0]) for k, v in got.items()} == dict(per_key_windows)
    assert {k: int(v[1]) for k, v in got.items()} == dict(per_key_records)
    assert sim.metrics.drop_totals() == {}


def test_sliding_window_counts_each_record_size_over_slide_times():
    scenario = chain(
        [
            {
                "kind": "window_aggregate",
                "window": {"size_s": 4, "slide_s": 1, "watermark_s": 0.5},
                "aggregate": {"fn": "sum"},
            }
        ],
        rate=300,
    )
    sim = Simulation(scenario, SimOptions(seed=3, record_inputs=True)).run(20.0, drain=20.0)
    total_value = sum(v * n for _, _, _, _, v, n in sim.inputs)
    got = sim.metrics.sink_totals()["c.sink"]
    assert sum(v[1] for v in got.values()) == 4 * total_value
    assert list(window_starts(5.5, 4, 1)) == [2, 3, 4, 5]


def test_window_latency_is_at_least_lateness_after_window_end():
    scenario = chain([{"kind": "window_aggregate", "window": {"size_s": 2, "watermark_s": 1}}], rate=200)
    sim = Simulation(scenario, SimOptions(seed=1)).run(30.0)
    lat = sim.metrics.latency().iloc[0]
    # The newest record of a window is < 2 s old at its end; firing waits 1 s more plus a watermark tick.
    assert 1.0 <= lat.p50 <= 3.0 + 0.2 + 0.05


def test_watermark_ticks_do_not_drift():
    # Ticks every 0.2 s summed by repeated addition fall just short of 179 of the first 300 whole
    # seconds, so those 1 s windows would fire a tick (0.2 s) late; tick k at k × 0.2 never does.
    scenario = chain(
        [{"kind": "window_aggregate", "window": {"size_s": 1, "watermark_s": 0}}],
        rate=100,
        arrivals="constant",
        keys={"count": 1},
    )
    sim = Simulation(scenario, SimOptions(seed=1, watermark_interval=0.2)).run(300.5)
    lat = np.frombuffer(sim.metrics.lat["c"], dtype=float)
    assert len(lat) == 300  # one result per window
    # The newest record of a window is 0.01 s (the arrival spacing) older than its end.
    assert lat.max() < 0.05


def test_a_record_generated_exactly_when_a_drained_run_stops_is_not_late(tmp_path):
    path = tmp_path / "trace.csv"
    path.write_text("t\n0.5\n1.0\n2.0\n")
    ops = [
        {
            "name": "src",
            "kind": "source",
            "cost_per_record": 0.0,
            "source": {"rate": 1.0, "keys": {"count": 1}, "arrivals": {"process": "trace", "path": str(path)}},
        },
        {"name": "win", "kind": "window_aggregate", "window": {"size_s": 1.0, "watermark_s": 0.0}},
        {"name": "out", "kind": "sink"},
    ]
    streams = [{"from": "src", "to": "win"}, {"from": "win", "to": "out"}]
    scenario = Scenario.model_validate(
        {
            "cluster": {"nodes": [{"name": "n0", "cores": 1}]},
            "jobs": [
                {"id": "q", "rank": 1, "target_latency_s": 1.0, "templates": [{"operators": ops, "streams": streams}]}
            ],
        }
    )
    sim = Simulation(scenario, SimOptions(seed=1, record_inputs=True))
    sim.run(0.2)
    sim.run(2.0, drain=5.0)  # the record at t = 2.0 is generated during this run, after its final watermark
    assert sim.metrics.drop_totals() == {}
    assert sim.metrics.sink_totals() == sink_totals(sim)


def test_sink_totals_equal_reference_through_every_kind():
    scenario = chain(
        [
            {"kind": "filter", "selectivity": 0.7},
            {"kind": "keyed_stateful", "instances": 3},
            {"kind": "map", "selectivity": 1.5, "instances": 2},
            {"kind": "window_aggregate", "window": {"size_s": 3}, "aggregate": {"fn": "sum"}, "instances": 2},
            {"kind": "join", "selectivity": 0.9},
        ],
        keys={"count": 200, "zipf_s": 1.2},
        rate=1500,
        nodes=3,
    )
    sim = Simulation(scenario, SimOptions(seed=7, record_inputs=True)).run(30.0, drain=30.0)
    assert sim.metrics.sink_totals() == sink_totals(sim)
    assert sim.metrics.conservation().balanced.all()


def test_conservation_with_a_failure_and_shedding():
    scenario = chain([{"kind": "map", "instances": 2}, {"kind": "keyed_stateful", "instances": 2}], rate=3000, nodes=3)
    sim = Simulation(scenario, SimOptions(seed=4, failures=[("n1", 10.0, 15.0)]))
    sim.apply(Decisions(0, rate_limits={"c.src": 1000.0}, limit_mode="drop"), at=20.0)
    sim.run(30.0)
    cons = sim.metrics.conservation()
    assert cons.balanced.all(), cons
    drops = sim.metrics.drop_totals()
    assert drops["failure"] > 0 and drops["shed"] > 0
    src = cons.set_index("pe").loc["c.src"]
    assert src.generated == src.sent + src.shed
    # After the limit, about 1000 records/s are admitted of ~3000 generated.
    assert drops["shed"] == pytest.approx(2000 * 10, rel=0.05)


def test_a_zero_rate_limit_stops_the_source():
    scenario = chain([{"kind": "map"}], rate=1000, arrivals="constant")
    sim = Simulation(scenario, SimOptions(seed=1))
    sim.apply(Decisions(0, rate_limits={"c.src": 0.0}, limit_mode="defer"), at=2.0)
    sim.run(5.0)
    src = sim.metrics.conservation().set_index("pe").loc["c.src"]
    assert src.sent == 2000 and src.shed == src.generated - 2000 >= 2999


def test_deferred_records_keep_their_event_time():
    scenario = chain([{"kind": "map"}], rate=1000, arrivals="constant")
    sim = Simulation(scenario, SimOptions(seed=1))
    sim.apply(Decisions(0, rate_limits={"c.src": 500.0}, limit_mode="defer"))
    sim.run(10.0)
    assert sim.metrics.drop_totals().get("shed", 0) == 0
    assert sim.metrics.deferred > 0
    # Half the rate gets through, and the backlog grows by 500 records/s: latency reaches seconds.
    assert sim.metrics.latency().iloc[0]["max"] > 4.0


def test_same_seed_same_metrics_bit_for_bit():
    scenario = chain(
        [
            {"kind": "filter", "selectivity": 0.5},
            {"kind": "keyed_stateful", "instances": 2},
            {"kind": "window_aggregate", "window": {"size_s": 2}},
        ],
        keys={"count": 100, "zipf_s": 1.0},
        rate=1000,
    )

    def run(seed):
        m = Simulation(scenario, SimOptions(seed=seed, service="exponential")).run(10.0).metrics
        return m.latency(), m.timeseries(), m.nodes(), m.instances()

    a, b, c = run(5), run(5), run(6)
    for x, y in zip(a, b, strict=True):
        assert x.equals(y)
    assert not a[0].equals(c[0])


@pytest.mark.parametrize(
    ("process", "extra", "mean_rate"),
    [
        ("poisson", {}, 1000.0),
        ("constant", {}, 1000.0),
        ("onoff", {"period_s": 10, "on_s": 2, "burst_factor": 3}, 1000.0 * (1 + 2 * 2 / 10)),
        ("diurnal", {"period_s": 20, "amplitude": 0.5}, 1000.0),
    ],
)
def test_arrival_processes_have_their_mean_rate(process, extra, mean_rate):
    from strata.model.job import SourceSpec

    spec = SourceSpec.model_validate({"rate": 1000, "arrivals": {"process": process, **extra}})
    stream = SourceStream(spec, seed=1, index=0)
    times = []
    while (t := stream.next_time()) < 200.0:
        times.append(t)
    assert len(times) / 200.0 == pytest.approx(mean_rate, rel=0.02)
    if process == "onoff":
        in_burst = sum(1 for t in times if t % 10 < 2)
        assert in_burst / len(times) == pytest.approx(2 * 3 / (2 * 3 + 8), rel=0.03)


def test_trace_replay_and_rate_curve(tmp_path):
    from strata.model.job import SourceSpec

    path = tmp_path / "trace.csv"
    path.write_text("t\n" + "\n".join(str(x) for x in [0.5, 0.1, 2.0, 3.25]) + "\n")
    spec = SourceSpec.model_validate({"rate": 1, "arrivals": {"process": "trace", "path": str(path)}})
    stream = SourceStream(spec, seed=1, index=0)
    assert [stream.next_time() for _ in range(5)] == [0.1, 0.5, 2.0, 3.25, None]
    curve = SourceSpec.model_validate(
        {"rate": 1, "rate_curve": [[0, 0], [100, 200]], "arrivals": {"process": "constant"}}
    )
    stream = SourceStream(curve, seed=1, index=0)
    times = []
    while (t := stream.next_time()) is not None and t < 100:
        times.append(t)
    assert len(times) == pytest.approx(100 * 200 / 2, rel=0.02)


@pytest.mark.parametrize("process", ["poisson", "constant"])
def test_a_rate_curve_that_ends_at_zero_ends_the_stream(process):
    from strata.model.job import SourceSpec

    # 100/s for 10 s, down to 0 at 11 s and 0 for ever after: about 1050 arrivals, then none (no spin).
    spec = SourceSpec.model_validate(
        {"rate": 100, "rate_curve": [[0, 100], [10, 100], [11, 0]], "arrivals": {"process": process}}
    )
    stream = SourceStream(spec, seed=3, index=0)
    times = []
    while (t := stream.next_time()) is not None:
        times.append(t)
        assert len(times) < 5000
    assert max(times) <= 11.0
    assert len(times) == pytest.approx(1050, rel=0.08)


def test_zipf_keys_and_drift():
    from strata.model.job import SourceSpec

    spec = SourceSpec.model_validate(
        {"rate": 1, "keys": {"count": 100, "zipf_s": 1.0, "drift_period_s": 10, "drift_step": 5}}
    )
    stream = SourceStream(spec, seed=2, index=0)
    early = Counter(stream.key(1.0) for _ in range(20000))
    late = Counter(stream.key(25.0) for _ in range(20000))
    weights = 1 / np.arange(1, 101)
    assert early[0] / 20000 == pytest.approx(weights[0] / weights.sum(), rel=0.05)
    assert early.most_common(1)[0][0] == 0 and late.most_common(1)[0][0] == 10


def test_placement_forms_and_errors():
    scenario = chain([{"kind": "map", "instances": 2}], nodes=3)
    sim = Simulation(
        scenario,
        SimOptions(placement={"c.op1": [("n2", 1.5), ("n0", 0.5)], ("c.src", 0): "n1", "c.sink": "n2"}),
    )
    assert [i.node.name for i in sim.pes["c.op1"].instances] == ["n2", "n0"]
    assert sim.node_by_name["n2"].view.share == {"c.op1": 1.5}
    assert sim.pes["c.src"].instances[0].node.name == "n1"
    sim = Simulation(scenario, SimOptions(placement={"c.op1": {"n1": 0.7, "n0": 0.0, "n2": 1.2}}))
    assert [(i.node.name, i.share) for i in sim.pes["c.op1"].instances] == [("n1", 0.7), ("n2", 1.2)]
    with pytest.raises(ValueError, match=r"placement\['c.op1'\]: expected a node"):
        Simulation(scenario, SimOptions(placement={"c.op1": "nowhere"}))
    with pytest.raises(ValueError, match="expected a PE"):
        Simulation(scenario, SimOptions(placement={"c.nope": "n0"}))


def test_every_node_gets_its_own_policy_with_job_targets():
    scenario: Scenario = chain([{"kind": "map"}], nodes=2, target=3.0)
    views = []

    def factory(view):
        from strata.sim import FifoDispatch

        views.append(view)
        return FifoDispatch(view)

    Simulation(scenario, SimOptions(dispatch=factory))
    assert [v.name for v in views] == ["n0", "n1"]
    assert all(v.target_latency == {"c": 3.0} for v in views)
    assert views[0].downstream["c.src"] == ("c.op1",)


_RUN = """
import hashlib
from strata.protocol.engine import Decisions
from strata.sim import Move, SimOptions, Simulation
from strata.sim.scenarios import chain
sc = chain([{"kind": "map", "instances": 2}, {"kind": "window_aggregate", "window": {"size_s": 1},
            "instances": 3, "key_groups": 8}], keys={"count": 50, "zipf_s": 1.0}, rate=500, nodes=3)
sim = Simulation(sc, SimOptions(seed=9, service="exponential"))
sim.apply(Decisions(0, moves=[Move("c.op2", g, (g + 1) % 3, "stop" if g % 2 else "live") for g in range(8)]), at=2.0)
sim.run(5.0)
m = sim.metrics
print(hashlib.sha256(m.latency().to_csv().encode() + m.nodes().to_csv().encode()
                     + m.migrations().to_csv().encode()).hexdigest())
"""


@pytest.mark.slow
def test_determinism_does_not_depend_on_python_hash_seed():
    import os
    import subprocess
    import sys

    digests = set()
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        out = subprocess.run([sys.executable, "-c", _RUN], capture_output=True, text=True, env=env, check=True)
        digests.add(out.stdout.strip())
    assert len(digests) == 1


def test_frontier_is_event_time_or_the_window_due_time():
    from strata.sim import FifoDispatch

    seen = []

    class Recorder(FifoDispatch):
        def push(self, msg, now):
            seen.append((msg.pe, msg.event_time, msg.frontier, msg.created))
            super().push(msg, now)

    scenario = chain(
        [{"kind": "map"}, {"kind": "window_aggregate", "window": {"size_s": 2, "watermark_s": 0.5}}], rate=100
    )
    Simulation(scenario, SimOptions(seed=1, dispatch=Recorder)).run(5.0)
    into_window = [(et, f) for pe, et, f, _ in seen if pe == "c.op2"]
    regular = [(et, f) for pe, et, f, _ in seen if pe == "c.op1"]
    assert into_window and regular
    assert all(f == math.floor(et / 2) * 2 + 2 + 0.5 for et, f in into_window)
    assert all(f == et for et, f in regular)
    # A window result, carrying its newest input's event time, leaves only once the window is due.
    results = [(et, created) for pe, et, _, created in seen if pe == "c.sink"]
    assert results and all(created >= math.floor(et / 2) * 2 + 2.5 for et, created in results)


def test_enforced_cpu_share_caps_an_instance():
    scenario = chain([{"kind": "map", "cost_per_record": 8e-4}], rate=1000, arrivals="constant", nodes=2)
    placement = {"c.src": "n0", "c.op1": [("n1", 0.4)], "c.sink": "n0"}
    capped = Simulation(scenario, SimOptions(placement=placement, enforce_shares=True)).run(20.0)
    free = Simulation(scenario, SimOptions(placement=placement)).run(20.0)
    busy = capped.metrics.instances().set_index("pe").loc["c.op1", "busy"]
    # Offered 0.8 cores; the share allows 0.4 cores (plus a 10 ms burst), the free run uses 0.8.
    assert busy / 20.0 == pytest.approx(0.4, rel=0.01)
    assert free.metrics.instances().set_index("pe").loc["c.op1", "busy"] / 20.0 == pytest.approx(0.8, rel=0.01)
    assert capped.metrics.conservation().balanced.all()
    assert capped.metrics.latency().iloc[0].p99 > 5.0 > free.metrics.latency().iloc[0].p99


def test_imbalance_over_time_follows_a_hot_key():
    # One key only: every record lands on one of the two instances of the keyed op.
    scenario = chain(
        [{"kind": "keyed_stateful", "instances": 2, "cost_per_record": 1e-4}],
        keys={"count": 1},
        rate=1000,
        arrivals="constant",
    )
    sim = Simulation(scenario, SimOptions(seed=1)).run(5.0)
    imb = sim.metrics.imbalance_over_time()
    busy = imb[(imb.pe == "c.op1") & (imb.t >= 1)]
    assert len(busy) == 4 and (busy.imbalance == 2.0).all()
