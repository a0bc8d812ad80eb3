"""L0's cell placement in the loop: the jobs as :func:`strata.plan.cells.place_cells` sees them (SODA, Wolf et al.,
§4.2 macroW: PEs onto nodes; here jobs onto cells, one cell = one Spark application with an OS-enforced share).

Pure: plain data in, a :class:`~strata.plan.cells.CellPlan` out. The Controller calls :func:`place` at its start and
after every (re)plan when its ``cells`` knob is set (only an engine that runs cells sets it:
:mod:`strata.runners.fleet`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from strata.model import OperatorKind, Scenario, critical_jobs
from strata.plan.cells import CellJob, CellPlan, default_limits, place_cells

MIN_CORES = 0.05  # a held-back job (no cpu share in the plan) still has a cell, and place_cells needs cores > 0


@dataclass(frozen=True)
class CellConfig:
    """Knobs of L0's cell placement, with their defaults (docs/hierarchy.md, "Cells"); the costs and the movement
    limit are :func:`strata.plan.cells.default_limits`'."""

    max_cells: int | None = None  # Spark applications L0 may run (None: default_limits' for the machine)
    pins: tuple[tuple[str, str], ...] = ()  # (job, cell): what the user pinned (--dedicate JOB: a cell of its own)
    # Cores a latency-critical job's micro-batch needs at once (its peak, at most the machine's): the tasks
    # of one batch (the source's input partitions) run in parallel, one core each.
    batch_tasks: int = 2
    # The cores the cells' shares divide (this machine's for a local master; None: the scenario's cluster, on
    # which L0's plan gives each job its cpu share: those shares are scaled to these cores).
    cores: float | None = None
    time_limit_s: float = 1.0  # the solver's budget

    def __post_init__(self) -> None:
        if self.max_cells is not None and self.max_cells < 1:
            raise ValueError(f"cells.max_cells: expected at least 1; found {self.max_cells}")


def cell_jobs(scenario: Scenario, cores: Mapping[str, float], critical_s: float, config: CellConfig) -> list[CellJob]:
    """Every job as the cell placement sees it: latency class (target ≤ ``critical_s``), rank, its output's
    weight, the cores L0's plan gives it (``cores``: job → cpu share on the scenario's cluster, scaled to
    ``config.cores``), a critical job's peak (a batch's tasks at once), the jobs it reads (a Python job's
    declaration) and its pin.

    Non-critical work is elastic: the OS's weights are work-conserving, so it takes every core the critical
    cells leave idle. When the plan's shares fill the machine (they do whenever there is demand), the
    non-critical jobs' cores are scaled down to what the critical jobs' peaks leave, so that the cell shares
    give the critical cells their bursts rather than each cell its mean alone."""
    pins = dict(config.pins)
    machine = config.cores or scenario.cluster.total_cores
    scale = machine / scenario.cluster.total_cores
    out = []
    for job in scenario.jobs:
        mean = min(max(cores.get(job.id, 0.0) * scale, MIN_CORES), machine)
        critical = job.target_latency_s <= critical_s
        tpl = job.templates[0]
        sinks = [st for st in tpl.streams if tpl.operator[st.dst].kind is OperatorKind.SINK]
        out.append(
            CellJob(
                id=job.id,
                critical=critical,
                rank=job.rank,
                weight=max((tpl.weight_of(st) for st in sinks), default=1.0),
                cores=mean,
                peak_cores=max(mean, min(float(config.batch_tasks), machine)) if critical else mean,
                reads=tuple(job.declared.reads) if job.declared is not None else (),
                pin=pins.get(job.id),
            )
        )
    peaks = sum(j.peak_cores for j in out if j.critical)
    elastic = sum(j.cores for j in out if not j.critical)
    left = machine - peaks
    if elastic > left and elastic > 0:
        factor = max(left, MIN_CORES * len(out)) / elastic
        out = [
            j
            if j.critical
            else replace(j, cores=max(MIN_CORES, j.cores * factor), peak_cores=max(MIN_CORES, j.cores * factor))
            for j in out
        ]
    return out


def light_compiling(scenario: Scenario, members: Mapping[str, Sequence[str]], critical_s: float) -> set[str]:
    """The cells of ``members`` (cell → its jobs) whose JVM compiles with its first tier only (HotSpot's C1): those
    whose every job is latency-critical (target ≤ ``critical_s``).

    Why (issue 28, a critical cell's appetite; docs/spark.md, "Cells"): a latency-critical job's batches are
    small, so its cell's JVM spends more on compiling than it gains. Measured on bench_platform, the alerts
    cell's C2 compiler took 0.3–0.45 cores through its first ~40 s and 0.1–0.15 after, while its 94 batches
    needed 0.34 core-s each; and one such query with C1 only (bench_checkpoint_writes' query, a batch every
    0.5 s) took 32–40 % less JVM CPU with no slower batches (Spark's trigger median 217 and 196 ms against 260
    and 194 ms with C2, two pairs). What the cell does not burn, the bulk cells get. A cell
    holding any bulk job keeps C2: its batches are large, where C2's code pays for itself."""
    critical = set(critical_jobs(scenario, critical_s))
    return {cell for cell, jobs in members.items() if jobs and set(jobs) <= critical}


def place(
    scenario: Scenario,
    cores: Mapping[str, float],
    critical_s: float,
    config: CellConfig,
    current: Mapping[str, str] | None,
) -> CellPlan:
    """Jobs onto cells on the scenario's machine (or cluster) under ``config``; ``current``: job → cell now."""
    limits = default_limits(config.cores or scenario.cluster.total_cores)
    if config.max_cells is not None:
        limits = replace(limits, max_cells=config.max_cells)
    jobs = cell_jobs(scenario, cores, critical_s, config)
    return place_cells(jobs, limits, current, config.time_limit_s)
