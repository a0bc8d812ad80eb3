"""The movable keyed store (strata.spark.state): the executor's fold run without Spark, then once through Spark.

The no-Spark tests drive the store's own driver (``plan``/``commit``) and
executor (``_Task.run``) with key groups ``kg = key mod G`` and a
:class:`StateCache` per simulated Python worker, so worker reuse, crashes
between the task and the manifest, moves and garbage collection are all
exercised against answers computed with pandas.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from strata.model import AggregateSpec, WindowSpec
from strata.spark.state import KeyedSpec, KeyedStateStore, batch_partials, combines_before_shuffle
from strata.spark.state_log import StateLog
from strata.spark.state_table import StateCache

CACHE_A, CACHE_B = StateCache(), StateCache()
G, P = 8, 2
EPOCH_US = 1_700_000_000 * 1_000_000


def make_batch(rng: np.random.Generator, b: int, rows: int, keys: int, groups: int = G) -> pd.DataFrame:
    key = rng.integers(0, keys, rows)
    et = EPOCH_US + b * 1_000_000 + rng.integers(0, 1_000_000, rows)
    return pd.DataFrame(
        {
            "kg": (key % groups).astype(np.int32),
            "key": key.astype(np.int64),
            "event_time": pd.to_datetime(et, unit="us", utc=True),
            "x": rng.random(rows),
        }
    )


def micros(times: pd.Series) -> np.ndarray:
    return times.astype("datetime64[us, UTC]").astype("int64").to_numpy()


def run_batch(store: KeyedStateStore, b: int, frame: pd.DataFrame, workers: dict[int, StateCache], commit=True):
    """One micro-batch: plan, every partition's task on its worker's cache, commit; output rows per partition."""
    group_rows = frame.groupby("kg").size().to_dict()
    newest = int(micros(frame["event_time"]).max()) if len(frame) else None
    plan = store.plan(b, group_rows, newest)
    task = store.task(plan)
    out = {}
    for p in range(store.spec.partitions):
        mine = frame[np.asarray(plan.routing)[frame["kg"].to_numpy()] == p]
        out[p] = task.run(p, pa.Table.from_pandas(mine, preserve_index=False), cache=workers[p]).to_pandas()
    if commit:
        store.commit(plan)
    return out, plan


def emitted(out: dict[int, pd.DataFrame]) -> pd.DataFrame:
    return pd.concat(out.values(), ignore_index=True).sort_values("key").reset_index(drop=True)


def test_batch_partials_fold_a_batch_into_partials_per_key():
    spec = KeyedSpec(AggregateSpec(fn="min"), None, G, P)
    rows = pd.DataFrame(
        {
            "kg": np.array([1, 1, 2, 1], np.int32),
            "key": [9, 9, 10, 17],
            "event_time": pd.to_datetime([5, 7, 1, 2], unit="us", utc=True),
            "x": [3.0, np.nan, 2.0, -1.0],
        }
    )
    out = batch_partials(rows, spec).sort_values("key").reset_index(drop=True)
    assert list(out["key"]) == [9, 10, 17]
    assert list(out["n"]) == [1, 1, 1]  # the null value is not counted
    assert list(out["m"]) == [3.0, 2.0, -1.0] and list(out["et"]) == [7, 1, 2]
    assert list(out["ws"]) == [0, 0, 0]


def test_counts_survive_reroutes_and_worker_swaps(tmp_path):
    """Every batch's output is the running count of the keys it touched, whichever worker runs which partition."""
    rng = np.random.default_rng(1)
    store = KeyedStateStore(KeyedSpec(AggregateSpec(), None, G, P), tmp_path)
    a, b = StateCache(), StateCache()
    seen = pd.Series(dtype=np.int64)
    for batch in range(8):
        frame = make_batch(rng, batch, 3000, 2000)
        if batch == 3:
            store.route([0] * G)  # every group on partition 0
        elif batch == 5:
            store.route([(g + 1) % P for g in range(G)])
        workers = {0: a, 1: b} if batch % 3 else {0: b, 1: a}  # Python workers are reused in any order
        out, _ = run_batch(store, batch, frame, workers)
        seen = seen.add(frame.groupby("key").size(), fill_value=0)
        got = emitted(out)
        assert sorted(got["key"]) == sorted(frame["key"].unique())
        np.testing.assert_array_equal(got["count"], seen.loc[got["key"]].to_numpy())


