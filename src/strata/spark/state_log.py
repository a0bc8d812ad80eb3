"""The durable files of the movable keyed store: one file per task and batch, and manifests.

Layout under the store directory (shared file system, as for Spark's checkpoints):

- ``manifests/<b>.json``: batch b committed (after the sink wrote it): its
  watermark, routing table and, per key group, the newest batch ≤ b whose file
  holds the group's whole state (its snapshot; −1 while it has none);
- ``v=<b>/part=<p>.parquet``: batch b's file written by task p: one row group
  per key group of the batch's changes (the partials of every (key, window)
  row the batch changed), sorted by key group, so a reader of one group reads
  only that group's bytes (the footer's ``kg`` statistics say which row
  group); then one row group per group snapshotted at b, holding its whole
  state (the footer's ``snapshot_from`` says where they start, ``full`` which
  groups b snapshots, and the manifest records them). A group whose every row
  the batch changed needs no second copy: its changes are its whole state.

The state of group g at version v is its snapshot row group (in the file of
the batch the manifest names) plus its change row groups of the committed
batches after it (docs/spark.md, "Keyed state that can move"); a worker that
holds g at an older version reads only the change row groups since. Snapshots
live in the batch's file rather than in files of their own because, on small
state, a snapshot of every other group every other batch meant 16 more small
files per task and batch: writing them was 47% of the tasks' py-spy samples
at 10k keys (locked profile). Every file
is written to a temporary name and renamed, so a reader sees a whole file or
none. All reads go through :class:`IoStats` so the cost of a move is measured,
not estimated.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

STATE_COLUMNS = ("kg", "key", "ws", "n", "s", "m", "et")
# keys are mostly distinct, so dictionary encoding is wasted work, and LZ4 decodes several times faster than the
# default Snappy+dictionary: a 156k-row snapshot wrote in 11 ms instead of 53 and read in 5 ms instead of 19
# (5.0 MB instead of 5.7, statistics off), measured on this machine
_FAST = {"use_dictionary": False, "compression": "lz4"}


def state_schema(key_type: pa.DataType) -> pa.Schema:
    """Rows of state: key group, key, window start µs (0 unwindowed), count, sum, min-or-max, newest event µs."""
    return pa.schema(
        [
            ("kg", pa.int32()),
            ("key", key_type),
            ("ws", pa.int64()),
            ("n", pa.int64()),
            ("s", pa.float64()),
            ("m", pa.float64()),
            ("et", pa.int64()),
        ]
    )


@dataclass
class IoStats:
    """Bytes read and written through this module, per file, in one process (what a move actually costs)."""

    read: Counter = field(default_factory=Counter)
    written: Counter = field(default_factory=Counter)

    @property
    def bytes_read(self) -> int:
        return sum(self.read.values())

    @property
    def bytes_written(self) -> int:
        return sum(self.written.values())

    def clear(self) -> None:
        self.read.clear()
        self.written.clear()


class _CountingFile:
    """A read-only file object that adds every byte it returns to ``IoStats.read`` (pyarrow reads through it)."""

    def __init__(self, path: Path, io: IoStats):
        self._f = open(path, "rb")  # noqa: SIM115 (closed by close(), which pyarrow calls)
        self._path = str(path)
        self._io = io
        self.closed = False

    def read(self, n: int = -1) -> bytes:
        data = self._f.read(n)
        self._io.read[self._path] += len(data)
        return data

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._f.seek(offset, whence)

    def tell(self) -> int:
        return self._f.tell()

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False

    def close(self) -> None:
        self._f.close()
        self.closed = True

    def size(self) -> int:
        return os.fstat(self._f.fileno()).st_size


class StateLog:
    """Paths and reads/writes of one store directory's durable files."""

    def __init__(self, directory: str | Path, io: IoStats | None = None):
        self.root = Path(directory)
        self.io = io if io is not None else IoStats()
        # changelog footers already read by this reader (one task): the groups of one file share one footer read
        self._footers: dict[Path, pq.FileMetaData] = {}
        # (batch, part, group, kind) → that group's changes or snapshot rows, read ahead for one task (prefetch)
        self._ahead: dict[tuple[int, int, int, str], pa.Table] = {}

    # ------------------------------------------------------------------ paths

    def changelog(self, batch: int, part: int) -> Path:
        return self.root / f"v={batch}" / f"part={part}.parquet"

    def token(self, batch: int, part: int) -> tuple[int, int, int] | None:
        """Which write of changelog (batch, part) is on disk: a replay's rename makes a new inode and mtime."""
        try:
            st = os.stat(self.changelog(batch, part))
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    # ------------------------------------------------------------------ writes

    def write_changelog(
        self, batch: int, part: int, changes: pa.Table, snapshots: pa.Table | None = None, meta: dict | None = None
    ) -> tuple[int, int, int] | None:
        """Write task ``part``'s file of ``batch``: one row group per key group of ``changes`` (sorted by kg), then
        one per group of ``snapshots`` (whole states, sorted by kg); its token.

        The footer's ``strata`` metadata is ``meta`` plus ``snapshot_from``, the index of the first snapshot row
        group: a reader catching up reads a group's changes only, one rebuilding reads its snapshot only. Keeping
        both matters: with the whole state in place of the changes, a worker that caught up after a swap of
        workers read every snapshot in full (65-70 MB a task and batch at 10M keys, against 2 MB)."""
        path = self.changelog(batch, part)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        runs = [(t, np.unique(t.column("kg").to_numpy()).tolist()) for t in (changes, snapshots) if t is not None]
        meta = {**(meta or {}), "snapshot_from": len(runs[0][1])}
        schema = changes.schema.with_metadata({"strata": json.dumps(meta)})
        # statistics of kg only: they pick a group's row groups; others would only grow the footer
        with pq.ParquetWriter(tmp, schema, write_statistics=["kg"], **_FAST) as w:
            for table, groups in runs:
                for rows in _by_group(table, groups):
                    # one row group per key group: a reader of g skips the others' bytes
                    w.write_table(rows.replace_schema_metadata(schema.metadata), row_group_size=max(rows.num_rows, 1))
        self.io.written[str(path)] += os.path.getsize(tmp)
        os.replace(tmp, path)
        return self.token(batch, part)

    # ------------------------------------------------------------------ reads

    def prefetch(self, wanted: dict[tuple[int, int], dict[int, str]]) -> None:
        """Read ahead, for each file (batch, part), the row groups of the key groups ``wanted`` of it (group →
        ``"changes"`` or ``"snapshot"``), with one read per file and kind: a task that catches up or rebuilds many
        groups (a Python worker that served the other partition last) would otherwise open, seek and decode each
        file once per group. Reads exactly the bytes the per-group reads would (each row group is one key
        group's), so a move still costs its group's state."""
        for (batch, part), kinds in wanted.items():
            path = self.changelog(batch, part)
            f = _CountingFile(path, self.io)
            try:
                for kind in ("changes", "snapshot"):
                    groups = sorted(g for g, k in kinds.items() if k == kind)
                    if not groups:
                        continue
                    md, mine = self._row_groups(path, f, groups, kind)
                    if not mine:
                        continue
                    table = pq.ParquetFile(f, metadata=md).read_row_groups(mine)
                    kgs = table.column("kg").to_numpy()
                    if np.any(kgs[1:] < kgs[:-1]):
                        # each part of the file is sorted by kg (write_changelog), but snapshots read both: the
                        # snapshot row groups and the changes of groups whose changes are their whole state
                        order = np.argsort(kgs, kind="stable")
                        table, kgs = table.take(order), kgs[order]
                    for g in groups:
                        lo, hi = np.searchsorted(kgs, g, "left"), np.searchsorted(kgs, g, "right")
                        self._ahead[(batch, part, g, kind)] = table.slice(lo, hi - lo)
            finally:
                f.close()

    def _row_groups(self, path, f, groups, kind: str = "changes") -> tuple:
        """The file's footer (read once, then cached) and its non-empty row groups of ``kind`` whose ``kg``
        statistics may hold one of ``groups``. A group whose batch changed every row has no snapshot row group:
        its changes are its whole state, and a snapshot reader takes those."""
        md = self._footers.get(path)
        if md is None:
            md = self._footers[path] = _footer(f)
        kg = md.schema.to_arrow_schema().get_field_index("kg")
        meta = json.loads((md.metadata or {}).get(b"strata", b"{}"))
        start = meta.get("snapshot_from", md.num_row_groups)

        def hits(indices, wanted) -> list[int]:
            out = []
            for i in indices:
                st = md.row_group(i).column(kg).statistics
                hit = st is not None and st.has_min_max and any(st.min <= g <= st.max for g in wanted)
                if md.row_group(i).num_rows and hit:
                    out.append(i)
            return out

        if kind == "changes":
            return md, hits(range(start), groups)
        mine = hits(range(start, md.num_row_groups), groups)
        found = set()
        for i in mine:
            st = md.row_group(i).column(kg).statistics
            found.update(g for g in groups if st.min <= g <= st.max)
        return md, sorted(mine + hits(range(start), [g for g in groups if g not in found]))

    def read_group_changes(self, batch: int, part: int, group: int, kind: str = "changes") -> pa.Table:
        """Key group ``group``'s rows of file (batch, part), its changes or (``kind="snapshot"``) its whole state:
        its row groups only, chosen by footer statistics."""
        ahead = self._ahead.pop((batch, part, group, kind), None)
        if ahead is not None:
            return ahead
        path = self.changelog(batch, part)
        f = _CountingFile(path, self.io)
        try:
            md, mine = self._row_groups(path, f, [group], kind)
            pf = pq.ParquetFile(f, metadata=md)
            table = pf.read_row_groups(mine) if mine else pf.schema_arrow.empty_table()
        finally:
            f.close()
        return table.filter(pc.equal(table.column("kg"), group)) if mine else table

    def group_bytes(self, batch: int, part: int, group: int, kind: str = "snapshot") -> int:
        """Compressed bytes of key group ``group``'s row groups of ``kind`` in file (batch, part), from its footer
        (uncounted: what a move's reads are compared with)."""
        path = self.changelog(batch, part)
        with open(path, "rb") as raw:
            md, mine = StateLog(self.root)._row_groups(path, raw, [group], kind)
        return sum(
            md.row_group(i).column(c).total_compressed_size for i in mine for c in range(md.row_group(i).num_columns)
        )

    def changelog_meta(self, batch: int, part: int) -> dict:
        """What task ``part`` recorded about ``batch`` in its changelog's footer (rows per group, bytes read, …)."""
        meta = pq.read_schema(self.changelog(batch, part)).metadata or {}
        return json.loads(meta.get(b"strata", b"{}"))

    # ------------------------------------------------------------------ manifests

    def manifests(self) -> list[int]:
        return sorted(int(p.stem) for p in (self.root / "manifests").glob("*.json"))

    def read_manifest(self, batch: int) -> dict:
        return json.loads((self.root / "manifests" / f"{batch}.json").read_text())

    def write_manifest(self, manifest: dict) -> None:
        path = self.root / "manifests" / f"{manifest['batch']}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(manifest))
        os.replace(tmp, path)

    # ------------------------------------------------------------------ garbage collection

    def collect(self, needed: int | None, bases: list[int] | None, recent: int = 0) -> int | None:
        """Delete what no replay needs; the oldest version kept (None: nothing can go yet).

        A replay of the next batch rebuilds each group at ``needed`` (the newest
        committed batch before it) from its snapshot as of ``needed`` (``bases``,
        that batch's manifest's entries) plus its row groups of the files after
        it; the batch after reads a newer version still. So files and manifests
        go back to the oldest such snapshot over all groups (its manifest and
        file also identify a cached copy's version). Files and manifests of the
        ``recent`` latest batches are kept too: a Python worker that served a
        group a few batches ago proves its copy by that batch's file and
        catches up from the files since, instead of rebuilding the group from
        its snapshot (right after the state fills, every group is snapshotted
        every few batches).
        """
        if needed is None or not bases or min(bases) < 0:
            return None  # a group without a snapshot is rebuilt from the first file on
        keep = min(min(bases), needed - recent + 1) if recent > 0 else min(bases)
        for b in self.manifests():
            if b < keep:
                (self.root / "manifests" / f"{b}.json").unlink(missing_ok=True)
        for version in self.root.glob("v=*"):
            if int(version.name[2:]) < keep:
                for f in version.iterdir():
                    f.unlink(missing_ok=True)
                version.rmdir()
        return keep


def _footer(f) -> pq.FileMetaData:
    """A Parquet file's footer, reading exactly its bytes (pyarrow itself reads the last 64 KiB at once, which
    for a small key group's share of a changelog is most of the cost of a move)."""
    f.seek(-8, os.SEEK_END)
    tail = f.read(8)
    length = int.from_bytes(tail[:4], "little")
    f.seek(-8 - length, os.SEEK_END)
    body = f.read(length)
    # the footer alone, framed as a file: its row groups' offsets still point into the real file
    return pq.read_metadata(pa.BufferReader(b"PAR1" + body + tail))


def _by_group(table: pa.Table, groups: list[int]):
    """Each group's rows of a table sorted by kg, as slices (no copy)."""
    if not groups:
        return
    kg = table.column("kg").to_numpy()
    bounds = np.searchsorted(kg, [*groups, groups[-1] + 1])
    for i in range(len(groups)):
        yield table.slice(bounds[i], bounds[i + 1] - bounds[i])
