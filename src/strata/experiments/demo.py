"""``strata demo``: plain Spark and Strata, one after the other, on the same seeded input.

Both modes run on one embedded session (started once, then warmed up so that
neither mode pays the Python workers' start-up), with the same jobs, triggers,
partitions, sinks and the same movable keyed-state store for keyed operators:

- **baseline** — plain Spark: every job admitted with its first template, no
  pool (Spark's FIFO order inside the default pool), the keyed store's hash
  routing table never changed (hash partitioning), no gate, no caps;
- **strata** — the scheduling levels in control through
  :class:`~strata.spark.engine.SparkEngine`: L0 admission, template, cpu share
  (FAIR pool) and rate caps, re-planned each epoch from learned costs; L1
  hotspot diminishing on the routing table; L2 the dispatch gate.

Each mode measures records with event time in ``[0, duration)`` (seconds after
its epoch), then stops ``drain_s`` later. Latency of an output record = commit
time of its batch − its event time; an expected output not delivered by the
stop counts as a deadline miss with latency ≥ stop − event time (censored, so a
mode cannot look better by leaving work undone). Every sink is compared with a
reference recomputed from the generated input the query read
(:func:`verify_segment`): nothing lost, nothing duplicated.
"""

from __future__ import annotations

import json
import shutil
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from strata.control.controller import Controller, HierarchyConfig
from strata.control.estimation import ResourceLearner, mean_offered_rates
from strata.model import OperatorKind, Scenario, pe_id
from strata.plan import Options, Plan
from strata.plan.pacing import admitted_ingest, rate_caps
from strata.protocol.engine import Decisions, WindowStats
from strata.spark.engine import POOLS, EngineConfig, Segment, SparkEngine
from strata.spark.gate import Gate, GateConfig
from strata.spark.pipelines import AGGREGATIONS
from strata.spark.workload import Timeline, Workload, generate

MODES = ("baseline", "strata")
US = 1_000_000


@dataclass(frozen=True)
class DemoConfig:
    """Knobs of one demo run, with their defaults."""

    duration_s: float = 30.0  # measured event time per mode
    drain_s: float = 4.0  # run on after the horizon, so its last records can be delivered
    lead_s: float = 2.0  # the source epoch is this far after the queries start
    window_s: float = 2.0  # control step
    seed: int = 0  # added to every source's seed
    cores: int = 2
    state_partitions: int = 4
    warmup: bool = True
    gate: GateConfig = field(default_factory=GateConfig)
    # One full L0 epoch at the start (a demo run is shorter than an epoch); L0 re-plans components on
    # signals. Spark runs a keyed operator on a fixed number of partitions: no DS2 scaling of instances.
    # Moving a key group costs nothing extra in the managed store (every batch reads state from the shared
    # directory), so L1 balances without a cooldown ("aggressive").
    control: HierarchyConfig = field(
        default_factory=lambda: HierarchyConfig(
            epoch_s=600.0,
            window_s=2.0,
            plan=Options(budget_s=1.0),
            scaling=False,
            dispatch="llf",
            balancing="aggressive",
        )
    )


def triggers(scenario: Scenario) -> dict[str, float]:
    """Processing-time trigger per job: latency-sensitive jobs (target ≤ 5 s) run batches back to back."""
    return {j.id: min(5.0, j.target_latency_s / 15) for j in scenario.jobs if j.target_latency_s > 5}


def keyed_operators(scenario: Scenario) -> frozenset[str]:
    """Every aggregation runs in the movable store (both modes), so only the routing differs."""
    return frozenset(
        op.name for j in scenario.jobs for t in j.templates for op in t.operators if op.kind in AGGREGATIONS
    )


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


@dataclass
class ModeRun:
    """What one mode leaves behind: the engine (segments, decisions) and the tables it measured."""

    mode: str
    epoch: float
    stop: float
    engine: SparkEngine
    observations: list[dict] = field(default_factory=list)
    gate_rows: list[dict] = field(default_factory=list)
    controller_log: list[dict] = field(default_factory=list)
    learned: list[dict] = field(default_factory=list)
    late_s: float = 0.0


