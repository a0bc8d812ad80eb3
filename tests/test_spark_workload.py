"""The synthetic source without Spark: deterministic rows, rates, keys, read limits, the control file."""

from __future__ import annotations

import time

import numpy as np
import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from strata.model import SourceSpec
from strata.model.inputs import Timeline, Workload, record_columns, zipf_cdf
from strata.spark.sources import RateCap, SyntheticStreamReader, expected_rows, synthetic_options, task_splits

EPOCH = 1_700_000_000.0


def reader(spec: SourceSpec, **kw) -> SyntheticStreamReader:
    return SyntheticStreamReader(synthetic_options(spec, **kw))


def rows_of(r: SyntheticStreamReader, start: dict, end: dict) -> dict[str, np.ndarray]:
    batches = [b for part in r.partitions(start, end) for b in r.read(part)]
    return {name: np.concatenate([b.column(name).to_numpy() for b in batches]) for name in ("id", "key", "value")}


def test_constant_arrivals_follow_the_rate_curve_exactly():
    spec = SourceSpec(rate=100, rate_curve=[(0, 100), (10, 300)], arrivals={"process": "constant"})
    tl = Timeline(Workload.of(spec), tick_s=0.1)
    # ∫0^10 (100 + 20 t) dt = 2000 records, and 300/s afterwards
    assert tl.rows_before_tick(100) == 2000
    assert tl.rows_before_tick(110) - tl.rows_before_tick(100) == 300


def test_onoff_bursts_multiply_the_rate_during_on_phases():
    spec = SourceSpec(rate=1000, arrivals={"process": "onoff", "period_s": 10, "on_s": 2, "burst_factor": 4}, seed=3)
    tl = Timeline(Workload.of(spec), tick_s=0.1)
    on = tl.rows_before_tick(20)
    off = tl.rows_before_tick(100) - on
    assert on == pytest.approx(2 * 4000, rel=0.05)
    assert off == pytest.approx(8 * 1000, rel=0.05)


def test_rows_are_a_pure_function_of_their_offsets():
    spec = SourceSpec(rate=3000, keys={"count": 500, "zipf_s": 1.2, "drift_period_s": 2.0, "drift_step": 7}, seed=11)
    a = reader(spec, clock="virtual", end_s=5, epoch=EPOCH, partitions=3)
    b = reader(spec, clock="virtual", end_s=5, epoch=EPOCH, partitions=1)
    whole = rows_of(a, {"row": 0, "epoch": EPOCH}, {"row": 9000, "epoch": EPOCH})
    # the same range read in two pieces by another reader instance (a replay) gives the same rows
    first = rows_of(b, {"row": 0, "epoch": EPOCH}, {"row": 4321, "epoch": EPOCH})
    second = rows_of(b, {"row": 4321, "epoch": EPOCH}, {"row": 9000, "epoch": EPOCH})
    for col in ("id", "key", "value"):
        np.testing.assert_array_equal(whole[col], np.concatenate([first[col], second[col]]))
    ref = expected_rows(spec, 5, EPOCH)
    np.testing.assert_array_equal(whole["key"], ref["key"][:9000])
    np.testing.assert_array_equal(whole["id"], np.arange(9000))


def test_keys_are_zipf_and_drift_moves_the_hot_key():
    spec = SourceSpec(rate=20000, keys={"count": 100, "zipf_s": 1.0, "drift_period_s": 1.0, "drift_step": 5}, seed=1)
    ref = expected_rows(spec, 2.0, EPOCH)
    t = (ref["event_time"].astype("int64") / 1e6) - EPOCH
    early, late = ref["key"][t < 1.0], ref["key"][(t >= 1.0) & (t < 2.0)]
    assert np.bincount(early).argmax() == 0
    assert np.bincount(late).argmax() == 5
    cdf = zipf_cdf(100, 1.0)
    share = np.mean(early == 0)
    assert share == pytest.approx(cdf[0], abs=0.02)
    assert np.all(np.diff(ref["event_time"].astype("int64")) >= 0)


def test_values_are_uniform_and_event_times_inside_their_tick():
    spec = SourceSpec(rate=5000, seed=2)
    spec = Workload.of(spec)
    tl = Timeline(spec, 0.1)
    hi = tl.rows_before_tick(10)
    cols = record_columns(spec, 0.1, tl.segments(0, hi), 0, hi)
    assert 0.45 < cols["value"].mean() < 0.55
    assert cols["t"].min() > 0 and cols["t"].max() < 1.0


