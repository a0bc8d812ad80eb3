"""`run_demo` runs its modes in ``DemoConfig.order``, runs the fleet only with no session of its own in the
process, and lays its tables out the same whatever that order (the session, the modes and the measurement stand
in: no Spark). Each stand-in writes a mode's metrics tables as the real ones do; the cell modes' summaries are
measured again over the demo's horizon."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

import strata.runners.demo as demo
import strata.spark.session
from strata.model import load_scenario
from strata.runners.dedicated import DEDICATED
from strata.runners.demo import DEMO_MODES, DemoConfig, run_demo
from strata.runners.spark_loop import hand_pools
from strata.spark.measure import RunResult
from tests.conftest import EXAMPLES

JOBS = ("alerts", "sessions", "scoring")


def test_the_order_is_a_permutation_of_the_four_modes():
    assert DemoConfig().order == ("baseline", "fair", "dedicated", "strata")  # what `strata demo` runs
    assert DemoConfig(order=("strata", "dedicated", "fair", "baseline")).order[0] == "strata"
    for bad in (("baseline", "fair", "strata"), ("baseline", "fair", "fair", "strata"), (*DEMO_MODES, "fifo")):
        with pytest.raises(ValueError, match=r"DemoConfig\.order: expected each of baseline, fair, dedicated, strata"):
            DemoConfig(order=bad)


def write_tables(directory: Path, mode: str, fleet_horizon_s: float | None = None) -> None:
    """A mode's metrics as collect / merge_metrics write them: per job two outputs inside a 10 s horizon (latency
    1 s and 3 s), one past it (event time 12 s), 160 input rows; a cell mode's run.json with its own horizon."""
    metrics = directory / "metrics"
    metrics.mkdir(parents=True)
    latency = [
        {"mode": "baseline", "job": j, "template": t, "event_s": e, "latency_s": lat, "delivered": True}
        for j, t in zip(JOBS, ("default", "default", "exact"), strict=True)
        for e, lat in ((0.5, 1.0), (5.0, 3.0), (12.0, 0.1))
    ]
    pd.DataFrame(latency).to_csv(metrics / "latency.csv", index=False)
    pd.DataFrame([{"mode": "baseline", "job": j, "rows_in": 160} for j in JOBS]).to_csv(
        metrics / "batches.csv", index=False
    )
    checks = [{"mode": "baseline", "job": j, "missing": 0, "duplicated": 0, "wrong": 0} for j in JOBS]
    pd.DataFrame(checks).to_csv(metrics / "checks.csv", index=False)
    # what the mode measured itself: a placeholder the demo keeps (session modes) or measures again (cell modes)
    summary = [{"mode": "baseline", "job": j, "outputs": -1, "floor_s": 0.25} for j in JOBS]
    if fleet_horizon_s is not None:
        summary = [{**r, "cell": "c-" + r["job"]} for r in summary]
    pd.DataFrame(summary).to_csv(metrics / "summary.csv", index=False)
    for name in ("partitions", "decisions", "gate", "observations", "progress", "controller", "learning"):
        (metrics / f"{name}.csv").write_text("\n")
    if fleet_horizon_s is not None:
        config = {"duration_s": fleet_horizon_s, "cells": {"c-" + j: [j] for j in JOBS}}
        (metrics / "run.json").write_text(json.dumps({"config": config}))


@pytest.fixture
def stand_ins(monkeypatch):
    """The session, run_mode, collect, the hand deployment and `strata run` replaced; what each was asked, in
    order, in ``calls``."""
    calls: list = []
    alive: list = []

    def build_session(*a, **k):
        spark = SimpleNamespace(sparkContext=SimpleNamespace(defaultParallelism=2), stop=lambda: calls.append("stop"))
        alive.append(spark)
        calls.append("session")
        return spark

    def run_mode(spark, scenario, mode, out, config, epoch, stop, on_step):
        assert spark is alive[-1]
        calls.append((mode, config.pools))
        return SimpleNamespace(mode=mode, late_s=0.0)

    def collect(runs, scenario, horizon_s, spark, out, meta, timings):
        assert horizon_s == 10.0 and [r.mode for r in runs] == [out.name]  # verified at once, with its session
        write_tables(out, out.name)

    def run_dedicated(request, scenario, config, on_step, lead_s):
        calls.append((DEDICATED, request.duration_s, request.files))
        write_tables(Path(request.out), DEDICATED, fleet_horizon_s=12.0)
        return 100.0

    def run_fleet(request, console, errors):
        calls.append(("strata", request.duration_s, request.files))
        out = Path(request.out)
        write_tables(out, "strata", fleet_horizon_s=12.0)
        (out / "strata").mkdir()
        (out / "strata" / "run.json").write_text(json.dumps({"epoch": 100.0}))
        return 0

    monkeypatch.setattr(strata.spark.session, "build_session", build_session)
    monkeypatch.setattr(demo, "end_jvm", lambda spark: calls.append("end JVM"))
    for name, stand_in in (("run_mode", run_mode), ("collect", collect), ("run_dedicated", run_dedicated)):
        monkeypatch.setattr(demo, name, stand_in)
    monkeypatch.setattr(demo, "run_fleet", run_fleet)
    return calls


