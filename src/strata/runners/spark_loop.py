"""Scenarios on Spark under the control loop: what ``strata run`` and both modes of ``strata demo`` run.

:func:`run_mode` builds the Spark engine adapter (with the dispatch gate when
Strata is in control), the :class:`~strata.control.controller.Controller`
(or :class:`~strata.control.loop.Plain`: plain Spark, every job on its first
template, Spark's FIFO, hash routing, no caps) and drives them with
:func:`strata.control.loop.run` until the stop time; it records every
window's observation, the controller's steps and the estimator's model, as
plain rows for :mod:`strata.spark.measure`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from strata.control.controller import Controller, HierarchyConfig
from strata.control.estimation import BatchAccount, ResourceLearner, attribute, batch_floor
from strata.control.loop import Plain, run
from strata.control.micro_batches import gate_config
from strata.dispatch.gate import GateConfig, GateCore
from strata.model import Scenario, critical_jobs, pe_id
from strata.plan import Options
from strata.protocol.engine import Decisions, Observation
from strata.protocol.units import URGENT_POOL
from strata.spark.engine import EngineConfig, SparkEngine
from strata.spark.gate import Gate
from strata.spark.measure import ModeRun
from strata.spark.pipelines import AGGREGATIONS

MODES = ("baseline", "fair", "strata")
"""Plain Spark (FIFO), plain Spark with FAIR pools set by hand (:func:`hand_pools`), Strata in control."""


@dataclass(frozen=True)
class RunConfig:
    """Knobs of one run on Spark, with their defaults."""

    state_partitions: int = 4
    # None: the gate's bound is the session's cores less HierarchyConfig.gate_reserved_cores (at least 1:
    # strata.control.micro_batches.gate_config).
    gate: GateConfig | None = None
    # One full L0 epoch at the start (a demo run is shorter than an epoch); L0 re-plans components on
    # signals. Spark runs a keyed operator on a fixed number of partitions: no DS2 scaling of instances.
    # Moving a key group costs nothing extra in the managed store (every batch reads state from the shared
    # directory), so L1 balances without a cooldown ("aggressive").
    control: HierarchyConfig = field(
        default_factory=lambda: HierarchyConfig(
            epoch_s=600.0,
            window_s=2.0,  # the control step: the loop's window and the pacing's catch-up
            plan=Options(budget_s=1.0),
            scaling=False,
            dispatch="edf",  # the dispatch level's own block, as in the simulator (strata.adapt.Composition)
            balancing="aggressive",
            pacing="plan",  # a micro-batch read over the plan's rate holds the cores whatever its deadline
            # Bulk batches are split into tasks whose longest fits the critical jobs' slack (size_batches): Spark cannot
            # preempt a task, and a critical batch beside a bulk one waits for one to end. Each task costs 0.047-0.065
            # core-s whatever it holds (bench_task_split, two runs: its launch, input split, sink file), so a split is
            # no finer than keeps that within 10% of its records' work. In one application (bench_one_app seeds 0 1 2,
            # 28 Nov, quiet, two runs) alerts' p99 1.62-1.84 s against FAIR by hand's 2.56-4.74 s, 0-3 misses against
            # 79-341, the lesser bulk job 0.88-1.02x FAIR's rows/s; beside a busy loop `scoring` fell to 0.55-0.66x
            # FAIR's (docs/spark.md, "On again, with a floor").
            size_batches=True,
            task_overhead_s=0.05,
            # A latency-critical query polls every half of its target (2 s → 1 s): each Spark micro-batch has a
            # fixed cost (planning, offset and commit logs, the sink's files, listener events), paid in cores the
            # bulk jobs lose. At 0.05 an alerts cell of its own took 1.36 of 2 cores (~3.4 batches/s of 117
            # records), at 0.25 0.5-0.9 (2 batches/s), at 0.5 0.41-0.48 (bench_demo --cpu, 28 Nov: docs/spark.md).
            # A record waits at most half its target for its batch to start; the batch has the other half.
            critical_poll=0.5,
        )
    )
    sink: str = "parquet"
    # plain Spark as a careful user tunes it (baseline modes only): job → FAIR pool, job → maxFilesPerTrigger
    pools: dict[str, str] = field(default_factory=dict)
    read_limits: dict[str, int] = field(default_factory=dict)

    def gate_for(self, spark) -> GateConfig:
        """The gate's knobs on ``spark``'s session: ``gate`` if set, else bounded by the session's cores, the
        latency-critical jobs' batches never held."""
        cfg = self.control
        return self.gate or gate_config(
            spark.sparkContext.defaultParallelism, cfg.gate_reserved_cores, cfg.critical_latency_s
        )


def hand_pools(scenario: Scenario, critical_s: float = HierarchyConfig.critical_latency_s) -> dict[str, str]:
    """FAIR pools as Spark's documentation recommends and a careful user sets them once: latency-critical
    jobs (target ≤ ``critical_s``) in the weight-32 pool, the others by rank — the best rank among them
    weight 4, the next 2, the rest 1."""
    critical = set(critical_jobs(scenario, critical_s))
    ranks = sorted({j.rank for j in scenario.jobs if j.id not in critical})
    weights = {r: ("w4", "w2")[k] if k < 2 else "w1" for k, r in enumerate(ranks)}
    return {j.id: URGENT_POOL if j.id in critical else weights[j.rank] for j in scenario.jobs}


def keyed_operators(scenario: Scenario) -> frozenset[str]:
    """Every aggregation runs in the movable store (both modes), so only the routing differs."""
    return frozenset(
        op.name for j in scenario.jobs for t in j.templates for op in t.operators if op.kind in AGGREGATIONS
    )


