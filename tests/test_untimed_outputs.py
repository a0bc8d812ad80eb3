"""Rows a sink wrote with a null event-time column: counted, left out of latency, and said once per job (no Spark)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from strata.model import load_scenario
from strata.model.user import collecting, job, with_python_jobs
from strata.report.console import untimed_lines
from strata.spark.measure import job_summary
from strata.spark.pipelines import latency_percentiles
from strata.spark.sinks import NO_EVENT_TIME, event_micros, timed

from .conftest import EXAMPLES


def test_a_null_event_time_is_kept_as_a_written_row_without_latency():
    times = event_micros(pd.Series([pd.Timestamp(999.0, unit="s"), None, pd.NaT]))
    assert times.tolist() == [999_000_000, NO_EVENT_TIME, NO_EVENT_TIME]
    assert timed(times).tolist() == [999_000_000]
    lat = latency_percentiles(1_000.0, timed(times))
    assert lat["latency_max"] == pytest.approx(1.0) and lat["latency_p99"] == pytest.approx(1.0)
    assert latency_percentiles(1_000.0, timed(times[1:]))["latency_p50"] is None


def _batch(job_id: str, batch_id: int, rows_out: int, rows_untimed: int) -> dict:
    return {
        "mode": "strata",
        "job": job_id,
        "segment": 0,
        "batch_id": batch_id,
        "rows_in": 10.0,
        "rows_out": rows_out,
        "rows_untimed": rows_untimed,
    }


def _summary(scenario, batches: list[dict]) -> pd.DataFrame:
    latency = pd.DataFrame(columns=["mode", "job", "event_s"])
    rows = job_summary(latency, pd.DataFrame(batches), pd.DataFrame(), scenario, "strata", 10.0, 10.0)
    return pd.DataFrame(rows)


def test_the_summary_counts_untimed_rows_once_per_batch_and_the_run_says_so():
    scenario = load_scenario(EXAMPLES / "pipeline.yaml")
    first, second = (j.id for j in scenario.jobs)
    batches = [
        _batch(first, 0, 1000, 1000),
        _batch(first, 1, 500, 500),  # a replayed batch: its last attempt is what the sink holds
        _batch(first, 1, 700, 700),
        _batch(first, 2, 300, 0),
        _batch(second, 0, 40, 0),
    ]
    summary = _summary(scenario, batches).set_index("job")
    assert summary.loc[first, ["written", "untimed", "outputs"]].tolist() == [2000, 1700, 0]
    assert summary.loc[second, ["written", "untimed"]].tolist() == [40, 0]
    lines = untimed_lines(summary.reset_index(), scenario)
    assert lines == [
        f"[yellow]warning[/] job {first}: 1,700 of 2,000 rows its sink wrote have no event time (column "
        "'event_time' is null): latency and misses cannot be measured for them"
    ]


def test_a_python_jobs_warning_names_its_declaration_and_its_event_time_column():
    with collecting():
        counts = job("counts", rank=1, event_time="window_end")
        counts.template(lambda spark: spark)
    scenario = with_python_jobs([counts], [], "user", cores=2)
    summary = _summary(scenario, [_batch("counts", 0, 12, 5)])
    (line,) = untimed_lines(summary, scenario)
    assert f"job counts ({counts.origin}): 5 of 12 rows" in line and "(column 'window_end' is null)" in line
    assert counts.origin.rpartition(":")[0] == __file__


def test_nothing_is_said_when_every_row_has_an_event_time_or_the_table_predates_the_count():
    scenario = load_scenario(EXAMPLES / "pipeline.yaml")
    assert untimed_lines(_summary(scenario, [_batch(scenario.jobs[0].id, 0, 9, 0)]), scenario) == []
    old = _summary(scenario, [{k: v for k, v in _batch(scenario.jobs[0].id, 0, 9, 0).items() if k != "rows_untimed"}])
    assert old["untimed"].isna().all() and untimed_lines(old, scenario) == []
    assert np.all(timed(np.array([5, 6], np.int64)) == [5, 6])
