"""A producer process for file sources: JSON, CSV or Parquet files written atomically into a directory at seeded,
bursty rates.

The workload driver for user queries over directories (tests, ``bench_platform``
and the platform example): records come from the one input definition
(:mod:`strata.model.inputs`, the same λ(t), keys and values the synthetic
source emits), so the files hold records ``[lo, hi)`` of a source spec and any
run's input can be recomputed exactly. Every ``file_s`` seconds of wall time
the records whose event time has passed go into one file, written under a
hidden name and renamed (Spark's file source never sees a partial file).
Columns: ``id``, ``event_time`` (ISO-8601 UTC, µs, in JSON and CSV; a UTC
timestamp in µs in Parquet, the unit Spark reads), ``key``, ``value`` plus
``extra`` columns computed from them; CSV files have a header line.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from strata.model import SourceSpec
from strata.model.inputs import Timeline, Workload, record_columns, static_dimension

Extra = Callable[[pd.DataFrame], pd.DataFrame]
FORMATS = ("json", "csv", "parquet")


def iso_times(frame: pd.DataFrame) -> pd.DataFrame:
    """``event_time`` (if the frame has one) as ISO-8601 UTC text with µs (what the JSON and CSV files hold)."""
    if "event_time" not in frame:
        return frame
    return frame.assign(event_time=frame["event_time"].dt.strftime("%Y-%m-%dT%H:%M:%S.%fZ"))


def write_file(frame: pd.DataFrame, path: Path, fmt: str) -> None:
    """``frame`` into ``path`` as ``fmt`` (one of :data:`FORMATS`). Parquet keeps µs: pandas' ns timestamps
    would be Parquet ``TIMESTAMP(NANOS)``, which Spark does not read."""
    if fmt == "json":
        lines = "\n".join(json.dumps(r) for r in iso_times(frame).to_dict(orient="records"))
        path.write_text(lines + "\n")
    elif fmt == "csv":
        iso_times(frame).to_csv(path, index=False)
    else:
        frame.to_parquet(path, engine="pyarrow", index=False, coerce_timestamps="us")


def publish(frame: pd.DataFrame, final: Path, fmt: str) -> None:
    """Write under a hidden name, then rename: a file source never sees a partial file (Spark skips names
    starting with ``.``)."""
    tmp = final.with_name(f".{final.name}.tmp")
    write_file(frame, tmp, fmt)
    os.replace(tmp, final)


class Producer(threading.Thread):
    """Writes ``source``'s records into ``directory`` as time passes (from wall time ``epoch``) until ``end_s``."""

    def __init__(
        self,
        directory: str | Path,
        source: SourceSpec,
        epoch: float,
        end_s: float,
        file_s: float = 0.5,
        tick_s: float = 0.1,
        extra: Extra | None = None,
        fmt: str = "json",
    ) -> None:
        if fmt not in FORMATS:
            raise ValueError(f"Producer fmt: expected one of {', '.join(FORMATS)}; found {fmt!r}")
        super().__init__(daemon=True, name=f"producer-{Path(directory).name}")
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.workload = Workload.of(source)
        self.timeline = Timeline(self.workload, tick_s)
        self.epoch, self.end_s, self.file_s, self.tick_s = epoch, end_s, file_s, tick_s
        self.extra, self.fmt = extra, fmt
        self.written = 0  # records written so far
        self.files = 0
        self._halt = threading.Event()

    def rows(self, lo: int, hi: int) -> pd.DataFrame:
        """Records [lo, hi) as the files hold them (event_time as UTC timestamps)."""
        cols = record_columns(self.workload, self.tick_s, self.timeline.segments(lo, hi), lo, hi)
        micros = np.round((self.epoch + cols.pop("t")) * 1e6).astype("int64")
        frame = pd.DataFrame({**cols, "event_time": pd.to_datetime(micros, unit="us", utc=True)})
        return self.extra(frame) if self.extra is not None else frame

    def write(self, lo: int, hi: int) -> None:
        publish(self.rows(lo, hi), self.directory / f"part-{lo:012d}.{self.fmt}", self.fmt)
        self.files += 1

    def run(self) -> None:
        lo = 0
        while not self._halt.is_set():
            now = min(time.time() - self.epoch, self.end_s)
            hi = self.timeline.rows_before_tick(max(0, int(now / self.tick_s)))
            if hi > lo:
                self.write(lo, hi)
                lo = self.written = hi
            if now >= self.end_s:
                return
            self._halt.wait(self.file_s)

    def stop(self) -> None:
        self._halt.set()
        self.join()


def clicks(share_above: float = 0.8, delay_s: float = 1.0) -> Extra:
    """Clicks on the records as impressions: a record with value > ``share_above`` is clicked ``delay_s`` later
    (the click's ``impression`` is the record's id), for stream–stream joins with a known answer."""

    def of(frame: pd.DataFrame) -> pd.DataFrame:
        c = frame[frame["value"] > share_above].copy()
        c["impression"] = c["id"]
        c["event_time"] = c["event_time"] + pd.Timedelta(seconds=delay_s)
        return c

    return of