def learned_rows(learner: ResourceLearner, scenario: Scenario, t: float) -> list[dict]:
    """The learner's estimate of every PE next to the spec's prior, at ``t`` (seconds after the epoch)."""
    priors = {pe_id(j.id, op.name): op for j in scenario.jobs for tpl in j.templates for op in tpl.operators}
    return [
        {
            "t": t,
            "pe": pe,
            "cost_per_record": e.cost_per_record,
            "prior_cost_per_record": priors[pe].cost_per_record,
            "selectivity": e.selectivity,
            "prior_selectivity": priors[pe].selectivity,
            "fixed_s": e.fixed_s,
            "marginal_s": e.marginal_s,
            "samples": e.samples,
        }
        for pe, e in sorted(learner.estimates().items())
    ]


def job_floors(batches: list[dict], cores: int) -> dict[str, float]:
    """Job → its floor, its batch time with the machine to itself (:func:`strata.control.estimation.batch_floor`),
    from the batches Spark accounted (``SparkEngine.batch_observations``)."""
    by_job: dict[str, list[BatchAccount]] = {}
    for b in batches:
        if b.get("cpu_s") is not None and b.get("batch_ms") is not None:
            account = BatchAccount(b["cpu_s"] + b["python_s"], b["width"], b["run_s"], b["batch_ms"] / 1000)
            by_job.setdefault(b["job"], []).append(account)
    return {job: f for job, rows in by_job.items() if (f := batch_floor(rows, cores)) is not None}


def spark_engine(
    spark,
    scenario: Scenario,
    out: Path,
    config: RunConfig,
    epoch: float,
    controlled: bool,
    gate_rows: list[dict],
    gate: GateConfig | None = None,
) -> SparkEngine:
    """The Spark engine adapter of one application: with the dispatch gate (``gate``, default
    :meth:`RunConfig.gate_for` the session) when Strata is in control, released batches into ``gate_rows``."""
    core = GateCore(gate or config.gate_for(spark))
    return SparkEngine(
        spark,
        scenario,
        out,
        EngineConfig(
            epoch=epoch,
            state_partitions=config.state_partitions,
            managed=keyed_operators(scenario),
            sink=config.sink,
            pools={} if controlled else config.pools,
            read_limits={} if controlled else config.read_limits,
            directory_triggers=config.control.directory_triggers(scenario),  # every mode's, as its triggers
        ),
        gate=Gate(core, on_release=gate_rows.append) if controlled else None,
        attribute=attribute,
        read_restarts=config.control.read_restarts() if controlled else None,
    )


class Recorder:
    """The loop's ``on_step`` of a run: every window's observation as a plain row, and the estimator's model
    (``controller``: a Controller; None: plain Spark, nothing learned), then ``on_step``."""

    def __init__(
        self,
        run_: ModeRun,
        scenario: Scenario,
        controller: Controller | None,
        on_step: Callable[[str, Observation, Decisions, dict], None] | None = None,
    ) -> None:
        self.run = run_
        self.scenario = scenario
        self.controller = controller
        self.on_step = on_step

    def __call__(self, obs: Observation, decisions: Decisions) -> None:
        epoch = self.run.epoch
        row = {
            "t": obs.now - epoch,
            **{f"p99:{j}": s.p99 for j, s in obs.window.latency.items()},
            **{f"in:{pe}": r for pe, r in obs.window.ingest.items()},
            **{f"cap:{pe}": cap for pe, cap in (decisions.rate_limits or {}).items()},
        }
        self.run.observations.append(row)
        if self.controller is not None:
            self.run.learned += learned_rows(self.controller.estimator, self.scenario, obs.now - epoch)
        if self.on_step is not None:
            self.on_step(self.run.mode, obs, decisions, row)


def run_mode(
    spark,
    scenario: Scenario,
    mode: str,
    out: Path,
    config: RunConfig,
    epoch: float,
    stop: float,
    on_step: Callable[[str, Observation, Decisions, dict], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    on_engine: Callable[[SparkEngine], None] | None = None,
) -> ModeRun:
    """Run ``mode`` ("strata": the Controller in control; anything else: plain Spark) until wall time ``stop``.

    The sources' epoch is ``epoch`` (wall seconds). Every query is stopped at
    the end; the run's measurements are returned for :func:`strata.spark.measure.collect`. A job declared in
    Python carries its declaration (``Job.declared``): its templates are the user's functions.
    """
    controlled = mode == "strata"
    gate_rows: list[dict] = []
    engine = spark_engine(spark, scenario, out, config, epoch, controlled, gate_rows)
    if on_engine is not None:
        try:
            on_engine(engine)  # e.g. resume from the run directory: may refuse before any query starts
        except BaseException:
            engine.close()
            raise
    run_ = ModeRun(mode, epoch, stop, engine, gate_rows=gate_rows)
    # plain Spark runs on the triggers Strata picks, so the modes differ only in what Strata decides as they run
    triggers = config.control.triggers(scenario)
    controller = Controller(scenario, config.control) if controlled else Plain(scenario, triggers)
    record = Recorder(run_, scenario, controller if controlled else None, on_step)
    started = time.time()
    try:
        window_s = config.control.window_s
        run(engine, controller, window_s=window_s, until=stop, on_step=record, should_stop=should_stop)
    finally:
        run_.late_s = max(0.0, started - epoch)
        engine.stop_all()
        run_.stop = time.time()
        engine.close()
        run_.floors = job_floors(engine.batch_observations(), spark.sparkContext.defaultParallelism)
        if controlled:
            run_.controller_log = [asdict(entry) for entry in controller.log]
    return run_
