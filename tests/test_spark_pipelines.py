"""Exactly once on Spark: every operator kind's sink output equals an offline pandas computation.

One module-scoped run starts six queries on the shared session (availableNow
over a finite generated source, a few micro-batches each). Every one is killed
mid-run by an exception raised after batch 2 was written (and, for the Strata
store, its state committed) but before Spark committed it, and is restarted
from its checkpoint. The managed keyed operator's routing table changes
between batches. Every check below then
compares the sinks with a reference recomputed from the same generated input.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from pyspark.errors import StreamingQueryException

from strata.model import Job, SourceSpec, locate_problems
from strata.model.inputs import static_dimension
from strata.spark.listener import ProgressListener, progress_row
from strata.spark.pipelines import Pipeline, PipelineOptions, PipelineProblems
from strata.spark.sinks import event_micros
from strata.spark.sources import expected_rows

pytestmark = pytest.mark.spark

EPOCH = 1_700_000_000.0
END_S = 6.0
SOURCE = {"rate": 1500, "keys": {"count": 40, "zipf_s": 1.1, "drift_period_s": 3.0, "drift_step": 3}, "seed": 5}
CRASH_AT = 2  # batch after whose sink write the crashing queries die


def make_job(jid: str, *ops: dict) -> Job:
    chain = [{"name": "src", "kind": "source", "source": SOURCE}, *ops, {"name": "out", "kind": "sink"}]
    names = [o["name"] for o in chain]
    streams = [{"from": a, "to": b} for a, b in itertools.pairwise(names)]
    return Job.model_validate({"id": jid, "rank": 1, "templates": [{"operators": chain, "streams": streams}]})


JOBS = {
    "rowwise": make_job(
        "rowwise",
        {"name": "f", "kind": "filter", "predicate": "value > 0.3"},
        {"name": "m", "kind": "map", "expressions": ["id", "key", "value * 10 AS v10"]},
    ),
    "joined": make_job(
        "joined",
        {"name": "j", "kind": "join", "join": {"rows": 30}},
        {"name": "f", "kind": "filter", "predicate": "dim > 0.2"},
    ),
    "win_native": make_job(
        "win_native",
        {
            "name": "w",
            "kind": "window_aggregate",
            "window": {"size_s": 1, "watermark_s": 0.5},
            "aggregate": {"fn": "sum", "column": "value"},
        },
    ),
    "win_managed": make_job(
        "win_managed",
        {
            "name": "w",
            "kind": "window_aggregate",
            "window": {"size_s": 2, "slide_s": 1, "watermark_s": 1},
            "aggregate": {"fn": "max"},
            "key_groups": 8,
        },
    ),
    "keyed_managed": make_job(
        "keyed_managed", {"name": "k", "kind": "keyed_stateful", "key_groups": 16, "aggregate": {"fn": "count"}}
    ),
    "keyed_native": make_job("keyed_native", {"name": "k", "kind": "keyed_stateful", "aggregate": {"fn": "avg"}}),
}


def options(name: str) -> PipelineOptions:
    managed = {"win_managed": frozenset({"w"}), "keyed_native": frozenset()}.get(name)
    cap = None if name == "rowwise" else 2000  # rowwise is capped through its control file instead
    return PipelineOptions(
        sink="parquet",
        clock="virtual",
        end_s=END_S,
        epoch=EPOCH,
        max_rows_per_batch=cap,
        available_now=True,
        managed=managed,
    )


class Crash:
    """Kills the query after batch ``CRASH_AT`` was written (and state committed), before Spark commits it."""

    def before(self, pipeline, batch_id):
        pass

    def after(self, pipeline, record):
        if record["batch_id"] == CRASH_AT:
            raise RuntimeError("injected crash")


class Reroute:
    """Changes the managed operator's routing between batches and looks at where the state went."""

    def __init__(self):
        self.seen: dict[int, dict] = {}

    def before(self, pipeline, batch_id):
        pass

    def after(self, pipeline, record):
        store = pipeline.store
        b = record["batch_id"]
        groups = {
            p: set(pq.read_table(store.directory / f"v={b}" / f"part={p}.parquet").column("kg").to_pylist())
            for p in (0, 1)
        }
        self.seen[b] = {"partition_rows": record["partition_rows"], "state_groups": groups}
        if b == 0:
            store.route([0] * 16)
        elif b == 1:
            store.route([(g + 1) % 2 for g in range(16)])


