"""Knobs of a run on Spark that Strata sets from the session and the scenario: the gate's bound, the hand pools,
the jobs a run keeps (``--jobs``/``--skip-jobs``)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from strata.model.user import load_jobs, with_python_jobs
from strata.runners.live import JobChoiceError, choose_jobs
from strata.runners.spark_loop import RunConfig, hand_pools

PLATFORM = Path(__file__).resolve().parents[1] / "src" / "strata" / "examples" / "platform" / "jobs.py"


def session(cores: int) -> SimpleNamespace:
    return SimpleNamespace(sparkContext=SimpleNamespace(defaultParallelism=cores))


def test_the_gate_keeps_one_cores_worth_of_batches_back_for_urgent_ones():
    assert [RunConfig().gate_for(session(c)).max_running for c in (1, 2, 8)] == [1, 1, 7]
    # and never holds a latency-critical job's batch (target ≤ the Controller's 5 s) for a slot
    assert RunConfig().gate_for(session(2)).critical_s == 5.0


def test_hand_pools_put_the_critical_query_at_weight_32_and_the_rest_by_rank(tmp_path, monkeypatch):
    monkeypatch.setenv("STRATA_INPUT", str(tmp_path))
    scenario = with_python_jobs(load_jobs(PLATFORM), [], "platform")
    # alerts: target 2 s (critical); ranks of the others: 2 → w4, 3 → w2, 4 and 5 → w1
    assert hand_pools(scenario) == {
        "alerts": "urgent",
        "active_users": "w4",
        "attributed_clicks": "w2",
        "busy_windows": "w2",
        "sessions": "w1",
        "enriched": "w1",
    }


def test_choose_jobs_splits_one_jobs_file_into_applications(tmp_path, monkeypatch):
    """``--jobs``/``--skip-jobs``: the critical job alone, the rest without it; a shared stream stays whole."""
    monkeypatch.setenv("STRATA_INPUT", str(tmp_path))
    scenario = with_python_jobs(load_jobs(PLATFORM), [], "platform")
    alone = choose_jobs(scenario, ["alerts"], [])
    assert [j.id for j in alone.jobs] == ["alerts"] and alone.job["alerts"].declared.id == "alerts"
    rest = choose_jobs(scenario, [], ["alerts"])
    others = ["active_users", "attributed_clicks", "sessions", "enriched", "busy_windows"]
    assert sorted(j.id for j in rest.jobs) == sorted(others)
    # one job object: each kept job still carries its declaration (functions, sink), none lost to validation
    assert all(j.declared is scenario.job[j.id].declared for j in rest.jobs)
    assert "declared" not in rest.jobs[0].model_dump()  # not part of the spec (nor of a checkpoint's fingerprint)
    assert choose_jobs(scenario, [], []) is scenario
    # busy_windows reads active_users' output: they run in one application
    with pytest.raises(JobChoiceError, match="'busy_windows' reads 'active_users'"):
        choose_jobs(scenario, [], ["active_users"])
    with pytest.raises(JobChoiceError, match=r"--jobs: expected jobs of this run \(alerts, .*found 'alert'"):
        choose_jobs(scenario, ["alert"], [])
    with pytest.raises(JobChoiceError, match="at least one job"):
        choose_jobs(scenario, ["alerts"], ["alerts"])
