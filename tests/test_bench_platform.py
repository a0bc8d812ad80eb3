"""bench_platform's pure parts: the modes' order across seeds, a measured window, each pair's worst seed."""

from __future__ import annotations

import pandas as pd
import pytest

from strata.model.user import with_python_jobs
from tests.conftest import benchmark_script


@pytest.fixture(scope="module")
def bench():
    with benchmark_script("bench_platform") as module:
        yield module


def test_every_other_seed_runs_the_modes_in_reverse(bench):
    modes = ["alone", "fair", "strata-cells"]
    assert bench.order_of(modes, 0) == modes
    assert bench.order_of(modes, 1) == ["strata-cells", "fair", "alone"]
    assert bench.order_of(modes, 2) == modes


def test_a_window_counts_outputs_from_its_start_to_the_horizon_delivered_by_the_stop(bench):
    alerts = bench.jobs_of("alone", bench.WORKLOADS["platform"])  # target 2 s, weight 100
    scenario = with_python_jobs(alerts, [], "platform")
    latency = pd.DataFrame(
        {
            "job": "alerts",
            # 5 s: start-up; 55 s: delivered after the stop (60 s); 57 s: past the horizon (56 s)
            "event_s": [5.0, 21.0, 22.0, 30.0, 50.0, 55.0, 57.0],
            "latency_s": [10.0, 0.5, 3.0, 1.0, 1.0, 5.5, 0.2],
            "template": "udf_filter",
            "delivered": True,
        }
    )
    batches = pd.DataFrame({"job": "alerts", "t_finished": [15.0, 25.0, 59.0, 61.0], "rows_in": [100, 200, 300, 400]})
    settled = bench.window_figures(latency, batches, scenario, 20.0, 56.0, 60.0)["alerts"]
    assert (settled["outputs"], settled["misses"]) == (4, 1)
    assert settled["p99_s"] == pytest.approx(1.0 + 0.97 * 2.0)  # between 1.0 and 3.0 of [0.5, 1, 1, 3]
    assert settled["importance"] == pytest.approx(100.0 * 3 / 36.0)  # on time per second of the window
    assert settled["throughput"] == pytest.approx((200 + 300) / 40.0)  # committed from 20 s to the stop
    whole = bench.window_figures(latency, batches, scenario, 0.0, 56.0, 60.0)["alerts"]
    assert (whole["outputs"], whole["misses"]) == (5, 2)
    assert whole["importance"] == pytest.approx(100.0 * 3 / 56.0)
    assert whole["throughput"] == pytest.approx(600 / 60.0)
    nothing = bench.window_figures(pd.DataFrame(), pd.DataFrame(), scenario, 20.0, 56.0, 60.0)["alerts"]
    assert (nothing["outputs"], nothing["p99_s"], nothing["importance"], nothing["throughput"]) == (0, None, 0.0, 0.0)


def test_the_worst_seed_is_picked_per_figure_for_strata(bench):
    def seed(n, p99, misses, share, importance, floor):
        return {
            "seed": n,
            "strata": "strata-cells",
            "baseline": "fair",
            "p99_ratio": p99,
            "p99_settled_ratio": None if n == 2 else p99,
            "misses": misses,
            "misses_settled": (None, 0),
            "bulk_share": share,
            "bulk_share_settled": share,
            "importance": importance,
            "importance_settled": importance,
            "floor_p99": (floor, floor / 2),
        }

    ratios = [
        seed(1, 1.5, (10, 0), 1.1, (900.0, 1000.0), 0.8),
        seed(2, 0.9, (0, 5), 1.2, (1000.0, 950.0), 0.7),
        seed(3, 2.0, (3, 4), 0.9, (800.0, 820.0), 0.9),
    ]
    (row,) = bench.worst(ratios)
    assert (row["strata"], row["baseline"], row["seed"]) == ("strata-cells", "fair", "worst")
    assert (row["p99_ratio"], row["seeds"]["p99_ratio"]) == (0.9, 2)
    assert (row["p99_settled_ratio"], row["seeds"]["p99_settled_ratio"]) == (1.5, 1)  # seed 2 measured none
    assert row["floor_p99"] == (0.7, 0.4)  # alone on the seed of each worst p99 ratio
    assert (row["misses"], row["seeds"]["misses"]) == ((0, 5), 2)
    assert (row["bulk_share"], row["seeds"]["bulk_share"]) == (0.9, 3)
    assert (row["bulk_share_settled"], row["seeds"]["bulk_share_settled"]) == (0.9, 3)
    assert (row["importance"], row["seeds"]["importance"]) == ((1000.0, 950.0), 2)
    assert (row["misses_settled"], row["seeds"]["misses_settled"]) == (None, None)


def test_each_process_belongs_to_the_application_its_command_names(bench):
    python = "/work/.venv/bin/python"
    serve = f"{python} bench_platform.py --serve /tmp/w/dedicated-2 --modes bulk --seeds 2 --duration 60"
    assert bench.application_of(serve) == "dedicated-2.bulk"
    fleet = f"{python} -m strata run jobs.py --out /tmp/w/strata-cells-1/run-strata-cells --duration 63.5"
    assert bench.application_of(fleet) == "strata-cells-1.fleet"
    cell = f"{python} -m strata.runners.cell /tmp/w/strata-cells-1/run-strata-cells/cells/c0/cell.spec"
    assert bench.application_of(cell) == "strata-cells-1.c0"
    assert bench.application_of("/usr/lib/jvm/bin/java -cp x org.apache.spark.deploy.SparkSubmit") is None


def test_a_cumulative_counter_is_read_between_its_samples(bench):
    import app_cpu

    series = [(10.0, 1.0), (12.0, 3.0), (14.0, 3.5)]
    assert app_cpu.at(series, 11.0) == pytest.approx(2.0)
    assert app_cpu.at(series, 9.0) == 1.0 and app_cpu.at(series, 20.0) == 3.5
    assert app_cpu.between(series, 11.0, 13.0) == pytest.approx(3.25 - 2.0)
    # born after the window's start: its first sample is CPU it used inside the window
    assert app_cpu.between(series, 5.0, 12.0) == pytest.approx(3.0)
    assert app_cpu.between(series, 0.0, 9.0) == 0.0  # born after the window's end
    assert app_cpu.role_of("java", "java -cp x") == "jvm"
    assert app_cpu.role_of("python", "python -m pyspark.daemon") == "workers"
    assert app_cpu.role_of("python", "python -m strata.spark.worker_daemon pyspark.worker") == "workers"
    assert app_cpu.role_of("python", "python -m strata run jobs.py") == "driver"
