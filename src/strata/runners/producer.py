"""A producer process for file sources: JSON files written atomically into a directory at seeded, bursty rates.

The workload driver for user queries over directories (tests, ``bench_platform``
and the platform example): records come from the one input definition
(:mod:`strata.model.inputs`, the same λ(t), keys and values the synthetic
source emits), so the files hold records ``[lo, hi)`` of a source spec and any
run's input can be recomputed exactly. Every ``file_s`` seconds of wall time
the records whose event time has passed go into one file, written under a
hidden name and renamed (Spark's file source never sees a partial file).
Columns: ``id``, ``event_time`` (ISO-8601 UTC, µs), ``key``, ``value`` plus
``extra`` columns computed from them.
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
from strata.model.inputs import Timeline, Workload, record_columns

Extra = Callable[[pd.DataFrame], pd.DataFrame]


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
    ) -> None:
        super().__init__(daemon=True, name=f"producer-{Path(directory).name}")
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.workload = Workload.of(source)
        self.timeline = Timeline(self.workload, tick_s)
        self.epoch, self.end_s, self.file_s, self.tick_s = epoch, end_s, file_s, tick_s
        self.extra = extra
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
        frame = self.rows(lo, hi)
        text = frame.assign(event_time=frame["event_time"].dt.strftime("%Y-%m-%dT%H:%M:%S.%fZ"))
        lines = "\n".join(json.dumps(r) for r in text.to_dict(orient="records"))
        final = self.directory / f"part-{lo:012d}.json"
        tmp = self.directory / f".{final.name}.tmp"
        tmp.write_text(lines + "\n")
        os.replace(tmp, final)
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


def write_sources(directories: dict[str, SourceSpec], epoch: float, end_s: float) -> None:
    """Fill each directory with its source's records until ``end_s`` after ``epoch`` (the target of a producer
    process: the files then come from a process the queries' scheduler knows nothing of)."""
    producers = [Producer(d, source, epoch, end_s) for d, source in directories.items()]
    for p in producers:
        p.start()
    for p in producers:
        p.join()
