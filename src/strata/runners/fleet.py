"""``strata run``: the jobs as a fleet of cells — one Spark application per cell, each with a CPU share the
operating system enforces — under ONE hierarchy (issue 28; DESIGN.md, placement row: cells).

Inside one Spark application the gate and the FAIR pools order the batches, but not the driver's own work for
each query, and Spark cannot preempt a task: process isolation is the decisive lever (docs/spark.md, "Cells").
L0 places the jobs onto cells as SODA places PEs onto nodes (:func:`strata.plan.cells.place_cells`, through the
Controller's ``cells`` knob) and gives each cell its share (:class:`strata.runners.shares.CpuShares`).

The fleet process runs the one Controller (L0, L1 and the meta level over every job) through the one loop
(:func:`strata.control.loop.run`) against a :class:`FleetEngine`: an Engine whose ``observe`` merges its cells'
observations (:func:`merge_observations`) and whose ``apply`` routes each job's decisions to the cell holding it
(:func:`route`), sets the cells' shares, and moves a job whose cell changed — reserve the target (its share is
set first), stop the job at a batch boundary in its cell, continue it from its checkpoint in the target.
The fleet hosts one cell in-process (:class:`strata.runners.cell.Cell`) and starts the others as child
processes (:mod:`strata.runners.cell`). On a standalone cluster (``--master spark://…``) every cell is a child
whose application starts with the whole cores of its first share (:class:`~strata.runners.shares.ClusterCores`;
the cluster's workers enforce them) and the fleet's own session is local, only to load the jobs. One run
directory, one metrics set (:func:`merge_metrics`), one report, one live view.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import pickle
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Collection, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from multiprocessing.connection import Client, Connection
from pathlib import Path
from typing import Protocol

import pandas as pd
from rich.console import Console
from rich.live import Live

from strata.control.cells import CellConfig, light_compiling
from strata.control.controller import Controller
from strata.control.loop import run
from strata.model import Scenario, critical_jobs
from strata.protocol.engine import Decisions, Observation, WindowStats
from strata.runners.cell import CELLS, Cell, CellSpec, end_jvm, read_ready
from strata.runners.live import (
    DRAIN_S,
    SPARK_LOG,
    STOP_SIGNALS,
    RunRequest,
    View,
    check_files,
    prepare,
    refuse_changed,
    run_config,
    start_session,
    time_base,
)
from strata.runners.shares import NICE, ClusterCores, CpuShares, dir_name, started
from strata.runners.spark_loop import Recorder, RunConfig, job_floors
from strata.runners.warmup import Warmed, lead_after, warm_line, warm_up, window_grid
from strata.spark.checkpoint import CheckpointChanged
from strata.spark.engine import EngineConfig, decision_row
from strata.spark.java import JavaError
from strata.spark.measure import ModeRun, job_summary, write_metrics
from strata.spark.session import FIRST_TIER_ONLY, MasterUnreachable, check_master, warm_python_workers

READY_TIMEOUT_S = 180.0  # how long a cell may take to start its session and load the jobs
CLOSE_TIMEOUT_S = 120.0  # how long a cell may take to measure and verify its sinks at the end


# ---------------------------------------------------------------------- the contract's plain data, merged and routed


def merge_observations(parts: Mapping[str, Observation], shares: Mapping[str, float], now: float) -> Observation:
    """One observation of the whole fleet from its cells' (their jobs are disjoint): per-job and per-PE maps
    united, key groups and instances concatenated, ``node_utilisation`` per cell (its busy cores over its
    share), units summed, the dispatch strategy of the first cell (every cell runs the one the meta level
    chose)."""
    windows = [o.window for o in parts.values()]
    units = sum(o.units for o in parts.values())
    util = {}
    for name, o in parts.items():
        span = max(o.window.now - o.window.start, 1e-9)
        busy = sum(i.busy for i in o.window.instances) / span
        util[name] = busy / shares[name] if shares.get(name) else 0.0

    def union(attr: str) -> dict:
        return {k: v for w in windows for k, v in getattr(w, attr).items()}

    dropped: dict[str, int] = {}
    for w in windows:
        for reason, n in w.dropped.items():
            dropped[reason] = dropped.get(reason, 0) + n
    window = WindowStats(
        now=now,
        start=min((w.start for w in windows), default=now),
        key_groups=tuple(kg for w in windows for kg in w.key_groups),
        instances=tuple(i for w in windows for i in w.instances),
        node_utilisation=util,
        queue_lengths=union("queue_lengths"),
        latency=union("latency"),
        rates=union("rates"),
        ingest=union("ingest"),
        routing=union("routing"),
        placement=union("placement"),
        migrating=tuple(m for w in windows for m in w.migrating),
        dropped=dropped,
    )
    dispatch = next((o.dispatch for o in parts.values() if o.dispatch is not None), None)
    return Observation(
        window,
        nodes_down=frozenset().union(*(o.nodes_down for o in parts.values())),
        templates={j: t for o in parts.values() for j, t in o.templates.items()},
        dispatch=dispatch,
        units=units,
        unit_records=sum(o.unit_records * o.units for o in parts.values()) / units if units else 0.0,
        task_run={j: t for o in parts.values() for j, t in o.task_run.items()},
    )


def route(
    decisions: Decisions, holder: Mapping[str, str], cells: Collection[str], admitted: Mapping[str, str] | None
) -> dict[str, Decisions]:
    """Each cell's share of ``decisions``: the per-job fields of the jobs it holds (``holder``: job → cell),
    per-PE fields by the PE's job, the dispatch strategy and triggers to every cell. ``admitted``: the admission
    in force, sent again (restricted) to every cell when placement changed jobs' cells (``decisions.admitted``
    None): the cell a job left stops it, the cell it joined starts it."""
    admit = decisions.admitted if decisions.admitted is not None else admitted if decisions.cells else None

    def mine(values: Mapping | None, cell: str, key=lambda k: k) -> dict | None:
        if values is None:
            return None
        return {k: v for k, v in values.items() if holder.get(key(k)) == cell}

    def job_of(pe: str) -> str:
        return pe.partition(".")[0]

    out = {}
    for cell in cells:
        out[cell] = Decisions(
            epoch=decisions.epoch,
            admitted=mine(admit, cell),
            cpu_share=mine(decisions.cpu_share, cell),
            pools=mine(decisions.pools, cell),
            triggers=decisions.triggers,
            placement=mine(decisions.placement, cell, job_of),
            rate_limits=mine(decisions.rate_limits, cell, job_of),
            task_records=mine(decisions.task_records, cell, job_of),
            limit_mode=decisions.limit_mode,
            moves=[m for m in decisions.moves if holder.get(job_of(m.pe)) == cell],
            dispatch=decisions.dispatch,
            replan=decisions.replan,
            reasons=decisions.reasons,
        )
    return out


# ---------------------------------------------------------------------- cells as the fleet sees them


class CellHandle(Protocol):
    """A cell the fleet calls (:data:`strata.runners.cell.CALLS`), in this process or another."""

    name: str

    def call(self, method: str, *args): ...


class LocalCell:
    """The cell this process hosts."""

    def __init__(self, cell: Cell) -> None:
        self.cell = cell
        self.name = cell.spec.name

    def call(self, method: str, *args):
        return getattr(self.cell, method)(*args)

    def close(self) -> None:
        return None


@dataclass
class RemoteCell:
    """A cell in a child process (:func:`launch_cell`), over its connection (made once it is ready: ``address``
    holds where it listens and what its warm-up measured, ``key`` authenticates): each call is one request and its
    answer."""

    name: str
    process: subprocess.Popen
    log: Path
    address: Path
    key: bytes
    conn: Connection | None = None
    warmed: Warmed = field(default_factory=Warmed)

    def connect(self, timeout_s: float = READY_TIMEOUT_S) -> RemoteCell:
        """Wait for the cell to be ready (its session up, the jobs loaded, its own jobs' queries warmed) and
        connect; raises :class:`CellLost` if it ends first or is not ready in time (it is then killed)."""
        deadline = time.time() + timeout_s
        while not self.address.exists():
            if self.process.poll() is not None or time.time() > deadline:
                if self.process.poll() is None:
                    self.process.kill()
                    self.process.wait()
                raise CellLost(self.name, self.log, self.process.poll())
            time.sleep(0.2)
        address, self.warmed = read_ready(self.address.read_text())
        self.conn = Client(address, authkey=self.key)
        return self

    def call(self, method: str, *args):
        try:
            self.conn.send((method, args))
            status, value = self.conn.recv()
        except (EOFError, OSError) as err:
            raise CellLost(self.name, self.log, self.process.poll()) from err
        if status == "error":
            raise value
        return value

    def close(self) -> None:
        """Ask the cell to end (its queries already stopped), then wait for it; killed if it hangs."""
        if self.conn is not None:
            with contextlib.suppress(CellLost):
                self.call("close")
            self.conn.close()
        try:
            self.process.wait(timeout=30 if self.conn is not None else 0)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class CellLost(RuntimeError):
    """A cell process ended or stopped answering."""

    def __init__(self, name: str, log: Path, code: int | None) -> None:
        self.name = name
        ended = f"exited {code}" if code is not None else "stopped answering"
        tail = log.read_text(errors="replace").strip().splitlines()[-3:] if log.exists() else []
        super().__init__(f"cell {name} {ended} (its log: {log}){': ' + ' | '.join(tail) if tail else ''}")


@dataclass
class FleetEngine:
    """The fleet as an :class:`~strata.protocol.engine.Engine`: its cells' observations merged, decisions routed
    to the cell holding each job, L0's cell shares enforced by the OS and its moves carried out.

    ``spawn``: starts a cell L0 names that does not run yet (name, share, the jobs it will hold) → its handle;
    ``shares``: what enforces cell shares (:class:`~strata.runners.shares.CpuShares`: ``set``); ``critical``: the
    latency-critical jobs, whose cells outweigh the others (:func:`~strata.runners.shares.cgroup_weights`)."""

    cells: dict[str, CellHandle]
    shares: object
    spawn: Callable[[str, float, tuple[str, ...]], CellHandle] | None = None
    clock: Callable[[], float] = time.time
    holder: dict[str, str] = field(default_factory=dict)  # job → its cell
    cell_shares: dict[str, float] = field(default_factory=dict)
    admitted: dict[str, str] = field(default_factory=dict)  # the admission in force (job → template)
    critical: frozenset[str] = frozenset()
    decisions: list[dict] = field(default_factory=list)  # the fleet's own enforced changes (cells, shares, moves)
    _placed: set[str] = field(default_factory=set)  # jobs whose cell was logged

    def now(self) -> float:
        return self.clock()

    def advance(self, until: float) -> bool:
        """Let the cells run until wall time ``until``; False once no cell has a query running."""
        while (left := until - self.clock()) > 0:
            time.sleep(min(left, 0.25))
        return any(c.call("alive") for c in self.cells.values())

    def observe(self) -> Observation:
        parts = {name: c.call("observe") for name, c in self.cells.items()}
        return merge_observations(parts, self.cell_shares, self.clock())

    def apply(self, decisions: Decisions) -> None:
        """Shares first (a move's target is reserved before the job stops), then per cell: the cells a job
        leaves stop it at a batch boundary before the cell it joins continues it from its checkpoint."""
        weighs = decisions.cells is not None and (
            critical_cells(decisions.cells, self.critical) != critical_cells(self.holder, self.critical)
        )
        if decisions.cell_shares is not None or weighs:  # a critical job's move moves its cell's weight too
            self._set_shares(decisions)
        moves: dict[str, tuple[str, str]] = {}
        if decisions.cells is not None:
            unknown = sorted(set(decisions.cells.values()) - set(self.cells))
            for name in unknown:
                if self.spawn is None:
                    raise ValueError(f"cells: no cell {name!r} and none can be started")
                joining = tuple(sorted(j for j, c in decisions.cells.items() if c == name))
                self.cells[name] = self.spawn(name, self.cell_shares.get(name, 1.0), joining)
                self._log(decisions, "cell", "*", f"{name} started")
            moves = {j: (self.holder[j], c) for j, c in decisions.cells.items() if self.holder.get(j, c) != c}
            self.holder = dict(decisions.cells)
            for job, cell in sorted(decisions.cells.items()):
                if job not in moves and job not in self._placed:
                    self._log(decisions, "cell", job, cell)
            self._placed = set(decisions.cells)
        since = self.clock()
        stops = {}  # the jobs leaving a cell stop there first
        for src in sorted({src for src, _ in moves.values()}):
            staying = {j: t for j, t in self.admitted.items() if self.holder.get(j) == src and j not in moves}
            stops[src] = Decisions(decisions.epoch, admitted=staying, reasons=decisions.reasons)
        self._apply_each(stops)
        for job, (src, dst) in sorted(moves.items()):
            self.cells[dst].call("adopt", job, since, src)
            detail = f"{src} → {dst}: stopped at a batch boundary, continued from its checkpoint"
            self._log(decisions, "move", job, detail)
        if decisions.admitted is not None:
            self.admitted = dict(decisions.admitted)
        routed = route(decisions, self.holder, list(self.cells), self.admitted)
        self._apply_each({name: d for name, d in routed.items() if not d.empty()})

    def _apply_each(self, decisions: Mapping[str, Decisions]) -> None:
        """Each cell's decisions, the cells at once (each is its own application: a query's start or stop at a
        batch boundary takes seconds, and one cell's should not wait for another's)."""
        if len(decisions) <= 1:
            for name, d in decisions.items():
                self.cells[name].call("apply", d)
            return
        with ThreadPoolExecutor(len(decisions)) as pool:
            done = [pool.submit(self.cells[name].call, "apply", d) for name, d in decisions.items()]
        for future in done:
            future.result()  # the first error, raised here

    def _set_shares(self, decisions: Decisions) -> None:
        if decisions.cell_shares is not None:
            self.cell_shares = dict(decisions.cell_shares)
        placed = decisions.cells if decisions.cells is not None else self.holder
        self.shares.set(self.cell_shares, critical_cells(placed, self.critical))
        held = self.shares.held(self.cell_shares)  # on a cluster: the whole cores each cell started with
        for name, cores in held.items():
            if name in self.cells:
                self.cells[name].call("share", cores)
        detail = ", ".join(f"{c} {v:.2f}" for c, v in sorted(self.cell_shares.items()))
        if held != self.cell_shares:
            detail += "; held " + ", ".join(f"{c} {v:g}" for c, v in sorted(held.items()))
        self._log(decisions, "cell shares", "*", f"{detail} cores ({getattr(self.shares, 'backend', '?')})")

    def _log(self, decisions: Decisions, kind: str, job: str, detail: str) -> None:
        self.decisions.append(decision_row(self.clock(), decisions, kind, job, detail))

    def status(self) -> dict:
        """The live view's dict (:func:`strata.runners.live.engine_status`) over every cell, with job → cell."""
        merged: dict = {
            "running": {},
            "pools": {},
            "caps": {},
            "floors": {},
            "decisions": [],
            "cells": dict(self.holder),
        }
        for c in self.cells.values():
            part = c.call("status")
            for key in ("running", "pools", "caps", "floors"):
                merged[key].update(part[key])
            merged["decisions"] += part["decisions"]
        merged["decisions"] = sorted(merged["decisions"] + self.decisions[-6:], key=lambda d: d["t"])[-6:]
        return merged

    def failures(self) -> dict[str, str]:
        return {job: why for c in self.cells.values() for job, why in c.call("failures").items()}

    def stop_all(self) -> float:
        """Every query of every cell stopped between batches; the wall time the last one ended."""
        return max((c.call("stop_all") for c in self.cells.values()), default=self.clock())


# ---------------------------------------------------------------------- starting cells


def launch_cell(spec: CellSpec, shares: CpuShares | ClusterCores, key: bytes) -> RemoteCell:
    """Start cell ``spec.name`` as a child process in its cgroup, if any (dying with this process); it starts its
    session and loads the jobs while the fleet goes on (:meth:`RemoteCell.connect` waits for it)."""
    home = spec.home
    home.mkdir(parents=True, exist_ok=True)
    spec_file = home / "cell.spec"
    spec_file.with_suffix(".address").unlink(missing_ok=True)
    spec_file.touch(mode=0o600)
    spec_file.write_bytes(pickle.dumps((spec, key)))
    log = home / "cell.log"
    with log.open("w") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "strata.runners.cell", str(spec_file)],
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            preexec_fn=shares.preexec(spec.name),
            start_new_session=True,  # Ctrl-C reaches the fleet alone, which stops every cell between batches
        )
    return RemoteCell(spec.name, process, log, spec_file.with_suffix(".address"), key)


