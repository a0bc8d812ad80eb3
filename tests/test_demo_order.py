"""`run_demo` runs its modes in ``DemoConfig.order`` and lays its tables out the same whatever that order
(the engine, the session and the measurement stand in: no Spark)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pandas as pd
import pytest

import strata.runners.demo as demo
import strata.spark.session
from strata.model import load_scenario
from strata.runners.demo import DemoConfig, run_demo
from strata.runners.spark_loop import MODES, hand_pools
from strata.spark.measure import RunResult
from tests.conftest import EXAMPLES


def test_the_order_is_a_permutation_of_the_three_modes():
    assert DemoConfig().order == ("baseline", "fair", "strata")  # what `strata demo` runs
    assert DemoConfig(order=("strata", "fair", "baseline")).order == ("strata", "fair", "baseline")
    for bad in (("baseline", "strata"), ("baseline", "fair", "fair"), ("baseline", "fair", "strata", "fifo")):
        with pytest.raises(ValueError, match=r"DemoConfig\.order: expected each of baseline, fair, strata once"):
            DemoConfig(order=bad)


def test_modes_run_in_the_order_given_and_are_measured_in_the_one_order(tmp_path, monkeypatch):
    scenario = load_scenario(EXAMPLES / "demo.yaml")
    ran, measured = [], []
    spark = SimpleNamespace(sparkContext=SimpleNamespace(defaultParallelism=2), stop=lambda: None)
    monkeypatch.setattr(strata.spark.session, "build_session", lambda *a, **k: spark)

    def run_mode(spark, scenario, mode, out, config, epoch, stop, on_step):
        ran.append((mode, config.pools))
        return SimpleNamespace(mode=mode, late_s=0.0)

    def collect(runs, scenario, horizon_s, spark, out, meta, timings):
        measured.extend(r.mode for r in runs)
        (out / "metrics").mkdir()
        (out / "metrics" / "run.json").write_text(json.dumps({"config": meta["config"]}))
        return RunResult(pd.DataFrame(), pd.DataFrame(), pd.DataFrame(), out, timings)

    monkeypatch.setattr(demo, "run_mode", run_mode)
    monkeypatch.setattr(demo, "collect", collect)
    order = ("strata", "fair", "baseline")
    run_demo(scenario, tmp_path / "run", DemoConfig(duration_s=1.0, warmup=False, order=order))
    assert [mode for mode, _ in ran] == list(order)
    assert dict(ran) == {"strata": {}, "fair": hand_pools(scenario), "baseline": {}}  # FAIR by hand's pools alone
    assert measured == list(MODES)
    recorded = json.loads((tmp_path / "run" / "metrics" / "run.json").read_text())
    assert recorded["config"]["order"] == list(order)
    assert {"baseline_s", "fair_s", "strata_s"} <= set(recorded["timings"])
