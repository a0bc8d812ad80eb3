"""``strata demo``: plain Spark (FIFO; FAIR pools by hand) and Strata, one after the other, on the same input.

Every mode runs on one embedded session (started once, then warmed up so that
neither mode pays the Python workers' start-up), with the same jobs, triggers,
partitions, sinks and the same movable keyed-state store for keyed operators,
each through :func:`strata.runners.spark_loop.run_mode` — the loop ``strata
run`` runs:

- **baseline** — plain Spark: every job admitted with its first template, no
  pool (Spark's FIFO order inside the default pool), the keyed store's hash
  routing table never changed (hash partitioning), no gate, no caps;
- **fair** — the same with FAIR pools set by hand as Spark's documentation
  recommends (:func:`strata.runners.spark_loop.hand_pools`: the latency-critical
  jobs in a weight-32 pool, the others weighted by rank);
- **strata** — the Controller in control: L0 admission, template, cpu share
  (FAIR pool) and rate caps, re-planned from learned costs; L1 hotspot
  diminishing on the routing table; L2 the dispatch gate.

Each mode measures records with event time in ``[0, duration)`` (seconds after
its epoch), then stops ``drain_s`` later; :mod:`strata.spark.measure` turns
the runs into the metrics tables, and every sink is compared with a reference
recomputed from the generated input (:mod:`strata.spark.verify`).

The modes run in ``DemoConfig.order`` (default baseline, fair, strata). The
session keeps warming up as they run, so whichever runs later gains; a
benchmark alternates the order across seeds. The tables list the modes in
:data:`~strata.runners.spark_loop.MODES` order whatever order they ran in.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from strata.model import Scenario
from strata.protocol.engine import Decisions, Observation
from strata.protocol.units import POOLS
from strata.runners.spark_loop import MODES, RunConfig, hand_pools, keyed_operators, run_mode
from strata.spark.conf import SparkSettings
from strata.spark.measure import RunResult, collect


@dataclass(frozen=True)
class DemoConfig:
    """Knobs of one demo run, with their defaults."""

    duration_s: float = 30.0  # measured event time per mode
    drain_s: float = 4.0  # run on after the horizon, so its last records can be delivered
    lead_s: float = 2.0  # the source epoch is this far after the queries start
    seed: int = 0  # added to every source's seed
    cores: int = 2
    warmup: bool = True
    order: tuple[str, ...] = MODES  # the order the modes run in: any permutation of MODES
    run: RunConfig = field(default_factory=RunConfig)

    def __post_init__(self) -> None:
        if sorted(self.order) != sorted(MODES):
            raise ValueError(f"DemoConfig.order: expected each of {', '.join(MODES)} once; found {self.order!r}")


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


# ---------------------------------------------------------------------- one mode


def warm_up(spark, scenario: Scenario, out: Path) -> tuple[float, float]:
    """Run every template once on a few seconds of input, so both modes start with warm Python workers.

    Returns the warm-up's seconds and how long starting the first round of queries took (the lead a
    measured run needs before its sources' epoch)."""
    from strata.spark.pipelines import Pipeline, PipelineOptions

    started = time.time()
    start_s = 0.0
    options = PipelineOptions(
        sink="memory", clock="virtual", end_s=2.0, epoch=started, available_now=True, managed=keyed_operators(scenario)
    )
    rounds = max(len(job.templates) for job in scenario.jobs)
    for k in range(rounds):  # a job's templates share its query name, so one template per job at a time
        pipelines = [
            Pipeline(
                spark, job, job.templates[k], out / "warmup" / f"{job.id}-{k}", options, ("jobs", j, "templates", k)
            )
            for j, job in enumerate(scenario.jobs)
            if k < len(job.templates)
        ]
        t = time.time()
        for p in pipelines:
            p.start()
        start_s = max(start_s, time.time() - t)
        for p in pipelines:
            p.query.awaitTermination()
    shutil.rmtree(out / "warmup", ignore_errors=True)
    return time.time() - started, start_s


# ---------------------------------------------------------------------- verification


def run_demo(
    scenario: Scenario,
    out: Path,
    config: DemoConfig | None = None,
    on_step: Callable[[str, Observation, Decisions, dict], None] | None = None,
    on_phase: Callable[[str], None] | None = None,
    spark_settings: SparkSettings | None = None,
) -> RunResult:
    """Session → warm-up → the modes in ``config.order`` → verification and metrics tables under ``out``;
    ``spark_settings``: the user's Spark settings (default: their ``spark-defaults.conf``)."""
    from strata.spark.session import build_session

    config = config or DemoConfig()
    scenario = reseed(scenario, config.seed)
    out = Path(out)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    say = on_phase or (lambda _: None)
    timings: dict[str, float] = {}
    t0 = time.time()
    spark = build_session(
        f"strata-demo-{scenario.name}",
        cores=config.cores,
        shuffle_partitions=config.cores,
        pools=POOLS,
        work_dir=out / "spark",
        settings=spark_settings,
        log_file=out / "spark.log",
    )
    timings["session_s"] = time.time() - t0
    try:
        lead = config.lead_s
        if config.warmup:
            say(f"session up in {timings['session_s']:.0f} s; warming up the Python workers")
            timings["warmup_s"], timings["query_start_s"] = warm_up(spark, scenario, out)
            # the sources' epoch comes after every query is up, so no mode starts with a backlog
            lead = max(lead, 1.5 * timings["query_start_s"])
        runs = []
        for mode in config.order:
            say(f"{mode}: running {config.duration_s:.0f} s of input (+{config.drain_s:.0f} s drain)")
            t = time.time()
            epoch = t + lead
            runs.append(
                run_mode(
                    spark,
                    scenario,
                    mode,
                    out / mode,
                    replace(config.run, pools=hand_pools(scenario)) if mode == "fair" else config.run,
                    epoch,
                    epoch + config.duration_s + config.drain_s,
                    on_step,
                )
            )
            timings[f"{mode}_s"] = time.time() - t
            timings[f"{mode}_late_s"] = runs[-1].late_s
        # the tables and the report read the same whatever order the modes ran in (run.json records the order)
        runs.sort(key=lambda r: MODES.index(r.mode))
        say("verifying every sink against the reference and measuring")
        t = time.time()
        knobs = {k: v for k, v in asdict(config).items() if k != "run"}
        meta = {
            "config": {
                **knobs,
                "window_s": config.run.control.window_s,
                "state_partitions": config.run.state_partitions,
            },
            "gate": asdict(config.run.gate_for(spark)),
        }
        result = collect(runs, scenario, config.duration_s, spark, out, meta, timings)
        timings["verify_s"] = time.time() - t
        timings["total_s"] = time.time() - t0
        run_json = out / "metrics" / "run.json"
        run_json.write_text(json.dumps({**json.loads(run_json.read_text()), "timings": timings}, indent=1, default=str))
        return result
    finally:
        spark.stop()
