"""``strata run``: a scenario's jobs on Spark under the control loop, with a live view, for as long as it runs.

The same decisions the demo's Strata mode makes — admission, templates, FAIR
pools, rate caps, the dispatch gate, key-group moves, the estimator's model —
made by :func:`strata.runners.spark_loop.run_mode` until the duration ends or
Ctrl-C (checked between control steps: the batches in flight finish and
commit). With Strata in control the application first warms its queries as
each cell of a fleet does (:func:`strata.runners.warmup.warm_application`, on a
scratch directory: never the run's sinks or checkpoints), and its sources'
epoch follows from what that measured (:func:`strata.runners.warmup.lead_after`).
``control=False`` runs plain Spark through the same loop, cold, as a team
starts it. Afterwards the metrics tables of :mod:`strata.spark.measure` are
written (every sink checked against a reference recomputed from its input where
the source is generated) and ``strata report`` renders them.
"""

from __future__ import annotations

import json
import shutil
import signal
import time
from collections.abc import Collection
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

from strata.control.meta import OFF, with_meta
from strata.model import Scenario, SpecError, load_scenario, locate_problems
from strata.model.user import PythonJob, load_python_run, split_files, with_jobs
from strata.protocol.engine import Decisions, Observation
from strata.protocol.units import POOLS
from strata.runners.spark_loop import RunConfig, job_floors, run_mode
from strata.runners.warmup import LEAD_S, lead_after, on_grid, warm_application, warm_line
from strata.spark.checkpoint import CheckpointChanged
from strata.spark.conf import SparkSettings
from strata.spark.java import JavaError
from strata.spark.pipelines import PipelineOptions, PipelineProblems, check_template
from strata.spark.session import MasterUnreachable
from strata.spark.user import pipeline_for

DRAIN_S = 4.0  # records this close to the stop are not counted as due
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
SPARK_LOG = "spark.log"  # Spark's own log lines, under the run directory (strata.spark.logs)
WARM_UP = "warmup"  # the warm-up's scratch under --out (removed after): never the run's sinks or checkpoints


def _fmt(value, spec: str) -> str:
    return "–" if value is None else format(value, spec)


class Floors:
    """Each job's floor (its batch time alone, learned from the batches Spark accounted: :func:`job_floors`) for
    the live view, recomputed at most every ``every_s``: the view renders twice a second in every cell, and a
    floor learned over every batch so far moves slowly, while recomputing it reads each batch's progress from
    the JVM on the driver the queries share."""

    def __init__(self, engine, every_s: float = 5.0) -> None:
        self.engine = engine
        self.every_s = every_s
        self._at = -float("inf")
        self._floors: dict[str, float] = {}

    def __call__(self) -> dict[str, float]:
        now = time.monotonic()
        if now - self._at >= self.every_s:
            cores = self.engine.spark.sparkContext.defaultParallelism
            self._floors = job_floors(self.engine.batch_observations(), cores)
            self._at = now
        return self._floors


def engine_status(engine, floors: Floors) -> dict:
    """What the live view shows of one :class:`~strata.spark.engine.SparkEngine` (plain data, so a cell in another
    process can send it): job → template running, job → pool, source PE → rate cap, job → its floor
    (``floors``'), the latest decisions."""
    return {
        "running": {job: s.template for job, s in engine.running.items()},
        "floors": dict(floors()),
        "pools": dict(engine.gate.base_pools) if engine.gate is not None else {},
        "caps": dict(engine.caps),
        "decisions": list(engine.decisions[-6:]),
    }