class PoolProbe:
    def __init__(self):
        self.pools: list[str | None] = []

    def before(self, pipeline, batch_id):
        self.pools.append(pipeline.spark.sparkContext.getLocalProperty("spark.scheduler.pool"))

    def after(self, pipeline, record):
        pass


class PoolChoice:
    """Puts every batch in pool ``w2`` before it runs, as the dispatch gate does."""

    def before(self, pipeline, batch_id):
        pipeline.spark.sparkContext.setLocalProperty("spark.scheduler.pool", "w2")

    def after(self, pipeline, record):
        pass


@pytest.fixture(scope="module")
def reference() -> pd.DataFrame:
    cols = expected_rows(SourceSpec.model_validate(SOURCE), END_S, EPOCH)
    frame = pd.DataFrame(cols)
    frame["et_us"] = frame["event_time"].astype("int64")
    return frame


def run_all(pipes: dict[str, Pipeline]) -> dict[str, Exception | None]:
    """Start the pipelines one at a time, then wait for all; how each ended (None or its exception)."""
    for p in pipes.values():  # Python planner processes starting together time out when the machine is busy
        p.start()
        deadline = time.time() + 120
        while p.query.isActive and p.query.lastProgress is None and time.time() < deadline:
            time.sleep(0.2)
    ended = {}
    for name, p in pipes.items():
        with contextlib.suppress(StreamingQueryException):  # the exception is read just below
            p.query.awaitTermination(300)
        ended[name] = p.query.exception()
    return ended