def test_sliding_window_max_matches_pandas_with_a_cold_worker(tmp_path):
    rng = np.random.default_rng(2)
    window = WindowSpec(size_s=2, slide_s=1, watermark_s=1)
    store = KeyedStateStore(KeyedSpec(AggregateSpec(fn="max"), window, G, P), tmp_path)
    frames, outs = [], []
    for batch in range(6):
        frames.append(make_batch(rng, batch, 2000, 300))
        workers = {0: StateCache(), 1: StateCache()} if batch == 4 else {0: CACHE_A, 1: CACHE_B}
        out, plan = run_batch(store, batch, frames[-1], workers)
        outs.append(emitted(out))
    got = pd.concat(outs)
    assert not got.duplicated(["window_start", "key"]).any()
    every = pd.concat(frames)
    et = micros(every["event_time"])
    parts = []
    for j in range(2):
        ws = et - et % 1_000_000 - j * 1_000_000
        parts.append(pd.DataFrame({"ws": ws, "key": every["key"].to_numpy(), "x": every["x"].to_numpy()}))
    ref = pd.concat(parts).groupby(["ws", "key"])["x"].max().reset_index()
    ref = ref[ref["ws"] + 2_000_000 <= plan.watermark_us].sort_values(["ws", "key"]).reset_index(drop=True)
    got = got.assign(ws=micros(got["window_start"])).sort_values(["ws", "key"]).reset_index(drop=True)
    assert len(ref) > 500
    np.testing.assert_array_equal(got["ws"], ref["ws"])
    np.testing.assert_array_equal(got["key"], ref["key"])
    np.testing.assert_array_equal(got["max"], ref["x"])


class _History:
    """A random history of one store: four Python workers given to three partitions in any assignment, key groups
    moved, batches that die before or after their manifest and are replayed, queries restarted (a new store
    object, cold workers), random snapshot and retention settings."""

    parts = 3

    def __init__(self, rng: np.random.Generator, directory: Path, aggregate: AggregateSpec, window=None, **spec):
        self.rng, self.directory = rng, directory
        self.spec = KeyedSpec(
            aggregate,
            window,
            G,
            self.parts,
            snapshot_factor=float(rng.choice([0.05, 0.5, 1.0])),
            max_log_versions=int(rng.choice([2, 4, 32])),
            min_log_versions=int(rng.choice([1, 2])),
            recent_versions=int(rng.choice([0, 2, 8])),
            **spec,
        )
        self.workers = [StateCache() for _ in range(4)]
        self.store = KeyedStateStore(self.spec, directory)

    def anyone(self) -> dict[int, StateCache]:
        return {p: self.workers[i] for p, i in enumerate(self.rng.permutation(len(self.workers))[: self.parts])}

    def restart(self) -> None:
        self.workers = [StateCache() for _ in self.workers]
        self.store = KeyedStateStore(self.spec, self.directory)

    def run(self, b: int, frame: pd.DataFrame):
        """Batch ``b`` after whatever the history does to it first: the successful run's output and plan."""
        rng = self.rng
        if rng.random() < 0.3:
            table = list(self.store.routing)
            table[int(rng.integers(G))] = int(rng.integers(self.parts))
            self.store.route(table)
        if rng.random() < 0.25:
            run_batch(self.store, b, frame, self.anyone(), commit=bool(rng.random() < 0.5))  # dies, is replayed
            if rng.random() < 0.5:
                self.restart()
        elif rng.random() < 0.1:
            self.restart()
        return run_batch(self.store, b, frame, self.anyone())


