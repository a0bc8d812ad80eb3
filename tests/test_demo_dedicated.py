"""The demo's hand deployment on Spark (issue 28): the latency-critical job in an application of its own, the
other in a second one under FAIR pools by hand at nice +10's weight, plain Spark in each — every sink recomputed
exactly. 20 s of input; the two applications start cold, as `strata run` starts its cells."""

from __future__ import annotations

import json
import pickle

import pandas as pd
import pytest
import yaml

from strata.model import load_scenario
from strata.runners.dedicated import BULK_CELL, CRITICAL_CELL, hand_cells, hand_shares, run_dedicated
from strata.runners.live import RunRequest
from strata.runners.shares import nice_levels
from strata.runners.spark_loop import RunConfig


def job_spec(job: str, rank: int, target_s: float, seed: int) -> dict:
    """A filter over a generated source (100 records/s, 10 keys) into a sink."""
    source = {"name": "s", "kind": "source", "source": {"rate": 100, "keys": {"count": 10}, "seed": seed}}
    ops = [source, {"name": "f", "kind": "filter", "predicate": "value < 0.5"}, {"name": "o", "kind": "sink"}]
    streams = [{"from": "s", "to": "f"}, {"from": "f", "to": "o"}]
    return {
        "id": job,
        "rank": rank,
        "target_latency_s": target_s,
        "templates": [{"operators": ops, "streams": streams}],
    }


SPEC = {
    "cluster": {"nodes": [{"name": "n0", "cores": 2}]},
    "jobs": [job_spec("fast", 1, 2.0, 4), job_spec("bulk", 2, 30.0, 5)],
}


def test_the_hand_deployment_puts_critical_jobs_apart_and_weighs_the_others_as_nice_10(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    scenario = load_scenario(spec)
    cells = hand_cells(scenario, critical_s=2.0)
    assert cells == {"fast": CRITICAL_CELL, "bulk": BULK_CELL}
    shares = hand_shares(cells, 2.0)
    assert shares == pytest.approx({CRITICAL_CELL: 2.0, BULK_CELL: 2.0 / 1.25**10})  # 0.215 cores
    assert nice_levels(shares) == {CRITICAL_CELL: 0, BULK_CELL: 10}  # where only nice can enforce them
    assert hand_cells(scenario, critical_s=1.0) == {"fast": BULK_CELL, "bulk": BULK_CELL}  # no critical job
    assert hand_shares({"fast": BULK_CELL, "bulk": BULK_CELL}, 2.0) == pytest.approx({BULK_CELL: 0.2147}, abs=1e-4)


@pytest.mark.spark
def test_two_plain_applications_every_sink_exact(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    scenario = load_scenario(spec)
    out = tmp_path / "dedicated"
    # 20 s: the bulk application, cold and at a tenth of the critical one's weight, took more than 8 s to commit
    # its first batch beside it (CI's fresh clone: 6 s of input left it with no batch and nothing to verify)
    run_dedicated(RunRequest((spec,), 20.0, out=out), scenario, RunConfig())
    metrics = out / "metrics"
    summary = pd.read_csv(metrics / "summary.csv")
    assert dict(zip(summary["job"], summary["cell"], strict=True)) == {"fast": CRITICAL_CELL, "bulk": BULK_CELL}
    checks = pd.read_csv(metrics / "checks.csv")
    assert sorted(checks["job"]) == ["bulk", "fast"]  # one segment each, both verified
    assert (checks["rows_read"] > 0).all() and not checks["unverifiable"].notna().any()
    assert checks[["missing", "duplicated", "wrong"]].to_numpy().sum() == 0
    decisions = pd.read_csv(metrics / "decisions.csv")
    admitted = decisions[decisions["kind"] == "admit"]
    assert sorted(zip(admitted["job"], admitted["cell"], strict=True)) == [("bulk", BULK_CELL), ("fast", CRITICAL_CELL)]
    ran = json.loads((metrics / "run.json").read_text())["config"]
    # each application warmed the queries of the jobs it holds before the sources' epoch was set, and the epoch
    # came 1.5 × the slowest measured start after (at least 2 s), as the demo's session modes set theirs
    warmed = ran["warm_up"]
    assert {c: w["jobs"] for c, w in warmed.items()} == {CRITICAL_CELL: ["fast"], BULK_CELL: ["bulk"]}
    assert ran["lead_s"] == max(2.0, 1.5 * max(w["start_s"] for w in warmed.values())) > 0
    for cell in (CRITICAL_CELL, BULK_CELL):
        started, _key = pickle.loads((out / "cells" / cell / "cell.spec").read_bytes())
        assert started.warm == tuple(j for j, c in hand_cells(scenario, 2.0).items() if c == cell)
        assert started.request.control is False and started.config.pools == {
            "fast": "urgent",
            "bulk": "w4",
        }  # plain Spark, FAIR by hand
        assert (out / "cells" / cell / "metrics" / "summary.csv").exists()  # each measured in its application
