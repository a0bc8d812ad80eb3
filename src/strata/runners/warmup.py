"""Queries warmed before a measured run, and the lead of its sources' epoch from what the warm-up measured:
one mechanism for every Spark application Strata starts — the demo's session (its ``baseline`` and ``fair``
modes), each cell of a fleet (``strata run``, the demo's ``dedicated`` and ``strata`` modes: a cell warms the jobs
it will hold before it reports ready), the one application of ``strata run --cells 1`` with Strata in control
(:func:`warm_application`; ``--no-control`` is plain Spark as a team starts it, cold) — so that no mode's first
batches pay a cold JVM and cold Python workers after its sources' epoch (issues 28, 29; docs/spark.md, "Cells").

A job whose sources Strata generates runs its templates once on :data:`WARM_INPUT_S` of generated input. A
user's own Python job is rehearsed the way a Spark team warms a query (:mod:`strata.spark.rehearsal`): its own
query, as Strata builds it, on a sample of each file source (the files already there, else rows of the schema it
declared) read a file a batch. Each writes the kind of sink the run writes (a user's own function or table sink:
a memory sink, never called on rehearsal rows), from a checkpoint, both under the warm-up's scratch directory —
never the run's sink or checkpoint, so the run stays exactly once. A query that
cannot be rehearsed (no input yet, Kafka, a Python data source, a failure) is skipped with its reason
(:attr:`Warmed.skipped`), and no query outlives :data:`WARM_CAP_S` (one that took no batch by then is skipped
too): a warm-up never fails nor holds up a run.
"""

from __future__ import annotations

import math
import shutil
import time
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from strata.model import Job, OperatorKind, Scenario
from strata.runners.spark_loop import keyed_operators

if TYPE_CHECKING:
    from strata.spark.pipelines import Pipeline, PipelineOptions

WARM_INPUT_S = 2.0  # event seconds of generated input each warmed template reads
LEAD_S = 2.0  # the least lead of the sources' epoch over the queries' start
START_MARGIN = 1.5  # the lead covers this many times the measured start of a round of queries
WARM_CAP_S = 60.0  # a warm-up stops whatever query of it still runs this long after it began
GRID_MAX_S = 60.0  # a run waits at most this long for its epoch to fall on its windows' grid (window_grid)


@dataclass(frozen=True)
class Warmed:
    """What a warm-up did: its wall seconds, the longest a round of its queries took to start (the lead a
    measured run needs before its sources' epoch: :func:`lead_after`), the jobs warmed and those skipped (job →
    why, in a few words)."""

    seconds: float = 0.0
    start_s: float = 0.0
    jobs: tuple[str, ...] = ()
    skipped: dict[str, str] = field(default_factory=dict)


def lead_after(warmed: Iterable[Warmed], least_s: float = LEAD_S) -> float:
    """How far after its queries start a run's sources' epoch comes, the run's applications having warmed up
    (``warmed``: each one's warm-up): at least ``least_s``, and :data:`START_MARGIN` × the longest start of a round
    of queries any of them measured (:attr:`Warmed.start_s`; they start their queries at once), so that every
    query is up and has taken its first batch, of no input, before any record is due."""
    return max(least_s, START_MARGIN * max((w.start_s for w in warmed), default=0.0))


def window_grid(scenario: Scenario) -> float:
    """The period (s) of the window boundaries over Strata's generated input: the least common multiple of the
    slides (a tumbling window's size) of every window aggregate reading a generated source, to the millisecond;
    0 when there is none, or when it passes :data:`GRID_MAX_S`.

    Spark's windows start at multiples of their slide since the Unix epoch, and generated records' event times
    start at the sources' epoch; a run whose epoch falls on this grid (:func:`on_grid`) sees the same windows of
    the same records as any other that does. Without it, how many windows of a 30 s run close by its horizon (2
    or 3 of 10 s) depended on the instant each mode started: the demo's ``sessions`` scored 43 or 60 on-time
    importance by chance between runs of the same code."""
    slides = {
        round(1000 * (op.window.slide_s or op.window.size_s))
        for job in scenario.jobs
        if job.declared is None
        for tpl in job.templates
        if any(op.source is not None and op.source.path is None for op in tpl.operators)
        for op in tpl.operators
        if op.kind is OperatorKind.WINDOW_AGGREGATE and op.window is not None
    }
    grid = math.lcm(*slides) / 1000 if slides else 0.0
    return grid if grid <= GRID_MAX_S else 0.0


def on_grid(t: float, grid_s: float) -> float:
    """The first instant at or after ``t`` on a grid of period ``grid_s`` since the Unix epoch (``t`` if none)."""
    return math.ceil(t / grid_s) * grid_s if grid_s > 0 else t


