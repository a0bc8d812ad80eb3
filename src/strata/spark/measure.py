"""What a run on Spark measured: per-record output latency, per-job summary, and the metrics tables.

Latency of an output record = commit time of its batch − its event time; an
expected output not delivered by the stop counts with latency stop − event time
(censored: a miss once that passes the job's target), whether its input was
never read or read and still held in a window's state, so a run cannot look
better by leaving work undone. The tables written under ``<run>/metrics`` are what
``strata report`` reads: latency, batches, partitions, summary, checks,
decisions, gate, observations, progress (Spark's per-batch progress: offsets,
backlog, durations, watermark, state rows), controller, learning (CSV) and
``run.json``.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from strata.model import OperatorKind, Scenario
from strata.model.inputs import Timeline, Workload
from strata.spark.engine import Segment, SparkEngine
from strata.spark.sinks import timed
from strata.spark.verify import (
    US,
    committed_output,
    emitted_watermark,
    micros,
    reference_output,
    segment_input,
    unread_input,
    verify_segment,
)


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
    floors: dict[str, float] = field(default_factory=dict)  # job → its batch time alone (the runner learns it)


def output_latency(run: ModeRun, tick_s: float, spark) -> tuple[pd.DataFrame, list[dict]]:
    """One row per expected output record with event time in the horizon: delivered or not, latency.

    Also returns the verification rows (one per segment whose query Strata can recompute: not a user's own, whose
    outputs are timed from the event times its sink wrote, and checked by its tests)."""
    frames, checks = [], []
    for segment in run.engine.segments:
        if segment.pipeline.job.declared is not None:  # a user's own query: timed from what its sink wrote
            frames.append(_user_latency(run, segment))
            continue
        check = verify_segment(spark, segment, run.epoch, tick_s)
        check["mode"] = run.mode
        check["segment"] = segment.index
        checks.append(check)
        sink = committed_output(segment)
        finished = {r["batch_id"]: r["finished"] for r in segment.pipeline.batch_records()}
        if not sink.empty:  # a resumed segment's sink also holds the earlier run's batches: verified, not timed
            sink = sink[sink["batch_id"].astype(int).isin(finished)]
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


def _user_latency(run: ModeRun, segment: Segment) -> pd.DataFrame:
    """A user query's output records of committed batches: latency = the batch's commit − the row's event time."""
    p = segment.pipeline
    committed = run.engine.progress.of(p.query) if p.query is not None else {}
    finished = {r["batch_id"]: r["finished"] for r in p.batch_records() if r["batch_id"] in committed}
    parts = [
        pd.DataFrame({"event_s": known / US - run.epoch, "latency_s": finished[b] - known / US})
        for b, known in ((b, timed(times)) for b, times in p.written.items())
        if b in finished
    ]
    if not parts:
        return pd.DataFrame()
    out = pd.concat(parts, ignore_index=True)
    return out.assign(mode=run.mode, job=segment.job, template=segment.template, delivered=True)


def undelivered(
    run: ModeRun, scenario: Scenario, tick_s: float, horizon_s: float, spark, owed: Collection[str] | None = None
) -> pd.DataFrame:
    """Outputs that were due (event time < horizon) but not delivered, with latency censored at stop − event
    time: the reference over the input up to the horizon that no committed batch read (generated rows past the
    last one read; a file source's files none of its committed batches took) and, for a window aggregate, the
    windows of the input it did read that are still in its state (ending after its watermark, so not emitted:
    a job that read its input but had not yet closed a window owes that window as much as one that never read
    it). ``owed``: the jobs whose output this run owes (None: all; a cell of a fleet run owes only the jobs it
    holds at the end)."""
    rows = []
    for job in scenario.jobs:
        if owed is not None and job.id not in owed:
            continue
        segments = [s for s in run.engine.segments if s.job == job.id]
        if not segments or job.declared is not None:  # what a user's query owes is not known without running it
            continue
        last = segments[-1]
        window = next((op for op in last.pipeline.chain if op.kind is OperatorKind.WINDOW_AGGREGATE), None)
        rows_due = _unread(segments, run.epoch, tick_s, horizon_s)
        if window is not None:
            rows_due = pd.concat([*(segment_input(s, run.epoch, tick_s) for s in segments), rows_due])
        if rows_due.empty:
            continue
        expected = reference_output(spark, last, rows_due)
        if window is not None and not expected.empty:
            expected = _held(expected, segments)
        if expected.empty:
            continue
        if "window_end_us" in expected:
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


def _unread(segments: list[Segment], epoch: float, tick_s: float, horizon_s: float) -> pd.DataFrame:
    """A job's input up to the horizon that none of its committed batches read."""
    last = segments[-1]
    source = last.pipeline.chain[0].source
    if source.path is not None:
        return unread_input(segments, epoch + horizon_s)
    hi = Timeline(Workload.of(source), tick_s).rows_before_tick(round(horizon_s / tick_s))
    lo = last.end_row or last.start_row
    pending = Segment(last.job, last.template, -1, lo, last.run_dir, last.pipeline, 0.0, end_row=max(lo, hi))
    return segment_input(pending, epoch, tick_s)


