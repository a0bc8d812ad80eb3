"""``strata demo``: what ``strata run`` does by default — Strata deciding the deployment — against what a team
does by hand, one mode after the other on the same seeded input (issue 28).

The modes (:data:`DEMO_MODES`) run the same jobs, triggers, partitions, sinks and movable keyed-state store:

- **baseline** — plain Spark in one application: every job admitted with its first template, no pool (Spark's
  FIFO order inside the default pool), the keyed store's hash routing table never changed, no gate, no caps;
- **fair** — the same with FAIR pools set by hand as Spark's documentation recommends
  (:func:`strata.runners.spark_loop.hand_pools`: the latency-critical jobs in a weight-32 pool, the others
  weighted by rank);
- **dedicated** — the best deployment a team makes by hand (:mod:`strata.runners.dedicated`): the
  latency-critical jobs in a Spark application of their own, the others in a second one under FAIR pools by
  hand, weighing as ``nice`` +10 against the first; plain Spark in each;
- **strata** — ``strata run`` as a user runs it (:func:`strata.runners.fleet.run_fleet`): L0 places the jobs
  onto cells (Spark applications with OS-enforced CPU shares) under one hierarchy — admission, templates,
  pools, rate caps, the gate in each cell, learned costs — and merges their metrics.

Where they run. ``baseline`` and ``fair`` run in the demo's embedded session through
:func:`strata.runners.spark_loop.run_mode` (the session is started when a mode first needs it, then warmed up,
so that no mode pays the Python workers' start-up). ``dedicated`` and ``strata`` start their applications as
``strata run`` starts its cells: fresh processes that analyse every template and warm the queries of the jobs
they will hold. Every mode warms up the one way (:func:`strata.runners.warmup.warm_up`: each template on 2 s of
input) and sets its sources' epoch the one way (:func:`strata.runners.warmup.lead_after`: at least ``lead_s``,
and 1.5× the measured start of a round of queries, after its queries start), so each query's first batch runs
before the epoch in every mode.

The fleet cannot run beside the demo's session: PySpark runs one JVM per Python process (its gateway), and the
fleet hosts one cell on this process's session — its ``getOrCreate`` would return the demo's session, move that
JVM and its Python workers into the host cell's cgroup (whatever is left in a cell is SIGKILLed when the shares
close), and end that JVM when the fleet finishes. So the session modes that ran before ``strata`` are verified
first, then the session is stopped and its JVM ended (``session_stop_s``); a session mode after ``strata``
starts a fresh session and warms it up again (``session_s`` and ``warmup_s`` add up). The default order and its
reverse need one session. ``dedicated``'s two applications are children: the demo's idle session stays.

Each mode measures records with event time in ``[0, duration)`` after its own sources' epoch; the session modes
stop ``drain_s`` after that, the cell modes run ``duration + drain_s`` from when their queries were started (as
``strata run`` runs). Every sink is compared with a reference recomputed from the generated input
(:mod:`strata.spark.verify`; the cells verify their own). Each mode's tables are written under
``OUT/<mode>/metrics``, then stacked into ``OUT/metrics`` (the cell modes' summaries measured again over the
demo's horizon), which the side-by-side table and the report read.

The modes run in ``DemoConfig.order`` (default :data:`DEMO_MODES`). The machine keeps warming up as they run, so
whichever runs later gains; a benchmark alternates the order across seeds. The tables list the modes in
:data:`DEMO_MODES` order whatever order they ran in.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import pandas as pd
import yaml
from rich.console import Console

from strata.model import Scenario, critical_jobs
from strata.protocol.engine import Decisions, Observation
from strata.protocol.units import POOLS
from strata.runners.cell import end_jvm
from strata.runners.dedicated import DEDICATED, run_dedicated
from strata.runners.fleet import run_fleet, stack
from strata.runners.live import DRAIN_S, RunRequest
from strata.runners.spark_loop import RunConfig, hand_pools, run_mode
from strata.runners.warmup import LEAD_S, lead_after, on_grid, warm_up, window_grid
from strata.spark.conf import SparkSettings, user_conf
from strata.spark.measure import RunResult, collect, job_summary, write_metrics

DEMO_MODES = ("baseline", "fair", DEDICATED, "strata")
"""Plain Spark (FIFO), FAIR pools by hand, the hand deployment (critical jobs in their own application), Strata's
fleet of cells."""
SESSION_MODES = ("baseline", "fair")  # the modes run in the demo's own session
TABLES = (
    "summary",
    "latency",
    "batches",
    "partitions",
    "checks",
    "decisions",
    "gate",
    "observations",
    "progress",
    "controller",
    "learning",
)
"""The metrics tables every mode writes (:func:`strata.spark.measure.collect`,
:func:`strata.runners.fleet.merge_metrics`)."""


@dataclass(frozen=True)
class DemoConfig:
    """Knobs of one demo run, with their defaults."""

    duration_s: float = 30.0  # measured event time per mode
    drain_s: float = DRAIN_S  # run on after the horizon, so its last records can be delivered
    lead_s: float = LEAD_S  # the sources' epoch is at least this far after the queries start
    seed: int = 0  # added to every source's seed
    cores: int = 2
    warmup: bool = True
    order: tuple[str, ...] = DEMO_MODES  # the order the modes run in: any permutation of DEMO_MODES
    run: RunConfig = field(default_factory=RunConfig)

    def __post_init__(self) -> None:
        if sorted(self.order) != sorted(DEMO_MODES):
            raise ValueError(f"DemoConfig.order: expected each of {', '.join(DEMO_MODES)} once; found {self.order!r}")


def reseed(scenario: Scenario, seed: int) -> Scenario:
    """Every source's seed + ``seed`` (same structure, different random input)."""
    if seed == 0:
        return scenario
    data = scenario.model_dump(by_alias=True)
    for job in data["jobs"]:
        for tpl in job["templates"]:
            for op in tpl["operators"]:
                if op.get("source"):
                    op["source"]["seed"] += seed
    return Scenario.model_validate(data)