@pytest.mark.parametrize("key_type", ["long", "string"])
@pytest.mark.parametrize("seed", range(6))
def test_random_histories_of_swaps_moves_restarts_and_crashes_keep_running_sums_exact(tmp_path, seed, key_type):
    """Random histories (:class:`_History`) with key spaces from 40 keys (every group's every row changes) to
    4,000, integral and string keys. Every batch emits the running sum of exactly the keys it touched, and a last
    batch over every key on cold workers finds the whole committed state."""
    rng = np.random.default_rng(seed)
    history = _History(rng, tmp_path, AggregateSpec(fn="sum", column="x"), key_type=key_type)
    as_key = str if key_type == "string" else int
    totals = pd.Series(dtype=np.float64)
    for b in range(14):
        frame = make_batch(rng, b, 1500, int(rng.choice([40, 400, 4000])))
        frame["key"] = frame["key"].map(as_key)
        out, _ = history.run(b, frame)
        totals = totals.add(frame.groupby("key")["x"].sum(), fill_value=0)
        got = emitted(out).set_index("key")["sum"]
        assert sorted(got.index) == sorted(frame["key"].unique()), b
        np.testing.assert_allclose(got.to_numpy(), totals.loc[got.index].to_numpy(), err_msg=f"batch {b}")
    history.restart()
    last = pd.DataFrame({"key": totals.index})
    last = last.assign(
        kg=(last["key"].astype(np.int64) % G).astype(np.int32),
        event_time=pd.to_datetime(EPOCH_US + 20 * 1_000_000, unit="us", utc=True),
        x=1.0,
    )[["kg", "key", "event_time", "x"]]
    out, _ = run_batch(history.store, 14, last, history.anyone())
    got = emitted(out).set_index("key")["sum"]
    np.testing.assert_allclose(got.to_numpy(), totals.loc[got.index].to_numpy() + 1.0)
    assert len(got) == len(totals)


@pytest.mark.parametrize("seed", range(4))
def test_random_histories_emit_every_sliding_window_once_with_its_max(tmp_path, seed):
    """The windowed fold under random histories (:class:`_History`): the windows the successful runs emit are
    exactly those closed by the last watermark, each once, with the max of every record in it."""
    rng = np.random.default_rng(seed)
    history = _History(
        rng, tmp_path, AggregateSpec(fn="max", column="x"), WindowSpec(size_s=2, slide_s=1, watermark_s=1)
    )
    frames, outs = [], []
    for b in range(12):
        frames.append(make_batch(rng, b, 1000, int(rng.choice([40, 400]))))
        out, plan = history.run(b, frames[-1])
        outs.append(emitted(out))
    got = pd.concat(outs)
    got = got.assign(ws=micros(got["window_start"])).sort_values(["ws", "key"]).reset_index(drop=True)
    every = pd.concat(frames)
    et = micros(every["event_time"])
    copies = [
        pd.DataFrame(
            {"ws": et - et % 1_000_000 - j * 1_000_000, "key": every["key"].to_numpy(), "x": every["x"].to_numpy()}
        )
        for j in range(2)
    ]
    ref = pd.concat(copies).groupby(["ws", "key"])["x"].max().reset_index()
    ref = ref[ref["ws"] + 2_000_000 <= plan.watermark_us].sort_values(["ws", "key"]).reset_index(drop=True)
    assert len(ref) > 100
    np.testing.assert_array_equal(got["ws"], ref["ws"])
    np.testing.assert_array_equal(got["key"], ref["key"])
    np.testing.assert_array_equal(got["max"], ref["x"])


def _tables(out: dict[int, pd.DataFrame]) -> pd.DataFrame:
    return emitted(out)[["key", "count", "event_time"]]


def _state(directory: Path, batch: int) -> pd.DataFrame:
    """The committed state at ``batch`` as a cold worker rebuilds it from files: every key group's rows."""
    store = KeyedStateStore(KeyedSpec(AggregateSpec(), None, G, P), directory)
    plan = store.plan(batch + 1, {}, None)
    task = store.task(plan)
    cache = StateCache()
    for p in range(P):
        task.run(p, pa.Table.from_pandas(make_batch(np.random.default_rng(0), 0, 0, 1)[:0]), cache=cache)
    groups = cache.stores[str(directory)]
    frames = [
        pd.DataFrame({"key": t.keys[: t.size], "n": t.n[: t.size]}) for s in groups.values() for t in s.windows.values()
    ]
    return pd.concat(frames).sort_values("key").reset_index(drop=True)


