"""`strata run --master spark://…` on a real standalone cluster started on this machine.

A master and one worker are launched with the pyspark distribution's own
``spark-class``, bound to 127.0.0.1 on free ports, in their own process groups.
``strata run`` runs in a subprocess (its own driver JVM, so the shared test
session is untouched) until the sink holds a few batches, is stopped with
Ctrl-C (SIGINT), and must exit cleanly; its output must be exactly the
generated records 0..n-1, each once. The cluster is torn down in any case.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pyspark
import pytest

from strata.model import SourceSpec
from strata.spark.sinks import ParquetSink
from strata.spark.sources import expected_rows

pytestmark = pytest.mark.spark

SPARK_HOME = Path(pyspark.__file__).parent
SOURCE = {"rate": 300, "keys": {"count": 50, "zipf_s": 0.8}, "seed": 9}
SPEC = f"""
cluster: {{nodes: [{{name: n0, cores: 1}}]}}
jobs:
  - id: copy
    rank: 1
    templates:
      - operators:
          - {{name: s, kind: source, source: {json.dumps(SOURCE)}}}
          - {{name: m, kind: map, expressions: ["id", "key", "value"]}}
          - {{name: o, kind: sink}}
        streams: [{{from: s, to: m}}, {{from: m, to: o}}]
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(predicate, timeout_s: float, what: str) -> None:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(1.0)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")


def alive_workers(ui_port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=5) as r:
            return json.load(r)["aliveworkers"]
    except OSError:
        return 0


def stop_group(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)


@pytest.mark.skipif(not (SPARK_HOME / "bin" / "spark-class").exists(), reason="pyspark ships no spark-class")
def test_a_pipeline_runs_on_a_standalone_cluster(tmp_path):
    port, ui, worker_ui = free_port(), free_port(), free_port()
    env = {
        **os.environ,
        "SPARK_HOME": str(SPARK_HOME),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOG_DIR": str(tmp_path / "logs"),
        "SPARK_WORKER_DIR": str(tmp_path / "work"),
        "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
    }
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    procs: list[subprocess.Popen] = []
    run = None
    logs = contextlib.ExitStack()

    def log(name: str):
        return logs.enter_context(open(tmp_path / name, "w"))

    try:
        procs.append(
            subprocess.Popen(
                [
                    spark_class,
                    "org.apache.spark.deploy.master.Master",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                    "--webui-port",
                    str(ui),
                ],
                env=env,
                start_new_session=True,
                stdout=log("master.log"),
                stderr=subprocess.STDOUT,
            )
        )
        procs.append(
            subprocess.Popen(
                [
                    spark_class,
                    "org.apache.spark.deploy.worker.Worker",
                    f"spark://127.0.0.1:{port}",
                    "--host",
                    "127.0.0.1",
                    "--cores",
                    "1",
                    "--memory",
                    "2g",
                    "--webui-port",
                    str(worker_ui),
                    "--work-dir",
                    str(tmp_path / "work"),
                ],
                env=env,
                start_new_session=True,
                stdout=log("worker.log"),
                stderr=subprocess.STDOUT,
            )
        )
        wait_until(lambda: alive_workers(ui) == 1, 180, "the worker to register with the master")

        spec = tmp_path / "spec.yaml"
        spec.write_text(SPEC)
        out = tmp_path / "run"
        strata = Path(sys.executable).with_name("strata")
        run = subprocess.Popen(
            [
                str(strata),
                "run",
                str(spec),
                "--master",
                f"spark://127.0.0.1:{port}",
                "--duration",
                "900",
                "--out",
                str(out),
            ],
            env=env,
            stdout=log("run.log"),
            stderr=subprocess.STDOUT,
        )
        sink = ParquetSink(out / "strata" / "jobs" / "copy" / "0-default" / "sinks" / "copy")

        def written() -> bool:
            assert run.poll() is None, (tmp_path / "run.log").read_text()[-3000:]
            frame = sink.read()
            return not frame.empty and frame["batch_id"].nunique() >= 2

        wait_until(written, 300, "two non-empty batches in the sink")
        run.send_signal(signal.SIGINT)
        assert run.wait(180) == 0, (tmp_path / "run.log").read_text()[-3000:]
        log = (tmp_path / "run.log").read_text()
        assert "interrupted" in log and f"spark://127.0.0.1:{port}" in log
        assert (out / "metrics" / "batches.csv").exists() and (out / "metrics" / "decisions.csv").exists()

        frame = sink.read().sort_values("id")
        n = len(frame)
        np.testing.assert_array_equal(frame["id"], np.arange(n))  # each record once, none skipped
        ref = expected_rows(SourceSpec.model_validate(SOURCE), end_s=n / SOURCE["rate"] * 3 + 10, epoch=0.0)
        np.testing.assert_array_equal(frame["key"], ref["key"][:n])
        np.testing.assert_array_equal(frame["value"], ref["value"][:n])
    finally:
        if run is not None and run.poll() is None:
            run.kill()
            run.wait(30)
        for proc in reversed(procs):
            stop_group(proc)
        logs.close()
