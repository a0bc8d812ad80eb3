"""What a file source offers and what waits in it, from the directory and the query's own checkpoint.

Spark's file source reports no latest offset in its progress (its offsets count
batches, not records), so the offered rate and the backlog of a query reading
directories are observed here (DESIGN.md rule 8: observation from Spark and
the data alone, nothing from the producer):

- *offered*: the data files in the source directories (Spark's own rule:
  names starting with ``_`` or ``.`` are not data), their bytes and
  modification times;
- *planned*: the files the query has taken into a batch, from the file
  source's metadata log in the checkpoint (``sources/<i>/<batch>`` and
  ``<batch>.compact``: a ``v1`` line, then one JSON entry per file with its
  path and batch id) — Spark writes it when it plans the batch;
- *records per byte*: rows of the query's committed batches (progress) over
  the bytes of the files those batches read.

So backlog (records) = unplanned bytes × records per byte, offered records/s =
growth of the directories' bytes × records per byte, and the pending batch's
oldest record is the oldest unplanned file's (its first record's event time
when the file carries the event-time column; else its modification time).
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlparse

import numpy as np


@dataclass(frozen=True)
class DataFile:
    path: str
    size: int
    mtime: float


def data_files(directory: str | Path) -> list[DataFile]:
    """The data files under ``directory`` as Spark's file source sees them (hidden and ``_`` names skipped)."""
    out: list[DataFile] = []
    for root, dirs, files in os.walk(directory):
        dirs[:] = [d for d in dirs if not d.startswith((".", "_"))]
        for name in files:
            if name.startswith((".", "_")):
                continue
            full = os.path.join(root, name)
            try:
                st = os.stat(full)
            except FileNotFoundError:  # renamed or cleaned up while listing
                continue
            out.append(DataFile(os.path.realpath(full), st.st_size, st.st_mtime))
    return out


def _local(uri: str) -> str:
    parsed = urlparse(uri)
    return os.path.realpath(unquote(parsed.path) if parsed.scheme in ("file", "") else uri)


def planned_files(checkpoint: str | Path) -> dict[str, int]:
    """File → batch id, for every file the query's file sources have taken into a batch (all sources)."""
    out: dict[str, int] = {}
    root = Path(checkpoint) / "sources"
    if not root.is_dir():
        return out
    for source in root.iterdir():
        logs = [p for p in source.iterdir() if p.name.split(".")[0].isdigit()]
        compacts = [p for p in logs if p.name.endswith(".compact")]
        start = max((int(p.name.split(".")[0]) for p in compacts), default=-1)
        for p in logs:
            batch = int(p.name.split(".")[0])
            if batch < start or (batch == start and not p.name.endswith(".compact")):
                continue
            try:
                lines = p.read_text().splitlines()[1:]
            except FileNotFoundError:  # compacted away while reading
                continue
            for line in lines:
                if line.strip():
                    entry = json.loads(line)
                    out[_local(entry["path"])] = int(entry["batchId"])
    return out


@dataclass
class FileProbe:
    """Observation of one query's file sources (directories recorded when its DataFrame was built)."""

    directories: list[str]
    checkpoint: Path
    formats: dict[str, str] = field(default_factory=dict)  # directory → format
    event_time: str = "event_time"
    event_times: dict[str, str] = field(default_factory=dict)  # directory → its event-time column, where different
    _last: tuple[float, int] | None = None
    _rate: float | None = None
    _rpb: float | None = None
    _file_bytes: float | None = None
    _oldest: dict[str, float] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def listing(self) -> tuple[list[DataFile], dict[str, int]]:
        files = [f for d in self.directories for f in data_files(d)]
        return files, planned_files(self.checkpoint)

    def records_per_byte(
        self, files: list[DataFile], planned: dict[str, int], committed: dict[int, int]
    ) -> float | None:
        """Rows of committed batches over the bytes of the files they read (None before a batch with rows)."""
        size = {f.path: f.size for f in files}
        read = sum(size.get(p, 0) for p, b in planned.items() if b in committed)
        batches = set(planned.values())
        rows = sum(n for b, n in committed.items() if b in batches)
        return rows / read if read > 0 and rows > 0 else None

    def observe(self, now: float, committed: dict[int, int]) -> tuple[float | None, int | None]:
        """(records/s offered since the previous call, records waiting), None where not yet known; also refreshes
        the records per byte and per file that :meth:`pending` and the read limit use."""
        files, planned = self.listing()
        rpb = self.records_per_byte(files, planned, committed)
        total = sum(f.size for f in files)
        waiting = sum(f.size for f in files if f.path not in planned)
        with self._lock:
            if rpb is not None:
                self._rpb = rpb
                self._file_bytes = total / len(files)
            rpb = self._rpb
            last, self._last = self._last, (now, total)
            if rpb is not None and last is not None and now > last[0]:
                self._rate = max(0.0, (total - last[1]) * rpb / (now - last[0]))
            rate = self._rate
        return rate, (round(waiting * rpb) if rpb is not None else None)

    def records_per_file(self) -> float | None:
        """Mean records in a file of these directories (None before a committed batch with rows was observed)."""
        with self._lock:
            return self._rpb * self._file_bytes if self._rpb is not None and self._file_bytes else None

    def batch(self, batch_id: int) -> tuple[float | None, int]:
        """A planned batch's oldest record time and records (the files Spark took into it; records estimated from
        their bytes, or counted as files until the records per byte are known), for the dispatch gate."""
        mine = []
        for path, b in planned_files(self.checkpoint).items():
            if b != batch_id:
                continue
            try:  # only the batch's own files: the gate runs before every batch, a directory walk is not needed
                st = os.stat(path)
            except FileNotFoundError:  # removed since Spark planned it (cleanSource): nothing to price
                continue
            mine.append(DataFile(path, st.st_size, st.st_mtime))
        if not mine:
            return None, 0
        with self._lock:
            rpb = self._rpb
        rows = round(sum(f.size for f in mine) * rpb) if rpb is not None else len(mine)
        return min(self.oldest_record(f) for f in mine), rows

    def oldest_record(self, f: DataFile) -> float:
        """Seconds since the Unix epoch of the file's oldest event time (its mtime if it has none readable)."""
        with self._lock:
            known = self._oldest.get(f.path)
        if known is None:
            known = self._read_oldest(f)
            with self._lock:
                self._oldest[f.path] = known
        return known

    def _read_oldest(self, f: DataFile) -> float:
        home = next((d for d in self.formats if f.path.startswith(os.path.realpath(d))), None)
        fmt = self.formats.get(home) if home is not None else None
        column = self.event_times.get(home, self.event_time) if home is not None else self.event_time
        try:
            if fmt == "parquet":
                import pyarrow.parquet as pq

                col = pq.read_table(f.path, columns=[column]).column(0)
            elif fmt in ("json", "csv"):
                import pyarrow.csv as pcsv
                import pyarrow.json as pjson

                reader = pjson.read_json if fmt == "json" else pcsv.read_csv
                col = reader(f.path).column(column)
            else:
                return f.mtime
            values = col.to_numpy(zero_copy_only=False)
            if values.size == 0:
                return f.mtime
            if np.issubdtype(values.dtype, np.datetime64):
                return float(values.min().astype("datetime64[us]").astype(np.int64)) / 1e6
            return float(np.nanmin(values.astype(float)))
        except (KeyError, OSError, ValueError, TypeError, ImportError):
            return f.mtime
