"""Every sink against a reference recomputed from the input its query read (exactly once, checked).

A generated source's records are a pure function of their offsets
(:mod:`strata.model.inputs`), so the rows a query segment read can be
generated again; a file source's are the files its checkpoint's file log
names for its committed batches, read again. Either is pushed through the
template offline: filters through Spark in batch mode, window aggregates in
pandas (epoch-aligned, as Spark's ``window()``). Only committed batches count
as output: a batch interrupted by a stop may have written, but a restart
would replay and overwrite it.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd

from strata.model import OperatorKind
from strata.model.inputs import Timeline, Workload, record_columns
from strata.spark.engine import Segment
from strata.spark.files import data_files, planned_files
from strata.spark.pipelines import AGGREGATIONS

US = 1_000_000


def micros(values) -> np.ndarray:
    """Timestamps (tz-aware, or naive meaning UTC, as Parquet hands them back) → µs since the Unix epoch."""
    return pd.to_datetime(pd.Series(values), utc=True).astype("datetime64[us, UTC]").astype("int64").to_numpy()


def read_files(paths, fmt: str) -> pd.DataFrame:
    """The records of data files (``json`` lines, ``csv`` with a header, ``parquet``), event time as UTC."""
    readers = {"json": lambda f: pd.read_json(f, lines=True), "csv": pd.read_csv, "parquet": pd.read_parquet}
    frames = [readers[fmt](f) for f in sorted(paths)]
    frames = [f for f in frames if not f.empty]
    if not frames:
        return pd.DataFrame({"id": [], "event_time": pd.to_datetime([], utc=True), "key": [], "value": []})
    frame = pd.concat(frames, ignore_index=True)
    return frame.assign(event_time=pd.to_datetime(frame["event_time"], utc=True))


def read_by_committed(segment: Segment) -> list[str]:
    """The files a file-source segment took into its committed batches (its checkpoint's file log)."""
    last = last_committed(segment)
    return [f for f, batch in planned_files(segment.pipeline.checkpoint).items() if batch <= last]


def segment_input(segment: Segment, epoch: float, tick_s: float) -> pd.DataFrame:
    """The records the segment's query read: generated rows [start_row, end_row), or a file source's files of
    its committed batches."""
    source = segment.pipeline.chain[0].source
    if source.path is not None:
        return read_files(read_by_committed(segment), source.format)
    spec = Workload.of(source)
    timeline = Timeline(spec, tick_s)
    lo, hi = segment.start_row, segment.end_row or segment.start_row
    cols = record_columns(spec, tick_s, timeline.segments(lo, hi), lo, hi)
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


def emitted_watermark(segment: Segment) -> int:
    """The segment's event-time watermark (µs) as of its last committed batch: a window aggregate has emitted
    exactly the windows ending at or before it (append mode); later ones are still in its state."""
    last = last_committed(segment)
    return max(
        (r.get("watermark_us") or -(2**62) for r in segment.pipeline.batch_records() if r["batch_id"] <= last),
        default=-(2**62),
    )


def verify_segment(spark, segment: Segment, epoch: float, tick_s: float) -> dict:
    """Sink vs reference for one segment: expected, delivered, missing, duplicated (and wrong values).

    A segment whose query no recomputation reproduces (:mod:`strata.spark.replay`) is not compared: its row says
    why in ``unverifiable`` and counts nothing as lost, duplicated or wrong."""
    rows = segment_input(segment, epoch, tick_s)
    reason = segment.pipeline.unreproducible
    if reason:
        sink = committed_output(segment)
        return {
            "job": segment.job,
            "template": segment.template,
            "rows_read": len(rows),
            "expected": None,
            "delivered": len(sink),
            "missing": 0,
            "duplicated": 0,
            "wrong": 0,
            "unverifiable": reason,
        }
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
            "unverifiable": "",
        }
    fn = window.aggregate.fn if window.aggregate else "count"
    due = expected[expected["window_end_us"] <= emitted_watermark(segment)]
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
        "unverifiable": "",
    }


def unread_input(segments: list[Segment], horizon: float) -> pd.DataFrame:
    """A file-source job's records with event time before ``horizon`` (wall seconds) in files none of its
    segments took into a committed batch."""
    source = segments[-1].pipeline.chain[0].source
    read = {f for s in segments for f in read_by_committed(s)}
    rows = read_files([f.path for f in data_files(source.path) if f.path not in read], source.format)
    return rows[micros(rows["event_time"]) < horizon * US] if not rows.empty else rows