@pytest.fixture(scope="module")
def run(spark, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("pipelines")
    listener = ProgressListener()
    spark.streams.addListener(listener)
    pipes = {name: Pipeline(spark, job, job.templates[0], run_dir, options(name)) for name, job in JOBS.items()}
    pipes["rowwise"].rate_cap.set(1200)
    pipes["rowwise"].pool = "urgent"
    probe, reroute = PoolProbe(), Reroute()
    pipes["rowwise"].hooks.append(probe)
    pipes["keyed_managed"].hooks.append(reroute)
    pipes["joined"].hooks.append(PoolChoice())
    for p in pipes.values():
        p.hooks.append(Crash())
    crashed = run_all(pipes)
    restarted = {name: Pipeline(spark, job, job.templates[0], run_dir, options(name)) for name, job in JOBS.items()}
    resumed = run_all(restarted)
    assert not any(resumed.values()), resumed
    for p in [*pipes.values(), *restarted.values()]:
        assert listener.wait_terminated(p.query.runId), f"{p.name}: termination never reported"
    yield {
        "pipes": pipes,
        "restarted": restarted,
        "crashed": crashed,
        "listener": listener,
        "probe": probe,
        "reroute": reroute,
    }
    spark.streams.removeListener(listener)


def sink(run, name) -> pd.DataFrame:
    frame = run["pipes"][name].result()
    assert not frame.empty, f"{name} wrote nothing"
    return frame


def progress(run, name) -> list[dict]:
    return [r for r in run["listener"].snapshot() if r["query"] == name]


def test_every_query_was_killed_mid_run_and_resumed(run):
    for name, error in run["crashed"].items():
        assert error is not None and "injected crash" in str(error), f"{name}: {error}"
        batches = sorted(r["batch_id"] for r in run["restarted"][name].batch_records())
        assert batches[0] == CRASH_AT and len(batches) >= 2, (name, batches)  # the killed batch replayed first


def test_every_input_row_is_read_exactly_once(run, reference):
    for name in JOBS:
        rows = sum(r["input_rows"] for r in progress(run, name))
        assert rows == len(reference), name


def test_listener_reads_each_progress_as_the_query_recorded_it(run):
    """Strata's listener reads an event as its JSON text: the same rows as the query's own recent progress."""
    for name, p in run["restarted"].items():
        own = [progress_row(json.loads(q.json)) for q in p.query.recentProgress]
        heard = [r for r in progress(run, name) if r["id"] == str(p.query.id) and r["batch_id"] >= CRASH_AT]
        assert own and heard == own, name


def test_filter_and_map(run, reference):
    out = sink(run, "rowwise").sort_values("id").reset_index(drop=True)
    ref = reference[reference["value"] > 0.3].reset_index(drop=True)
    assert list(out["id"]) == list(ref["id"])
    np.testing.assert_array_equal(out["key"], ref["key"])
    np.testing.assert_allclose(out["v10"], ref["value"] * 10)
    assert set(out.columns) >= {"id", "key", "v10", "event_time"}


def test_control_file_caps_rows_per_batch_and_backlog_is_observed(run, reference):
    rows = progress(run, "rowwise")
    assert max(r["input_rows"] for r in rows) == 1200
    assert len([r for r in rows if r["input_rows"]]) == -(-len(reference) // 1200)
    first = next(r for r in rows if r["input_rows"])
    assert first["backlog_rows"] == len(reference) - first["end_row"]


def test_pool_is_set_per_batch(run):
    assert run["probe"].pools and set(run["probe"].pools) == {"urgent"}
    assert {r["pool"] for r in run["pipes"]["rowwise"].batch_records()} == {"urgent"}
    # a hook's choice (the gate's) is the pool the batch's record gives, not the pipeline's own
    joined = list(run["pipes"]["joined"].batch_records())
    assert joined and {r["pool"] for r in joined} == {"w2"}


def test_stream_static_join(run, reference):
    out = sink(run, "joined").sort_values("id").reset_index(drop=True)
    dim = pd.DataFrame(static_dimension(30))
    ref = reference.merge(dim, on="key")
    ref = ref[ref["dim"] > 0.2].sort_values("id").reset_index(drop=True)
    assert list(out["id"]) == list(ref["id"])
    np.testing.assert_allclose(out["dim"], ref["dim"])


def windows(reference: pd.DataFrame, size_s: float, slide_s: float, fn: str, closed_by_us: int) -> pd.DataFrame:
    """Offline event-time windows (aligned to the Unix epoch like Spark's window()) closed by a watermark."""
    size, slide = int(size_s * 1e6), int(slide_s * 1e6)
    parts = []
    for j in range(-(-size // slide)):
        start = reference["et_us"] - reference["et_us"] % slide - j * slide
        inside = start + size > reference["et_us"]
        parts.append(reference[inside].assign(ws=start[inside]))
    all_windows = pd.concat(parts)
    agg = all_windows.groupby(["ws", "key"])["value"].agg(fn).reset_index()
    return agg[agg["ws"] + size <= closed_by_us].sort_values(["ws", "key"]).reset_index(drop=True)


def _window_output(frame: pd.DataFrame, fn: str) -> pd.DataFrame:
    ws = event_micros(frame["window_start"])
    out = pd.DataFrame({"ws": ws, "key": frame["key"], "v": frame[fn]})
    assert not out.duplicated(["ws", "key"]).any(), "a window was emitted twice"
    return out.sort_values(["ws", "key"]).reset_index(drop=True)


def test_tumbling_window_on_spark_state_after_crash_and_restart(run, reference):
    marks = [r["watermark"] for r in progress(run, "win_native") if r["watermark"]]
    final = pd.Timestamp(marks[-1]).value // 1000
    # Spark's watermark: newest event time − 0.5 s, in whole milliseconds
    assert final == (reference["et_us"].max() - 500_000) // 1000 * 1000
    out = _window_output(sink(run, "win_native"), "sum")
    ref = windows(reference, 1, 1, "sum", final)
    assert len(ref) > 100
    assert list(out["ws"]) == list(ref["ws"]) and list(out["key"]) == list(ref["key"])
    np.testing.assert_allclose(out["v"], ref["value"])


def test_sliding_window_on_the_managed_store(run, reference):
    out = _window_output(sink(run, "win_managed"), "max")
    ref = windows(reference, 2, 1, "max", reference["et_us"].max() - 1_000_000)
    assert len(ref) > 100
    assert list(out["ws"]) == list(ref["ws"]) and list(out["key"]) == list(ref["key"])
    np.testing.assert_array_equal(out["v"], ref["value"])


def _latest_per_key(frame: pd.DataFrame) -> pd.DataFrame:
    assert not frame.duplicated(["key", "batch_id"]).any()
    return frame.sort_values("batch_id").groupby("key").tail(1).set_index("key").sort_index()


def test_keyed_managed_state_survives_crash_restart_and_rerouting(run, reference):
    final = _latest_per_key(sink(run, "keyed_managed"))
    ref = reference.groupby("key").size().sort_index()
    assert list(final.index) == list(ref.index)
    np.testing.assert_array_equal(final["count"], ref.to_numpy())
    seen = run["reroute"].seen
    # batch 0: hash routing, key group g's state written by task g mod 2
    assert seen[0]["state_groups"][0] and all(g % 2 == p for p in (0, 1) for g in seen[0]["state_groups"][p])
    # batch 1: every key group routed to partition 0, so task 0 read the groups task 1 had written and holds all
    assert seen[1]["partition_rows"][1] == 0 and seen[1]["partition_rows"][0] > 0
    assert not seen[1]["state_groups"][1]
    assert seen[1]["state_groups"][0] >= seen[0]["state_groups"][0] | seen[0]["state_groups"][1]
    # batch 2: each group moved to the partition opposite to hash routing
    assert seen[2]["state_groups"][0] and seen[2]["state_groups"][1]
    assert all((g + 1) % 2 == p for p in (0, 1) for g in seen[2]["state_groups"][p])


def test_keyed_on_spark_state_update_mode(run, reference):
    final = _latest_per_key(sink(run, "keyed_native"))
    ref = reference.groupby("key")["value"].mean().sort_index()
    assert list(final.index) == list(ref.index)
    np.testing.assert_allclose(final["avg"], ref.to_numpy())


def test_sink_side_latency_and_partition_load_are_recorded(run):
    records = list(run["pipes"]["keyed_managed"].batch_records())
    assert all(r["latency_p50"] is not None and r["latency_p99"] >= r["latency_p50"] for r in records)
    assert all(sum(r["partition_rows"]) == sum(r["group_rows"].values()) for r in records)


def test_unanalysable_expression_fails_before_start_with_a_location(spark, tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "cluster: {nodes: [{name: n0, cores: 2}]}\n"
        "jobs:\n"
        "  - id: j\n"
        "    rank: 1\n"
        "    templates:\n"
        "      - operators:\n"
        "          - {name: s, kind: source, source: {rate: 10}}\n"
        "          - name: f\n"
        "            kind: filter\n"
        '            predicate: "no_such_column > 1"\n'
        "          - {name: o, kind: sink}\n"
        "        streams: [{from: s, to: f}, {from: f, to: o}]\n"
    )
    from strata.model import load_scenario

    job = load_scenario(spec).jobs[0]
    with pytest.raises(PipelineProblems) as err:
        Pipeline(spark, job, job.templates[0], Path(tmp_path), here=("jobs", 0, "templates", 0))
    located = locate_problems([spec], err.value.problems).problems
    assert len(located) == 1
    assert str(located[0]).startswith(f"{spec}:10: jobs[0].templates[0].operators[1].predicate: expected an expression")
    assert "no_such_column" in located[0].found