def warm_up(
    spark,
    scenario: Scenario,
    scratch: Path,
    jobs: Collection[str] | None = None,
    cap_s: float = WARM_CAP_S,
    sink: str = "parquet",
) -> Warmed:
    """Run every template of ``jobs`` (default: every job of ``scenario``) once, a job's templates one round
    after another, under ``scratch`` (removed after), so the queries measured next start with a warm JVM and warm
    Python workers: Strata's own on :data:`WARM_INPUT_S` of generated input (virtual clock), a user's rehearsed
    on samples of its files (:mod:`strata.spark.rehearsal`), each into the kind of sink the run writes
    (``sink``, under ``scratch``: a run's first batch otherwise pays Spark's file writer cold — warmed into a
    memory sink, bench_platform's alert query took 0.83 core-s for its first batch, 0.02–0.03 for the next). A
    query still running ``cap_s`` after the warm-up began is stopped; a user's query that cannot be rehearsed or
    fails is skipped (:attr:`Warmed.skipped`: why)."""
    from strata.spark.pipelines import PipelineOptions

    wanted = [j.id for j in scenario.jobs] if jobs is None else list(jobs)
    held = [(k, job) for k, job in enumerate(scenario.jobs) if job.id in wanted]
    skipped: dict[str, str] = {}
    started = time.time()
    start_s = 0.0
    options = PipelineOptions(
        sink=sink,
        clock="virtual",
        end_s=WARM_INPUT_S,
        epoch=started,
        available_now=True,
        managed=keyed_operators(scenario),
    )
    rounds = max((len(job.templates) for _, job in held), default=0)
    try:
        for t in range(rounds):  # a job's templates share its query name, so one template per job at a time
            pipelines = []
            for k, job in held:
                if t < len(job.templates) and job.id not in skipped:
                    pipeline, why = _warm_pipeline(spark, job, t, scratch / f"round-{t}", options, ("jobs", k))
                    if why is None:
                        pipelines.append(pipeline)
                    else:
                        skipped[job.id] = why
            begun = time.time()
            failed = {p.job.id: why for p in pipelines if (why := _start(p)) is not None}
            start_s = max(start_s, time.time() - begun)
            for p in pipelines:
                why = failed.get(p.job.id) or _finish(p, started, cap_s)
                if why is not None:
                    skipped[p.job.id] = why
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    warmed = tuple(job.id for _, job in held if job.id not in skipped)
    return Warmed(time.time() - started, start_s, warmed, skipped)


def warm_application(
    spark, scenario: Scenario, scratch: Path, jobs: Collection[str] | None = None, sink: str = "parquet"
) -> Warmed:
    """What every application Strata starts does before its sources' epoch: its Python workers started
    (:func:`strata.spark.session.warm_python_workers`), then the queries of ``jobs`` (default: every job of
    ``scenario``) warmed under ``scratch`` into the run's kind of ``sink`` (:func:`warm_up`). A cell does it before
    it reports ready (:mod:`strata.runners.cell`), ``strata run --cells 1`` before it sets its sources' epoch
    (:func:`strata.runners.live.run_live`)."""
    from strata.spark.session import warm_python_workers

    warm_python_workers(spark)
    return warm_up(spark, scenario, scratch, jobs, sink=sink)


def _warm_pipeline(
    spark, job: Job, t: int, scratch: Path, options: PipelineOptions, here: tuple
) -> tuple[Pipeline | None, str | None]:
    """The query that warms ``job``'s template ``t`` under ``scratch`` and None, or None and why there is none (a
    user's query that cannot be rehearsed). A user query's checkpoint is its run directory's parent's, so each
    job's is ``scratch/jobs/<job>/checkpoint``: a throwaway one, as the rest under ``scratch``."""
    from strata.model import SpecError
    from strata.spark.rehearsal import Rehearsal
    from strata.spark.user import pipeline_for

    run_dir = scratch / "jobs" / job.id / "warm-up"
    where = (*here, "templates", t)
    if job.declared is None:
        return pipeline_for(spark, job, job.templates[t], run_dir, options, where), None
    rehearsal = Rehearsal(spark, scratch / "input" / job.id)
    try:
        pipeline = pipeline_for(
            spark, job, job.templates[t], run_dir, options, where, files_per_trigger=1, rehearsal=rehearsal
        )
    except Exception as e:  # the run says where (a located SpecError), when it builds the query again
        found = e.problems[0].found if isinstance(e, SpecError) else _first_line(e)
        return None, rehearsal.refused or f"its query did not build ({found})"
    return (None, rehearsal.refused) if rehearsal.refused else (pipeline, None)


def _start(pipeline: Pipeline) -> str | None:
    """Start a warming query; why a user's did not start (None: it did). Strata's own failing is Strata's error,
    and raised."""
    try:
        pipeline.start()
    except Exception as e:
        if pipeline.job.declared is None:
            raise
        return f"its query did not start ({_first_line(e)})"
    return None


def _finish(pipeline: Pipeline, started: float, cap_s: float) -> str | None:
    """Wait for a warming query to end, stopping it ``cap_s`` after the warm-up ``started``; why it did not warm
    (None: it ran a batch at least). A user's query failing is skipped; Strata's own is Strata's error, raised."""
    from pyspark.errors import StreamingQueryException

    query = pipeline.query
    try:
        if not query.awaitTermination(max(0.001, started + cap_s - time.time())):  # Spark wants a timeout > 0
            query.stop()  # a warm-up holds up no run: it warmed this far
            if not pipeline.records:
                return f"no batch done within the warm-up's {cap_s:g} s"
    except StreamingQueryException as e:
        if pipeline.job.declared is None:
            raise
        return f"its query failed ({_first_line(e)})"
    return None


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0][:200]


def warm_line(warmed: Mapping[str, Warmed], lead_s: float) -> str:
    """What each application's warm-up did (``warmed``: application → its warm-up), and the lead it gave the
    sources' epoch, as the run says it."""
    parts = [
        f"{name} {w.seconds:.0f} s ({', '.join(w.jobs)}: started in {w.start_s:.1f} s)" if w.jobs else f"{name} none"
        for name, w in sorted(warmed.items())
    ]
    line = f"queries warmed: {'; '.join(parts)}; sources' epoch {lead_s:.1f} s after they start"
    skipped = {j: why for w in warmed.values() for j, why in w.skipped.items()}
    if skipped:
        line += "; not warmed: " + ", ".join(f"{j} ({why})" for j, why in sorted(skipped.items()))
    return line
