"""The third benchmark workload (benchmarks/workloads/team_c/jobs.py) run by the control loop, checked against
pandas: each of its four queries writes exactly what its rule makes of the JSON and Parquet records."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from strata.model import SourceSpec
from strata.model.user import load_jobs, with_python_jobs
from strata.runners.producer import team_c_input
from strata.runners.spark_loop import RunConfig
from tests.conftest import rows_read, run_until, written_at_once

JOBS = Path(__file__).resolve().parents[1] / "benchmarks" / "workloads" / "team_c" / "jobs.py"
# many keys, few records each: a card's session (4 s gap) closes within the input
SOURCE = SourceSpec(rate=120, keys={"count": 400, "zipf_s": 0.6}, seed=5)
SECONDS = 16.0


def written(root: Path) -> dict[str, pd.DataFrame]:
    """The workload's input for ``SECONDS`` of event time, every file written at once; the rows each directory
    holds."""
    return written_at_once(team_c_input(root, SOURCE, time.time() - SECONDS, SECONDS), SECONDS)


def risk_of(value: float) -> float:  # the risk job's model, restated for one amount
    feats = np.concatenate([np.sin(value * np.linspace(0.5, 4.0, 64)), np.cos(value * np.linspace(0.5, 4.0, 64))])
    for _ in range(40):
        feats = np.tanh(feats[::-1] * 0.9 + 0.05)
    return round(float(feats.mean()), 9)


def sessions_of(events: pd.DataFrame, gap: pd.Timedelta) -> pd.DataFrame:
    """Per key, runs of events less than ``gap`` apart: (session end = last event + gap, key, count, sum)."""
    rows = []
    for key, group in events.sort_values("event_time").groupby("key"):
        times, values = group["event_time"].tolist(), group["value"].tolist()
        start = 0
        for i in range(1, len(times) + 1):
            if i == len(times) or times[i] - times[i - 1] >= gap:
                rows.append((times[i - 1] + gap, key, i - start, sum(values[start:i])))
                start = i
    return pd.DataFrame(rows, columns=["session_end", "key", "payments", "spent"])


@pytest.mark.spark
def test_team_c_queries_equal_pandas(spark, tmp_path, monkeypatch):
    inputs = written(tmp_path / "in")
    events = inputs["payments_json"]
    assert events.equals(inputs["payments_parquet"])
    monkeypatch.setenv("STRATA_INPUT", str(tmp_path / "in"))  # read by the jobs file when it is loaded
    scenario = with_python_jobs(load_jobs(JOBS), [], "team_c")
    wanted = {job: len(events) for job in ("fraud", "volume", "risk", "card_sessions")}

    def enough(engine) -> bool:
        rows = rows_read(engine)
        windowed = [s.pipeline for s in engine.segments if s.job in ("volume", "card_sessions")]
        # a window is written by the batch after the one whose watermark passed its end (Spark's no-data batch)
        return all(rows.get(j, 0) >= n for j, n in wanted.items()) and all(not p.result().empty for p in windowed)

    result = run_until(spark, scenario, tmp_path / "run", RunConfig(sink="memory"), enough)
    engine = result.engine
    assert not engine.failures()
    out = {s.job: s.pipeline.result() for s in engine.segments}

    # the SQL rules: every payment blocked or sent to review, each once, with its verdict
    block = events["value"] > 0.97
    review = ~block & (events["value"] > 0.9) & (events["key"] % 7 == 0)
    got = out["fraud"].set_index("id").sort_index()
    assert list(got.index) == sorted(events.loc[block | review, "id"])
    assert set(got.loc[got["verdict"] == "block"].index) == set(events.loc[block, "id"])
    assert np.array_equal(got["amount"].to_numpy(), (events.set_index("id").loc[got.index, "value"] * 1000).round(2))

    # the mapInPandas model: every payment once, its risk the model's
    risks = out["risk"].set_index("id")["risk"].sort_index()
    assert list(risks.index) == sorted(events["id"])
    by_id = events.set_index("id")
    assert all(abs(risks[i] - risk_of(by_id.at[i, "value"])) < 1e-9 for i in risks.index[::11])

    # sliding windows (20 s every 5 s): each written window right and written once; the written ones a prefix
    ends = [events["event_time"].dt.floor("5s") + pd.Timedelta(seconds=5 * k) for k in (1, 2, 3, 4)]
    ref = pd.concat([events.assign(window_end=e) for e in ends], ignore_index=True)
    ref = ref.assign(merchant_group=ref["key"] % 16).groupby(["window_end", "merchant_group"])["value"]
    ref = ref.agg(["size", "max"])
    got = out["volume"].assign(window_end=lambda f: pd.to_datetime(f["window_end"], utc=True))
    got = got.set_index(["window_end", "merchant_group"]).sort_index()
    assert not got.index.duplicated().any()
    assert got["payments"].to_dict() == ref["size"].reindex(got.index).to_dict()
    assert np.allclose(got["largest"], ref["max"].reindex(got.index).round(6))
    written_ends = sorted(set(got.index.get_level_values(0)))
    assert written_ends == sorted(set(ref.index.get_level_values(0)))[: len(written_ends)]

    # session windows per card (4 s gap, cards below 200): every written session is one of pandas', once
    cards = events[events["key"] < 200]
    ref = sessions_of(cards, pd.Timedelta(seconds=4)).set_index(["session_end", "key"])
    got = out["card_sessions"].assign(session_end=lambda f: pd.to_datetime(f["session_end"], utc=True))
    got = got.set_index(["session_end", "key"]).sort_index()
    assert not got.index.duplicated().any() and got.index.isin(ref.index).all()
    assert got["payments"].to_dict() == ref["payments"].reindex(got.index).to_dict()
    assert np.allclose(got["spent"], ref["spent"].reindex(got.index).round(6))
