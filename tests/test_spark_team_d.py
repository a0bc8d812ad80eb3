"""The fourth benchmark workload (benchmarks/workloads/team_d/jobs.py) run by the control loop, checked against
pandas: each query writes exactly what its rule makes of the JSON and CSV readings and the device registry."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from strata.model import SourceSpec
from strata.model.inputs import static_dimension
from strata.model.user import load_jobs, with_python_jobs
from strata.runners.producer import team_d_input
from strata.runners.spark_loop import RunConfig
from tests.conftest import rows_read, run_until, written_at_once

JOBS = Path(__file__).resolve().parents[1] / "benchmarks" / "workloads" / "team_d" / "jobs.py"
SOURCE = SourceSpec(rate=120, keys={"count": 300, "zipf_s": 0.8}, seed=11)
SECONDS = 32.0  # two 15 s windows close within the input


def eta_of(value: float, key: int) -> float:  # the eta job's model, restated for one shipment
    x, drift = value, (key % 17) / 17.0
    for _ in range(3000):
        x = 0.5 * np.cos(x + drift) + 0.5 * x
    return round(60.0 * float(x), 9)


@pytest.mark.spark
def test_team_d_queries_equal_pandas(spark, tmp_path, monkeypatch):
    inputs = written_at_once(team_d_input(tmp_path / "in", SOURCE, time.time() - SECONDS, SECONDS), SECONDS)
    events = inputs["telemetry_json"]
    assert events["id"].tolist() == inputs["telemetry_csv"]["id"].tolist()
    monkeypatch.setenv("STRATA_INPUT", str(tmp_path / "in"))  # read by the jobs file when it is loaded
    scenario = with_python_jobs(load_jobs(JOBS), [], "team_d")

    def enough(engine) -> bool:
        rows = rows_read(engine)
        windowed = [s.pipeline for s in engine.segments if s.job in ("depot_load", "fleet_summary")]
        return all(rows.get(s.job, 0) >= len(events) for s in engine.segments) and all(
            not p.result().empty for p in windowed
        )

    result = run_until(spark, scenario, tmp_path / "run", RunConfig(sink="memory"), enough)
    engine = result.engine
    assert not engine.failures()
    out = {s.job: s.pipeline.result() for s in engine.segments}

    # each reading above its own device's limit, each once
    dim = pd.Series(static_dimension(300, 11)["dim"])
    limit = 0.55 + 0.4 * dim[events["key"]].to_numpy()
    hot = events[events["value"].to_numpy() > limit]
    got = out["excursions"].set_index("id").sort_index()
    assert list(got.index) == sorted(hot["id"])
    assert got["device"].tolist() == hot.set_index("id").sort_index()["key"].tolist()

    # the pandas UDF: every reading once, its eta the model's
    etas = out["eta"].set_index("id")["eta_min"].sort_index()
    assert list(etas.index) == sorted(events["id"])
    by_id = events.set_index("id")
    assert all(abs(etas[i] - eta_of(by_id.at[i, "value"], by_id.at[i, "key"])) < 1e-6 for i in etas.index[::13])

    # tumbling 15 s windows per depot: each written window right, once; the written windows a prefix
    ref = events.assign(window_end=events["event_time"].dt.floor("15s") + pd.Timedelta(seconds=15))
    ref = ref.assign(depot=ref["key"] % 24).groupby(["window_end", "depot"])["value"].agg(["size", "mean"])
    got = out["depot_load"].assign(window_end=lambda f: pd.to_datetime(f["window_end"], utc=True))
    got = got.set_index(["window_end", "depot"]).sort_index()
    assert not got.index.duplicated().any()
    assert got["readings"].to_dict() == ref["size"].reindex(got.index).to_dict()
    assert np.allclose(got["mean_value"], ref["mean"].reindex(got.index).round(6))
    ends = sorted(set(got.index.get_level_values(0)))
    assert ends == sorted(set(ref.index.get_level_values(0)))[: len(ends)]

    # sliding 30 s windows every 10 s over the whole fleet: counts and maxima exact, each window once
    starts = [events["event_time"].dt.floor("10s") + pd.Timedelta(seconds=10 * k) for k in (1, 2, 3)]
    ref = pd.concat([events.assign(window_end=e) for e in starts], ignore_index=True)
    ref = ref.groupby("window_end")["value"].agg(["size", "max"])
    got = out["fleet_summary"].assign(window_end=lambda f: pd.to_datetime(f["window_end"], utc=True))
    got = got.set_index("window_end").sort_index()
    assert not got.index.duplicated().any()
    assert got["readings"].to_dict() == ref["size"].reindex(got.index).to_dict()
    assert np.allclose(got["hottest"], ref["max"].reindex(got.index).round(6))
