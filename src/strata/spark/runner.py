"""Run a scenario's jobs as Structured Streaming queries on one session (``strata run``).

Every job starts its first template (all admitted, for now: issue 8's planner
chooses). Problems Spark would hit are found before any query starts
(:func:`check_scenario`, then building every pipeline analyses every
expression); a query that dies later is reported with its cause while the
others keep running.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from strata.model import Problem, Scenario
from strata.spark.listener import ProgressListener, write_tables
from strata.spark.pipelines import Pipeline, PipelineOptions, PipelineProblems, check_template


def check_scenario(scenario: Scenario) -> list[Problem]:
    """Problems that keep any job's chosen (first) template from running on Spark."""
    problems: list[Problem] = []
    for j, job in enumerate(scenario.jobs):
        problems.extend(check_template(job, job.templates[0], ("jobs", j, "templates", 0)))
    return problems


@dataclass
class QueryStatus:
    """One row of the live view."""

    job: str
    state: str
    batches: int
    input_rows: int
    rows_per_s: float | None
    backlog_rows: int | None
    batch_ms: float | None
    latency_p50: float | None
    latency_p99: float | None
    cause: str | None = None


@dataclass
class Runner:
    """Builds, starts, watches and stops one pipeline per job on a shared session."""

    scenario: Scenario
    out: Path
    options: PipelineOptions = field(default_factory=PipelineOptions)
    master: str | None = None
    cores: int | None = None
    shuffle_partitions: int = 2
    spark: object = None
    owns_session: bool = True
    listener: ProgressListener | None = None
    pipelines: list[Pipeline] = field(default_factory=list)
    failures: dict[str, str] = field(default_factory=dict)

    def build(self, spark=None) -> None:
        """Session, listener and every pipeline; raises :class:`PipelineProblems` before any query starts.

        With ``spark`` given, that session is used and left running by :meth:`close`.
        """
        from strata.spark.session import build_session

        problems = check_scenario(self.scenario)
        if problems:
            raise PipelineProblems(problems)
        self.out = Path(self.out)
        self.owns_session = spark is None
        self.spark = spark or build_session(
            f"strata-run-{self.scenario.name}",
            master=self.master,
            cores=self.cores,
            shuffle_partitions=self.shuffle_partitions,
            work_dir=self.out / "spark",
        )
        self.listener = ProgressListener()
        self.spark.streams.addListener(self.listener)
        problems = []
        for j, job in enumerate(self.scenario.jobs):
            try:
                self.pipelines.append(
                    Pipeline(
                        self.spark, job, job.templates[0], self.out, self.options, here=("jobs", j, "templates", 0)
                    )
                )
            except PipelineProblems as e:
                problems.extend(e.problems)
        if problems:
            raise PipelineProblems(problems)

    def start(self) -> None:
        for p in self.pipelines:
            p.start()

    def status(self) -> list[QueryStatus]:
        """The live view: one row per query; a dead query is recorded in :attr:`failures`."""
        rows = []
        progress = self.listener.snapshot() if self.listener else []
        for p in self.pipelines:
            mine = [r for r in progress if r["query"] == p.name]
            last = mine[-1] if mine else {}
            records = list(p.batch_records())
            sink = next((r for r in reversed(records) if r["latency_p50"] is not None), {})
            q = p.query
            if q is not None and not q.isActive and p.name not in self.failures:
                error = q.exception()
                if error is not None:
                    self.failures[p.name] = _cause(error)
            state = (
                "failed"
                if p.name in self.failures
                else "running"
                if q is not None and q.isActive
                else "stopped"
                if q is not None
                else "held"
            )
            rows.append(
                QueryStatus(
                    p.name,
                    state,
                    len(mine),
                    sum(r["input_rows"] or 0 for r in mine),
                    last.get("processed_rows_per_s"),
                    last.get("backlog_rows"),
                    last.get("batch_ms"),
                    sink.get("latency_p50"),
                    sink.get("latency_p99"),
                    self.failures.get(p.name),
                )
            )
        return rows

    def active(self) -> bool:
        return any(p.query is not None and p.query.isActive for p in self.pipelines)

    def stop(self, drain_timeout_s: float = 30.0) -> None:
        """Stop every query between batches, then record why any died.

        Generated sources are paused first (rate cap 0) and each query's
        running batch is let finish, because ``query.stop()`` interrupts a
        batch in flight. The caps in force before are restored afterwards, so
        a restart from the same run directory is not left paused.
        """
        live = [p for p in self.pipelines if p.query is not None and p.query.isActive]
        caps = {p.name: p.rate_cap.get() for p in live if p.rate_cap is not None}
        for p in live:
            if p.rate_cap is not None:
                p.rate_cap.set(0)
        deadline = time.time() + drain_timeout_s
        for p in live:
            while p.query.isActive and p.query.status["isTriggerActive"] and time.time() < deadline:
                time.sleep(0.1)
            p.query.stop()
        for p in live:
            if p.rate_cap is not None:
                p.rate_cap.set(caps[p.name])
        self.status()

    def write_metrics(self) -> dict[str, Path]:
        batches = [r for p in self.pipelines for r in p.batch_records()]
        return write_tables(self.out / "metrics", self.listener.snapshot() if self.listener else [], batches)

    def close(self) -> None:
        if self.spark is not None:
            if self.listener is not None:
                self.spark.streams.removeListener(self.listener)
            if self.owns_session:
                self.spark.stop()


def _cause(error) -> str:
    """The first informative line of a StreamingQueryException."""
    text = str(getattr(error, "desc", None) or error).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    python = [ln for ln in lines if "Error:" in ln or "Exception:" in ln]
    return (python[-1] if python else lines[0] if lines else "unknown error")[:300]


def wait(runner: Runner, duration_s: float, on_tick=None, tick_s: float = 1.0) -> None:
    """Run until ``duration_s`` has passed or every query has ended; ``on_tick(status)`` each tick."""
    deadline = time.time() + duration_s
    while time.time() < deadline and runner.active():
        time.sleep(min(tick_s, max(0.0, deadline - time.time())))
        if on_tick is not None:
            on_tick(runner.status())