def platform_input(root: str | Path, source: SourceSpec, epoch: float, end_s: float) -> list[Producer]:
    """The platform example's input: ``events/`` (the source's records) and ``clicks/`` on them."""
    root = Path(root)
    return [
        Producer(root / "events", source, epoch, end_s),
        Producer(root / "clicks", source, epoch, end_s, extra=clicks()),
    ]


def redelivered(every: int = 10) -> Extra:
    """At-least-once delivery: the records whose id is a multiple of ``every`` appear twice in their file (the
    same row both times), so a deduplicating query has a known answer: the records, each once."""

    def of(frame: pd.DataFrame) -> pd.DataFrame:
        return pd.concat([frame, frame[frame["id"] % every == 0]], ignore_index=True)

    return of


TEAM_B_DIRECTORIES = ("events_csv", "events_parquet", "orders_csv")  # team_b_input's producers' directories
TEAM_B_DIMENSION = "users"  # its static table's directory: ``key``, ``dim``


def team_b_layout(root: str | Path, source: SourceSpec) -> None:
    """The second benchmark workload's directories (empty) and its static table (:func:`static_table`, a CSV file
    with a header), before any query starts, since a stream–static join's static side is listed when the query
    is planned."""
    root = Path(root)
    for name in TEAM_B_DIRECTORIES:
        (root / name).mkdir(parents=True, exist_ok=True)
    static_table(root / TEAM_B_DIMENSION / "users.csv", source, "csv")


def static_table(path: Path, source: SourceSpec, fmt: str) -> None:
    """A stream–static join's static side, one row per key of ``source`` (``key``, ``dim`` ~ U[0, 1):
    :func:`~strata.model.inputs.static_dimension`) as ``fmt`` at ``path``, written once: not rewritten under
    running queries when their producers start."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        publish(pd.DataFrame(static_dimension(source.keys.count, source.seed)), path, fmt)


def team_b_input(root: str | Path, source: SourceSpec, epoch: float, end_s: float) -> list[Producer]:
    """The second benchmark workload's input (``benchmarks/workloads/team_b``): the source's records as CSV
    (``events_csv/``) and as Parquet (``events_parquet/``), orders redelivered at least once as CSV
    (``orders_csv/``), and the static table (:func:`team_b_layout`)."""
    root = Path(root)
    team_b_layout(root, source)
    return [
        Producer(root / "events_csv", source, epoch, end_s, fmt="csv"),
        Producer(root / "events_parquet", source, epoch, end_s, fmt="parquet"),
        Producer(root / "orders_csv", source, epoch, end_s, extra=redelivered(), fmt="csv"),
    ]


TEAM_C_DIRECTORIES = {"payments_json": "json", "payments_parquet": "parquet"}  # team_c_input's: directory → format


def team_c_layout(root: str | Path, source: SourceSpec) -> None:
    """The third benchmark workload's directories, empty, before any query starts (each query is planned on
    its directory's listing)."""
    for name in TEAM_C_DIRECTORIES:
        (Path(root) / name).mkdir(parents=True, exist_ok=True)


def team_c_input(root: str | Path, source: SourceSpec, epoch: float, end_s: float) -> list[Producer]:
    """The third benchmark workload's input (``benchmarks/workloads/team_c``): the source's records as JSON lines
    (``payments_json/``) and as Parquet (``payments_parquet/``)."""
    team_c_layout(root, source)
    return [Producer(Path(root) / name, source, epoch, end_s, fmt=fmt) for name, fmt in TEAM_C_DIRECTORIES.items()]


TEAM_D_DIRECTORIES = {"telemetry_json": "json", "telemetry_csv": "csv"}  # team_d_input's: directory → format
TEAM_D_DIMENSION = "devices"  # its static registry's directory: ``key``, ``dim`` as Parquet


def team_d_layout(root: str | Path, source: SourceSpec) -> None:
    """The fourth benchmark workload's directories (empty) and its device registry, before any query starts."""
    root = Path(root)
    for name in TEAM_D_DIRECTORIES:
        (root / name).mkdir(parents=True, exist_ok=True)
    static_table(root / TEAM_D_DIMENSION / "devices.parquet", source, "parquet")


def team_d_input(root: str | Path, source: SourceSpec, epoch: float, end_s: float) -> list[Producer]:
    """The fourth benchmark workload's input (``benchmarks/workloads/team_d``): the source's records as JSON lines
    (``telemetry_json/``) and as CSV (``telemetry_csv/``), and the registry (:func:`team_d_layout`)."""
    team_d_layout(root, source)
    return [Producer(Path(root) / name, source, epoch, end_s, fmt=fmt) for name, fmt in TEAM_D_DIRECTORIES.items()]


def write_sources(directories: dict[str, SourceSpec], epoch: float, end_s: float) -> None:
    """Fill each directory with its source's records until ``end_s`` after ``epoch`` (the target of a producer
    process: the files then come from a process the queries' scheduler knows nothing of)."""
    producers = [Producer(d, source, epoch, end_s) for d, source in directories.items()]
    for p in producers:
        p.start()
    for p in producers:
        p.join()
