"""bench_demo's pure parts: the four modes' order across seeds, and which application a demo's process is."""

from __future__ import annotations

import pytest

from tests.conftest import benchmark_script


@pytest.fixture(scope="module")
def bench():
    with benchmark_script("bench_demo") as module:
        yield module


def test_every_other_seed_runs_the_four_modes_in_reverse(bench):
    assert bench.order_for(0) == ("baseline", "fair", "dedicated", "strata") == bench.order_for(2)
    assert bench.order_for(1) == ("strata", "dedicated", "fair", "baseline")


def test_each_process_of_the_demo_belongs_to_its_application(bench):
    python = "/work/.venv/bin/python"
    cell = f"{python} -m strata.runners.cell /tmp/b/seed0/dedicated/cells/bulk/cell.spec"
    assert bench.demo_application(cell) == "dedicated.bulk"
    java = "/usr/lib/jvm/bin/java -cp x -Xss16m -Dderby.system.home={} org.apache.spark.deploy.SparkSubmit"
    assert bench.demo_application(java.format("/tmp/b/seed0/strata/spark")) == "strata.host"
    assert bench.demo_application(java.format("/tmp/b/seed0/spark")) == "session"
    # a child cell's JVM: its cell process named the application already
    assert bench.demo_application(java.format("/tmp/b/seed0/strata/cells/c0/spark")) is None
    assert bench.demo_application("/bin/bash /opt/spark/bin/spark-class org.apache.spark.deploy.SparkSubmit") is None