def write_spec(scenario: Scenario, path: Path) -> Path:
    """``scenario`` as a YAML spec at ``path``: the file the cell modes' applications load (a reseeded scenario
    has no file of its own)."""
    path.write_text(yaml.safe_dump(scenario.model_dump(mode="json", by_alias=True, exclude_none=True), sort_keys=False))
    return path


# ---------------------------------------------------------------------- the demo's session


class DemoSession:
    """The demo's embedded session, started (and warmed up) when a session mode first needs it, and stopped with
    its JVM ended before the fleet runs (see the module's docstring). ``timings`` adds up what each start and
    stop took."""

    def __init__(self, scenario: Scenario, out: Path, config: DemoConfig, settings: SparkSettings, say) -> None:
        self.scenario, self.out, self.config, self.settings, self.say = scenario, out, config, settings, say
        self.spark = None
        self.lead = config.lead_s
        self.timings: dict[str, float] = {}

    def _add(self, key: str, seconds: float) -> None:
        self.timings[key] = self.timings.get(key, 0.0) + seconds

    def get(self):
        """The running session, started and warmed up first if there is none."""
        if self.spark is not None:
            return self.spark
        from strata.spark.session import build_session

        t = time.time()
        self.spark = build_session(
            f"strata-demo-{self.scenario.name}",
            cores=self.config.cores,
            shuffle_partitions=self.config.cores,
            pools=POOLS,
            work_dir=self.out / "spark",
            settings=self.settings,
            log_file=self.out / "spark.log",
        )
        self._add("session_s", time.time() - t)
        if self.config.warmup:
            self.say(f"session up in {time.time() - t:.0f} s; warming up the Python workers")
            warmed = warm_up(self.spark, self.scenario, self.out / "warmup", sink=self.config.run.sink)
            self._add("warmup_s", warmed.seconds)
            self.timings["query_start_s"] = max(self.timings.get("query_start_s", 0.0), warmed.start_s)
            # the sources' epoch comes after every query is up, so no mode starts with a backlog
            self.lead = lead_after([warmed], self.config.lead_s)
        return self.spark

    def stop(self, end: bool) -> None:
        """Stop the session; ``end``: its JVM too (so the next session in this process, the fleet's, is its own)."""
        if self.spark is None:
            return
        t = time.time()
        self.spark.stop()
        if end:
            end_jvm(self.spark)
            self._add("session_stop_s", time.time() - t)
        self.spark = None


# ---------------------------------------------------------------------- one mode


def run_in_session(session: DemoSession, scenario: Scenario, mode: str, out: Path, config: DemoConfig, on_step):
    """A session mode through ``run_mode``, measured and verified at once into ``out/<mode>/metrics`` (the
    session may be stopped before the end of the demo). Returns how late its queries started."""
    spark = session.get()
    epoch = on_grid(time.time() + session.lead, window_grid(scenario))
    run_config = replace(config.run, pools=hand_pools(scenario)) if mode == "fair" else config.run
    ran = run_mode(
        spark, scenario, mode, out / mode, run_config, epoch, epoch + config.duration_s + config.drain_s, on_step
    )
    collect([ran], scenario, config.duration_s, spark, out / mode, {"config": {"duration_s": config.duration_s}}, {})
    return ran.late_s


def mode_request(spec: Path, out: Path, config: DemoConfig, settings: SparkSettings) -> RunRequest:
    """The request a cell mode runs ``spec`` with into ``out``: the demo's input, drain, sink and Spark settings."""
    return RunRequest((spec,), config.duration_s + config.drain_s, out=out, sink=config.run.sink, spark=settings)


def run_strata(spec: Path, out: Path, config: DemoConfig, settings: SparkSettings, console: Console, errors: Console):
    """``strata run SPEC`` as a user runs it by default (its cells decided by L0) into ``out/strata``. Returns its
    sources' epoch. A refusal before any query started (exit 2, said on ``errors``) raises ValueError."""
    if run_fleet(mode_request(spec, out / "strata", config, settings), console, errors) == 2:
        raise ValueError("strata mode: `strata run` refused to start its cells (exit 2): see the error above")
    return float(json.loads((out / "strata" / "strata" / "run.json").read_text())["epoch"])