@pytest.mark.parametrize("crash", ["before_manifest", "after_manifest"])
def test_replay_after_a_crash_gives_identical_state_and_output(tmp_path, crash):
    """A batch replayed after dying before or after its manifest: same output, same state, whatever the caches hold."""
    frames = [make_batch(np.random.default_rng(b), b, 4000, 3000) for b in range(6)]
    ref_store = KeyedStateStore(KeyedSpec(AggregateSpec(), None, G, P), tmp_path / "ref")
    ref_workers = {0: StateCache(), 1: StateCache()}
    ref = [_tables(run_batch(ref_store, b, frames[b], ref_workers)[0]) for b in range(6)]

    store = KeyedStateStore(KeyedSpec(AggregateSpec(), None, G, P), tmp_path / "crash")
    workers = {0: StateCache(), 1: StateCache()}
    for b in range(3):
        run_batch(store, b, frames[b], workers)
    # batch 3's tasks ran (changelogs written, caches advanced to 3) and then the query died
    run_batch(store, 3, frames[3], workers, commit=crash == "after_manifest")
    # the restarted query replays batch 3 under another routing table, with the workers swapped
    store = KeyedStateStore(KeyedSpec(AggregateSpec(), None, G, P), tmp_path / "crash")
    store.route([(g + 1) % P for g in range(G)])
    swapped = {0: workers[1], 1: workers[0]}
    for b in range(3, 6):
        out, _ = run_batch(store, b, frames[b], swapped)
        pd.testing.assert_frame_equal(_tables(out), ref[b])
    pd.testing.assert_frame_equal(_state(tmp_path / "crash", 5), _state(tmp_path / "ref", 5))


def _others_bytes(path: Path, group: int) -> int:
    """Compressed bytes of a changelog's row groups of other key groups (a reader of ``group`` skips them)."""
    md = pq.read_metadata(path)
    kg = md.schema.to_arrow_schema().get_field_index("kg")
    total = 0
    for i in range(md.num_row_groups):
        rg = md.row_group(i)
        if rg.num_rows and rg.column(kg).statistics.min != group:
            total += sum(rg.column(c).total_compressed_size for c in range(rg.num_columns))
    return total


def test_a_move_reads_only_the_moved_groups_bytes(tmp_path):
    """Moving key group 3 to partition 1: the new owner reads group 3's snapshot row group (in the file of the batch
    the manifest names) and its row groups of the files since, nothing else."""
    store = KeyedStateStore(KeyedSpec(AggregateSpec(), None, G, P), tmp_path)
    workers = {0: StateCache(), 1: StateCache()}
    rng = np.random.default_rng(3)
    for b in range(12):  # past the first snapshots
        run_batch(store, b, make_batch(rng, b, 20_000, 40_000), workers)
    moved = 3
    assert store.routing[moved] == 1 % P or store.routing[moved] == moved % P
    table = list(store.routing)
    table[moved] = 1 - table[moved]
    store.route(table)
    new_owner = workers[table[moved]]
    new_owner.io.clear()
    run_batch(store, 12, make_batch(rng, 12, 20_000, 40_000), workers)
    log = StateLog(tmp_path)
    meta = json.loads(pq.read_schema(log.changelog(12, table[moved])).metadata[b"strata"])
    assert meta["rebuilt"] == [moved] and meta["bytes_read"] > 0
    assert not workers[1 - table[moved]].last["rebuilt"]  # the old owner's groups stayed in its memory
    reads = new_owner.io.read
    base = log.read_manifest(11)["snapshots"][moved]
    old_owner = 1 - table[moved]
    assert 0 < base <= 11  # the group has a snapshot, and not only from the first batch
    # the snapshot's file and the files since, nothing older: a move costs the group's state, not its history
    assert set(reads) == {str(log.changelog(v, old_owner)) for v in range(base, 12)}
    for f, n in reads.items():  # each file: its footer and group 3's row groups, none of the others'
        assert n <= Path(f).stat().st_size - _others_bytes(Path(f), moved), f
    assert reads[str(log.changelog(base, old_owner))] >= log.group_bytes(base, old_owner, moved)