class View:
    """The live table: per job its cell, template, pool, cap, offered rate and latency; then the latest decisions.

    ``status``: a callable giving :func:`engine_status`'s dict (with ``cells``, job → cell, for a fleet run)."""

    def __init__(self, scenario: Scenario, title: str) -> None:
        self.scenario = scenario
        self.title = title
        self.started = time.time()
        self.status = None
        self.last: tuple[Observation, Decisions] | None = None

    def render(self) -> Group:
        table = Table(title=f"{self.title} — {time.time() - self.started:.0f} s", title_justify="left")
        status = self.status() if self.status is not None else {}
        cells = status.get("cells")
        columns = (
            "job",
            "rank",
            "template",
            "pool",
            "offered/s",
            "cap/s",
            "p50 s",
            "p99 s",
            "floor s",
            "miss",
            "target s",
        )
        for col in (("cell",) if cells else ()) + columns:
            table.add_column(col, justify="left" if col in ("cell", "job", "template", "pool") else "right")
        obs = self.last[0] if self.last is not None else None
        running, pools, caps = status.get("running", {}), status.get("pools", {}), status.get("caps", {})
        floors = status.get("floors", {})
        for job in self.scenario.jobs:
            template = running.get(job.id)
            src = next((pe for pe in (obs.window.ingest if obs else {}) if pe.partition(".")[0] == job.id), None)
            lat = obs.window.latency.get(job.id) if obs is not None else None
            table.add_row(
                *((cells.get(job.id, "–"),) if cells else ()),
                job.id,
                str(job.rank),
                template if template is not None else "[yellow]held[/]",
                pools.get(job.id) or "default",
                _fmt(obs.window.ingest.get(src) if src else None, ".0f"),
                _fmt(caps.get(src) if src else None, ".0f"),
                _fmt(lat.p50 if lat else None, ".2f"),
                _fmt(lat.p99 if lat else None, ".2f"),
                _fmt(floors.get(job.id), ".2f"),
                _fmt(lat.miss_rate if lat else None, ".0%"),
                f"{job.target_latency_s:g}",
            )
        recent = Table(title="latest decisions", title_justify="left", show_header=True)
        for col in ("t s", "kind", "job", "detail", "why"):
            recent.add_column(col)
        for d in status.get("decisions", []):
            recent.add_row(f"{d['t'] - self.started:.0f}", d["kind"], d["job"], d["detail"], d["reasons"][:60])
        return Group(table, recent)