def pace(model: Scenario, plan: Plan, window: WindowStats | None, catch_up_s: float) -> dict[str, float | None]:
    """Rate caps for the sources of ``plan``: the ingest it admits under the resource functions of ``model`` (the
    model it was made on), while the offered load or the source's backlog exceeds that
    (:mod:`strata.plan.pacing`); a backlog drains, while the offer is below the admitted rate, at the
    rate the plan's cpu scaled up to the whole cluster allows (the cores the plan leaves idle go to the
    deferred records, in proportion to each PE's share). With no ``window`` (the plan's start, before any
    observation) every capped source starts at its admitted ingest, so the first micro-batches already
    follow the plan. A required job's sources are never capped: the planner must fit such a job whole, and
    when it falls short that is the Controller's shortfall signal (a re-plan), not a reason to hold its
    input back."""
    offered = dict(window.ingest) if window is not None else {}
    cpu = plan.cpu()
    admitted = {
        pe: rate
        for pe, rate in admitted_ingest(model, plan.templates, cpu, offered).items()
        if not model.job[pe.partition(".")[0]].required
    }
    instances = window.instances if window is not None else ()
    backlog = {inst.pe: inst.queued for inst in instances if inst.pe in admitted}
    # a backlog drains also on the cores the plan leaves idle, shared in proportion to the plan's cpu
    scale = max(1.0, model.cluster.total_cores / max(sum(cpu.values()), 1e-9))
    whole = {pe: c * scale for pe, c in cpu.items()}
    drain = {pe: r for pe, r in admitted_ingest(model, plan.templates, whole, offered).items() if pe in admitted}
    return rate_caps(admitted, offered, backlog, catch_up_s, drain=drain)


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


def run_mode(
    spark,
    scenario: Scenario,
    mode: str,
    out: Path,
    config: DemoConfig,
    on_tick: Callable[[str, float, dict], None] | None = None,
) -> ModeRun:
    """Run ``mode`` for ``duration_s + drain_s`` of event time; stop every query; return what it measured."""
    gate_rows: list[dict] = []
    gate = Gate(config.gate, on_release=gate_rows.append) if mode == "strata" else None
    epoch = time.time() + config.lead_s
    engine = SparkEngine(
        spark,
        scenario,
        out,
        EngineConfig(
            epoch=epoch,
            triggers=triggers(scenario),
            state_partitions=config.state_partitions,
            managed=keyed_operators(scenario),
        ),
        gate=gate,
    )
    run = ModeRun(mode, epoch, epoch + config.duration_s + config.drain_s, engine, gate_rows=gate_rows)
    controller = learner = None
    if mode == "strata":
        learner = ResourceLearner()
        # the planner's prior of the offered load: each arrival process's long-run mean, not its nominal rate
        offered = mean_offered_rates(scenario)
        prior = learner.refine(scenario, offered)
        controller = Controller(prior, config.control)
        decisions = controller.start(now=time.time())
        decisions.rate_limits = pace(prior, controller.plan, None, config.window_s)  # from the first batch on
        engine.apply(decisions)
        planned = prior  # the model the plan in force was made on
    else:
        engine.apply(Decisions(0, admitted={j.id: j.templates[0].name for j in scenario.jobs}))
    run.late_s = max(0.0, time.time() - epoch)  # > 0: queries were still starting when input began
    while time.time() < run.stop:
        time.sleep(max(0.0, min(config.window_s, run.stop - time.time())))
        obs = engine.observe()
        row = {
            "t": obs.now - epoch,
            **{f"p99:{j}": s.p99 for j, s in obs.window.latency.items()},
            **{f"in:{pe}": r for pe, r in obs.window.ingest.items()},
        }
        run.observations.append(row)
        if controller is not None:
            learner.observe_window(obs.window)
            # the learned resource functions are the model the Controller's next (re)plan starts from
            controller.scenario = learner.refine(scenario, offered)
            decisions = controller.step(obs)
            if decisions.replan:
                planned = controller.scenario
            decisions.rate_limits = pace(planned, controller.plan, obs.window, config.window_s)
            row.update({f"cap:{pe}": cap for pe, cap in decisions.rate_limits.items()})
            engine.apply(decisions)
            run.learned += learned_rows(learner, scenario, obs.now - epoch)
        if on_tick is not None:
            on_tick(mode, obs.now - epoch, row)
        failed = engine.failures()
        if failed:
            raise RuntimeError("; ".join(f"query {j} died: {c}" for j, c in failed.items()))
    engine.stop_all()
    run.stop = time.time()
    time.sleep(0.5)  # the last batches' progress events are delivered asynchronously
    engine.close()
    if controller is not None:
        run.controller_log = [asdict(entry) for entry in controller.log]
    return run


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
            Pipeline(spark, job, job.templates[k], out / "warmup" / f"{job.id}-{k}", options)
            for job in scenario.jobs
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