def test_a_batch_that_changes_every_key_of_a_group_is_its_snapshot(tmp_path):
    """Small state where every batch touches every key: each group's changes are its whole state, so the manifest
    names the batch as its snapshot without a second copy, and a cold worker rebuilds from that batch's file alone."""
    store = KeyedStateStore(KeyedSpec(AggregateSpec(), None, G, P), tmp_path)
    rng = np.random.default_rng(8)
    frames = [make_batch(rng, b, 4000, 40) for b in range(4)]  # 40 keys, 4000 rows: every key, every batch
    for b in range(3):
        run_batch(store, b, frames[b], {0: CACHE_A, 1: CACHE_B})
    log = StateLog(tmp_path)
    assert log.read_manifest(2)["snapshots"] == [2] * G
    for p in range(P):
        meta = log.changelog_meta(2, p)
        assert meta["full"] == [g for g in range(G) if g % P == p]
        assert pq.read_table(log.changelog(2, p)).num_rows == sum(1 for k in range(40) if k % G % P == p)
    cold = {0: StateCache(), 1: StateCache()}
    out, _ = run_batch(store, 3, frames[3], cold)
    for worker in cold.values():
        assert set(worker.io.read) <= {str(log.changelog(2, p)) for p in range(P)}
    ref = pd.concat(frames).groupby("key").size()
    got = emitted(out).set_index("key")["count"]
    np.testing.assert_array_equal(got, ref.loc[got.index])


def test_cold_workers_rebuild_from_a_file_that_mixes_snapshots_and_whole_state_changes(tmp_path):
    """A batch whose file snapshots some groups in row groups of their own and others by their changes (every row
    changed): cold workers rebuilding all of them read both kinds in one pass, out of kg order, and must still hand
    each group its own rows (they once got the wrong slices and lost two groups' state)."""
    store = KeyedStateStore(KeyedSpec(AggregateSpec(fn="sum", column="x"), None, G, P), tmp_path)
    rng = np.random.default_rng(21)
    frames = [make_batch(rng, v, 3000, 600) for v in range(5)]
    for v in range(4):
        run_batch(store, v, frames[v], {0: CACHE_A, 1: CACHE_B} if v % 2 else {0: CACHE_B, 1: CACHE_A})
    log = StateLog(tmp_path)
    assert log.read_manifest(3)["snapshots"] == [3] * G
    own_row_group = [
        g
        for p in range(P)
        for g in range(G)
        if g % P == p and log.group_bytes(3, p, g) and log.group_bytes(3, p, g) != log.group_bytes(3, p, g, "changes")
    ]
    assert 0 < len(own_row_group) < G  # both kinds of snapshot in batch 3's files
    out, _ = run_batch(store, 4, frames[4], {0: StateCache(), 1: StateCache()})
    got = emitted(out).set_index("key")["sum"]
    ref = pd.concat(frames).groupby("key")["x"].sum()
    np.testing.assert_allclose(got.to_numpy(), ref.loc[got.index].to_numpy())


def test_workers_swapped_every_batch_catch_up_from_changes_not_snapshots(tmp_path):
    """Two workers that trade partitions every batch catch up through each other's files: they read the groups'
    changes, never the snapshot row groups in the same files, and count from the other's snapshots, so groups are
    snapshotted no more often than without swaps (reading whole snapshots as changes once made every group
    snapshot every batch: 65-70 MB read a task and batch at 10M keys)."""
    rng = np.random.default_rng(12)
    frames = [make_batch(rng, v, 20_000, 40_000) for v in range(16)]
    full = {}
    for swap in (False, True):
        store = KeyedStateStore(KeyedSpec(AggregateSpec(), None, G, P), tmp_path / str(swap))
        log = StateLog(tmp_path / str(swap))
        a, b = StateCache(), StateCache()
        full[swap] = []
        for v, frame in enumerate(frames):
            workers = {0: b, 1: a} if swap and v % 2 else {0: a, 1: b}
            for w in (a, b):
                w.io.clear()
            run_batch(store, v, frame, workers)
            full[swap].append(sum(len(log.changelog_meta(v, p)["full"]) for p in range(P)))
            if not swap or v < 2:
                continue
            for w in (a, b):
                assert w.last["caught_up"] and not w.last["rebuilt"]
                for f, n in w.io.read.items():  # the file's footer and changes, none of its snapshot row groups
                    path = Path(f)
                    batch, part = int(path.parent.name[2:]), int(path.stem[5:])
                    snap = sum(log.group_bytes(batch, part, g) for g in log.changelog_meta(batch, part)["full"])
                    assert n <= path.stat().st_size - snap, (v, f)
    assert sum(full[True]) <= sum(full[False]) + G, full


