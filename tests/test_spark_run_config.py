"""Knobs of a run on Spark that Strata sets from the session and the scenario: the gate's bound, the hand pools."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from strata.control.spark_run import gate_config, hand_pools
from strata.model.user import load_jobs, with_python_jobs

PLATFORM = Path(__file__).resolve().parents[1] / "src" / "strata" / "examples" / "platform" / "jobs.py"


def session(cores: int) -> SimpleNamespace:
    return SimpleNamespace(sparkContext=SimpleNamespace(defaultParallelism=cores))


def test_the_gate_keeps_one_cores_worth_of_batches_back_for_urgent_ones():
    assert [gate_config(session(c)).max_running for c in (1, 2, 8)] == [1, 1, 7]


def test_hand_pools_put_the_critical_query_at_weight_32_and_the_rest_by_rank(tmp_path, monkeypatch):
    monkeypatch.setenv("STRATA_INPUT", str(tmp_path))
    scenario, _ = with_python_jobs(load_jobs(PLATFORM), [], "platform")
    # alerts: target 2 s (critical); ranks of the others: 2 → w4, 3 → w2, 4 and 5 → w1
    assert hand_pools(scenario) == {
        "alerts": "urgent",
        "active_users": "w4",
        "attributed_clicks": "w2",
        "busy_windows": "w2",
        "sessions": "w1",
        "enriched": "w1",
    }
