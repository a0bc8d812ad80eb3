"""The fleet on Spark (issue 28): cells as Spark applications with OS-enforced shares under one hierarchy, a job
moved between cells mid-run, SIGKILL of the fleet leaving no cell behind, a restart resuming every cell — every
sink recomputed exactly (docs/spark.md, "Cells")."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_cell_move.py"
STRATA = str(Path(sys.executable).with_name("strata"))


def bench_cell_move():
    """The move benchmark's module: its spec, scripted L0 and one round (:func:`move_once`)."""
    spec = importlib.util.spec_from_file_location("bench_cell_move", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


BENCH = bench_cell_move()
SPEC = BENCH.SPEC


@pytest.mark.spark
def test_a_job_moves_between_cells_mid_run_and_every_sink_is_exact(spark, tmp_path):
    policy, fleet, tables = BENCH.move_once(spark, tmp_path)
    assert policy.moved and fleet.holder == {"fast": "c0", "win": "c0"}
    checks = tables["checks"]
    # one check per segment, over its whole output: win's segment ran in c1, then continued in c0
    assert sorted(checks["job"]) == ["fast", "win"], checks
    assert (checks[["missing", "duplicated", "wrong"]] == 0).all().all(), checks
    assert checks.set_index("job").loc["win", "cell"] == "c0" and (checks["expected"] > 0).all()
    batches = tables["batches"]
    win = batches[batches["job"] == "win"]
    assert set(win["cell"]) == {"c0", "c1"}  # its rows from both cells
    assert win["batch_id"].is_unique  # nothing read twice: the batch ids continue across the move
    decisions = tables["decisions"]
    assert ((decisions["kind"] == "move") & (decisions["job"] == "win")).sum() == 1
    resumed = decisions[decisions["kind"] == "resumed"]
    # one resume, of win, timed (its duration is the benchmark's figure, not a test's)
    assert list(resumed["job"]) == ["win"] and resumed["resume_s"].iloc[0] > 0
    summary = tables["summary"].set_index("job")
    assert summary.loc["win", "delivered"] > 0 and summary.loc["fast", "delivered"] > 0
    assert list(summary["cell"]) == ["c0", "c0"]


def cell_processes(out: Path) -> list[int]:
    """Processes of the run in ``out``: a cell's Python (its spec is under ``out``) or a JVM whose command line
    names ``out`` (its work directory)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if str(out) in cmd and state != "Z" and int(entry) != os.getpid():
            found.append(int(entry))
    return found


@pytest.mark.spark
def test_sigkill_of_the_fleet_leaves_no_cell_and_a_restart_resumes_every_cell_exactly(tmp_path):
    (spec := tmp_path / "spec.yaml").write_text(SPEC)
    out = tmp_path / "out"
    with open(tmp_path / "first.log", "w") as log:  # the fleet's own output, until it is killed
        command = [STRATA, "run", str(spec), "--cells", "2", "--duration", "600", "--out", str(out)]
        fleet = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 240
        sinks = [out / "strata" / "jobs" / job / "0-default" / "sinks" for job in ("fast", "win")]
        while not all(any(s.rglob("*.parquet")) for s in sinks if s.exists()) or not all(s.exists() for s in sinks):
            assert fleet.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "no output from both cells within 240 s"
            time.sleep(1.0)
        assert (out / "cells").is_dir() and cell_processes(out)  # a child cell runs
        fleet.send_signal(signal.SIGKILL)
        fleet.wait(30)
    finally:
        if fleet.poll() is None:
            fleet.kill()
    deadline = time.monotonic() + 30
    while (left := cell_processes(out)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left, [Path(f"/proc/{p}/cmdline").read_bytes()[:200] for p in left]
    again = subprocess.run(
        [STRATA, "run", str(spec), "--cells", "2", "--duration", "12", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "fast: resuming (default) after batch" in again.stdout and "win: resuming (default)" in again.stdout
    checks = pd.read_csv(out / "metrics" / "checks.csv")
    assert sorted(checks["job"]) == ["fast", "win"]
    assert (checks[["missing", "duplicated", "wrong"]] == 0).all().all(), checks
    decisions = pd.read_csv(out / "metrics" / "decisions.csv")
    admitted = decisions[decisions["kind"] == "admit"]
    assert sorted(admitted["cell"]) == ["c0", "c1"]  # each job resumed in a cell of its own
