"""Queries warmed before a measured run, and the lead of its sources' epoch from what the warm-up measured:
one mechanism for every Spark application Strata starts — the demo's session (its ``baseline`` and ``fair``
modes), each cell of a fleet (``strata run``, the demo's ``dedicated`` and ``strata`` modes: a cell warms the jobs
it will hold before it reports ready) — so that no mode's first batches pay a cold JVM and cold Python workers
after its sources' epoch (issue 28; docs/spark.md, "Cells").

Only a job whose sources Strata generates can be warmed: its templates run once on :data:`WARM_INPUT_S` of
generated input into a memory sink. A user's own Python job reads their files, which no synthetic input stands
in for: it is skipped (:attr:`Warmed.skipped`).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from strata.model import Scenario
from strata.runners.spark_loop import keyed_operators

WARM_INPUT_S = 2.0  # event seconds of generated input each warmed template reads
LEAD_S = 2.0  # the least lead of the sources' epoch over the queries' start
START_MARGIN = 1.5  # the lead covers this many times the measured start of a round of queries


@dataclass(frozen=True)
class Warmed:
    """What a warm-up did: its wall seconds, the longest a round of its queries took to start (the lead a
    measured run needs before its sources' epoch: :func:`lead_after`), the jobs warmed and those skipped (a
    user's Python job)."""

    seconds: float = 0.0
    start_s: float = 0.0
    jobs: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()


def lead_after(warmed: Iterable[Warmed], least_s: float = LEAD_S) -> float:
    """How far after its queries start a run's sources' epoch comes, the run's applications having warmed up
    (``warmed``: each one's warm-up): at least ``least_s``, and :data:`START_MARGIN` × the longest start of a round
    of queries any of them measured (:attr:`Warmed.start_s`; they start their queries at once), so that every
    query is up and has taken its first batch, of no input, before any record is due."""
    return max(least_s, START_MARGIN * max((w.start_s for w in warmed), default=0.0))


def warm_up(spark, scenario: Scenario, scratch: Path, jobs: Collection[str] | None = None) -> Warmed:
    """Run every template of ``jobs`` (default: every job of ``scenario``) once on :data:`WARM_INPUT_S` of
    generated input, memory sink, virtual clock, under ``scratch`` (removed after), so the queries measured next
    start with a warm JVM and warm Python workers. A user's Python job is skipped: nothing stands in for its
    files."""
    from strata.spark.pipelines import Pipeline, PipelineOptions

    wanted = [j.id for j in scenario.jobs] if jobs is None else list(jobs)
    skipped = tuple(j for j in wanted if scenario.job[j].declared is not None)
    warmed = [(k, job) for k, job in enumerate(scenario.jobs) if job.id in wanted and job.id not in skipped]
    started = time.time()
    start_s = 0.0
    options = PipelineOptions(
        sink="memory",
        clock="virtual",
        end_s=WARM_INPUT_S,
        epoch=started,
        available_now=True,
        managed=keyed_operators(scenario),
    )
    rounds = max((len(job.templates) for _, job in warmed), default=0)
    try:
        for t in range(rounds):  # a job's templates share its query name, so one template per job at a time
            pipelines = [
                Pipeline(spark, job, job.templates[t], scratch / f"{job.id}-{t}", options, ("jobs", k, "templates", t))
                for k, job in warmed
                if t < len(job.templates)
            ]
            begun = time.time()
            for p in pipelines:
                p.start()
            start_s = max(start_s, time.time() - begun)
            for p in pipelines:
                p.query.awaitTermination()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return Warmed(time.time() - started, start_s, tuple(job.id for _, job in warmed), skipped)


def warm_line(warmed: Mapping[str, Warmed], lead_s: float) -> str:
    """What each application's warm-up did (``warmed``: application → its warm-up), and the lead it gave the
    sources' epoch, as the run says it."""
    parts = [
        f"{name} {w.seconds:.0f} s ({', '.join(w.jobs)}: started in {w.start_s:.1f} s)" if w.jobs else f"{name} none"
        for name, w in sorted(warmed.items())
    ]
    line = f"queries warmed: {'; '.join(parts)}; sources' epoch {lead_s:.1f} s after they start"
    skipped = sorted({j for w in warmed.values() for j in w.skipped})
    if skipped:
        line += f"; not warmed (a user's Python job reads its own files): {', '.join(skipped)}"
    return line
