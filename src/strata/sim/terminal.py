"""What ``strata simulate`` prints on the terminal while it runs: a calibration and run-time estimate before, a
progress bar during and summary tables after (rendering results for reports is the :mod:`strata.report` package's)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from strata.model import Scenario
from strata.sim.kernel import Simulation
from strata.sim.options import SimOptions

MAX_JOBS = 15


@dataclass(frozen=True)
class Calibration:
    """A short plain run (no controller) of the scenario: how fast this machine simulates it."""

    sim_s: float
    wall_s: float
    events: int

    @property
    def events_per_s(self) -> float:
        return self.events / max(self.wall_s, 1e-9)

    def estimate(self, duration: float) -> float:
        """Wall seconds for ``duration`` simulated seconds at the calibrated speed."""
        return duration * self.wall_s / max(self.sim_s, 1e-12)


def calibrate(
    scenario: Scenario, options: SimOptions | None = None, budget_s: float = 1.0, max_sim_s: float = math.inf
) -> Calibration:
    """Simulate the scenario (round-robin placement, FIFO, no controller) for doubling spans until
    ``budget_s`` of wall time has passed or ``max_sim_s`` simulated seconds are done."""
    start = time.perf_counter()
    sim = Simulation(scenario, options)
    until = 0.05
    while True:
        sim.run(min(until, max_sim_s))
        wall = time.perf_counter() - start
        if wall >= budget_s or sim.now >= max_sim_s:
            return Calibration(sim.now, wall, sim.events)
        until *= 2


def duration_text(seconds: float) -> str:
    """``5 s``, ``3 min 20 s``, ``2 h 5 min``, ``3.2 days``."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds // 60:.0f} min {seconds % 60:.0f} s"
    if seconds < 86400 * 2:
        return f"{seconds // 3600:.0f} h {seconds % 3600 / 60:.0f} min"
    years = seconds / (365.25 * 86400)
    return f"{seconds / 86400:,.1f} days" if years < 2 else f"{years:,.3g} years"


@contextmanager
def progress_bar(
    console: Console, duration: float, events_per_s: float | None = None
) -> Iterator[Callable[[float, int], None]]:
    """A rich progress bar over simulated time; yields ``tick(now, events)`` for the run to call.

    The event rate is measured between the ticks where the engine's event count moved (it
    advances once per control window); until then it shows the calibrated rate (``events_per_s``).
    The ETA is rich's, from the simulated seconds per wall second so far."""
    columns = (
        TextColumn("[bold]simulating"),
        BarColumn(),
        TextColumn("{task.completed:,.0f}/{task.total:,.0f} s"),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
    )
    first = f"~{events_per_s:,.0f} ev/s (calibrated)" if events_per_s else ""
    with Progress(*columns, console=console, transient=False) as bar:
        task = bar.add_task("sim", total=duration, rate=first)
        seen: list[float] = [time.perf_counter(), 0, time.perf_counter(), 0]  # first wall, events; last

        def tick(now: float, events: int) -> None:
            rate = bar.tasks[0].fields["rate"]
            if events != seen[3]:
                seen[2], seen[3] = time.perf_counter(), events
                rate = f"{(events - seen[1]) / max(seen[2] - seen[0], 1e-9):,.0f} ev/s"
            bar.update(task, completed=min(now, duration), rate=rate)

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