def micros(values) -> np.ndarray:
    """Timestamps (tz-aware, or naive meaning UTC, as Parquet hands them back) → µs since the Unix epoch."""
    return pd.to_datetime(pd.Series(values), utc=True).astype("datetime64[us, UTC]").astype("int64").to_numpy()


def segment_input(segment: Segment, epoch: float, tick_s: float) -> pd.DataFrame:
    """The generated records the segment's query read: rows [start_row, end_row)."""
    spec = Workload.of(segment.pipeline.chain[0].source)
    timeline = Timeline(spec, tick_s)
    lo, hi = segment.start_row, segment.end_row or segment.start_row
    cols = generate(spec, tick_s, timeline.segments(lo, hi), lo, hi)
    micros = np.round((epoch + cols.pop("t")) * US).astype("int64")
    return pd.DataFrame({**cols, "event_time": pd.to_datetime(micros, unit="us", utc=True)})


def reference_output(spark, segment: Segment, rows: pd.DataFrame) -> pd.DataFrame:
    """What the segment's template must have written for ``rows``: its filters through Spark in batch mode
    on the whole input (maps write one row per row, so they do not change which records appear; records
    are compared by id); a window aggregation recomputed in pandas."""
    from pyspark.sql import functions as F

    chain = segment.pipeline.chain[1:-1]
    rowwise = [op for op in chain if op.kind not in AGGREGATIONS]
    window = next((op for op in chain if op.kind is OperatorKind.WINDOW_AGGREGATE), None)
    if any(op.kind is OperatorKind.KEYED_STATEFUL for op in chain):
        raise ValueError("the demo's reference covers row-wise operators and window aggregates")
    frame = rows
    if rowwise:
        if frame.empty:
            frame = frame.iloc[0:0]
        else:
            df = spark.createDataFrame(frame)
            for op in rowwise:
                if op.kind is OperatorKind.FILTER:
                    df = df.filter(F.expr(op.predicate))
                elif op.kind is not OperatorKind.MAP:  # a map is one row out per row in: which rows, not values
                    raise ValueError(f"the demo's reference does not cover {op.kind.value} operators")
            frame = df.toPandas()
    if window is None:
        return frame
    return window_reference(frame, window)