def test_read_limits_and_the_control_file_cap_batches(tmp_path):
    spec = SourceSpec(rate=1000, arrivals={"process": "constant"})
    cap = RateCap(tmp_path / "control" / "q.json")
    r = reader(spec, clock="virtual", end_s=10, epoch=EPOCH, max_rows_per_batch=2500, control_file=cap.path)
    start = r.initialOffset()
    assert start == {"row": 0, "epoch": EPOCH}
    assert r.getDefaultReadLimit() == ReadMaxRows(2500)
    assert r.latestOffset(start, ReadAllAvailable())["row"] == 10000
    assert r.latestOffset(start, r.getDefaultReadLimit())["row"] == 2500
    cap.set(700)
    assert r.latestOffset(start, r.getDefaultReadLimit())["row"] == 700
    assert r.latestOffset({"row": 9800, "epoch": EPOCH}, ReadAllAvailable())["row"] == 10000
    cap.set(0)  # paused: no new offset, so Spark plans no batch
    assert r.latestOffset({"row": 1200, "epoch": EPOCH}, ReadAllAvailable())["row"] == 1200
    cap.set(None)
    assert r.latestOffset(start, ReadAllAvailable())["row"] == 10000
    assert r.reportLatestOffset() == {"row": 10000, "epoch": EPOCH}
    with pytest.raises(ValueError):
        cap.set(-1)


def test_the_control_file_splits_batches_into_tasks_of_at_most_its_rows(tmp_path):
    assert task_splits(9000, 2, None) == 2  # no bound: the source's own splits
    assert task_splits(9000, 2, 3000) == 4  # 2 × ceil(9000 / 6000): 4 tasks of 2250 rows, as many on each core
    assert task_splits(9000, 2, 5000) == 2
    assert task_splits(5, 2, 1) == 6
    spec = SourceSpec(rate=1000, arrivals={"process": "constant"})
    cap = RateCap(tmp_path / "control" / "q.json")
    r = reader(spec, clock="virtual", end_s=10, epoch=EPOCH, control_file=cap.path)
    start, end = r.initialOffset(), {"row": 9000, "epoch": EPOCH}
    assert [(p.lo, p.hi) for p in r.partitions(start, end)] == [(0, 4500), (4500, 9000)]
    cap.set(5000)
    cap.split(3000)
    assert cap.get() == 5000 and cap.task_rows() == 3000  # the cap and the task size live side by side
    assert [(p.lo, p.hi) for p in r.partitions(start, end)] == [(0, 2250), (2250, 4500), (4500, 6750), (6750, 9000)]
    assert len(rows_of(r, start, end)["id"]) == 9000  # the same rows, in more tasks
    cap.set(None)
    assert cap.task_rows() == 3000
    cap.split(None)
    assert len(r.partitions(start, end)) == 2
    with pytest.raises(ValueError):
        cap.split(0)


def test_wall_clock_offers_only_what_has_happened():
    spec = SourceSpec(rate=1000, arrivals={"process": "constant"})
    r = reader(spec, clock="wall")
    start = {"row": 0, "epoch": time.time() - 3.0}
    end = r.latestOffset(start, ReadAllAvailable())["row"]
    assert 2900 <= end <= 3200
    r.prepareForTriggerAvailableNow()
    frozen = r.latestOffset(start, ReadAllAvailable())["row"]
    time.sleep(0.35)
    assert r.latestOffset(start, ReadAllAvailable())["row"] == frozen
    assert reader(spec, clock="wall").latestOffset(start, ReadAllAvailable())["row"] >= frozen + 300


def test_bad_options_are_refused():
    spec = SourceSpec(rate=10)
    with pytest.raises(ValueError, match="virtual clock needs end_s"):
        reader(spec, clock="virtual")
    with pytest.raises(ValueError, match="clock"):
        reader(spec, clock="sundial")
    with pytest.raises(ValueError, match="cannot be generated"):
        Timeline(Workload.of(SourceSpec(rate=10, arrivals={"process": "trace", "path": "x.csv"})))


def test_a_read_freezes_its_workers_heap(monkeypatch):
    """PySpark runs a full collection in a reused worker after every task; a read moves the worker's heap out of
    its reach (issue 28: ~50 ms a task otherwise)."""
    import gc
    import sys

    from strata.spark import worker_heap

    r = reader(SourceSpec(rate=1000, seed=2), clock="virtual", end_s=1, epoch=EPOCH)
    part = r.partitions({"row": 0, "epoch": EPOCH}, {"row": 500, "epoch": EPOCH})[0]
    gc.unfreeze()
    monkeypatch.setattr(worker_heap, "_loaded_at_freeze", 0)
    try:
        [batch] = r.read(part)
        assert batch.num_rows == 250
        assert gc.get_freeze_count() > 0
        assert worker_heap._loaded_at_freeze == len(sys.modules)
    finally:
        gc.unfreeze()
