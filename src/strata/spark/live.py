"""``strata run``: start every job on Spark, show live progress (rich), stop cleanly, write metrics."""

from __future__ import annotations

import signal
import time
from pathlib import Path

from rich.console import Console
from rich.live import Live
from rich.table import Table

from strata.model import Scenario, locate_problems
from strata.spark.pipelines import PipelineOptions, PipelineProblems
from strata.spark.runner import QueryStatus, Runner, check_scenario, wait


def _fmt(value, spec: str) -> str:
    return "" if value is None else format(value, spec)


def status_table(rows: list[QueryStatus], elapsed: float, title: str) -> Table:
    table = Table(title=f"{title} — {elapsed:.0f} s", title_justify="left")
    for col in ("job", "state", "batches", "input rows", "rows/s", "backlog", "batch ms", "p50 s", "p99 s"):
        table.add_column(col, justify="left" if col in ("job", "state") else "right")
    for r in rows:
        state = {"running": "[green]running[/]", "failed": "[bold red]failed[/]"}.get(r.state, r.state)
        table.add_row(
            r.job,
            state,
            str(r.batches),
            str(r.input_rows),
            _fmt(r.rows_per_s, ".0f"),
            _fmt(r.backlog_rows, "d"),
            _fmt(r.batch_ms, ".0f"),
            _fmt(r.latency_p50, ".2f"),
            _fmt(r.latency_p99, ".2f"),
        )
    return table


def run_live(
    scenario: Scenario,
    files: list[Path],
    duration_s: float,
    master: str | None,
    out: Path,
    sink: str,
    console: Console,
    errors: Console,
) -> int:
    """The ``strata run`` command; raises SpecError (located) before any query starts; returns the exit code."""
    problems = check_scenario(scenario)
    if problems:
        raise locate_problems(files, problems)
    runner = Runner(scenario, out, PipelineOptions(sink=sink), master=master)
    try:
        try:
            runner.build()
        except PipelineProblems as e:
            raise locate_problems(files, e.problems) from None
        # query deaths are reported below with their cause; Spark's own error log would bury the live view
        runner.spark.sparkContext.setLogLevel("FATAL")
        runner.start()

        started = time.time()
        title = f"strata run {scenario.name} on {runner.spark.sparkContext.master}"
        # PySpark's own SIGINT handler cancels every running job, which kills a query mid-batch;
        # Ctrl-C should instead end the wait and let runner.stop() finish the batches in flight.
        pyspark_handler = signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            with Live(status_table(runner.status(), 0, title), console=console, refresh_per_second=2) as live:
                wait(runner, duration_s, lambda rows: live.update(status_table(rows, time.time() - started, title)))
        except KeyboardInterrupt:
            console.print("[yellow]interrupted: stopping the queries[/]")
        finally:
            signal.signal(signal.SIGINT, pyspark_handler)
        runner.stop()
        rows = runner.status()
        console.print(status_table(rows, time.time() - started, title + " (final)"))
        tables = runner.write_metrics()
        console.print(f"metrics: {', '.join(str(p) for p in tables.values())}")
        for job, cause in runner.failures.items():
            errors.print(f"[bold red]query {job} died[/]: {cause}", highlight=False, soft_wrap=True)
        return 1 if runner.failures else 0
    finally:
        runner.close()