def test_modes_run_in_the_order_given_and_are_measured_in_the_one_order(tmp_path, stand_ins):
    scenario = load_scenario(EXAMPLES / "demo.yaml")
    order = ("strata", "dedicated", "fair", "baseline")
    result = run_demo(scenario, tmp_path / "run", DemoConfig(duration_s=10.0, warmup=False, order=order))
    spec = tmp_path / "run" / "spec.yaml"
    # no session before the fleet: it is started for the first session mode, and stopped at the end
    assert stand_ins == [
        ("strata", 14.0, (spec,)),
        (DEDICATED, 14.0, (spec,)),
        "session",
        ("fair", hand_pools(scenario)),
        ("baseline", {}),
        "stop",
    ]
    assert load_scenario(spec) == scenario  # the spec the cells load is the demo's input
    summary = result.summary
    assert list(summary["mode"]) == [m for m in DEMO_MODES for _ in JOBS]
    cells = summary[summary["mode"].isin([DEDICATED, "strata"])]
    # measured again over the demo's 10 s: 2 outputs, one over alerts' 2 s target; 160 rows over 12 + 4 s
    assert set(cells["outputs"]) == {2} and set(cells["throughput"]) == {10.0}
    assert list(cells[cells["job"] == "alerts"]["misses"]) == [1, 1]
    assert set(cells["floor_s"]) == {0.25} and list(cells["cell"][:3]) == ["c-alerts", "c-sessions", "c-scoring"]
    assert set(summary[summary["mode"].isin(["baseline", "fair"])]["outputs"]) == {-1}  # the session's own
    assert list(result.checks["mode"]) == [m for m in DEMO_MODES for _ in JOBS]
    recorded = json.loads((tmp_path / "run" / "metrics" / "run.json").read_text())
    assert recorded["config"]["order"] == list(order)
    assert recorded["config"]["critical_jobs"] == ["alerts"]
    assert recorded["config"]["cells"]["strata"]["c-alerts"] == ["alerts"]
    assert {"baseline_s", "fair_s", "dedicated_s", "strata_s", "strata_startup_s"} <= set(recorded["timings"])


def test_the_session_is_ended_before_the_fleet_and_started_afresh_after_it(tmp_path, stand_ins):
    scenario = load_scenario(EXAMPLES / "demo.yaml")
    order = ("fair", "strata", "baseline", "dedicated")
    run_demo(scenario, tmp_path / "run", DemoConfig(duration_s=10.0, warmup=False, order=order))
    modes = [c if isinstance(c, str) else c[0] for c in stand_ins]
    assert modes == ["session", "fair", "stop", "end JVM", "strata", "session", "baseline", DEDICATED, "stop"]


def test_a_strata_run_that_refuses_to_start_is_an_error(tmp_path, stand_ins, monkeypatch):
    monkeypatch.setattr(demo, "run_fleet", lambda request, console, errors: 2)
    scenario = load_scenario(EXAMPLES / "demo.yaml")
    with pytest.raises(ValueError, match="strata mode: `strata run` refused to start its cells"):
        run_demo(
            scenario, tmp_path / "run", DemoConfig(duration_s=10.0, warmup=False, order=("strata", *DEMO_MODES[:3]))
        )


def test_run_result_is_what_the_cli_reads():
    assert {"summary", "checks", "decisions", "directory", "timings"} <= set(RunResult.__dataclass_fields__)
