"""Key groups' state in one Python worker: hash tables folded in O(rows the batch touches).

Each Python worker keeps the key groups it has served in memory, each at the
batch version it last saw. A task needs its groups at exactly the previous
committed batch; a cached group is used only if it is at a version whose
changelog on disk is the very file it applied or wrote (a replay's rename
changes the file's identity), and is then brought forward by the changelogs
after it. Anything else is rebuilt from the durable files: the group's newest
snapshot (a row group of some batch's file, named by the manifest) plus its
changelogs since. Spark may give partition p's task to any
reused worker, so this check, not the partition id, decides what a cache is
worth (docs/spark.md, "Keyed state that can move").

Why hash indexes over numpy columns and not an embedded KV engine: on this
machine a 100,000-key batch (half new) folds into 1M keys of state in
0.03–0.05 s with Python dicts against 0.47–0.51 s through rocksdict (one
Python call per key either way, but RocksDB adds encoding, a write batch and
its own write-ahead log), and integral keys now skip the per-key Python call
too (:class:`_LongIndex`);
``benchmarks/bench_state.py --engines`` keeps that comparison. The durable copy is plain Parquet because
the store directory may be a shared file system, where RocksDB and LMDB files
must not be shared between machines.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from itertools import repeat

import numpy as np
import pandas as pd
import pyarrow as pa

from strata.spark.state_log import IoStats, StateLog, state_schema

NO_TIME = np.iinfo(np.int64).min


class _LongIndex:
    """Key → slot for integral keys: pandas' C hash table (khash), looked up a whole array at a time.

    A dict costs a Python call and an int object per key: at 10M keys (64
    groups of 156k) a task's lookups took 24 ms a batch that way (Zipf keys,
    worker holding its groups) to 143 ms (uniform, catching up a batch),
    most of the task's Python time, in an in-process profile; here 100k
    lookups in a 156k-key table take 1.6 ms. ``Int64HashTable`` is pandas-internal but has kept
    ``lookup`` and ``map_keys_to_values`` since pandas 1.x (pinned < 3).
    """

    __slots__ = ("table",)

    def __init__(self):
        from pandas._libs.hashtable import Int64HashTable

        self.table = Int64HashTable()

    def get(self, keys: np.ndarray) -> np.ndarray:
        return self.table.lookup(np.ascontiguousarray(keys, np.int64))  # −1 where absent

    def add(self, keys: np.ndarray, slots: np.ndarray) -> None:
        self.table.map_keys_to_values(np.ascontiguousarray(keys, np.int64), slots.astype(np.int64))


class _ObjectIndex:
    """Key → slot for string keys: a dict (pandas' object hash table cannot map keys to given slots)."""

    __slots__ = ("slot",)

    def __init__(self):
        self.slot: dict = {}

    def get(self, keys: np.ndarray) -> np.ndarray:
        # map over the bound method: a third faster than a ``(... for k in keys)`` expression (no frame per key)
        return np.fromiter(map(self.slot.get, keys.tolist(), repeat(-1)), np.int64, len(keys))

    def add(self, keys: np.ndarray, slots: np.ndarray) -> None:
        self.slot.update(zip(keys.tolist(), slots.tolist(), strict=True))


class KeyTable:
    """The partials of the keys of one (key group, window): a hash index key → slot over growable numpy columns."""

    __slots__ = ("et", "index", "keys", "m", "n", "s", "size")

    def __init__(self, key_dtype: np.dtype | type):
        self.index = _ObjectIndex() if np.dtype(key_dtype) == np.dtype(object) else _LongIndex()
        self.size = 0
        self.keys = np.empty(0, key_dtype)
        self.n = np.empty(0, np.int64)
        self.s = np.empty(0, np.float64)
        self.m = np.empty(0, np.float64)
        self.et = np.empty(0, np.int64)

    def _reserve(self, extra: int) -> None:
        need = self.size + extra
        if need <= len(self.n):
            return
        cap = max(need, 2 * len(self.n), 1024)  # doubling: appends stay amortised O(1) per key
        for name in ("keys", "n", "s", "m", "et"):
            old = getattr(self, name)
            new = np.empty(cap, old.dtype)
            new[: self.size] = old[: self.size]
            setattr(self, name, new)

    def locate(self, keys: np.ndarray) -> np.ndarray:
        """Slots of ``keys`` (distinct), appending empty partials for keys not seen before."""
        slots = self.index.get(keys)
        new = slots < 0
        k = int(new.sum())
        if k:
            self._reserve(k)
            fresh = np.arange(self.size, self.size + k)
            slots[new] = fresh
            self.keys[fresh] = keys[new]
            self.n[fresh], self.s[fresh], self.m[fresh], self.et[fresh] = 0, 0.0, np.nan, NO_TIME
            self.index.add(keys[new], fresh)
            self.size += k
        return slots

    def fold(self, keys, n, s, m, et, use_min: bool) -> np.ndarray:
        """Combine a batch's partials into the state; the slots touched."""
        i = self.locate(keys)
        self.n[i] += n
        self.s[i] += s
        # fmin/fmax skip NaN: a key whose values were all null keeps m = NaN
        self.m[i] = np.fmin(self.m[i], m) if use_min else np.fmax(self.m[i], m)
        self.et[i] = np.maximum(self.et[i], et)
        return i

    def put(self, keys, n, s, m, et) -> None:
        """Overwrite keys' partials with values from a changelog (already combined when written)."""
        i = self.locate(keys)
        self.n[i], self.s[i], self.m[i], self.et[i] = n, s, m, et


@dataclass
class GroupState:
    """One key group's state at one batch version, and what its next snapshot decision needs."""

    group: int
    version: int | None  # the batch this state is after; None: before the first batch
    token: tuple | None  # identity of the changelog file of ``version`` this state matches
    key_dtype: np.dtype | type
    windows: dict[int, KeyTable] = field(default_factory=dict)
    base_rows: int = 0  # rows of the snapshot this state was last written as (or read from)
    log_rows: int = 0  # changelog rows of this group since that snapshot
    log_versions: int = 0  # changelogs since that snapshot

    @property
    def rows(self) -> int:
        return sum(t.size for t in self.windows.values())

    def table(self, ws: int) -> KeyTable:
        t = self.windows.get(ws)
        if t is None:
            t = self.windows[ws] = KeyTable(self.key_dtype)
        return t

    def apply(self, rows: pa.Table) -> None:
        """Upsert changelog or snapshot rows (kg, key, ws, n, s, m, et)."""
        if not rows.num_rows:
            return
        cols = {c: rows.column(c).to_numpy(zero_copy_only=False) for c in ("key", "ws", "n", "s", "m", "et")}
        for ws, idx in _runs(cols["ws"]):
            self.table(int(ws)).put(*(cols[c][idx] for c in ("key", "n", "s", "m", "et")))

    def close(self, watermark_us: int, size_us: int | None) -> list[tuple[int, KeyTable]]:
        """Remove and return the windows whose end ≤ watermark (none when unwindowed)."""
        if size_us is None:
            return []
        due = sorted(ws for ws in self.windows if ws + size_us <= watermark_us)
        return [(ws, self.windows.pop(ws)) for ws in due]

    def to_arrow(self, key_type: pa.DataType) -> pa.Table:
        parts = [(ws, t) for ws, t in sorted(self.windows.items()) if t.size]
        return rows_table(self.group, parts, key_type)


def rows_table(group: int, parts: list[tuple[int, KeyTable]], key_type: pa.DataType, slots=None) -> pa.Table:
    """State rows of ``group`` from (window start, table) pairs (all slots, or ``slots[i]`` of part i)."""
    schema = state_schema(key_type)
    if not parts:
        return schema.empty_table()
    cols: dict[str, list[np.ndarray]] = {c: [] for c in ("key", "ws", "n", "s", "m", "et")}
    for i, (ws, t) in enumerate(parts):
        sel = slice(0, t.size) if slots is None else slots[i]
        keys = t.keys[sel]
        cols["key"].append(keys)
        cols["ws"].append(np.full(len(keys), ws, np.int64))
        for c in ("n", "s", "m", "et"):
            cols[c].append(getattr(t, c)[sel])
    data = {c: np.concatenate(v) for c, v in cols.items()}
    n = len(data["key"])
    arrays = [pa.array(np.full(n, group, np.int32))]
    arrays += [pa.array(data[c], type=schema.field(c).type) for c in ("key", "ws", "n", "s", "m", "et")]
    return pa.Table.from_arrays(arrays, schema=schema)


def _runs(values: np.ndarray):
    """(value, indices) for each distinct value (window starts are few per batch)."""
    if len(values) and values[0] == values[-1] and (values == values[0]).all():
        yield values[0], slice(None)
        return
    for v in np.unique(values):
        yield v, np.flatnonzero(values == v)


@dataclass(frozen=True)
class Version:
    """What a committed batch left that a reader of its changelogs needs: its routing table and watermark."""

    routing: tuple[int, ...]
    watermark_us: int


class StateCache:
    """Per-process key-group states, keyed by store directory; the few most recent stores are kept."""

    def __init__(self, stores: int = 4):
        self.stores: OrderedDict[str, dict[int, GroupState]] = OrderedDict()
        self.io = IoStats()
        self._keep = stores
        self.last: dict[str, list[int]] = {"cached": [], "caught_up": [], "rebuilt": []}

    def log(self, directory: str) -> StateLog:
        return StateLog(directory, self.io)

    def groups(self, directory: str) -> dict[int, GroupState]:
        groups = self.stores.setdefault(directory, {})
        self.stores.move_to_end(directory)
        while len(self.stores) > self._keep:
            self.stores.popitem(last=False)
        return groups

    @staticmethod
    def _valid(log: StateLog, state: GroupState | None, group: int, need: int, history: dict[int, Version]) -> bool:
        """Whether this process's copy of ``group`` is a committed version ≤ ``need`` whose changelog on disk is
        the very write it saw (a replay's rename changes the token)."""
        return (
            state is not None
            and state.version is not None
            and state.version <= need
            and state.version in history
            and state.token is not None
            and state.token == log.token(state.version, history[state.version].routing[group])
        )

    def reads(
        self,
        log: StateLog,
        groups: list[int],
        need: int | None,
        history: dict[int, Version],
        bases: dict[int, int],
    ) -> dict[tuple[int, int], dict[int, str]]:
        """The files (batch, part) :meth:`acquire` will read for ``groups``, and which groups of each (group →
        ``"changes"`` or ``"snapshot"``): what :meth:`StateLog.prefetch` reads ahead in one pass per file. Same
        rule as ``acquire``: from the cached version when valid, else from the group's snapshot as of ``need``
        (``bases``; −1: none) and its changes after it."""
        wanted: dict[tuple[int, int], dict[int, str]] = {}
        if need is None:
            return wanted
        cached = self.groups(str(log.root))
        for g in groups:
            state = cached.get(g)
            if self._valid(log, state, g, need, history):
                since = state.version
            else:
                base = bases.get(g, -1)
                since = base if base >= 0 else None
                if base >= 0:
                    wanted.setdefault((base, history[base].routing[g]), {})[g] = "snapshot"
            for v in history:
                if (since is None or v > since) and v <= need:
                    wanted.setdefault((v, history[v].routing[g]), {})[g] = "changes"
        return wanted

    def acquire(
        self,
        log: StateLog,
        group: int,
        need: int | None,
        history: dict[int, Version],
        size_us: int | None,
        key_dtype: np.dtype | type,
        base: int = -1,
    ) -> GroupState:
        """Key group ``group`` at version ``need`` (None: empty): from this process's cache if valid, else from
        files: its snapshot (the row group of batch ``base``, −1: none yet) and its row groups since."""
        cached = self.groups(str(log.root))
        if need is None:
            state = cached[group] = GroupState(group, None, None, key_dtype)
            return state
        state = cached.get(group)
        valid = self._valid(log, state, group, need, history)
        if valid:
            self.last["cached" if state.version == need else "caught_up"].append(group)
        else:
            self.last["rebuilt"].append(group)
            state = cached[group] = GroupState(group, None, None, key_dtype)
            if base >= 0:
                if base not in history or base > need:
                    raise RuntimeError(f"key group {group}: snapshot of batch {base} is not a committed version")
                owner = history[base].routing[group]
                token = log.token(base, owner)
                state.apply(log.read_group_changes(base, owner, group, "snapshot"))
                state.close(history[base].watermark_us, size_us)
                state.version, state.token, state.base_rows = base, token, state.rows
        for v in sorted(history):
            if (state.version is None or v > state.version) and v <= need:
                owner = history[v].routing[group]
                token = log.token(v, owner)
                changes = log.read_group_changes(v, owner, group)
                state.token = None  # half-applied if this raises: never valid again
                state.apply(changes)
                state.close(history[v].watermark_us, size_us)
                state.version, state.token = v, token
                if v == base:  # another worker snapshotted the group here: count from that snapshot, as it does
                    state.base_rows, state.log_rows, state.log_versions = state.rows, 0, 0
                else:
                    state.log_rows += changes.num_rows
                    state.log_versions += 1
        if state.version != need:
            raise RuntimeError(f"key group {group}: no durable state for batch {need} (found {state.version})")
        return state


def fold(
    states: dict[int, GroupState], fresh: pd.DataFrame, use_min: bool
) -> list[tuple[int, list[tuple[int, KeyTable]], list[np.ndarray]]]:
    """Fold a batch's partials (kg, key, ws, n, s, m, et; distinct per kg, key, ws) into the groups' tables.

    Returns, per key group touched, the (window, table) pairs and the slots changed in each.
    """
    changed = []
    if fresh.empty:
        return changed
    cols = {c: fresh[c].to_numpy() for c in ("kg", "key", "ws", "n", "s", "m", "et")}
    order = np.lexsort((cols["ws"], cols["kg"]))
    cols = {c: v[order] for c, v in cols.items()}
    kg = cols["kg"]
    cuts = np.flatnonzero(np.diff(kg)) + 1
    for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, len(kg)], strict=True):
        g = int(kg[lo])
        if g not in states:
            raise ValueError(f"rows of key group {g}, which this partition does not own in this batch")
        parts, slots = [], []
        for ws, idx in _runs(cols["ws"][lo:hi]):
            sub = {c: cols[c][lo:hi][idx] for c in ("key", "n", "s", "m", "et")}
            t = states[g].table(int(ws))
            slots.append(t.fold(sub["key"], sub["n"], sub["s"], sub["m"], sub["et"], use_min))
            parts.append((int(ws), t))
        changed.append((g, parts, slots))
    return changed


def snapshot_due(state: GroupState, factor: float, max_versions: int, min_versions: int = 1) -> bool:
    """Whether to write the group's snapshot now: once its changelog since the last one outweighs it.

    Rewriting a group after its log has grown to ``factor`` × its snapshot makes
    snapshot I/O amortise to O(factor⁻¹ + 1) per changelog row (the argument for
    LSM compaction), and bounds a rebuild — and so a move — to ≤ (1 + factor) ×
    the group's state (or its snapshot plus ``min_versions`` batches of changes).
    The golden-ratio jitter spreads groups' snapshots over different batches so
    no single batch rewrites the whole state; ``max_versions`` (jittered down to
    half) bounds the files an idle or slowly growing group pins, ``min_versions`` the snapshot row groups a batch
    writes when it touches most of a small state (a snapshot of every group every batch would otherwise be most
    of the batch's cost).
    """
    jitter = 0.5 + 0.5 * ((state.group * 0.6180339887) % 1.0)  # in [0.5, 1): the log stays ≤ factor × snapshot
    if state.log_versions >= max(min_versions, round(max_versions * jitter)):
        return True
    return state.log_versions >= min_versions and state.log_rows >= factor * jitter * max(state.base_rows, 1)


CACHE = StateCache()
