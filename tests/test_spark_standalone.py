"""The standalone cluster harness (issue 28, Deliver 4): a master and two 1-core workers from the wheel's
``spark-class``; two applications, each a cell with ``standalone_conf(1)``, get exactly one core each; nothing is
left running afterwards. A taken port and a worker that cannot start fail with a clear error. ``strata run
--master spark://…`` runs the fleet there: each cell an application granted the whole cores of its share, every
sink exact."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from strata.runners.shares import standalone_conf, whole_cores
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


def job(name: str, rank: int, target_s: float, seed: int, middle: dict) -> dict:
    """A job reading a generated source (50 records/s, 10 keys) through ``middle`` into its sink."""
    source = {"name": "s", "kind": "source", "source": {"rate": 50, "keys": {"count": 10}, "seed": seed}}
    return {
        "id": name,
        "rank": rank,
        "target_latency_s": target_s,
        "templates": [
            {
                "operators": [source, middle, {"name": "o", "kind": "sink"}],
                "streams": [{"from": "s", "to": middle["name"]}, {"from": middle["name"], "to": "o"}],
            }
        ],
    }


# the spec's cluster is the standalone one: two 1-core workers; alert is latency-critical, copy is bulk
CLUSTER_SPEC = {
    "name": "duo",
    "cluster": {"nodes": [{"name": "w0", "cores": 1}, {"name": "w1", "cores": 1}]},
    "jobs": [
        job("alert", 1, 2.0, 3, {"name": "f", "kind": "filter", "predicate": "value < 0.5"}),
        job("copy", 2, 30.0, 4, {"name": "m", "kind": "map", "expressions": ["id", "key", "value"]}),
    ],
}
QUICK_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


@pytest.mark.spark
def test_the_fleet_on_a_standalone_cluster_runs_each_cell_as_an_application_with_its_cores(tmp_path):
    port, ui = free_port(), free_port()
    (spec := tmp_path / "spec.yaml").write_text(yaml.safe_dump(CLUSTER_SPEC))
    out, log = tmp_path / "out", tmp_path / "run.log"
    granted: dict[str, int] = {}  # application → the most cores the master granted it while it ran
    with standalone_cluster(workers=2, cores=1, memory="1g", port=port, ui_port=ui, work_dir=tmp_path / "c") as url:
        command = [str(Path(sys.executable).with_name("strata")), "run", str(spec), "--master", url]
        command += ["--duration", "12", "--out", str(out), "--conf", "spark.executor.memory=512m"]
        command += ["--conf", f"spark.executor.extraJavaOptions={QUICK_JVM}"]
        with log.open("w") as sink:
            run = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)
        try:
            while run.poll() is None:
                for app in master_json("127.0.0.1", ui)["activeapps"]:
                    granted[app["name"]] = max(granted.get(app["name"], 0), app["cores"])
                time.sleep(0.5)
        finally:
            if run.poll() is None:
                run.kill()
            run.wait(60)
        said = log.read_text()
        assert run.returncode == 0, said[-3000:]
        ran = master_json("127.0.0.1", ui)
    assert processes_working_in(tmp_path / "c") == []
    assert not ran["activeapps"] and len(ran["completedapps"]) == 2  # the fleet's own session is local
    assert "cells (standalone)" in said and f"each an application on {url}" in said
    decisions = pd.read_csv(out / "metrics" / "decisions.csv")
    cells = dict(decisions[decisions["kind"] == "cell"][["job", "detail"]].values)
    assert sorted(cells) == ["alert", "copy"] and cells["alert"] != cells["copy"]
    first = decisions[decisions["kind"] == "cell shares"]["detail"].iloc[0]  # "c0 1.63, c1 0.37; held c0 1, ..."
    shares = {cell: float(v) for cell, v in re.findall(r"(c\d) (\d+\.\d+)", first.split(";")[0])}
    assert sorted(shares) == sorted(set(cells.values()))
    by_cell = {name.rsplit("-", 1)[1]: cores for name, cores in granted.items()}
    assert by_cell == whole_cores(shares, 2) == {cell: 1 for cell in shares}
    checks = pd.read_csv(out / "metrics" / "checks.csv")
    assert sorted(checks["job"]) == ["alert", "copy"] and (checks["rows_read"] > 0).all()
    assert (checks[["missing", "duplicated", "wrong"]] == 0).all().all(), checks