def test_garbage_collection_keeps_exactly_what_a_replay_needs(tmp_path):
    spec = KeyedSpec(AggregateSpec(), None, G, P, snapshot_factor=0.5, max_log_versions=4, recent_versions=0)
    store = KeyedStateStore(spec, tmp_path)
    workers = {0: StateCache(), 1: StateCache()}
    rng = np.random.default_rng(4)
    frames = [make_batch(rng, b, 3000, 5000) for b in range(14)]
    outs = [run_batch(store, b, frames[b], workers)[0] for b in range(14)]
    log = StateLog(tmp_path)
    bases = log.read_manifest(12)["snapshots"]  # what a replay of batch 13 rebuilds each group from
    assert len(bases) == G and min(bases) >= 0
    keep = min(bases)
    assert keep > 0 and log.manifests() == list(range(keep, 14))
    assert sorted(int(d.name[2:]) for d in tmp_path.glob("v=*")) == list(range(keep, 14))
    # what is left suffices: a replay of the last batch on cold workers gives the same output
    store = KeyedStateStore(spec, tmp_path)
    out, _ = run_batch(store, 13, frames[13], {0: StateCache(), 1: StateCache()})
    pd.testing.assert_frame_equal(_tables(out), _tables(outs[13]))


def test_recent_changelogs_let_a_swapped_worker_catch_up_instead_of_rebuilding(tmp_path):
    """With every group snapshotted every other batch, a worker that last held its groups four batches ago still
    finds that batch's changelog (kept as recent) and catches up; without the recent ones it rebuilds."""
    for recent, expected in ((8, "caught_up"), (0, "rebuilt")):
        spec = KeyedSpec(AggregateSpec(), None, G, P, snapshot_factor=0.01, recent_versions=recent)
        store = KeyedStateStore(spec, tmp_path / str(recent))
        a, b = StateCache(), StateCache()
        rng = np.random.default_rng(11)
        frames = [make_batch(rng, v, 2000, 400) for v in range(8)]
        for v in range(4):
            run_batch(store, v, frames[v], {0: a, 1: b})
        for v in (4, 5, 6):  # the workers swap partitions for three batches (every group is snapshotted at 5) …
            run_batch(store, v, frames[v], {0: b, 1: a})
        out, _ = run_batch(store, 7, frames[7], {0: a, 1: b})  # … and back: a's copies of partition 0's are at 3
        meta = store.log.changelog_meta(7, 0)
        assert meta[expected] == sorted(g for g in range(G) if g % P == 0), (recent, meta)
        both = pd.concat(frames)  # either way the counts are every batch's
        ref = both[both["kg"] % P == 0].groupby("key").size()
        got = out[0].set_index("key")["count"].sort_index()
        np.testing.assert_array_equal(got, ref.loc[got.index])


