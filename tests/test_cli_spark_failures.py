"""`strata run` / `strata demo` when Spark cannot start, and when they are told to stop (SIGTERM).

Each runs the installed command in a subprocess: what a user sees is one located line and exit
code 2 within seconds, never a Python or Java traceback; SIGTERM drains like Ctrl-C.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES

STRATA = str(Path(sys.executable).with_name("strata"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_master_is_one_line_and_exit_2_within_seconds(tmp_path):
    port = free_port()
    t0 = time.monotonic()
    run = subprocess.run(
        [STRATA, "run", str(EXAMPLES / "demo.yaml"), "--master", f"spark://127.0.0.1:{port}", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    took = time.monotonic() - t0
    assert run.returncode == 2
    assert f"no Spark master answers at 127.0.0.1:{port}" in run.stderr
    assert "Traceback" not in run.stdout + run.stderr
    assert took < 15.0


@pytest.mark.parametrize("command", ["run", "demo"])
def test_a_missing_java_is_one_line_with_the_install_hint(tmp_path, command):
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(tmp_path / "no-java-here")
    run = subprocess.run(
        [STRATA, command, str(EXAMPLES / "demo.yaml"), "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert run.returncode == 2
    assert "Java was not found" in run.stderr and "openjdk-17" in run.stderr
    assert "Traceback" not in run.stdout + run.stderr


SPEC = """
cluster: {nodes: [{name: n0, cores: 2}]}
jobs:
  - id: copy
    rank: 1
    templates:
      - operators:
          - {name: s, kind: source, source: {rate: 200, keys: {count: 10}, seed: 4}}
          - {name: f, kind: filter, predicate: "value < 0.5"}
          - {name: o, kind: sink}
        streams: [{from: s, to: f}, {from: f, to: o}]
"""


@pytest.mark.spark
def test_sigterm_drains_like_ctrl_c_and_writes_the_metrics(tmp_path):
    from strata.spark.sinks import ParquetSink

    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    out = tmp_path / "run"
    log = open(tmp_path / "run.log", "w")  # noqa: SIM115 - the subprocess writes it until it ends
    run = subprocess.Popen(
        [STRATA, "run", str(spec), "--duration", "600", "--out", str(out)], stdout=log, stderr=subprocess.STDOUT
    )
    sink = ParquetSink(out / "strata" / "jobs" / "copy" / "0-default" / "sinks" / "copy")
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            assert run.poll() is None, (tmp_path / "run.log").read_text()[-3000:]
            frame = sink.read()
            if not frame.empty and frame["batch_id"].nunique() >= 2:
                break
            time.sleep(1.0)
        else:
            raise AssertionError("no two batches in the sink within 240 s")
        run.send_signal(signal.SIGTERM)
        assert run.wait(180) == 0, (tmp_path / "run.log").read_text()[-3000:]
    finally:
        if run.poll() is None:
            run.kill()
        log.close()
    text = (tmp_path / "run.log").read_text()
    assert "interrupted (SIGTERM)" in text and "exactly once" in text
    assert (out / "metrics" / "checks.csv").exists() and (out / "report.html").exists()


@pytest.mark.spark
def test_a_changed_query_never_reuses_its_checkpoint_and_a_resume_says_so(tmp_path):
    """Two runs on one directory resume exactly once; a changed predicate is refused; --fresh sets the old aside."""
    spec = tmp_path / "spec.yaml"
    out = tmp_path / "run"

    def strata_run(*extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [STRATA, "run", str(spec), "--duration", "25", "--out", str(out), *extra],
            capture_output=True,
            text=True,
            timeout=300,
        )

    spec.write_text(SPEC)
    first = strata_run()
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    again = strata_run()
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "copy: resuming (default) after batch" in again.stdout
    assert "exactly once" in again.stdout  # the sink over both runs equals the reference of every row read

    spec.write_text(SPEC.replace("value < 0.5", "value < 0.3"))
    t0 = time.monotonic()
    changed = strata_run()
    assert changed.returncode == 2
    message = " ".join(changed.stderr.split())
    assert "copy: template 'default': operators[1].predicate: 'value < 0.5' → 'value < 0.3'" in message
    assert "--fresh" in message and "Traceback" not in changed.stdout + changed.stderr
    assert time.monotonic() - t0 < 60  # refused before any query started

    fresh = strata_run("--fresh", "copy")
    assert fresh.returncode == 0, fresh.stdout[-3000:] + fresh.stderr[-3000:]
    assert "copy: started afresh" in fresh.stdout and "exactly once" in fresh.stdout
    assert (out / "strata" / "jobs" / "copy.old-1" / "0-default" / "fingerprint.json").exists()


@pytest.mark.spark
@pytest.mark.parametrize("command", ["run", "demo"])
def test_an_expression_spark_cannot_analyse_is_located_before_any_query_runs(tmp_path, command):
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.replace("value < 0.5", "value >>> "))
    run = subprocess.run(
        [STRATA, command, str(spec), "--duration", "10", "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 2
    message = " ".join(run.stderr.split())
    assert f"{spec.name}:9: jobs[0].templates[0].operators[1].predicate: expected an expression Spark can analyse" in (
        message
    )
    assert "Traceback" not in run.stdout + run.stderr