def jvm_processes(spark) -> list[int]:
    """The session's JVM (PySpark's gateway process) and every process under it (its Python workers)."""
    gateway = getattr(spark.sparkContext, "_gateway", None)
    proc = getattr(gateway, "proc", None)
    if proc is None:  # a JVM this process did not start (spark-submit's): not ours to move
        return []
    found, todo = [], [proc.pid]
    while todo:
        pid = todo.pop()
        found.append(pid)
        for task in Path(f"/proc/{pid}/task").glob("*/children"):
            try:
                todo += [int(c) for c in task.read_text().split()]
            except OSError:
                continue
    return found


def close_shares(shares: CpuShares, timeout_s: float = 10.0) -> None:
    """Remove the run's cells once their processes are gone: a process that has just exited may still hold its
    cgroup for a moment (a zombie until its new parent reaps it), so a busy group is retried until
    ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            shares.close()
            return
        except OSError as err:
            if err.errno != errno.EBUSY or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


RUN_PREFIX = "strata-"  # a fleet's CpuShares run name: strata-<its pid>


def sweep_stale(shares: CpuShares) -> list[Path]:
    """Remove the empty cgroups of earlier fleets that ended without closing theirs (SIGKILL: nothing runs after
    it; their cells died with them): those named by a pid that no longer runs (a cell's group
    ``strata-strata-<pid>+cell-<cell>``; a directory of them, as fleets before 28 Nov left, with its cells).
    Returns what was removed."""
    if shares.backend == NICE:
        return []
    removed = []
    mine = dir_name("strata-", RUN_PREFIX)
    for group in shares.home.glob(f"{mine}*"):
        pid = group.name.removeprefix(mine).split("+")[0]
        if f"{RUN_PREFIX}{pid}" == shares.run or not pid.isdigit() or started(int(pid)) is not None:
            continue
        try:
            for cell in (c for c in group.iterdir() if c.is_dir()):
                cell.rmdir()
            group.rmdir()
        except OSError:  # a process still in it, or not ours to remove: left alone
            continue
        removed.append(group)
    return removed


def critical_cells(placed: Mapping[str, str], critical: Collection[str]) -> set[str]:
    """The cells (of ``placed``: job → cell) holding a job of ``critical``."""
    return {cell for job, cell in placed.items() if job in critical}


def host_cell(cells: Mapping[str, tuple[str, ...]], shares: Mapping[str, float]) -> str:
    """The cell this process hosts: the one with the most jobs (then the biggest share): this process also runs
    the Controller, whose work then competes with bulk jobs, and the latency-critical cells get fresh JVMs."""
    return max(sorted(cells), key=lambda c: (len(cells[c]), shares.get(c, 0.0)))


# ---------------------------------------------------------------------- metrics: one set for the run


def stack(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """The rows of ``frames`` in order, with every column any of them has (in order of appearance). Empty frames
    and columns all NA in a frame (a cell's CSV column of empty strings) are left out of the concatenation and
    the columns put back after, so each column's dtype comes from the values it has: what pandas < 3 did with
    them, which it now warns about (FutureWarning) in the run's log."""
    columns = list(dict.fromkeys(c for f in frames for c in f.columns))
    kept = [f.dropna(axis=1, how="all") for f in frames if not f.empty]
    if not kept:
        return pd.DataFrame(columns=columns)
    return pd.concat(kept, ignore_index=True).reindex(columns=columns)


def merge_metrics(
    out: Path,
    cell_dirs: Mapping[str, Path],
    run_: ModeRun,
    fleet: FleetEngine,
    scenario: Scenario,
    horizon_s: float,
    config: dict,
) -> dict[str, pd.DataFrame]:
    """The cells' metrics tables (``cell_dirs``: cell → its metrics directory) as one set under ``out/metrics``,
    each row with its ``cell``: a moved job's rows from both cells; its sink checked once, over its whole output
    (a segment a move continued in another cell is checked there: the earlier cell's check of the same segment
    covers only a prefix and is dropped); the per-job summary recomputed over every cell's rows; the fleet's own
    observations, controller steps, learning and decisions (cells, shares, moves) added; each job's cell at the
    end in the summary."""
    names = ("latency", "batches", "partitions", "checks", "decisions", "gate", "progress")
    tables: dict[str, pd.DataFrame] = {}
    for name in names:
        frames = []
        for cell, directory in sorted(cell_dirs.items()):
            path = Path(directory) / f"{name}.csv"
            if path.exists() and path.stat().st_size > 1:
                try:
                    frames.append(pd.read_csv(path).assign(cell=cell))
                except pd.errors.EmptyDataError:
                    continue
        tables[name] = stack(frames)
    epoch = run_.epoch
    own = pd.DataFrame([{"mode": run_.mode, **d, "t": d["t"] - epoch, "cell": "fleet"} for d in fleet.decisions])
    tables["decisions"] = stack([tables["decisions"], own])
    if not tables["decisions"].empty:
        tables["decisions"] = tables["decisions"].sort_values("t", kind="stable")
    checks = tables["checks"]
    if not checks.empty:  # the check with the most input of each segment covers its whole output
        checks = checks.sort_values("rows_read", kind="stable").drop_duplicates(["job", "segment"], keep="last")
        tables["checks"] = checks.sort_values(["job", "segment"]).reset_index(drop=True)
    latency = tables["latency"]
    if latency.empty:
        latency = pd.DataFrame(columns=["mode", "job", "event_s"])
    batches = tables["batches"]
    cores = max(1, round(scenario.cluster.total_cores))
    floors = job_floors(batches.to_dict("records"), cores) if not batches.empty else {}
    summary = job_summary(
        latency, batches, tables["partitions"], scenario, run_.mode, horizon_s, run_.stop - epoch, floors
    )
    tables["summary"] = pd.DataFrame([{**row, "cell": fleet.holder.get(row["job"])} for row in summary])
    tables["observations"] = pd.DataFrame([{"mode": run_.mode, **o} for o in run_.observations])
    tables["controller"] = pd.DataFrame(
        [{"mode": run_.mode, **row, "t": row["time"] - epoch} for row in run_.controller_log]
    )
    tables["learning"] = pd.DataFrame([{"mode": run_.mode, **row} for row in run_.learned])
    write_metrics(out, tables, scenario, config, {})
    return tables


# ---------------------------------------------------------------------- the command


def run_fleet(request: RunRequest, console: Console, errors: Console, max_cells: int | None = None, declared=()) -> int:
    """The ``strata run`` command with Strata in control: the jobs as a fleet of cells under one hierarchy.
    Raises SpecError (located) before any query starts; returns the exit code. ``request.dedicated``: jobs
    pinned to a cell of their own; ``max_cells``: how many applications L0 may use (None: the planner's default
    for the machine, :func:`strata.plan.cells.default_limits`)."""
    files = check_files(request)
    out = Path(request.out)
    out.mkdir(parents=True, exist_ok=True)
    loading = replace(request, dedicated=())  # pinned jobs run here too, in cells of their own
    cluster = on_cluster(request.master)
    try:  # on a cluster this process's own session only loads the jobs: every cell is an application there
        if cluster:
            check_master(request.master)  # in seconds, before the cells would each find it out
        spark = start_session(replace(request, master=LOADER_MASTER) if cluster else request, files.name, out)
    except (JavaError, MasterUnreachable) as err:
        errors.print(f"[bold red]error[/] {err}", highlight=False, soft_wrap=True)
        return 2
    shares: CpuShares | ClusterCores | None = None
    remote: list[RemoteCell] = []
    stop_asked: list[int] = []
    # Ctrl-C and SIGTERM end the loop after its step; every cell then stops its queries between batches.
    previous = {sig: signal.signal(sig, lambda signum, _: stop_asked.append(signum)) for sig in STOP_SIGNALS}
    try:
        scenario = prepare(spark, loading, files, out / "strata", errors, declared)
        if scenario is None:
            return 2
        if not cluster:  # on a cluster this session runs no job
            warm_python_workers(spark)
        unknown = [j for j in request.dedicated if j not in scenario.job]
        if unknown:
            names = ", ".join(j.id for j in scenario.jobs)
            found = ", ".join(map(repr, unknown))
            errors.print(f"[bold red]error[/] --dedicate: expected jobs of this run ({names}); found {found}")
            return 2
        pinned = set(request.dedicated)
        needed = len(pinned) + (len(scenario.jobs) > len(pinned))
        if max_cells is not None and needed > max_cells:
            errors.print(
                f"[bold red]error[/] --cells {max_cells}: expected room for a cell per --dedicate job and one for "
                f"the others; found {needed} needed"
            )
            return 2
        if cluster and (too_many := cells_over(scenario, needed if max_cells is None else max(needed, max_cells))):
            errors.print(f"[bold red]error[/] --master {request.master}: {too_many}", highlight=False)
            return 2
        config = fleet_config(scenario, request.dedicated, max_cells, request.master, run_config(request))
        if cluster:
            shares = ClusterCores(whole_cluster_cores(scenario), worker_cores(scenario))
        else:
            shares = CpuShares(f"{RUN_PREFIX}{os.getpid()}")
            sweep_stale(shares)
        return _run_cells(spark, loading, scenario, config, shares, remote, stop_asked, console, errors)
    except CheckpointChanged as err:
        refuse_changed(errors, out, err)
        return 2
    except CellLost as err:
        errors.print(f"[bold red]error[/] {err}", highlight=False, soft_wrap=True)
        return 1
    finally:
        for cell in remote:
            cell.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        spark.stop()
        if shares is not None:
            end_jvm(spark)  # it joined the host cell
            close_shares(shares)


def fleet_config(
    scenario: Scenario, pinned: Collection[str], max_cells: int | None, master: str | None, config: RunConfig
) -> RunConfig:
    """``config`` with L0's cell placement on: at most ``max_cells`` applications (None: the planner's default for
    the machine; on a standalone cluster never more than its whole cores, a cell's application needing 1 at
    least), each ``pinned`` job in a cell of its own; a batch's tasks as the source's input partitions; the
    cores the shares divide: this machine's for a local ``master``."""
    pins = tuple((job, f"pin-{job}") for job in pinned)
    local = master is None or master.startswith("local")  # else the cluster's cores are the scenario's
    cores = float(os.cpu_count() or 1) if local else None
    if on_cluster(master):
        whole = whole_cluster_cores(scenario)
        max_cells = whole if max_cells is None else min(max_cells, whole)
    cells = CellConfig(max_cells=max_cells, pins=pins, batch_tasks=EngineConfig.input_partitions, cores=cores)
    return replace(config, control=replace(config.control, cells=cells))


LOADER_MASTER = "local[1]"  # on a cluster, the fleet's own session: it loads and analyses the jobs, runs none


def on_cluster(master: str | None) -> bool:
    """Whether ``master`` is a Spark standalone cluster's: each cell is then an application on it, holding the
    whole cores its first share gave it (:class:`~strata.runners.shares.ClusterCores`)."""
    return master is not None and master.startswith("spark://")


def whole_cluster_cores(scenario: Scenario) -> int:
    """The standalone cluster's cores: the spec's cluster's, whole (the master grants whole cores)."""
    return max(1, math.floor(scenario.cluster.total_cores + 1e-9))


def worker_cores(scenario: Scenario) -> int:
    """The cores of the smallest node of the spec's cluster (a worker): an executor must fit one."""
    return max(1, math.floor(min(node.cores for node in scenario.cluster.nodes) + 1e-9))


def cells_over(scenario: Scenario, cells: int) -> str | None:
    """Why ``cells`` applications do not fit the scenario's standalone cluster (None if they do)."""
    whole = whole_cluster_cores(scenario)
    if cells <= whole:
        return None
    return (
        f"the spec's cluster has {whole} cores and each cell is an application of at least 1 core; expected at "
        f"most {whole} cells (--cells, a cell per --dedicate job and one for the others); found {cells}"
    )


def cell_request(request: RunRequest, conf: Mapping[str, str]) -> RunRequest:
    """``request`` with ``conf`` over the user's Spark settings (a cell's cores on a cluster win over theirs)."""
    return replace(request, spark=replace(request.spark, conf=request.spark.conf + tuple(conf.items())))


DRIVER_JAVA = "spark.driver.extraJavaOptions"


def first_tier_only(request: RunRequest) -> RunRequest:
    """``request`` for a cell whose JVM compiles with C1 only (:func:`strata.control.cells.light_compiling`): the
    option goes before the user's own driver Java options, so one of theirs that says otherwise wins."""
    theirs = request.spark.as_dict.get(DRIVER_JAVA, "")
    return cell_request(request, {DRIVER_JAVA: f"{FIRST_TIER_ONLY} {theirs}".strip()})


def _run_cells(
    spark,
    request: RunRequest,
    scenario: Scenario,
    config: RunConfig,
    shares: CpuShares | ClusterCores,
    remote: list[RemoteCell],
    stop_asked: list[int],
    console: Console,
    errors: Console,
) -> int:
    """Plan the cells, start them, run the one loop over the fleet, measure every cell and merge (``remote``
    receives the child cells as they start: the caller closes them). On a standalone cluster this process hosts
    no cell (its session is local, to load the jobs) and each cell's application starts with its cores."""
    from strata.report import write_report
    from strata.report.console import untimed_lines, verification_line
    from strata.report.tables import verdict

    out = Path(request.out)
    run_dir = out / "strata"
    controller = Controller(scenario, config.control)
    start = controller.start(time.time())
    placed = start.cells or {}
    shares_now = start.cell_shares or {}
    members = {c: tuple(j for j, cc in placed.items() if cc == c) for c in sorted(set(placed.values()))}
    cluster = isinstance(shares, ClusterCores)
    host = None if cluster else host_cell(members, shares_now)
    critical = frozenset(critical_jobs(scenario, config.control.critical_latency_s))
    shares.set(shares_now, critical_cells(placed, critical))
    held = shares.held(shares_now)
    if host is not None:
        # The host's JVM and its Python workers join the host cell; this process (the Controller, the host
        # jobs' batch callbacks) stays out: closing the shares at the end kills whatever is still in a cell.
        for pid in jvm_processes(spark):
            shares.join(host, pid)
    key = secrets.token_bytes(32)

    # on this machine only: a cluster's cells run their tasks in executors, whose JVMs were not measured
    light = set() if cluster else light_compiling(scenario, members, config.control.critical_latency_s)

    def spec(name: str, share: float, jobs: tuple[str, ...]) -> CellSpec:
        if cluster:
            return CellSpec(name, cell_request(request, shares.conf(name, share)), run_dir, config, jobs)
        return CellSpec(name, first_tier_only(request) if name in light else request, run_dir, config, jobs)

    for name in members:  # the children start their sessions, load the jobs and warm theirs together
        if name != host:
            remote.append(launch_cell(spec(name, shares_now[name], members[name]), shares, key))
    warmed: dict[str, Warmed] = {}
    if host is not None:  # the host cell's queries warmed here meanwhile
        host_spec = CellSpec(host, request, run_dir, config, members[host])
        warmed[host] = warm_up(spark, scenario, host_spec.home / "warmup", host_spec.warm, sink=request.sink)
    for cell in remote:
        warmed[cell.name] = cell.connect().warmed
    # The sources' epoch once every cell is up and warm, far enough ahead that each cell's queries start and take
    # their first batch before it (as the demo's session modes): a cell's start-up is not a backlog to read.
    lead = lead_after(warmed.values())
    epoch, said = time_base(run_dir, request.fresh, lead, window_grid(scenario))
    cells: dict[str, CellHandle] = {}
    if host is not None:
        local = Cell(spark, scenario, host_spec, epoch, held.get(host, 1.0))
        said += local.resume(request.fresh)  # every job checked (and set aside if fresh) before any query starts
        cells[host] = LocalCell(local)
    for cell in remote:
        cell.call("begin", epoch, held[cell.name])
        first = not cells  # the first cell checks every job (the host cell, else the first child)
        lines = cell.call("resume", request.fresh if first else ())
        said += lines if first else []  # what the others say of every job, the first said already
        cells[cell.name] = cell

    def spawn(name: str, share: float, jobs: tuple[str, ...]) -> RemoteCell:
        cell = launch_cell(spec(name, share, jobs), shares, key)
        remote.append(cell)
        cell.connect().call("begin", epoch, shares.held({name: share})[name])
        cell.call("resume", ())
        return cell

    fleet = FleetEngine(cells, shares, spawn, critical=critical)
    for line in [warm_line(warmed, lead), *said]:
        console.print(f"[cyan]▸[/] {line}", highlight=False)
    run_ = ModeRun("strata", epoch, epoch, None)
    where = ", ".join(f"{c}: {', '.join(j)} ({shares_now.get(c, 0):.2f} cores)" for c, j in members.items())
    hosting = f"this process hosts {host}" if host is not None else f"each an application on {request.master}"
    if cluster:
        where += "; started with " + ", ".join(f"{c} {n}" for c, n in sorted(shares.granted.items())) + " cores"
    if light - {host}:  # the host's JVM was started before the plan
        where += "; C1 only: " + ", ".join(sorted(light - {host}))
    console.print(f"[cyan]▸[/] cells ({shares.backend}): {where}; {hosting}", highlight=False)
    master = request.master or spark.sparkContext.master
    view = View(scenario, f"strata run {scenario.name} on {master} ({len(members)} cells)")
    view.status = fleet.status
    started = time.time()
    try:
        with Live(view.render(), console=console, refresh_per_second=2) as live:

            def shown(_mode: str, obs: Observation, decisions: Decisions, _row: dict) -> None:
                view.last = (obs, decisions)
                live.update(view.render())

            fleet.apply(start)
            stop = max(epoch, time.time()) + request.duration_s
            record = Recorder(run_, scenario, controller, shown)
            run(
                fleet,
                controller,
                window_s=config.control.window_s,
                until=stop,
                on_step=record,
                should_stop=lambda: bool(stop_asked),
                start=False,
            )
    finally:
        run_.late_s = max(0.0, started - epoch)
        run_.stop = fleet.stop_all()
        run_.controller_log = [asdict(entry) for entry in controller.log]
    if stop_asked:
        console.print(
            f"[yellow]interrupted ({signal.Signals(stop_asked[0]).name}): the queries were stopped between batches[/]"
        )
    failures = fleet.failures()
    horizon = max(0.0, run_.stop - epoch - DRAIN_S)
    knobs = {
        "config": {
            "duration_s": horizon,
            "requested_s": request.duration_s,
            "control": True,
            "cells": {c: list(j) for c, j in members.items()},
            "warm_up": {c: asdict(w) for c, w in warmed.items()},
            "lead_s": lead,
        }
    }
    held = {c: tuple(j for j, cc in fleet.holder.items() if cc == c) for c in fleet.cells}
    dirs = {c: Path(fleet.cells[c].call("finish", horizon, run_.stop, held[c], knobs)) for c in fleet.cells}
    tables = merge_metrics(out, dirs, run_, fleet, scenario, horizon, knobs)
    console.print(view.render())
    checks = tables["checks"]
    if not checks.empty:
        console.print(verification_line(checks))
    for line in untimed_lines(tables["summary"], scenario):
        errors.print(line, highlight=False, soft_wrap=True)
    console.print(
        f"metrics: {out / 'metrics'}; report: {write_report(out)}; Spark's logs: {out / SPARK_LOG}, "
        f"{out / CELLS}/*/{SPARK_LOG}"
    )
    for job, cause in failures.items():
        errors.print(f"[bold red]query {job} died[/]: {cause}", highlight=False, soft_wrap=True)
    return 1 if failures or verdict(checks).bad else 0