@pytest.mark.spark
def test_through_spark_with_user_columns_and_a_move(spark, tmp_path):
    """prepare/commit on a user's frame (string keys ``user``, values ``amount``, times ``ts``), 50k keys, a move."""
    from pyspark.sql import functions as F

    spec = KeyedSpec(
        AggregateSpec(fn="sum"), None, 16, 2, key="user", value="amount", event_time="ts", key_type="string"
    )
    store = KeyedStateStore(spec, tmp_path / "state")
    rng = np.random.default_rng(5)
    frames, outs, plans = [], [], []
    for b in range(3):
        n = 60_000
        frame = pd.DataFrame(
            {
                "user": [f"u{k}" for k in rng.integers(0, 50_000, n)],
                "amount": rng.integers(0, 100, n).astype(float),
                "ts": pd.to_datetime(EPOCH_US + b * 1_000_000 + rng.integers(0, 1_000_000, n), unit="us", utc=True),
            }
        )
        frames.append(frame)
        df = spark.createDataFrame(frame).withColumn("ts", F.col("ts").cast("timestamp"))
        out, plan = store.prepare(df, b)
        outs.append(out.toPandas())
        plans.append(plan)
        store.commit(plan)
        if b == 1:
            store.route([1 - p for p in store.routing])  # every key group moves
    assert plans[2].routing == tuple(1 - p for p in plans[1].routing)
    assert sum(plans[2].partition_rows) == len(frames[2])
    final = pd.concat(outs).groupby("user")["sum"].last()  # each batch's value is the running sum
    ref = pd.concat(frames).groupby("user")["amount"].sum()
    touched_last = set(frames[2]["user"])
    assert set(outs[2]["user"]) == touched_last
    np.testing.assert_array_equal(outs[2].set_index("user")["sum"].sort_index(), ref.loc[sorted(touched_last)])
    assert final.index.isin(ref.index).all() and len(final) == len(ref)


@pytest.mark.spark
def test_small_state_aggregates_with_nulls_match_pandas(spark, tmp_path):
    """Few keys, many records each, combined per key in the JVM, after the shuffle and then before it: avg, min,
    count and sum, nulls included (a key whose values are all null has a null avg and min, a count and sum of 0),
    equal pandas' over all batches."""
    rng = np.random.default_rng(9)
    frames = []
    for b in range(3):
        n = 20_000
        amount = rng.integers(0, 1000, n).astype(float)
        amount[rng.random(n) < 0.1] = np.nan
        key = rng.integers(0, 300, n)
        amount[key == 7] = np.nan  # a key whose values are all null: avg and min stay null
        ts = pd.to_datetime(EPOCH_US + b * 1_000_000 + rng.integers(0, 1_000_000, n), unit="us", utc=True)
        frames.append(pd.DataFrame({"key": key.astype(np.int64), "amount": amount, "event_time": ts}))
    for fn in ("avg", "min", "count", "sum"):
        store = KeyedStateStore(KeyedSpec(AggregateSpec(fn=fn), None, 8, 2, value="amount"), tmp_path / fn)
        outs, plans = [], []
        for b, frame in enumerate(frames):
            out, plan = store.prepare(spark.createDataFrame(frame), b)
            outs.append(out.toPandas().set_index("key")[fn].sort_index())
            store.commit(plan)
            plans.append(plan)
        assert sum(plans[2].group_rows.values()) == len(frames[2])
        # 300 keys in 20,000 records: the first batch shuffles records, the next ones partials per key
        assert [p.combined for p in plans] == [False, True, True]
        seen = pd.concat(frames)
        ref = seen.groupby("key")["amount"].agg({"avg": "mean"}.get(fn, fn))
        np.testing.assert_allclose(outs[2], ref.loc[outs[2].index], rtol=1e-12)
        assert np.isnan(outs[2].loc[7]) if fn in ("avg", "min") else outs[2].loc[7] == 0


def test_records_are_combined_before_the_shuffle_from_four_per_key():
    assert combines_before_shuffle(200_000, 10_000)  # 20 records per key
    assert combines_before_shuffle(4, 1) and not combines_before_shuffle(3, 1)
    assert not combines_before_shuffle(200_000, 190_000)  # nearly every record a new key
    assert not combines_before_shuffle(0, 0)  # nothing seen yet


