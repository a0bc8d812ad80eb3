"""`strata simulate`: summary table, metrics files, located errors with exit code 2."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from typer.testing import CliRunner

from strata.cli import app
from tests.conftest import EXAMPLES

runner = CliRunner()


def test_simulate_prints_summary_and_writes_tables(tmp_path):
    out = tmp_path / "m"
    result = runner.invoke(
        app, ["simulate", str(EXAMPLES / "pipeline.yaml"), "--duration", "5", "--seed", "2", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert "alerts" in result.output and "p99 ms" in result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["sim_seconds"] == 5 and summary["generated"] > 0
    cons = pd.read_parquet(out / "conservation.parquet")
    assert cons.balanced.all()
    assert set(pd.read_parquet(out / "latency.parquet").job) == {"alerts", "counts"}


def test_simulate_rejects_bad_input_with_exit_2(tmp_path):
    result = runner.invoke(app, ["simulate", str(EXAMPLES / "pipeline.yaml"), "--duration", "0"])
    assert result.exit_code == 2
    bad = tmp_path / "bad.yaml"
    bad.write_text("cluster: {nodes: []}\njobs: []\n")
    assert runner.invoke(app, ["simulate", str(bad)]).exit_code == 2
    result = runner.invoke(app, ["simulate", str(EXAMPLES / "pipeline.yaml"), "--batch", "0"])
    assert result.exit_code == 2


def test_simulate_node_failure_with_recovery_drops_nothing(tmp_path):
    out = tmp_path / "m"
    args = ["simulate", str(EXAMPLES / "pipeline.yaml"), "--duration", "8", "--fail", "n1@3", "--out", str(out)]
    lossy = runner.invoke(app, args)
    assert lossy.exit_code == 0, lossy.output
    assert sum(json.loads((out / "summary.json").read_text())["dropped"].values()) > 0
    recovered = runner.invoke(app, [*args, "--recovery", "--checkpoint-interval", "1"])
    assert recovered.exit_code == 0, recovered.output
    assert "instances restored" in recovered.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["dropped"] == {} or sum(summary["dropped"].values()) == 0
    assert summary["restored"] > 0
    assert pd.read_parquet(out / "conservation.parquet").balanced.all()


def test_simulate_rejects_a_malformed_failure(tmp_path):
    for bad in ("n1", "n1@x", "n1@5:2", "nope@3"):
        result = runner.invoke(app, ["simulate", str(EXAMPLES / "pipeline.yaml"), "--fail", bad])
        assert result.exit_code == 2, (bad, result.output)
        assert "fail" in result.output


def test_simulate_runs_a_plan_file(tmp_path):
    plan = {
        "admitted": ["alerts"],
        "templates": {"alerts": "default", "counts": "exact"},
        "assignment": {
            "alerts.events": {"n1": 0.5},
            "alerts.threshold": {"n0": 0.2, "n1": 0.3},
            "alerts.out": {"n1": 0.0},
        },
    }
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    out = tmp_path / "m"
    result = runner.invoke(
        app, ["simulate", str(EXAMPLES / "pipeline.yaml"), "--duration", "3", "--plan", str(path), "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    inst = pd.read_parquet(out / "instances.parquet")
    assert set(inst.pe) == {"alerts.events", "alerts.threshold", "alerts.out"}
    assert list(inst[inst.pe == "alerts.threshold"].node) == ["n0", "n1"]
    # the plan's admission: a plan that reads alerts.events (2000 records/s offered) at 500 caps it there
    path.write_text(json.dumps(plan | {"source_rates": {"alerts.events": 500.0}}))
    result = runner.invoke(
        app, ["simulate", str(EXAMPLES / "pipeline.yaml"), "--duration", "10", "--plan", str(path), "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["dropped"]["shed"] / summary["generated"] == pytest.approx(0.75, abs=0.03)
    path.write_text("{}")
    result = runner.invoke(app, ["simulate", str(EXAMPLES / "pipeline.yaml"), "--plan", str(path)])
    assert result.exit_code == 2
