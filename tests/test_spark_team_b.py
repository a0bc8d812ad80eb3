"""The second benchmark workload (benchmarks/workloads/team_b/jobs.py) run by the control loop, checked against
pandas: each of its five queries writes exactly what its rule makes of the CSV and Parquet records."""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from strata.model import SourceSpec
from strata.model.inputs import static_dimension
from strata.model.user import load_jobs, with_python_jobs
from strata.runners.producer import team_b_input
from strata.runners.spark_loop import RunConfig
from tests.conftest import rows_read, run_until, written_at_once

JOBS = Path(__file__).resolve().parents[1] / "benchmarks" / "workloads" / "team_b" / "jobs.py"
SOURCE = SourceSpec(rate=120, keys={"count": 30, "zipf_s": 1.0}, seed=4)


def written(root: Path, seconds: float = 14.0) -> dict[str, pd.DataFrame]:
    """The workload's input for ``seconds`` of event time, every file written at once; the rows each directory
    holds."""
    return written_at_once(team_b_input(root, SOURCE, time.time() - seconds, seconds), seconds)


def settle(value: float, key: int) -> float:  # the route_scores job's rule, restated
    x, bias = value, (key % 31) / 31.0
    for _ in range(8000):
        x = math.cos(x + bias)
    return x


@pytest.mark.spark
def test_team_b_queries_equal_pandas(spark, tmp_path, monkeypatch):
    inputs = written(tmp_path / "in")  # 14 s: at least one 10 s window ends 3 s (the watermark) before the last
    events, orders = inputs["events_csv"], inputs["orders_csv"]
    assert events.equals(inputs["events_parquet"]) and len(orders) > len(events)  # orders: some twice
    monkeypatch.setenv("STRATA_INPUT", str(tmp_path / "in"))  # read by the jobs file when it is loaded
    scenario = with_python_jobs(load_jobs(JOBS), [], "team_b")
    wanted = {"anomalies": len(events), "route_scores": len(events), "enriched": len(events)}
    wanted |= {"bucket_counts": len(events), "orders_once": len(orders)}

    def enough(engine) -> bool:
        rows = rows_read(engine)
        counts = next((s.pipeline for s in engine.segments if s.job == "bucket_counts"), None)
        # a window is written by the batch after the one whose watermark passed its end (Spark's no-data batch)
        return all(rows.get(j, 0) >= n for j, n in wanted.items()) and counts is not None and not counts.result().empty

    result = run_until(spark, scenario, tmp_path / "run", RunConfig(sink="memory"), enough)
    engine = result.engine
    assert not engine.failures()
    out = {s.job: s.pipeline.result() for s in engine.segments}

    # the pandas-UDF filter over CSV: exactly the readings its rule keeps, each once
    expected = 0.45 + 0.1 * np.cos(events["key"].astype(float))
    kept = events.loc[events["value"] - expected > 0.45, "id"]
    assert 0 < len(kept) < len(events)
    assert sorted(out["anomalies"]["id"]) == sorted(kept)

    # the Python UDF over Parquet: every reading once, its score the rule's
    scores = out["route_scores"].set_index("id")["score"].sort_index()
    assert list(scores.index) == sorted(events["id"])
    by_id = events.set_index("id")
    assert all(scores[i] == settle(by_id.at[i, "value"], by_id.at[i, "key"]) for i in scores.index[::7])

    # the stream–static join: the readings of users with dim ≥ 0.1, each once, weighted by the user's dim
    dims = pd.Series(static_dimension(30, seed=4)["dim"])
    joined = events[events["key"].map(dims) >= 0.1]
    got = out["enriched"].set_index("id").sort_index()
    assert list(got.index) == sorted(joined["id"])
    assert np.array_equal(got["weighted"].to_numpy(), (joined["value"] * joined["key"].map(dims)).to_numpy())

    # the deduplication: every order once, though some came twice
    assert sorted(out["orders_once"]["id"]) == sorted(events["id"])

    # the windowed count: every window written is right and written once (append mode); the windows written
    # are a prefix of the reference's (the last ones wait for a watermark that later data would move)
    ref = events.assign(window_end=events["event_time"].dt.floor("10s") + pd.Timedelta(seconds=10))
    ref = ref.assign(bucket=ref["key"] % 8).groupby(["window_end", "bucket"])["value"].agg(["size", "sum"])
    got = out["bucket_counts"].assign(window_end=lambda f: pd.to_datetime(f["window_end"], utc=True))
    got = got.set_index(["window_end", "bucket"]).sort_index()
    assert not got.index.duplicated().any() and len(got) >= 1
    assert got["readings"].to_dict() == ref["size"].reindex(got.index).to_dict()
    assert np.allclose(got["total"], ref["sum"].reindex(got.index).round(6))
    ends = sorted(set(got.index.get_level_values(0)))
    assert ends == sorted(set(ref.index.get_level_values(0)))[: len(ends)]
