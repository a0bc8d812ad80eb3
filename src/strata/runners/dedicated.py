"""The deployment a team makes by hand for a latency-critical stream (issue 28): the latency-critical jobs in a
Spark application of their own, the other jobs in a second application under FAIR pools set by hand
(:func:`~strata.runners.spark_loop.hand_pools`), plain Spark in each, the second application's processes
weighing against the first's as ``nice`` +:data:`BULK_NICE` processes would (what ``bench_platform``'s
``dedicated`` mode starts the bulk application at).

It is the fleet of ``strata run`` (:mod:`strata.runners.fleet`) with its decisions made by hand, once: the same
cells (:mod:`strata.runners.cell`: each a Spark application started as a child process that warms its jobs'
queries before it is ready, its CPU weight enforced by the OS through
:class:`~strata.runners.shares.CpuShares`), the same engine over them
(:class:`~strata.runners.fleet.FleetEngine`), the one loop driving them under
:class:`~strata.control.loop.Plain` (every job admitted on its first template, nothing changed after), and one
metrics set (:func:`~strata.runners.fleet.merge_metrics`, every sink verified in its cell). Only who decides
the deployment differs from Strata's mode: here the team, there L0 (DESIGN.md, placement row: cells).
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, replace
from pathlib import Path

from strata.control.loop import Plain, run
from strata.model import Scenario, critical_jobs
from strata.protocol.engine import Decisions, Observation
from strata.runners.cell import CellSpec
from strata.runners.fleet import RUN_PREFIX, FleetEngine, RemoteCell, close_shares, launch_cell, merge_metrics
from strata.runners.live import DRAIN_S, RunRequest
from strata.runners.shares import NICE_STEP, CpuShares
from strata.runners.spark_loop import Recorder, RunConfig, hand_pools
from strata.runners.warmup import LEAD_S, lead_after, on_grid, window_grid
from strata.spark.measure import ModeRun

DEDICATED = "dedicated"  # the mode's name in the metrics tables
CRITICAL_CELL, BULK_CELL = "critical", "bulk"
BULK_NICE = 10  # the bulk application's nice, as bench_platform's --bulk-nice starts it


def hand_cells(scenario: Scenario, critical_s: float) -> dict[str, str]:
    """job → its application: the latency-critical jobs in :data:`CRITICAL_CELL`, the others in :data:`BULK_CELL`
    (a scenario with none of one kind has one application)."""
    critical = set(critical_jobs(scenario, critical_s))
    return {j.id: CRITICAL_CELL if j.id in critical else BULK_CELL for j in scenario.jobs}


def hand_shares(cells: Mapping[str, str], cores: float) -> dict[str, float]:
    """application → its CPU share: the critical one the machine's ``cores``, the bulk one ``NICE_STEP`` ^
    ``BULK_NICE`` times less — the weight CFS gives a ``nice`` +10 process against a nice 0 one (1024 / 110), as
    a cgroup weight, or exactly nice +10 where only nice is available
    (:func:`~strata.runners.shares.nice_levels`)."""
    weights = {CRITICAL_CELL: cores, BULK_CELL: cores / NICE_STEP**BULK_NICE}
    return {cell: weights[cell] for cell in sorted(set(cells.values()))}


def run_dedicated(
    request: RunRequest,
    scenario: Scenario,
    config: RunConfig,
    on_step: Callable[[str, Observation, Decisions, dict], None] | None = None,
    lead_s: float = LEAD_S,
) -> float:
    """Run the hand deployment of ``request.files`` (the jobs every cell loads; ``scenario``: the same jobs) for
    ``request.duration_s`` from the sources' epoch, once both applications are up and have warmed their jobs'
    queries, at least ``lead_s`` after (:func:`~strata.runners.warmup.lead_after`), as ``strata run`` starts its
    cells; metrics under ``request.out/metrics`` (mode ``baseline`` in the cells' tables, as plain
    Spark). Returns the sources' epoch (wall s). Raises :class:`~strata.runners.fleet.CellLost` if an application
    ends or stops answering."""
    out = Path(request.out)
    placement = hand_cells(scenario, config.control.critical_latency_s)
    members = {c: tuple(j for j, cc in placement.items() if cc == c) for c in sorted(set(placement.values()))}
    shares_now = hand_shares(placement, scenario.cluster.total_cores)
    plain = replace(config, pools=hand_pools(scenario, config.control.critical_latency_s))
    cells_request = replace(request, control=False)
    # named as a fleet's (one at a time in a process): a later fleet sweeps it if this process is SIGKILLed
    shares = CpuShares(f"{RUN_PREFIX}{os.getpid()}")
    key = secrets.token_bytes(32)
    remote: list[RemoteCell] = []
    try:
        shares.set(shares_now)  # before the cells start: the nice backend gives each its level as it starts
        for name, jobs in members.items():  # both start their sessions, load the jobs and warm theirs together
            remote.append(launch_cell(CellSpec(name, cells_request, out / "run", plain, jobs), shares, key))
        warmed = {cell.name: cell.connect().warmed for cell in remote}
        lead = lead_after(warmed.values(), lead_s)  # as strata run's fleet
        epoch = on_grid(time.time() + lead, window_grid(scenario))
        for cell in remote:
            cell.call("begin", epoch, shares_now[cell.name])
            cell.call("resume", ())
        fleet = FleetEngine({c.name: c for c in remote}, shares, holder=dict(placement), cell_shares=shares_now)
        run_ = ModeRun(DEDICATED, epoch, epoch, None)
        policy = Plain(scenario, config.control.triggers(scenario))  # the triggers plain Spark runs on everywhere
        try:
            fleet.apply(policy.start(time.time()))
            stop = max(epoch, time.time()) + request.duration_s  # as the fleet of `strata run` stops
            record = Recorder(run_, scenario, None, on_step)
            run(fleet, policy, window_s=config.control.window_s, until=stop, on_step=record, start=False)
        finally:
            run_.stop = fleet.stop_all()
        horizon = max(0.0, run_.stop - epoch - DRAIN_S)
        knobs = {
            "config": {
                "duration_s": horizon,
                "control": False,
                "cells": {c: list(j) for c, j in members.items()},
                "warm_up": {c: asdict(w) for c, w in warmed.items()},
                "lead_s": lead,
            }
        }
        dirs = {c: Path(fleet.cells[c].call("finish", horizon, run_.stop, members[c], knobs)) for c in members}
        merge_metrics(out, dirs, run_, fleet, scenario, horizon, knobs)
        return epoch
    finally:
        for cell in remote:
            cell.close()
        close_shares(shares)
