"""Every application Strata starts warms its queries the one way, and its sources' epoch follows from what the
warm-up measured (issue 28: cells start warm, as the demo's session does; docs/spark.md, "Cells")."""

from __future__ import annotations

import json
import time

import pytest

from strata.model import Scenario
from strata.runners.cell import read_ready, ready_report
from strata.runners.live import time_base
from strata.runners.warmup import LEAD_S, Warmed, lead_after, on_grid, warm_line, window_grid


def test_the_epoch_lead_covers_the_slowest_measured_start_one_and_a_half_times():
    assert lead_after([]) == LEAD_S == 2.0  # nothing warmed: the least lead
    assert lead_after([Warmed(start_s=1.0)]) == 2.0  # 1.5 s < 2 s
    # the cells start their queries at once: the slowest one's start counts
    assert lead_after([Warmed(start_s=0.5), Warmed(start_s=4.0), Warmed(start_s=2.0)]) == 6.0
    assert lead_after([Warmed(start_s=4.8)], least_s=8.0) == 8.0  # a longer least lead asked for wins
    assert lead_after([Warmed(start_s=4.8)], least_s=1.0) == pytest.approx(7.2)


def test_a_new_run_s_epoch_is_the_lead_ahead_and_a_resumed_run_keeps_its_own(tmp_path):
    run_dir = tmp_path / "strata"
    before = time.time()
    epoch, said = time_base(run_dir, (), lead_after([Warmed(start_s=4.0)]))
    after = time.time()
    assert before + 6.0 <= epoch <= after + 6.0 and said == []
    assert json.loads((run_dir / "run.json").read_text()) == {"epoch": epoch}
    # restarted on the same run directory: its epoch, whatever the new warm-up measured
    again, said = time_base(run_dir, (), lead_after([Warmed(start_s=30.0)]))
    assert again == epoch and said[0].startswith(f"resuming the run in {run_dir}")
    fresh, said = time_base(run_dir, ("all",), 2.0)  # --fresh all: a new time base
    assert fresh != epoch and said == []


def windows(*specs, path=None) -> Scenario:
    """One job per window spec, each reading a generated source (or the files under ``path``)."""
    source = {"rate": 10} if path is None else {"rate": 10, "path": path, "format": "json"}
    return Scenario.model_validate(
        {
            "cluster": {"nodes": [{"name": "n0", "cores": 2}]},
            "jobs": [
                {
                    "id": f"j{i}",
                    "rank": i + 1,
                    "templates": [
                        {
                            "operators": [
                                {"name": "s", "kind": "source", "source": source},
                                {"name": "w", "kind": "window_aggregate", "window": window},
                                {"name": "o", "kind": "sink"},
                            ],
                            "streams": [{"from": "s", "to": "w"}, {"from": "w", "to": "o"}],
                        }
                    ],
                }
                for i, window in enumerate(specs)
            ],
        }
    )


def test_the_epoch_falls_on_the_grid_of_every_window_over_generated_input():
    # tumbling 10 s and sliding 4 s by 1.5 s: boundaries repeat every lcm(10, 1.5) = 30 s
    assert window_grid(windows({"size_s": 10}, {"size_s": 4, "slide_s": 1.5})) == 30.0
    assert window_grid(windows({"size_s": 10}, {"size_s": 2.5})) == 10.0
    assert window_grid(windows({"size_s": 7}, {"size_s": 11})) == 0.0  # 77 s: too long to wait for
    assert window_grid(windows({"size_s": 10}, path="/data/in")) == 0.0  # a file's event times are its own
    assert on_grid(1234.5, 10.0) == 1240.0 and on_grid(1240.0, 10.0) == 1240.0 and on_grid(3.3, 0.0) == 3.3


def test_a_new_run_s_epoch_waits_for_its_windows_grid(tmp_path):
    before = time.time()
    epoch, _ = time_base(tmp_path / "strata", (), 2.0, 10.0)
    assert epoch % 10.0 == 0.0 and before + 2.0 <= epoch <= time.time() + 12.0


def test_a_cell_reports_where_it_listens_and_what_its_warm_up_measured():
    warmed = Warmed(seconds=12.5, start_s=1.25, jobs=("sessions", "scoring"), skipped={"mine": "reads Kafka"})
    text = ready_report(("127.0.0.1", 40123), warmed)
    assert read_ready(text) == (("127.0.0.1", 40123), warmed)


def test_the_run_says_why_a_job_was_not_warmed():
    line = warm_line(
        {"c0": Warmed(9.6, 1.2, ("alerts",)), "c1": Warmed(0.0, 0.0, (), {"feed": "reads Kafka"})},
        lead_after([Warmed(9.6, 1.2)]),
    )
    assert line == (
        "queries warmed: c0 10 s (alerts: started in 1.2 s); c1 none; sources' epoch 2.0 s after they start; "
        "not warmed: feed (reads Kafka)"
    )