def window_reference(rows: pd.DataFrame, op) -> pd.DataFrame:
    """Aggregate per (window, key) like Spark's ``window()`` (epoch-aligned; sliding windows overlap)."""
    w, agg = op.window, op.aggregate
    size, slide = round(w.size_s * US), round((w.slide_s or w.size_s) * US)
    et = micros(rows["event_time"])
    parts = []
    last = et - np.mod(et, slide)
    for j in range(-(-size // slide)):
        start = last - j * slide
        inside = start + size > et
        parts.append(
            pd.DataFrame(
                {
                    "ws": start[inside],
                    "key": rows["key"].to_numpy()[inside],
                    "x": rows[agg.column].to_numpy()[inside] if agg else 1.0,
                }
            )
        )
    both = pd.concat(parts, ignore_index=True)
    fn = agg.fn if agg else "count"
    grouped = both.groupby(["ws", "key"])["x"]
    value = grouped.size() if fn == "count" else getattr(grouped, {"avg": "mean"}.get(fn, fn))()
    out = value.rename(fn).reset_index()
    out["window_end_us"] = out["ws"] + size
    return out


def committed_output(segment: Segment) -> pd.DataFrame:
    """The segment's sink rows of committed batches only: a batch interrupted by the stop may have written
    its output, but it was never committed (a restart would replay and overwrite it), so it is not output."""
    sink = segment.pipeline.result()
    last = last_committed(segment)
    return sink[sink["batch_id"].astype(int) <= last] if not sink.empty else sink


def last_committed(segment: Segment) -> int:
    """The id of the segment's last committed batch (Spark reports a batch's progress after its commit)."""
    progress = segment.pipeline.query.lastProgress if segment.pipeline.query is not None else None
    return -1 if progress is None else int(progress["batchId"])


def verify_segment(spark, segment: Segment, epoch: float, tick_s: float) -> dict:
    """Sink vs reference for one segment: expected, delivered, missing, duplicated (and wrong values)."""
    rows = segment_input(segment, epoch, tick_s)
    expected = reference_output(spark, segment, rows)
    sink = committed_output(segment)
    window = next((op for op in segment.pipeline.chain if op.kind is OperatorKind.WINDOW_AGGREGATE), None)
    if window is None:
        want = Counter(expected["id"].tolist()) if not expected.empty else Counter()
        got = Counter(sink["id"].tolist()) if not sink.empty else Counter()
        missing = sum((want - got).values())
        duplicated = sum(n - 1 for n in got.values() if n > 1) + sum((got - want).values())
        return {
            "job": segment.job,
            "template": segment.template,
            "rows_read": len(rows),
            "expected": sum(want.values()),
            "delivered": sum(got.values()),
            "missing": missing,
            "duplicated": duplicated,
            "wrong": 0,
        }
    fn = window.aggregate.fn if window.aggregate else "count"
    last = last_committed(segment)
    watermark = max(
        (r.get("watermark_us") or -(2**62) for r in segment.pipeline.batch_records() if r["batch_id"] <= last),
        default=-(2**62),
    )
    due = expected[expected["window_end_us"] <= watermark]
    got = sink.copy()
    if not got.empty:
        got["ws"] = micros(got["window_start"])
    keys = Counter(zip(got["ws"], got["key"], strict=True)) if not got.empty else Counter()
    duplicated = sum(n - 1 for n in keys.values() if n > 1)
    merged = due.merge(
        got[["ws", "key", fn]].drop_duplicates(["ws", "key"])
        if not got.empty
        else pd.DataFrame(columns=["ws", "key", fn]),
        on=["ws", "key"],
        how="left",
        suffixes=("", "_sink"),
    )
    missing = int(merged[f"{fn}_sink"].isna().sum())
    present = merged.dropna(subset=[f"{fn}_sink"])
    wrong = int((~np.isclose(present[fn].astype(float), present[f"{fn}_sink"].astype(float))).sum())
    extra = len(set(keys) - set(zip(due["ws"], due["key"], strict=True)))
    return {
        "job": segment.job,
        "template": segment.template,
        "rows_read": len(rows),
        "expected": len(due),
        "delivered": len(keys),
        "missing": missing,
        "duplicated": duplicated + extra,
        "wrong": wrong,
    }


# ---------------------------------------------------------------------- measurement


def output_latency(run: ModeRun, tick_s: float, spark) -> tuple[pd.DataFrame, list[dict]]:
    """One row per expected output record with event time in the horizon: delivered or not, latency.

    Also returns the verification rows (one per segment)."""
    frames, checks = [], []
    for segment in run.engine.segments:
        check = verify_segment(spark, segment, run.epoch, tick_s)
        check["mode"] = run.mode
        checks.append(check)
        sink = committed_output(segment)
        finished = {r["batch_id"]: r["finished"] for r in segment.pipeline.batch_records()}
        if sink.empty:
            continue
        et = micros(sink["event_time"]) / US
        commit = sink["batch_id"].astype(int).map(finished).to_numpy(dtype=float)
        frames.append(
            pd.DataFrame(
                {
                    "mode": run.mode,
                    "job": segment.job,
                    "template": segment.template,
                    "event_s": et - run.epoch,
                    "latency_s": commit - et,
                    "delivered": True,
                }
            )
        )
    return (pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()), checks


def undelivered(run: ModeRun, scenario: Scenario, tick_s: float, horizon_s: float, spark) -> pd.DataFrame:
    """Outputs that were due (event time < horizon) but not delivered: the reference over the generated input
    up to the horizon, minus everything read. Their latency is censored at stop − event time."""
    rows = []
    for job in scenario.jobs:
        segments = [s for s in run.engine.segments if s.job == job.id]
        if not segments:
            continue
        last = segments[-1]
        timeline = Timeline(Workload.of(last.pipeline.chain[0].source), tick_s)
        hi = timeline.rows_before_tick(round(horizon_s / tick_s))
        lo = last.end_row or last.start_row
        if hi <= lo:
            continue
        pending = Segment(job.id, last.template, -1, lo, last.run_dir, last.pipeline, 0.0, end_row=hi)
        expected = reference_output(spark, pending, segment_input(pending, run.epoch, tick_s))
        if expected.empty:
            continue
        if "window_end_us" in expected:
            window = next(op for op in last.pipeline.chain if op.kind is OperatorKind.WINDOW_AGGREGATE)
            et = expected["window_end_us"].to_numpy() / US
            due = et + window.window.watermark_s <= run.epoch + horizon_s
            et = et[due]
        else:
            et = micros(expected["event_time"]) / US
        rows.append(
            pd.DataFrame(
                {
                    "mode": run.mode,
                    "job": job.id,
                    "template": last.template,
                    "event_s": et - run.epoch,
                    "latency_s": run.stop - et,
                    "delivered": False,
                }
            )
        )
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame()


def job_summary(
    latency: pd.DataFrame,
    batches: pd.DataFrame,
    partitions: pd.DataFrame,
    scenario: Scenario,
    mode: str,
    horizon_s: float,
    run_s: float,
) -> list[dict]:
    """Per job: p50/p99 latency, deadline misses, throughput (input records committed per second of the
    run: from the epoch to the stop), on-time importance, imbalance."""
    out = []
    for job in scenario.jobs:
        lat = (
            latency[
                (latency["mode"] == mode)
                & (latency["job"] == job.id)
                & (latency["event_s"] >= 0)
                & (latency["event_s"] < horizon_s)
            ]
            if not latency.empty
            else pd.DataFrame()
        )
        b = batches[(batches["mode"] == mode) & (batches["job"] == job.id)] if not batches.empty else batches
        values = lat["latency_s"].to_numpy() if not lat.empty else np.zeros(0)
        misses = int((values > job.target_latency_s).sum())
        on_time = len(values) - misses
        template = lat["template"].mode().iloc[0] if not lat.empty else job.templates[0].name
        tpl = job.template(template)
        stream = next(st for st in tpl.streams if tpl.operator[st.dst].kind is OperatorKind.SINK)
        weight = tpl.weight_of(stream)
        imbalance = None
        p = partitions[(partitions["mode"] == mode) & (partitions["job"] == job.id)] if not partitions.empty else None
        if p is not None and not p.empty:
            totals = p.groupby("partition")["rows"].sum()
            imbalance = float(totals.max() / totals.mean()) if totals.mean() > 0 else None
        rows_in = float(b["rows_in"].fillna(0).sum()) if not b.empty else 0.0
        out.append(
            {
                "mode": mode,
                "job": job.id,
                "rank": job.rank,
                "target_s": job.target_latency_s,
                "outputs": len(values),
                "delivered": int(lat["delivered"].sum()) if not lat.empty else 0,
                "p50_s": float(np.percentile(values, 50)) if len(values) else None,
                "p99_s": float(np.percentile(values, 99)) if len(values) else None,
                "misses": misses,
                "miss_rate": misses / len(values) if len(values) else 0.0,
                "throughput": rows_in / run_s,
                "importance": weight * stream.value(on_time / horizon_s),
                "imbalance": imbalance,
            }
        )
    return out


@dataclass
class DemoResult:
    """Everything the demo measured; tables are also written under the run directory."""

    summary: pd.DataFrame
    checks: pd.DataFrame
    decisions: pd.DataFrame
    directory: Path
    timings: dict = field(default_factory=dict)


def collect(runs: list[ModeRun], scenario: Scenario, config: DemoConfig, spark, out: Path, timings: dict) -> DemoResult:
    """Measure both modes, verify every sink, write the metrics tables the report reads."""
    tick = 0.1
    lat_frames, checks, batch_rows, part_rows, decision_rows, gate_rows, obs_rows = [], [], [], [], [], [], []
    for run in runs:
        lat, chk = output_latency(run, tick, spark)
        lat_frames += [lat, undelivered(run, scenario, tick, config.duration_s, spark)]
        checks += chk
        for r in run.engine.batch_observations():
            batch_rows.append(
                {
                    "mode": run.mode,
                    **{k: v for k, v in r.items() if k != "partition_rows"},
                    "t_finished": r["finished"] - run.epoch,
                    "t_released": r["released"] - run.epoch,
                    "t_started": r["started"] - run.epoch,
                }
            )
            for i, n in enumerate(r.get("partition_rows") or []):
                part_rows.append(
                    {
                        "mode": run.mode,
                        "job": r["job"],
                        "batch_id": r["batch_id"],
                        "t": r["finished"] - run.epoch,
                        "partition": i,
                        "rows": n,
                    }
                )
        decision_rows += [{"mode": run.mode, **d, "t": d["t"] - run.epoch} for d in run.engine.decisions]
        gate_rows += [
            {"mode": run.mode, **g, "t": g["released"] - run.epoch, "wait_s": g["released"] - g["arrived"]}
            for g in run.gate_rows
        ]
        obs_rows += [{"mode": run.mode, **o} for o in run.observations]
    latency = pd.concat([f for f in lat_frames if not f.empty], ignore_index=True)
    batches, partitions = pd.DataFrame(batch_rows), pd.DataFrame(part_rows)
    summary = pd.DataFrame(
        [
            row
            for run in runs
            for row in job_summary(
                latency, batches, partitions, scenario, run.mode, config.duration_s, run.stop - run.epoch
            )
        ]
    )
    tables = {
        "latency": latency,
        "batches": batches,
        "partitions": partitions,
        "summary": summary,
        "checks": pd.DataFrame(checks),
        "decisions": pd.DataFrame(decision_rows),
        "gate": pd.DataFrame(gate_rows),
        "observations": pd.DataFrame(obs_rows),
        "controller": pd.DataFrame(
            [{"mode": run.mode, **row, "t": row["time"] - run.epoch} for run in runs for row in run.controller_log]
        ),
        "learning": pd.DataFrame([{"mode": run.mode, **row} for run in runs for row in run.learned]),
    }
    metrics = out / "metrics"
    metrics.mkdir(parents=True, exist_ok=True)
    for name, frame in tables.items():
        frame.to_csv(metrics / f"{name}.csv", index=False)
    meta = {
        "scenario": scenario.name,
        "config": {k: v for k, v in asdict(config).items() if k not in ("gate", "control")},
        "gate": asdict(config.gate),
        "timings": timings,
        "targets": {j.id: j.target_latency_s for j in scenario.jobs},
        "ranks": {j.id: j.rank for j in scenario.jobs},
    }
    (metrics / "run.json").write_text(json.dumps(meta, indent=1, default=str))
    return DemoResult(summary, tables["checks"], tables["decisions"], out, timings)


def run_demo(
    scenario: Scenario,
    out: Path,
    config: DemoConfig | None = None,
    on_tick: Callable[[str, float, dict], None] | None = None,
    on_phase: Callable[[str], None] | None = None,
) -> DemoResult:
    """Session → warm-up → baseline → strata → verification and metrics tables under ``out``."""
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
    )
    spark.sparkContext.setLogLevel("FATAL")
    timings["session_s"] = time.time() - t0
    try:
        lead = config.lead_s
        if config.warmup:
            say(f"session up in {timings['session_s']:.0f} s; warming up the Python workers")
            timings["warmup_s"], timings["query_start_s"] = warm_up(spark, scenario, out)
            # the sources' epoch comes after every query is up, so no mode starts with a backlog
            lead = max(lead, 1.5 * timings["query_start_s"])
        runs = []
        for mode in MODES:
            say(f"{mode}: running {config.duration_s:.0f} s of input (+{config.drain_s:.0f} s drain)")
            t = time.time()
            runs.append(run_mode(spark, scenario, mode, out / mode, replace(config, lead_s=lead), on_tick))
            timings[f"{mode}_s"] = time.time() - t
            timings[f"{mode}_late_s"] = runs[-1].late_s
        say("verifying every sink against the reference and measuring")
        t = time.time()
        result = collect(runs, scenario, config, spark, out, timings)
        timings["verify_s"] = time.time() - t
        timings["total_s"] = time.time() - t0
        (out / "metrics" / "run.json").write_text(
            json.dumps(
                {**json.loads((out / "metrics" / "run.json").read_text()), "timings": timings}, indent=1, default=str
            )
        )
        return result
    finally:
        spark.stop()