def analyse(spark, scenario: Scenario, scratch: Path, unreproducible: list[str] | None = None) -> list:
    """Every template of every job built on ``spark`` (each expression analysed by Spark) under ``scratch``, which
    is removed after; the problems found, located in the spec. Nothing is started. A Python job's template is its
    user's function, called here once: its errors raise :class:`SpecError` at the user's line. Templates whose
    output no replay reproduces are added to ``unreproducible`` as "job (template): why"."""
    problems = []
    unreproducible = [] if unreproducible is None else unreproducible
    try:
        for j, job in enumerate(scenario.jobs):
            for t, tpl in enumerate(job.templates):
                try:
                    run_dir = scratch / f"{j}-{t}"
                    if job.declared is not None:  # a user query's directory is a segment's, as in a run
                        run_dir = run_dir / "segment"
                    built = pipeline_for(
                        spark, job, tpl, run_dir, PipelineOptions(sink="memory"), here=("jobs", j, "templates", t)
                    )
                except PipelineProblems as e:
                    problems.extend(e.problems)
                    continue
                if built.unreproducible:
                    unreproducible.append(f"{job.id} ({tpl.name}): {built.unreproducible}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return problems


def time_base(
    run_dir: Path, fresh: Collection[str], lead_s: float = LEAD_S, grid_s: float = 0.0
) -> tuple[float, list[str]]:
    """The sources' epoch of the run in ``run_dir``: an earlier run's (resumed on the same time base), else now +
    ``lead_s`` (the time its queries need to start and take a first batch before any record is due:
    :func:`strata.runners.warmup.lead_after`), put off to the next instant on its windows' grid (``grid_s``:
    :func:`strata.runners.warmup.window_grid`).

    Generated records are a function of their offset and the epoch, so a
    resumed query must keep its epoch: its backlog is the records offered since.
    """
    meta = run_dir / "run.json"
    if meta.exists() and "all" not in fresh:
        epoch = float(json.loads(meta.read_text())["epoch"])
        return epoch, [f"resuming the run in {run_dir} (sources' epoch {time.time() - epoch:.0f} s ago)"]
    run_dir.mkdir(parents=True, exist_ok=True)
    epoch = on_grid(time.time() + lead_s, grid_s)
    meta.write_text(json.dumps({"epoch": epoch}))
    return epoch, []


class JobChoiceError(ValueError):
    """``--jobs``/``--skip-jobs`` name a job the run does not declare, leave no job, or split a shared stream."""


def choose_jobs(scenario: Scenario, only: Collection[str], skip: Collection[str]) -> Scenario:
    """The run restricted to ``only`` (all jobs when empty) less ``skip``. A job reading another job's output runs
    with its producer (the shared stream is the producer's output under the run directory)."""
    names = [j.id for j in scenario.jobs]
    for flag, given in (("--jobs", only), ("--skip-jobs", skip)):
        unknown = [n for n in given if n not in names]
        if unknown:
            found = ", ".join(repr(n) for n in unknown)
            raise JobChoiceError(f"{flag}: expected jobs of this run ({', '.join(names)}); found {found}")
    keep = [n for n in names if (not only or n in only) and n not in skip]
    if not keep:
        raise JobChoiceError("--jobs/--skip-jobs: expected at least one job left to run here; found none")
    for job in (j.declared for j in scenario.jobs if j.declared is not None):
        for producer in job.reads if job.id in keep else ():
            if producer not in keep:
                raise JobChoiceError(
                    f"--jobs/--skip-jobs: job {job.id!r} reads {producer!r}'s output, so both run; found "
                    f"{producer!r} left out"
                )
    if len(keep) == len(names):
        return scenario
    return with_jobs(scenario, [j for j in scenario.jobs if j.id in keep])


@dataclass(frozen=True)
class RunRequest:
    """What ``strata run`` is asked to do: the files, for how long, on which master, where, how, which jobs.

    ``only``/``skip``: the jobs to run, or to leave out, of those declared (:func:`choose_jobs`); ``dedicated``:
    those pinned to a cell of their own (:mod:`strata.runners.fleet`); ``spark``: the user's Spark settings and
    log verbosity, for every application the run starts; ``meta``: the meta level (:func:`run_config`)."""

    files: tuple[Path | str, ...]
    duration_s: float = 120.0
    master: str | None = None
    out: Path = Path("runs/latest")
    sink: str = "parquet"
    control: bool = True
    fresh: tuple[str, ...] = ()
    only: tuple[str, ...] = ()
    skip: tuple[str, ...] = ()
    dedicated: tuple[str, ...] = ()
    spark: SparkSettings = field(default_factory=SparkSettings)
    meta: str = OFF  # the meta level: off, adaptive, or a composition fixed (strata.control.meta.with_meta)


def run_config(request: RunRequest) -> RunConfig:
    """The run's knobs on Spark: the defaults with the request's sink and meta level."""
    return RunConfig(sink=request.sink, control=with_meta(RunConfig().control, request.meta))


@dataclass(frozen=True)
class RunFiles:
    """A request's files, statically checked: YAML specs and Python jobs files, and the run's name."""

    yaml: tuple[Path | str, ...]
    python: tuple[Path | str, ...]
    name: str


def check_files(request: RunRequest) -> RunFiles:
    """The request's files split by kind; the YAML templates checked before Spark starts (raises SpecError,
    located)."""
    yaml_files, python_files = split_files(request.files)
    name = Path(python_files[0]).stem if python_files else "jobs"
    if yaml_files:
        yaml_scenario = load_scenario(*yaml_files)
        problems = [
            p
            for j, job in enumerate(yaml_scenario.jobs)
            for t, tpl in enumerate(job.templates)
            for p in check_template(job, tpl, ("jobs", j, "templates", t))
        ]
        if problems:
            raise locate_problems(yaml_files, problems)
        name = name if python_files else yaml_scenario.name
    return RunFiles(yaml_files, python_files, name)


def start_session(request: RunRequest, name: str, work: Path):
    """The Spark session of one application of the run: its work directory and Spark's log under ``work``."""
    from strata.spark.session import build_session

    return build_session(
        f"strata-run-{name}",
        master=request.master,
        shuffle_partitions=2,
        pools=POOLS,
        work_dir=work / "spark",
        settings=request.spark,
        log_file=work / SPARK_LOG,
    )


def load_run(spark, request: RunRequest, files: RunFiles, declared: Collection[PythonJob] = ()) -> Scenario:
    """The run's jobs (the Python files run once the session exists: a module-level UDF needs one) less those
    ``--jobs``/``--skip-jobs`` leave out; raises SpecError (located) or :class:`JobChoiceError`."""
    scenario = load_python_run(files.python, files.yaml, files.name, declared)
    return choose_jobs(scenario, request.only, request.skip)


def prepare(spark, request: RunRequest, files: RunFiles, out: Path, errors: Console, declared=()) -> Scenario | None:
    """Load the run's jobs and analyse every template before any query starts (raises SpecError, located);
    None (said on ``errors``) when the job choice is bad. Templates no replay reproduces are warned of."""
    try:
        scenario = load_run(spark, request, files, declared)
    except JobChoiceError as err:
        errors.print(f"[bold red]error[/] {err}", highlight=False, soft_wrap=True)
        return None
    unreproducible: list[str] = []
    problems = analyse(spark, scenario, out / "analysis", unreproducible)
    if problems:  # located before any query starts, as the static checks
        raise locate_problems(list(files.yaml), problems)
    for line in unreproducible:
        errors.print(
            f"[yellow]warning[/] {line}; exactly once cannot hold across a replay, and its sink is not verified",
            highlight=False,
            soft_wrap=True,
        )
    return scenario


def refuse_changed(errors: Console, out: Path, err: CheckpointChanged) -> None:
    """Say that ``out`` holds checkpoints of a changed query, and what to do about it."""
    errors.print(
        f"[bold red]error[/] --out {out}: {err}; start the job afresh with --fresh JOB (its old "
        "checkpoint and outputs are kept aside) or use another --out",
        highlight=False,
        soft_wrap=True,
    )


def run_live(request: RunRequest, console: Console, errors: Console, declared: Collection[PythonJob] = ()) -> int:
    """The ``strata run --cells 1`` command: every job in this one Spark application. Raises SpecError (located)
    before any query starts; returns the exit code.

    ``request.files``: YAML spec files (cluster and jobs; checked before Spark starts) and Python files declaring
    jobs (run once the session exists: a module-level UDF needs one, as under spark-submit); ``declared``: jobs
    already declared in this process (a jobs file run as ``__main__``)."""
    from strata.report import write_report
    from strata.report.console import untimed_lines, verification_line
    from strata.report.tables import verdict
    from strata.spark.measure import collect

    files = check_files(request)
    out = Path(request.out)
    mode = "strata" if request.control else "baseline"
    out.mkdir(parents=True, exist_ok=True)
    try:
        spark = start_session(request, files.name, out)
    except (JavaError, MasterUnreachable) as err:
        errors.print(f"[bold red]error[/] {err}", highlight=False, soft_wrap=True)
        return 2
    try:
        scenario = prepare(spark, request, files, out / mode, errors, declared)
    except SpecError:
        spark.stop()
        raise
    if scenario is None:
        spark.stop()
        return 2
    who = "Strata in control" if request.control else "plain Spark"
    title = f"strata run {scenario.name} on {spark.sparkContext.master} ({who})"
    view = View(scenario, title)
    stop_asked: list[int] = []
    # PySpark's own SIGINT handler cancels every running job, which kills a query mid-batch; Ctrl-C, and SIGTERM
    # (what Kubernetes and systemd send), instead end the loop after its step, and the batches in flight finish.
    previous = {sig: signal.signal(sig, lambda signum, _: stop_asked.append(signum)) for sig in STOP_SIGNALS}
    try:
        # Strata warms the one application it starts as it warms each cell: the queries take their first batch
        # before the sources' epoch, not after it as a backlog; plain Spark, as a team starts it, runs cold.
        warmed = warm_application(spark, scenario, out / WARM_UP, sink=request.sink) if request.control else None
        lead = lead_after([warmed] if warmed is not None else [])
        epoch, said = time_base(out / mode, request.fresh, lead)
        if warmed is not None:
            said = [warm_line({"this application": warmed}, lead), *said]
        for line in said:
            console.print(f"[cyan]▸[/] {line}", highlight=False)
        with Live(view.render(), console=console, refresh_per_second=2) as live:

            def shown(_mode: str, obs: Observation, decisions: Decisions, _row: dict) -> None:
                view.last = (obs, decisions)
                live.update(view.render())

            def attach(engine) -> None:
                floors = Floors(engine)
                view.status = lambda: engine_status(engine, floors)
                for line in engine.resume(request.fresh):  # refuses a changed query before any query starts
                    live.console.print(f"[cyan]▸[/] {line}", highlight=False)

            try:
                result = run_mode(
                    spark,
                    scenario,
                    mode,
                    out / mode,
                    run_config(request),
                    epoch,
                    max(epoch, time.time()) + request.duration_s,
                    shown,
                    should_stop=lambda: bool(stop_asked),
                    on_engine=attach,
                )
            except CheckpointChanged as err:
                refuse_changed(errors, out, err)
                result = None
        if result is None:
            return 2
        if stop_asked:
            name = signal.Signals(stop_asked[0]).name
            console.print(f"[yellow]interrupted ({name}): the queries were stopped between batches[/]")
        failures = result.engine.failures()
        horizon = max(0.0, result.stop - result.epoch - DRAIN_S)
        knobs = {"duration_s": horizon, "requested_s": request.duration_s, "control": request.control}
        if warmed is not None:
            knobs |= {"warm_up": asdict(warmed), "lead_s": lead}
        config = {"config": knobs}
        measured = collect([result], scenario, horizon, spark, out, config, {})
        console.print(view.render())
        if not measured.checks.empty:
            console.print(verification_line(measured.checks))
        for line in untimed_lines(measured.summary, scenario):
            errors.print(line, highlight=False, soft_wrap=True)
        python_jobs = [j for j in scenario.jobs if j.declared is not None]
        if python_jobs:
            console.print(
                f"{len(python_jobs)} Python job(s) timed at their sinks, not verified: Strata cannot recompute a "
                "user's query (its tests can: see examples/platform/)",
                highlight=False,
            )
        console.print(f"metrics: {out / 'metrics'}; report: {write_report(out)}; Spark's log: {out / SPARK_LOG}")
        for job, cause in failures.items():
            errors.print(f"[bold red]query {job} died[/]: {cause}", highlight=False, soft_wrap=True)
        return 1 if failures or verdict(measured.checks).bad else 0
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        spark.stop()