def _held(expected: pd.DataFrame, segments: list[Segment]) -> pd.DataFrame:
    """The windows of ``expected`` that no segment emitted: past the job's watermark and not in its sink."""
    held = expected[expected["window_end_us"] > max(emitted_watermark(s) for s in segments)]
    sinks = [committed_output(s) for s in segments]
    written = {
        (ws, key)
        for sink in sinks
        if not sink.empty
        for ws, key in zip(micros(sink["window_start"]), sink["key"], strict=True)
    }
    if not written:
        return held
    keep = [(ws, key) not in written for ws, key in zip(held["ws"], held["key"], strict=True)]
    return held[np.asarray(keep, dtype=bool)]


def job_summary(
    latency: pd.DataFrame,
    batches: pd.DataFrame,
    partitions: pd.DataFrame,
    scenario: Scenario,
    mode: str,
    horizon_s: float,
    run_s: float,
    floors: dict[str, float] | None = None,
) -> list[dict]:
    """Per job: p50/p99 latency, deadline misses, throughput (input records committed per second of the
    run: from the epoch to the stop), on-time importance, imbalance, its floor (``floors``: its batch time
    with the machine to itself, beside the p99 it achieved), and the rows its sink wrote with how many of them
    had no event time (``untimed``: no latency, so neither an output nor a miss)."""
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
                "floor_s": (floors or {}).get(job.id),
                "misses": misses,
                "miss_rate": misses / len(values) if len(values) else 0.0,
                "throughput": rows_in / run_s,
                # a run stopped before its horizon began (every query died at once) measured no output rate
                "importance": weight * stream.value(on_time / horizon_s if horizon_s > 0 else 0.0),
                "imbalance": imbalance,
                **_written(b),
            }
        )
    return out


def _written(batches: pd.DataFrame) -> dict[str, int | None]:
    """The rows one job's sink wrote (``batches``: its batch records) and how many had no event time; a replayed
    batch counts once, as its last attempt (what its sink holds)."""
    if batches.empty or "rows_untimed" not in batches:  # a table from before Strata counted them
        return {"written": None, "untimed": None}
    last = batches.drop_duplicates(["segment", "batch_id"], keep="last")
    return {"written": int(last["rows_out"].sum()), "untimed": int(last["rows_untimed"].fillna(0).sum())}


@dataclass
class RunResult:
    """Everything a run measured; tables are also written under the run directory."""

    summary: pd.DataFrame
    checks: pd.DataFrame
    decisions: pd.DataFrame
    directory: Path
    timings: dict = field(default_factory=dict)


def collect(
    runs: list[ModeRun],
    scenario: Scenario,
    horizon_s: float,
    spark,
    out: Path,
    config: dict,
    timings: dict,
    owed: Collection[str] | None = None,
) -> RunResult:
    """Measure every mode's run, verify every sink, write the metrics tables the report reads.

    ``horizon_s``: event time (seconds after each run's epoch) that is measured; ``config``: the run's knobs, as
    plain data, for ``run.json``; ``owed``: the jobs whose undelivered output counts (:func:`undelivered`)."""
    tick = 0.1
    lat_frames, checks, batch_rows, part_rows, decision_rows, gate_rows, obs_rows = [], [], [], [], [], [], []
    for run in runs:
        lat, chk = output_latency(run, tick, spark)
        lat_frames += [lat, undelivered(run, scenario, tick, horizon_s, spark, owed)]
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
    frames = [f for f in lat_frames if not f.empty]
    latency = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["mode", "job", "event_s"])
    batches, partitions = pd.DataFrame(batch_rows), pd.DataFrame(part_rows)
    summary = pd.DataFrame(
        [
            row
            for run in runs
            for row in job_summary(
                latency, batches, partitions, scenario, run.mode, horizon_s, run.stop - run.epoch, run.floors
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
        "progress": pd.DataFrame([{"mode": run.mode, **r} for run in runs for r in run.engine.progress.snapshot()]),
        "controller": pd.DataFrame(
            [{"mode": run.mode, **row, "t": row["time"] - run.epoch} for run in runs for row in run.controller_log]
        ),
        "learning": pd.DataFrame([{"mode": run.mode, **row} for run in runs for row in run.learned]),
    }
    write_metrics(out, tables, scenario, config, timings)
    return RunResult(summary, tables["checks"], tables["decisions"], out, timings)


def write_metrics(out: Path, tables: dict[str, pd.DataFrame], scenario: Scenario, config: dict, timings: dict) -> None:
    """The tables as ``out/metrics/<name>.csv`` and ``run.json`` (the run's knobs, timings, targets and ranks)."""
    metrics = out / "metrics"
    metrics.mkdir(parents=True, exist_ok=True)
    for name, frame in tables.items():
        frame.to_csv(metrics / f"{name}.csv", index=False)
    meta = {
        "scenario": scenario.name,
        **config,
        "timings": timings,
        "targets": {j.id: j.target_latency_s for j in scenario.jobs},
        "ranks": {j.id: j.rank for j in scenario.jobs},
    }
    (metrics / "run.json").write_text(json.dumps(meta, indent=1, default=str))