def test_a_task_that_dies_mid_fold_leaves_no_half_folded_state(tmp_path, monkeypatch):
    """A task retried on the same worker after failing between the fold and its changelog counts the batch once."""
    store = KeyedStateStore(KeyedSpec(AggregateSpec(), None, G, P), tmp_path)
    worker = StateCache()
    rng = np.random.default_rng(6)
    first, second = make_batch(rng, 0, 500, 50), make_batch(rng, 1, 500, 50)
    run_batch(store, 0, first, {0: worker, 1: worker})
    plan = store.plan(1, {}, None)
    task = store.task(plan)
    rows = pa.Table.from_pandas(second[second["kg"] % P == 0], preserve_index=False)
    broken = StateLog.write_changelog

    def fail(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(StateLog, "write_changelog", fail)
    with pytest.raises(OSError):
        task.run(0, rows, cache=worker)
    monkeypatch.setattr(StateLog, "write_changelog", broken)
    out = task.run(0, rows, cache=worker).to_pandas().set_index("key")["count"]
    both = pd.concat([first, second])
    ref = both[both["kg"] % P == 0].groupby("key").size()
    np.testing.assert_array_equal(out.sort_index(), ref.loc[sorted(out.index)])


@pytest.mark.spark
@pytest.mark.slow
def test_exactly_once_at_a_million_keys_through_spark_with_replays_and_moves(spark, tmp_path):
    """1,000,000 distinct keys through Spark: batch 1 dies after its tasks wrote their changelogs (no manifest),
    is replayed under another routing table, committed, and replayed again after its manifest under a third
    table (as when Spark dies between the store's commit and its own); every attempt writes exactly the running
    sums a pandas recomputation gives, and so does the batch after."""
    from pyspark.sql import functions as F

    spec = KeyedSpec(AggregateSpec(fn="sum"), None, 64, 2)
    store = KeyedStateStore(spec, tmp_path / "state")
    # (first id, rows, key modulus, key offset): key = offset + id mod modulus; value = id mod 7
    batches = [(0, 600_000, 500_000, 0), (600_000, 550_000, 550_000, 450_000), (1_150_000, 150_000, 1_000_000, 0)]

    def frame(b: int):
        lo, n, mod, off = batches[b]
        return spark.range(lo, lo + n).select(
            (F.lit(off) + F.col("id") % mod).alias("key"),
            F.timestamp_micros(F.lit(EPOCH_US + b * 1_000_000) + F.col("id") % 1_000_000).alias("event_time"),
            (F.col("id") % 7).cast("double").alias("value"),
        )

    def reference(b: int) -> pd.Series:
        """The running sum of every key batch ``b`` touches (batch 1: 500,000 new keys and 50,000 of batch 0's)."""
        parts = []
        for lo, n, mod, off in batches[: b + 1]:
            ids = np.arange(lo, lo + n, dtype=np.int64)
            parts.append(pd.DataFrame({"key": off + ids % mod, "value": (ids % 7).astype(float)}))
        lo, n, mod, off = batches[b]
        touched = np.unique(off + np.arange(lo, lo + n, dtype=np.int64) % mod)
        totals = pd.concat(parts).groupby("key")["value"].sum()
        return totals.loc[touched]

    def attempt(b: int, routing: tuple[int, ...], commit: bool) -> pd.Series:
        store.route(routing)
        out, plan = store.prepare(frame(b), b)
        got = out.toPandas()
        if commit:
            store.commit(plan)
        assert plan.routing == routing
        return got.set_index("key")["sum"].sort_index()

    hashed = tuple(g % 2 for g in range(64))
    swapped = tuple(1 - p for p in hashed)
    halves = tuple(int(g >= 32) for g in range(64))
    np.testing.assert_array_equal(attempt(0, hashed, True).to_numpy(), reference(0).to_numpy())
    want = reference(1)
    assert len(pd.Index(want.index).union(pd.RangeIndex(500_000))) == 1_000_000  # the state now holds 1M keys
    for routing, commit in ((hashed, False), (swapped, True), (halves, True)):  # die, replay, replay after commit
        got = attempt(1, routing, commit)
        assert got.index.equals(want.index)
        np.testing.assert_array_equal(got.to_numpy(), want.to_numpy())
    got = attempt(2, swapped, True)
    want = reference(2)
    assert got.index.equals(want.index)
    np.testing.assert_array_equal(got.to_numpy(), want.to_numpy())
