"""Console output of a simulation: a progress bar while it runs and a summary table after."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from strata.sim.engine import Simulation

MAX_JOBS = 15


@contextmanager
def progress_bar(console: Console, duration: float) -> Iterator[Callable[[float, int], None]]:
    """A rich progress bar over simulated time; yields ``tick(now, events)`` for the run to call."""
    columns = (
        TextColumn("[bold]simulating"),
        BarColumn(),
        TextColumn("{task.completed:.0f}/{task.total:.0f} s"),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console, transient=False) as bar:
        task = bar.add_task("sim", total=duration, rate="")

        def tick(now: float, events: int) -> None:
            elapsed = bar.tasks[0].elapsed or 1e-9
            bar.update(task, completed=min(now, duration), rate=f"{events / elapsed:,.0f} ev/s")

        yield tick


def summary_tables(sim: Simulation) -> list[Table]:
    """Per-job latency and throughput, then cluster-wide figures."""
    m = sim.metrics
    lat = m.latency().set_index("job")
    ts = m.timeseries()
    span = max(sim.now, 1e-12)
    jobs = Table(title=f"{sim.scenario.name}: {sim.now:g} simulated seconds, seed {sim.seed}")
    for col in ("job", "in/s", "out/s", "p50 ms", "p95 ms", "p99 ms", "max ms", "L s", "missed"):
        jobs.add_column(col, justify="right" if col != "job" else "left", no_wrap=True)

    def fmt(x: float, scale: float = 1.0) -> str:
        return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x * scale:.3g}"

    shown = lat
    if len(lat) > MAX_JOBS:  # the jobs in the most trouble: deadline misses, then tail latency
        shown = lat.sort_values(["miss_rate", "p99"], ascending=False, na_position="last").head(MAX_JOBS)
        jobs.caption = f"{MAX_JOBS} of {len(lat)} jobs, most deadline misses and highest p99 first; all in latency"
    for job, row in shown.iterrows():
        per = ts[ts.job == job]
        ingest, out = per.ingest.sum() * m.bin_s / span, per.throughput.sum() * m.bin_s / span
        jobs.add_row(
            str(job),
            f"{ingest:,.0f}",
            f"{out:,.0f}",
            fmt(row.p50, 1e3),
            fmt(row.p95, 1e3),
            fmt(row.p99, 1e3),
            fmt(row["max"], 1e3),
            f"{row.target:g}",
            "–" if math.isnan(row.miss_rate) else f"{row.miss_rate:.1%}",
        )
    s = m.summary()
    cluster = Table(title="cluster", show_header=False)
    cluster.add_column("figure")
    cluster.add_column("value", justify="right")
    cluster.add_row("records generated / delivered to sinks", f"{s['generated']:,} / {s['delivered']:,}")
    dropped = ", ".join(f"{k} {v:,}" for k, v in sorted(s["dropped"].items())) or "0"
    cluster.add_row("records dropped", dropped)
    if "restored" in s:
        cluster.add_row(
            "recovery: instances restored / records replayed / duplicates dropped",
            f"{s['restored']:,} / {s['replayed']:,} / {s['duplicates']:,}",
        )
    util = f"{s['node_utilisation_mean']:.1%} / {s['node_utilisation_max']:.1%}"
    cluster.add_row("node cpu utilisation mean / max", util)
    cluster.add_row("stream affinity (bytes kept on a node)", fmt(s["stream_affinity"]))
    cluster.add_row("worst instance imbalance (max/mean)", fmt(s["imbalance_max"]))
    cluster.add_row("events", f"{s['events']:,}")
    return [jobs, cluster]
