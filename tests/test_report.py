"""Reports from metrics tables (no Spark): the comparison's numbers, a self-contained HTML file, the command."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
from typer.testing import CliRunner

from strata.cli import app
from strata.report import comparison, write_report

SUMMARY = pd.DataFrame(
    [
        {
            "mode": "baseline",
            "job": "alerts",
            "rank": 1,
            "target_s": 2.0,
            "outputs": 100,
            "delivered": 100,
            "p50_s": 1.5,
            "p99_s": 9.0,
            "misses": 40,
            "miss_rate": 0.4,
            "throughput": 400.0,
            "importance": 60.0,
            "imbalance": None,
        },
        {
            "mode": "strata",
            "job": "alerts",
            "rank": 1,
            "target_s": 2.0,
            "outputs": 100,
            "delivered": 100,
            "p50_s": 0.5,
            "p99_s": 1.5,
            "misses": 2,
            "miss_rate": 0.02,
            "throughput": 400.0,
            "importance": 98.0,
            "imbalance": None,
        },
        {
            "mode": "baseline",
            "job": "keyed",
            "rank": 2,
            "target_s": 30.0,
            "outputs": 50,
            "delivered": 50,
            "p50_s": 3.0,
            "p99_s": 6.0,
            "misses": 0,
            "miss_rate": 0.0,
            "throughput": 1000.0,
            "importance": 10.0,
            "imbalance": 1.6,
        },
        {
            "mode": "strata",
            "job": "keyed",
            "rank": 2,
            "target_s": 30.0,
            "outputs": 50,
            "delivered": 50,
            "p50_s": 3.0,
            "p99_s": 5.0,
            "misses": 0,
            "miss_rate": 0.0,
            "throughput": 950.0,
            "importance": 10.0,
            "imbalance": 1.1,
        },
    ]
)
DECISIONS = pd.DataFrame(
    [
        {
            "mode": "strata",
            "t": -1.0,
            "epoch": 0,
            "kind": "admit",
            "job": "alerts",
            "detail": "template default",
            "reasons": "epoch",
        },
        {"mode": "strata", "t": 4.0, "epoch": 0, "kind": "moves", "job": "keyed", "detail": "kg3→p1", "reasons": ""},
        {
            "mode": "strata",
            "t": 6.0,
            "epoch": 0,
            "kind": "rate cap",
            "job": "keyed",
            "detail": "900 rec/s (1800 rows/batch)",
            "reasons": "",
        },
        {
            "mode": "strata",
            "t": 12.0,
            "epoch": 0,
            "kind": "rate cap",
            "job": "keyed",
            "detail": "lifted",
            "reasons": "",
        },
    ]
)


def test_comparison_rows_carry_the_ratios():
    rows = {(r["job"], r["metric"]): r for r in comparison(SUMMARY, DECISIONS)}
    assert rows[("alerts", "p99 latency s")]["change"] == "6.0× lower"
    assert rows[("alerts", "deadline misses")]["change"] == "20× fewer"
    assert rows[("alerts", "deadline misses")]["baseline"] == "40 of 100"
    assert rows[("keyed", "throughput rec/s")]["change"] == "95% of baseline"
    assert rows[("keyed", "partition imbalance")]["strata"] == "1.10"
    assert rows[("keyed", "rate caps")]["strata"] == "1 set, 1 lifted"
    assert rows[("keyed", "rate caps")]["change"] == "first: 900 rec/s"
    assert rows[("alerts", "admission / template")]["strata"] == "admit: template default"
    assert rows[("all", "total importance (on time)")]["change"] == "+38.0"


def test_the_hand_tuned_fair_mode_gets_its_own_column_and_ratios():
    fair = SUMMARY[SUMMARY["mode"] == "baseline"].assign(mode="fair")
    fair.loc[fair["job"] == "alerts", ["p99_s", "misses", "importance"]] = [3.0, 8, 90.0]
    rows = {(r["job"], r["metric"]): r for r in comparison(pd.concat([SUMMARY, fair]), DECISIONS)}
    assert rows[("alerts", "p99 latency s")]["fair"] == "3.00"
    assert rows[("alerts", "p99 latency s")]["vs fair"] == "2.0× lower"  # 3.0 s by hand, 1.5 s under Strata
    assert rows[("alerts", "deadline misses")]["fair"] == "8 of 100"
    assert rows[("alerts", "deadline misses")]["vs fair"] == "4× fewer"
    assert rows[("keyed", "throughput rec/s")]["vs fair"] == "95% of FAIR"
    assert rows[("all", "total importance (on time)")]["vs fair"] == "+8.0"  # 108 against 100
    assert "fair" not in comparison(SUMMARY, DECISIONS)[0]  # a run without the mode has no such column


def write_run(tmp_path):
    metrics = tmp_path / "metrics"
    metrics.mkdir()
    rng = np.random.default_rng(0)
    latency = pd.DataFrame(
        {
            "mode": np.repeat(["baseline", "strata"], 50),
            "job": "alerts",
            "template": "default",
            "event_s": np.tile(np.linspace(0, 30, 50), 2),
            "latency_s": rng.uniform(0.2, 5, 100),
            "delivered": True,
        }
    )
    partitions = pd.DataFrame(
        [
            {
                "mode": m,
                "job": "keyed",
                "batch_id": b,
                "t": 2.0 * b,
                "partition": p,
                "rows": 100 + 50 * p * (m == "baseline"),
            }
            for m in ("baseline", "strata")
            for b in range(5)
            for p in range(4)
        ]
    )
    checks = pd.DataFrame(
        [
            {
                "mode": m,
                "job": "alerts",
                "template": "default",
                "rows_read": 1000,
                "expected": 100,
                "delivered": 100,
                "missing": 0,
                "duplicated": 0,
                "wrong": 0,
            }
            for m in ("baseline", "strata")
        ]
    )
    gate = pd.DataFrame(
        [{"mode": "strata", "query": "alerts", "batch_id": 1, "t": 3.0, "wait_s": 0.1, "pool": "urgent"}]
    )
    tables = {
        "summary": SUMMARY,
        "latency": latency,
        "batches": pd.DataFrame(),
        "partitions": partitions,
        "checks": checks,
        "decisions": DECISIONS,
        "gate": gate,
        "observations": pd.DataFrame(),
        "learning": pd.DataFrame(
            [
                {
                    "mode": "strata",
                    "t": t,
                    "pe": "alerts.threshold",
                    "cost_per_record": c,
                    "prior_cost_per_record": 1e-4,
                    "selectivity": 0.1,
                    "prior_selectivity": 0.1,
                    "fixed_s": 0.0,
                    "marginal_s": c,
                    "samples": n,
                }
                for t, c, n in ((2.0, 3e-4, 3), (4.0, 2.5e-4, 4))
            ]
        ),
    }
    for name, frame in tables.items():
        frame.to_csv(metrics / f"{name}.csv", index=False)
    (metrics / "run.json").write_text(
        json.dumps(
            {"scenario": "t", "config": {"duration_s": 30}, "targets": {"alerts": 2.0, "keyed": 30.0}, "timings": {}}
        )
    )


def test_report_is_one_file_with_embedded_figures(tmp_path):
    write_run(tmp_path)
    path = write_report(tmp_path)
    text = path.read_text()
    assert text.count("data:image/png;base64,") == 4  # latency over time, CDF, partition load, decisions
    assert "no record lost or duplicated" in text
    assert "1.00e-04 → 2.50e-04" in text  # the learner's last estimate next to the prior
    assert "<script" not in text and "http" not in text.replace("http-equiv", "")  # nothing fetched


def test_report_command_rebuilds_and_rejects_a_directory_without_metrics(tmp_path):
    write_run(tmp_path)
    runner = CliRunner()
    ok = runner.invoke(app, ["report", str(tmp_path)])
    assert ok.exit_code == 0 and (tmp_path / "report.html").exists()
    bad = runner.invoke(app, ["report", str(tmp_path / "nope")])
    assert bad.exit_code == 2
    assert "run.json: not found" in bad.output
