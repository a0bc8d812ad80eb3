"""A cell of a fleet run: one Spark application running a :class:`~strata.spark.engine.SparkEngine` (its dispatch
gate, L2, per batch, sized to the cell's share) for the jobs L0 placed in it (DESIGN.md, placement row: cells).

Every cell loads the whole jobs file (a Python jobs file needs a Spark session to be loaded) and runs only the
jobs it holds: admission within the cell. Every cell shares the run directory's per-job data (checkpoints,
sinks, managed state), so a job can move: stopped at a batch boundary in one cell, continued from its
checkpoint in another (:meth:`Cell.adopt`). Each cell has its own Spark work directory and log under
``OUT/cells/<cell>``.

The fleet process hosts one cell in-process (:class:`Cell`: it needs a session anyway to load and analyse the
jobs before any query starts) and starts the others as ``python -m strata.runners.cell SPEC``: such a cell
serves the fleet's calls (:data:`CALLS`) over a local connection with an authentication key
(:mod:`multiprocessing.connection`, pickled plain data) on its main thread — the queries run in Spark's threads.
It joins its cgroup and dies with the fleet (the fleet's :meth:`~strata.runners.shares.CpuShares.preexec`); its
JVM exits when its driver's stdin closes (PySpark's gateway), so no cell outlives the fleet.

Every cell starts warm, as the demo's session does: before it reports ready it runs the queries of the jobs it will
hold on a few seconds of input (:func:`strata.runners.warmup.warm_application`: generated, or a user's query's
own sample) and reports how long starting them took, from which the fleet sets the sources' epoch
(:func:`strata.runners.warmup.lead_after`): every query takes its first batch before any record is due.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from multiprocessing.connection import Listener
from pathlib import Path

from strata.protocol.engine import Decisions, Observation
from strata.runners.live import Floors, RunRequest, analyse, check_files, engine_status, load_run, start_session
from strata.runners.spark_loop import RunConfig, job_floors, spark_engine
from strata.runners.warmup import Warmed, warm_application
from strata.spark.engine import decision_row
from strata.spark.measure import ModeRun, collect

CELLS = "cells"  # OUT/cells/<cell>: a cell's Spark work directory, log, spec and metrics
CALLS = frozenset(
    {"now", "observe", "apply", "resume", "adopt", "share", "alive", "status", "stop_all", "finish", "failures"}
)
"""What the fleet may call on a cell (:class:`Cell`'s methods of those names)."""


@dataclass(frozen=True)
class CellSpec:
    """What a cell is started with: its name, the run's request, the run directory's per-job data (``run_dir``,
    shared by every cell), the run's knobs and the jobs it will hold (``warm``: their queries are warmed before it
    reports ready, :func:`strata.runners.warmup.warm_up`). The sources' epoch comes once every cell is up and
    warm (:meth:`Cell`)."""

    name: str
    request: RunRequest
    run_dir: Path
    config: RunConfig
    warm: tuple[str, ...] = ()

    @property
    def home(self) -> Path:
        """The cell's own directory: Spark's work directory and log, its metrics."""
        return Path(self.request.out) / CELLS / self.name


def gate_bound(share: float, cores: float, reserved: int, shields_critical: bool = True) -> int:
    """Batches the cell's gate lets run at once. A cell holding a latency-critical job: its share of cores, less
    the reserved cores when it has the whole machine (as one application's gate), at least 1. A cell without one
    has nothing to shield inside it, and the OS's weights already split the cores between cells (work-conserving:
    a cell may use what the others leave idle): as many batches as the machine has cores, as plain Spark runs
    them (serialising its batches behind a 0.3-core share held a bulk cell's first batches 30 s, bench_platform)."""
    if not shields_critical:
        return max(1, round(cores))
    whole = share >= cores - 1e-9
    return max(1, round(share) - (reserved if whole else 0))


class Cell:
    """One Spark application of the fleet: its engine (sources' ``epoch``), its gate (bound by ``share``), the jobs
    it holds, and what it measured."""

    def __init__(self, spark, scenario, spec: CellSpec, epoch: float, share: float) -> None:
        self.spark = spark
        self.scenario = scenario
        self.spec = spec
        controlled = spec.request.control
        gate_rows: list[dict] = []
        self._share = share
        self._shields = False  # no job admitted yet (the bound follows admission: :meth:`apply`)
        gate = replace(spec.config.gate_for(spark), max_running=self._bound())
        self.engine = spark_engine(spark, scenario, spec.run_dir, spec.config, epoch, controlled, gate_rows, gate)
        self.run = ModeRun("strata" if controlled else "baseline", epoch, epoch, self.engine, gate_rows=gate_rows)
        self.floors = Floors(self.engine)
        self._moved_in: dict[str, tuple[float, str]] = {}  # job → (when its stop elsewhere began, from which cell)

    def _bound(self) -> int:
        cores = self.scenario.cluster.total_cores
        return gate_bound(self._share, cores, self.spec.config.control.gate_reserved_cores, self._shields)

    def _rebound(self) -> None:
        """The gate's bound from the cell's share and whether it runs a latency-critical job now."""
        critical_s = self.spec.config.control.critical_latency_s
        running = self.engine.running
        self._shields = any(j.target_latency_s <= critical_s for j in self.scenario.jobs if j.id in running)
        gate = self.engine.gate
        if gate is not None:
            gate.core.config = replace(gate.core.config, max_running=self._bound())

    # ------------------------------------------------------------------ the fleet's calls

    def now(self) -> float:
        return self.engine.now()

    def alive(self) -> bool:
        """True while a query of this cell runs, or none should."""
        running = self.engine.running
        return not running or any(s.pipeline.query.isActive for s in running.values())

    def resume(self, fresh: tuple[str, ...] = ()) -> list[str]:
        """What an earlier run left (SparkEngine.resume), before any query of this cell starts."""
        return self.engine.resume(fresh)

    def adopt(self, job: str, since: float, origin: str) -> None:
        """``job`` comes from cell ``origin``, which began stopping it at ``since`` (wall s): it continues here from
        its checkpoint when admitted next."""
        self.engine.adopt(job)
        self._moved_in[job] = (since, origin)

    def share(self, cores: float) -> None:
        """The cell's share changed: its gate's bound follows (from the next release on)."""
        self._share = cores
        self._rebound()

    def apply(self, decisions: Decisions) -> None:
        self.engine.apply(decisions)
        if decisions.admitted is not None:
            self._rebound()

    def observe(self) -> Observation:
        """The window's observation; a moved-in job's first committed batch here is logged with how long it took
        to resume (from the start of its stop in the cell it left)."""
        obs = self.engine.observe()
        for job, (since, origin) in list(self._moved_in.items()):
            segment = self.engine.running.get(job)
            first = next(iter(segment.pipeline.batch_records()), None) if segment is not None else None
            if first is None:
                continue
            del self._moved_in[job]
            waited = first["finished"] - since
            detail = f"{waited:.1f} s from its stop in {origin} to its first batch in {self.spec.name}"
            row = decision_row(first["finished"], Decisions(0, reasons=("move",)), "resumed", job, detail)
            self.engine.decisions.append({**row, "resume_s": waited})
        return obs

    def status(self) -> dict:
        return engine_status(self.engine, self.floors)

    def failures(self) -> dict[str, str]:
        return self.engine.failures()

    def stop_all(self) -> float:
        """Stop every query of the cell between batches; the wall time it ended."""
        self.engine.stop_all()
        self.run.stop = time.time()
        return self.run.stop

    def finish(self, horizon_s: float, stop: float, held: tuple[str, ...], config: dict) -> str:
        """Measure the cell (every sink of its segments verified, latency of its batches) into ``home/metrics``;
        ``held``: the jobs it holds at the end, whose undelivered output it owes. Returns the directory."""
        self.engine.close()
        self.run.stop = stop
        self.run.floors = job_floors(self.engine.batch_observations(), self.spark.sparkContext.defaultParallelism)
        collect([self.run], self.scenario, horizon_s, self.spark, self.spec.home, config, {}, owed=held)
        return str(self.spec.home / "metrics")


def serve(listener: Listener, begin: Callable[[float, float], Cell]) -> Cell | None:
    """Answer the fleet's calls until it says ``close`` or goes away (then every query stops between batches).
    The first call is ``begin`` (the sources' epoch and the cell's share: the engine is made), then :data:`CALLS`.
    An error the fleet can act on (a bad decision) goes back to it; others end the cell. Returns the cell."""
    cell = None
    with listener.accept() as conn:
        while True:
            try:
                name, args = conn.recv()
            except (EOFError, OSError):
                break
            if name == "close":
                conn.send(("ok", None))
                return cell
            if name == "begin" and cell is None:
                cell = begin(*args)
                conn.send(("ok", None))
                continue
            if name not in CALLS or cell is None:
                conn.send(("error", ValueError(f"cell: no call {name!r} (calls: begin once, then {sorted(CALLS)})")))
                continue
            try:
                value = getattr(cell, name)(*args)
            except (ValueError, KeyError) as err:  # what a bad decision raises; sent as plain exceptions
                conn.send(("error", KeyError(*err.args) if isinstance(err, KeyError) else ValueError(str(err))))
                continue
            conn.send(("ok", value))
    if cell is not None:
        cell.stop_all()
    return cell


def ready_report(address: tuple[str, int], warmed: Warmed) -> str:
    """What a ready cell writes next to its spec (``.address``): where it listens and what its warm-up measured."""
    return json.dumps({"host": address[0], "port": address[1], "warmed": asdict(warmed)})


def read_ready(text: str) -> tuple[tuple[str, int], Warmed]:
    """:func:`ready_report`'s address and warm-up, read back."""
    ready = json.loads(text)
    warmed = {k: tuple(v) if isinstance(v, list) else v for k, v in ready["warmed"].items()}
    return (ready["host"], int(ready["port"])), Warmed(**warmed)


def main(spec_file: str) -> int:
    """A cell process: its session, the run's jobs, their queries warmed, its engine; then :func:`serve` at the
    address it writes next to ``spec_file`` (``.address``: :func:`ready_report`) once ready."""
    path = Path(spec_file)
    spec, key = pickle.loads(path.read_bytes())
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the fleet ends the cell (Ctrl-C reaches the fleet alone)
    files = check_files(spec.request)
    spark = start_session(spec.request, f"{files.name}-{spec.name}", spec.home)  # named apart on a cluster's master
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # PySpark's own handler would cancel the batches in flight
    scenario = load_run(spark, spec.request, files)
    # Every template analysed here too (the host cell reports problems): it warms this application up — a Python
    # data source's first batch otherwise waits seconds for its worker, after the sources' epoch.
    analyse(spark, scenario, spec.home / "analysis")
    # the epoch waits for the slowest cell
    warmed = warm_application(spark, scenario, spec.home / "warmup", spec.warm, spec.request.sink)
    with Listener(("127.0.0.1", 0), authkey=key) as listener:
        ready = path.with_suffix(".address")
        ready.with_suffix(".tmp").write_text(ready_report(listener.address, warmed))
        os.replace(ready.with_suffix(".tmp"), ready)
        try:
            serve(listener, lambda epoch, share: Cell(spark, scenario, spec, epoch, share))
        finally:
            spark.stop()
            end_jvm(spark)
    return 0


def end_jvm(spark) -> None:
    """After ``spark.stop()``: end the session's JVM (PySpark's gateway exits when its stdin closes) and reap it,
    so its cell holds no process, not even a zombie, when the shares are removed."""
    context = type(spark.sparkContext)
    gateway = getattr(context, "_gateway", None)
    proc = getattr(gateway, "proc", None)
    if proc is None:
        return
    gateway.shutdown()
    proc.stdin.close()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    context._gateway = context._jvm = None  # a later session in this process starts its own JVM


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