# ---------------------------------------------------------------------- measured together


def mode_tables(directory: Path, mode: str) -> dict[str, pd.DataFrame]:
    """One mode's metrics tables from ``directory/metrics``, every row of ``mode`` (a cell mode's plain cells
    wrote ``baseline``)."""
    tables = {}
    for name in TABLES:
        path = directory / "metrics" / f"{name}.csv"
        try:
            frame = pd.read_csv(path) if path.exists() else pd.DataFrame()
        except pd.errors.EmptyDataError:
            frame = pd.DataFrame()
        tables[name] = frame.assign(mode=mode) if "mode" in frame else frame
    return tables


def remeasured(tables: dict[str, pd.DataFrame], scenario: Scenario, mode: str, horizon_s: float, run_s: float):
    """A cell mode's summary over the demo's horizon (its fleet measured to its own), each job's floor and final
    cell kept."""
    merged = tables["summary"]
    floors = {r["job"]: r["floor_s"] for r in merged.to_dict("records") if pd.notna(r.get("floor_s"))}
    cells = dict(zip(merged["job"], merged["cell"], strict=True)) if "cell" in merged else {}
    rows = job_summary(
        tables["latency"], tables["batches"], tables["partitions"], scenario, mode, horizon_s, run_s, floors
    )
    return pd.DataFrame([{**r, "cell": cells.get(r["job"])} for r in rows])


def run_demo(
    scenario: Scenario,
    out: Path,
    config: DemoConfig | None = None,
    on_step: Callable[[str, Observation, Decisions, dict], None] | None = None,
    on_phase: Callable[[str], None] | None = None,
    spark_settings: SparkSettings | None = None,
    console: Console | None = None,
    errors: Console | None = None,
) -> RunResult:
    """The modes in ``config.order`` → verification and metrics tables under ``out``; ``spark_settings``: the
    user's Spark settings (default: their ``spark-defaults.conf``) for every application; ``console``/``errors``:
    where the Strata mode's ``strata run`` shows its live view and says what went wrong (default: nowhere, and
    stderr)."""
    config = config or DemoConfig()
    scenario = reseed(scenario, config.seed)
    out = Path(out)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    say = on_phase or (lambda _: None)
    settings = spark_settings if spark_settings is not None else SparkSettings(tuple(user_conf().items()))
    console = console or Console(quiet=True)
    errors = errors or Console(stderr=True)
    spec = write_spec(scenario, out / "spec.yaml")
    session = DemoSession(scenario, out, config, settings, say)
    timings: dict[str, float] = {}
    t0 = time.time()
    try:
        for mode in config.order:
            t = time.time()
            if mode in SESSION_MODES:
                say(f"{mode}: running {config.duration_s:.0f} s of input (+{config.drain_s:.0f} s drain)")
                timings[f"{mode}_late_s"] = run_in_session(session, scenario, mode, out, config, on_step)
            elif mode == DEDICATED:
                say(f"{mode}: starting the critical jobs' application and the others'; {config.duration_s:.0f} s")
                request = mode_request(spec, out / mode, config, settings)
                timings[f"{mode}_startup_s"] = run_dedicated(request, scenario, config.run, on_step, config.lead_s) - t
            else:
                say(f"{mode}: `strata run` (its cells); {config.duration_s:.0f} s of input (+{config.drain_s:.0f} s)")
                session.stop(end=True)
                timings[f"{mode}_startup_s"] = run_strata(spec, out, config, settings, console, errors) - t
            timings[f"{mode}_s"] = time.time() - t
    finally:
        session.stop(end=False)
    say("stacking every mode's verified tables")
    t = time.time()
    per_mode = {mode: mode_tables(out / mode, mode) for mode in DEMO_MODES}
    fleets = {m: json.loads((out / m / "metrics" / "run.json").read_text())["config"] for m in (DEDICATED, "strata")}
    for mode, ran in fleets.items():
        run_s = float(ran["duration_s"]) + DRAIN_S  # its fleet's horizon is its stop less the drain
        per_mode[mode]["summary"] = remeasured(per_mode[mode], scenario, mode, config.duration_s, run_s)
    tables = {name: stack([per_mode[m][name] for m in DEMO_MODES]) for name in TABLES}
    cells = {m: ran["cells"] for m, ran in fleets.items()}
    knobs = {k: v for k, v in asdict(config).items() if k != "run"}
    meta = {
        "config": {
            **knobs,
            "window_s": config.run.control.window_s,
            "state_partitions": config.run.state_partitions,
            "critical_jobs": critical_jobs(scenario, config.run.control.critical_latency_s),
            "cells": cells,
        }
    }
    timings = {**session.timings, **timings, "stack_s": time.time() - t, "total_s": time.time() - t0}
    write_metrics(out, tables, scenario, meta, timings)
    return RunResult(tables["summary"], tables["checks"], tables["decisions"], out, timings)
