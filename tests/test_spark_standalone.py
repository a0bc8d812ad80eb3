"""The standalone cluster harness (issue 28, Deliver 4): a master and two 1-core workers from the wheel's
``spark-class``; two applications, each a cell with ``standalone_conf(1)``, get exactly one core each; nothing is
left running afterwards. A taken port and a worker that cannot start fail with a clear error."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from strata.runners.shares import standalone_conf
from strata.spark.standalone import StandaloneError, master_json, standalone_cluster

APP = """
import json, sys, time
from pyspark.sql import SparkSession
QUICK = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
conf = {
    **json.loads(sys.argv[3]), "spark.executor.memory": "512m", "spark.ui.enabled": "false",
    "spark.driver.extraJavaOptions": QUICK, "spark.executor.extraJavaOptions": QUICK,
}
builder = SparkSession.builder.master(sys.argv[1]).appName(sys.argv[2])
for key, value in conf.items():
    builder = builder.config(key, value)
spark = builder.getOrCreate()
while spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() < 2:  # the driver and its one executor
    time.sleep(0.2)
print("executor", flush=True)
sys.stdin.read()  # hold the application (and its executor) until the test closes stdin
spark.stop()
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def processes_working_in(directory: Path) -> list[int]:
    """Processes whose working directory is ``directory`` or below (the daemons and their executors)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cwd = os.readlink(f"/proc/{entry}/cwd")
            except OSError:
                continue
            if cwd == str(directory) or cwd.startswith(f"{directory}/"):
                found.append(int(entry))
    return found


def test_a_taken_port_is_a_clear_error_before_anything_starts(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with (
            pytest.raises(StandaloneError, match=f"master port {port} on 127.0.0.1 is taken"),
            standalone_cluster(port=port, ui_port=free_port(), work_dir=tmp_path),
        ):
            pass
    assert not (tmp_path / "logs").exists()


@pytest.mark.spark
def test_a_worker_that_cannot_start_is_a_clear_error_and_nothing_is_left(tmp_path):
    with (
        pytest.raises(StandaloneError, match=r"(?s)worker-0 exited with code 1.*Memory"),
        standalone_cluster(workers=1, memory="0m", port=free_port(), ui_port=free_port(), work_dir=tmp_path),
    ):
        pass
    assert processes_working_in(tmp_path) == []


@pytest.mark.spark
def test_two_cells_get_one_core_each_on_two_one_core_workers(tmp_path):
    port, ui = free_port(), free_port()
    apps: list[subprocess.Popen] = []
    with standalone_cluster(workers=2, cores=1, memory="1g", port=port, ui_port=ui, work_dir=tmp_path) as url:
        assert url == f"spark://127.0.0.1:{port}"
        state = master_json("127.0.0.1", ui)
        assert state["aliveworkers"] == 2 and state["cores"] == 2
        conf = standalone_conf(1)
        try:
            for name in ("cell-a", "cell-b"):
                apps.append(
                    subprocess.Popen(
                        [sys.executable, "-c", APP, url, name, json.dumps(conf)],
                        stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.DEVNULL,
                        text=True,
                        env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"},
                    )
                )
            assert [app.stdout.readline().strip() for app in apps] == ["executor", "executor"]
            state = master_json("127.0.0.1", ui)
            granted = {app["name"]: (app["cores"], app["state"]) for app in state["activeapps"]}
            assert granted == {"cell-a": (1, "RUNNING"), "cell-b": (1, "RUNNING")}
            assert sorted(worker["coresused"] for worker in state["workers"]) == [1, 1]
        finally:
            for app in apps:
                app.stdin.close()
            assert [app.wait(60) for app in apps] == [0, 0]
    assert processes_working_in(tmp_path) == []
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))  # the master's port is free again
