"""The fleet on Spark (issue 28): cells as Spark applications with OS-enforced shares under one hierarchy, a job
moved between cells mid-run, SIGKILL of the fleet leaving no cell behind, a restart resuming every cell — every
sink recomputed exactly (docs/spark.md, "Cells")."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from strata.control.loop import run
from strata.model import load_scenario
from strata.protocol.engine import Decisions, Observation
from strata.runners.cell import Cell, CellSpec
from strata.runners.fleet import FleetEngine, LocalCell, close_shares, launch_cell, merge_metrics
from strata.runners.live import RunRequest
from strata.runners.shares import CpuShares
from strata.runners.spark_loop import RunConfig
from strata.spark.measure import ModeRun

STRATA = str(Path(sys.executable).with_name("strata"))


def job_spec(job: str, rank: int, target_s: float, seed: int, middle: dict) -> dict:
    """One job of the spec: a generated source (100 records/s, 10 keys), ``middle``, a sink."""
    source = {"name": "s", "kind": "source", "source": {"rate": 100, "keys": {"count": 10}, "seed": seed}}
    ops = [source, middle, {"name": "o", "kind": "sink"}]
    streams = [{"from": "s", "to": middle["name"]}, {"from": middle["name"], "to": "o"}]
    return {
        "id": job,
        "rank": rank,
        "target_latency_s": target_s,
        "templates": [{"operators": ops, "streams": streams}],
    }


# a latency-critical filter and a stateful window aggregation
SPEC = yaml.safe_dump(
    {
        "cluster": {"nodes": [{"name": "n0", "cores": 2}]},
        "jobs": [
            job_spec("fast", 1, 2.0, 4, {"name": "f", "kind": "filter", "predicate": "value < 0.5"}),
            job_spec(
                "win",
                2,
                30.0,
                5,
                {
                    "name": "w",
                    "kind": "window_aggregate",
                    "window": {"size_s": 2, "watermark_s": 1},
                    "aggregate": {"fn": "count"},
                },
            ),
        ],
    }
)


class MoveOnce:
    """A scripted L0: both jobs admitted, ``fast`` in c0 and ``win`` in c1; once ``win`` has committed a batch in
    c1, it moves to c0."""

    def __init__(self) -> None:
        self.moved = False

    def start(self, now: float) -> Decisions:
        return Decisions(
            1,
            admitted={"fast": "default", "win": "default"},
            triggers={"win": 1.0},
            cells={"fast": "c0", "win": "c1"},
            cell_shares={"c0": 1.0, "c1": 1.0},
            reasons=("start",),
        )

    def step(self, obs: Observation) -> Decisions:
        ran = any(i.pe.startswith("win.") and i.records > 0 for i in obs.window.instances)
        if ran and not self.moved:
            self.moved = True
            return Decisions(2, cells={"fast": "c0", "win": "c0"}, cell_shares={"c0": 1.5, "c1": 0.5})
        return Decisions(2)


@pytest.mark.spark
def test_a_job_moves_between_cells_mid_run_and_every_sink_is_exact(spark, tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    scenario = load_scenario(spec)
    out = tmp_path / "out"
    request = RunRequest((str(spec),), out=out, sink="parquet")
    config = RunConfig(sink="parquet")
    run_dir = out / "strata"
    shares = CpuShares(f"test-move-{os.getpid()}")
    child = launch_cell(CellSpec("c1", request, run_dir, config), shares, secrets.token_bytes(16))
    try:
        child.connect()
        epoch = time.time() + 1.0
        host = Cell(spark, scenario, CellSpec("c0", request, run_dir, config), epoch, 1.0)
        child.call("begin", epoch, 1.0)
        fleet = FleetEngine({"c0": LocalCell(host), "c1": child}, shares)
        policy = MoveOnce()
        fleet.apply(policy.start(time.time()))

        def resumed_twice() -> bool:  # win committed two batches in c0 after its move
            return sum(1 for s in host.engine.segments_of("win") for _ in s.pipeline.batch_records()) >= 2

        run(fleet, policy, window_s=1.0, until=epoch + 150.0, should_stop=resumed_twice, start=False)
        stop = fleet.stop_all()
        assert policy.moved and fleet.holder == {"fast": "c0", "win": "c0"}
        horizon = stop - epoch - 4.0
        held = {"c0": ("fast", "win"), "c1": ()}
        dirs = {c: Path(fleet.cells[c].call("finish", horizon, stop, held[c], {})) for c in ("c0", "c1")}
        fleet_run = ModeRun("strata", epoch, stop, None)
        tables = merge_metrics(out, dirs, fleet_run, fleet, scenario, horizon, {})
    finally:
        child.close()
        close_shares(shares)
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
    # from the move's start (the stop waits for the batch in flight) to its first batch committed in c0
    assert list(resumed["job"]) == ["win"] and 0 < resumed["resume_s"].iloc[0] <= 60.0
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
