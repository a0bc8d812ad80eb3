"""Keyed state at scale: Strata's movable store against Spark's HDFS-backed and RocksDB state stores.

One keyed count (``groupBy(key).count()``, update mode) per store, state size
and key distribution, all on one embedded session (local[CORES]) and the same
input: Spark's ``rate-micro-batch`` source, a fixed number of rows per batch,
``value`` = 0, 1, 2, … . The first ⌈K / batch⌉ batches fill the state with keys
0..K−1 (every key new: the fill curve is batch time against growing state);
after that keys are drawn from [0, K) uniformly or Zipf(1.1) (a hash of
``value``, so every store sees the same keys), so the state stays at K keys
and the measured batches update it. The first ``WARM_UP`` batches of a query
are never measured, and every store first runs ``--warm-up-batches`` (60)
batches unmeasured at the smallest K, so no store is measured on a cold JVM. With ``--rounds R`` every store runs R
times per K and distribution, in reverse order every other round (the JVM keeps speeding up for longer than any
warm-up, which favours whichever store runs later). Reported per (store, distribution, K), over all rounds:
rows/s over the measured batches (Σ rows / Σ trigger time) and the median
trigger time (Spark's ``durationMs.triggerExecution``), and each round's median.

Strata's store runs in ``foreachBatch`` as the pipelines run it (persist,
``prepare``, write the output to the ``noop`` sink, ``commit``); Spark's stores
run a native streaming aggregation into the ``noop`` sink. The RocksDB
provider is set on the session before its query first starts (Spark records
it in the checkpoint). Spark's stores run with their default settings.

Moves: in the Strata run, key group 0 is moved to the other partition after
the third measured batch; the changelog footers of the next batch say what its
tasks read (``bytes_read``, which groups were rebuilt from files). After the
run, the same move is replayed in this process on a worker that holds every
other group of the new owner but not the moved one, to time it and count its
bytes exactly against the group's state.

``--engines`` adds the micro-measurement behind the store's in-memory table:
folding one batch of keys into K keys of state with Python dicts over numpy
columns against rocksdict (RocksDB), when rocksdict is installed.

    .venv/bin/python benchmarks/bench_state.py [--keys 10000 1000000 10000000] [--batch 100000]
        [--measure 6] [--rounds 1] [--dists uniform zipf] [--stores strata hdfs rocksdb] [--engines] [--quick]

Writes benchmarks/results/state.json and state.png. The machine is shared:
figures are as measured, under whatever else ran.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import platform
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from strata.model import AggregateSpec
from strata.spark import build_session
from strata.spark.conf import SparkSettings
from strata.spark.state import KeyedSpec, KeyedStateStore
from strata.spark.state_log import StateLog
from strata.spark.state_table import StateCache, Version

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
HDFS = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
PROVIDER = "spark.sql.streaming.stateStore.providerClass"
KEY_GROUPS = 64
ZIPF_S = 1.1
MOVED = 0  # the key group moved in the Strata runs
# batches never measured: a query's first batches pay code generation, JIT and the Python workers' start
WARM_UP = 4
# batches each store runs before anything is measured: the JVM keeps getting faster for over a hundred batches (in
# one locked session of 20-batch queries at 10k keys, RocksDB's median batch went from 0.40 s in the first query to
# 0.26 s in the eighth, and the store's from 0.35 s to 0.29 s), so a short warm-up favours whichever store runs last.
# The store's plan warms up more slowly (three stages and a Python one): in a fresh session, six 30-batch queries
# at 10k keys, one after the other, had medians strata 0.36, rocksdb 0.27, strata 0.26, strata 0.23, rocksdb 0.24,
# strata 0.21 s
WARM_UP_BATCHES = 60


def key_expr(k: int, dist: str) -> str:
    """SQL for the key of row ``value``: the fill keys first, then uniform or Zipf over [0, k) from a hash."""
    u = "(pmod(xxhash64(value), 2147483648) / 2147483648.0)"
    if dist == "uniform":
        draw = f"pmod(xxhash64(value, 7), {k})"
    else:  # inverse CDF of the continuous Zipf density ∝ x^-s on [1, k+1)
        a = 1.0 - ZIPF_S
        draw = f"least(cast(floor(pow(1 + {u} * (pow({k + 1}, {a}) - 1), {1 / a})) AS BIGINT) - 1, {k - 1})"
    return f"CASE WHEN value < {k} THEN value ELSE {draw} END"


def source(spark, batch: int, cores: int, k: int, dist: str):
    df = (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", batch)
        .option("numPartitions", cores)
        .option("advanceMillisPerBatch", 1000)
        .load()
    )
    return df.selectExpr(f"{key_expr(k, dist)} AS key", "timestamp AS event_time", "CAST(value AS DOUBLE) AS value")


def run_query(query, batches: int, timeout_s: float) -> list[dict]:
    """Wait until ``batches`` micro-batches finished (or the timeout), stop, and return their progress events."""
    deadline = time.time() + timeout_s
    while time.time() < deadline and query.isActive:
        last = query.lastProgress
        if last is not None and last["batchId"] >= batches - 1:
            break
        time.sleep(0.2)
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    progress = [p for p in query.recentProgress if p["numInputRows"]]
    query.stop()
    return sorted(progress, key=lambda p: p["batchId"])[:batches]


def run_spark_store(spark, root: Path, provider: str, batch: int, cores: int, k: int, dist: str, n: int, t: float):
    spark.conf.set(PROVIDER, provider)  # read when the query first starts, then kept in its checkpoint
    q = (
        source(spark, batch, cores, k, dist)
        .groupBy("key")
        .count()
        .writeStream.outputMode("update")
        .format("noop")
        .option("checkpointLocation", str(root / "checkpoint"))
        .start()
    )
    return run_query(q, n, t), {}


def run_strata(spark, root: Path, batch: int, cores: int, k: int, dist: str, n: int, t: float, move_at: int):
    spec = KeyedSpec(AggregateSpec(), None, KEY_GROUPS, cores)
    store = KeyedStateStore(spec, root / "state")
    io: dict[int, dict] = {}

    def each(df, batch_id):
        # as strata.spark.pipelines runs the store, less the persist an unwindowed store does not need
        cached = df.persist() if store.reads_input_twice else df
        out, plan = store.prepare(cached, batch_id)
        out.write.format("noop").mode("overwrite").save()
        store.commit(plan)
        if cached is not df:
            cached.unpersist()
        io[batch_id] = {str(p): meta for p, meta in plan.tasks.items()}  # the footers commit read
        if batch_id == move_at:
            table = list(store.routing)
            table[MOVED] = (table[MOVED] + 1) % cores
            store.route(table)

    q = (
        source(spark, batch, cores, k, dist)
        .writeStream.foreachBatch(each)
        .option("checkpointLocation", str(root / "checkpoint"))
        .start()
    )
    progress = run_query(q, n, t)
    return progress, {"io": io, "move": replay_move(store)}


def replay_move(store: KeyedStateStore) -> dict:
    """Move key group ``MOVED`` once more, in this process, on a worker warm for every other group it owns."""
    log = StateLog(store.directory)
    committed = log.manifests()
    last = committed[-1]
    history = {b: Version(tuple(m["routing"]), m["watermark_us"]) for b in committed for m in [log.read_manifest(b)]}
    routing = history[last].routing
    new_owner = (routing[MOVED] + 1) % store.spec.partitions
    cache = StateCache()
    bases = log.read_manifest(last)["snapshots"]  # per group, the batch whose file holds its snapshot
    for g, p in enumerate(routing):
        if p == new_owner:
            cache.acquire(cache.log(str(store.directory)), g, last, history, None, np.int64, bases[g])
    cache.io.clear()
    t0 = time.perf_counter()
    state = cache.acquire(cache.log(str(store.directory)), MOVED, last, history, None, np.int64, bases[MOVED])
    seconds = time.perf_counter() - t0

    def snapshot_bytes(g: int) -> int:  # a short run may have no snapshot yet: then rebuilt from its changelogs
        return log.group_bytes(bases[g], history[bases[g]].routing[g], g) if bases[g] >= 0 else 0

    return {
        "group": MOVED,
        "group_rows": state.rows,
        "seconds": seconds,
        "bytes_read": cache.io.bytes_read,
        "files_read": len(cache.io.read),
        "snapshot_batch": bases[MOVED],
        "group_snapshot_bytes": snapshot_bytes(MOVED),
        "all_snapshots_bytes": sum(snapshot_bytes(g) for g in range(len(bases))),
    }


def warm_up(spark, root: Path, args) -> None:
    """Run every store once, unmeasured, before the first measured query: the JVM's JIT compiles the source's
    key expression, the shuffle and the aggregation paths during the first queries of a session, so without
    this whichever store runs first (Strata's) is measured on a cold JVM (at 10k keys its median batch took
    0.57 s cold against 0.48 s once warm, and RocksDB's 0.55 s against 0.30 s, in one locked profile)."""
    for store in args.stores:
        where = root / f"warm-{store}"
        run_store(spark, where, store, args, min(args.keys), "uniform", args.warm_up_batches, args.warm_up_batches)
        shutil.rmtree(where, ignore_errors=True)


def run_store(spark, where: Path, store: str, args, k: int, dist: str, n: int, move_at: int):
    """``n`` batches of one store's query at ``k`` keys; its progress events and extras (Strata's moves at
    ``move_at`` and footers)."""
    timeout = 120 + 30 * n
    try:
        if store == "strata":
            progress, extra = run_strata(spark, where, args.batch, args.cores, k, dist, n, timeout, move_at)
            return progress, {**extra, "move_at": move_at}
        provider = HDFS if store == "hdfs" else ROCKSDB
        return run_spark_store(spark, where, provider, args.batch, args.cores, k, dist, n, timeout)
    finally:
        release(spark)


def release(spark) -> None:
    """Drop what a stopped query left in the JVM before the next store runs: Spark's loaded state store providers
    (its maintenance thread unloads a stopped query's within a minute or so; the HDFS-backed store holds the whole
    state on the heap) and then the garbage. Whichever store ran right after the HDFS store at 10M keys ran slower
    (Strata's fill batches: median 0.53 s against 0.36 s in the other round). With this it still did
    (measured batches 0.418 against 0.348 s, 25 Nov 09:00 run), so the rounds' order still alternates."""
    jvm = spark.sparkContext._jvm
    getattr(getattr(jvm.org.apache.spark.sql.execution.streaming.state, "StateStore$"), "MODULE$").unloadAll()
    jvm.System.gc()


def summarise(progress: list[dict], fill: int, batch: int) -> dict:
    steady = [p for p in progress if p["batchId"] >= max(fill, WARM_UP)]
    dur = [p["durationMs"]["triggerExecution"] / 1000 for p in steady]
    rows = sum(p["numInputRows"] for p in steady)
    fill_curve = [
        {
            "batch": p["batchId"],
            "state_keys": (p["batchId"] + 1) * batch,
            "s": p["durationMs"]["triggerExecution"] / 1000,
        }
        for p in progress
        if 1 <= p["batchId"] < fill  # batch 0 pays the query's and the Python workers' start-up
    ]
    return {
        "measured_batches": len(steady),
        "rows_per_s": rows / sum(dur) if dur else None,
        "median_batch_s": statistics.median(dur) if dur else None,
        "batch_s": dur,
        "fill": fill_curve,
    }


def engines(k: int, batch: int) -> dict:
    """Fold a batch of keys (half new) into k keys of state: dict + numpy columns vs rocksdict."""
    from strata.spark.state_table import KeyTable

    rng = np.random.default_rng(1)
    keys = rng.permutation(np.arange(k + batch, dtype=np.int64))
    base = keys[:k]
    fresh = np.concatenate([keys[k : k + batch // 2], base[: batch - batch // 2]])
    ones = np.ones(len(fresh), np.int64)
    table = KeyTable(np.int64)
    t0 = time.perf_counter()
    table.fold(base, np.ones(k, np.int64), np.zeros(k), np.zeros(k), np.zeros(k, np.int64), False)
    build = time.perf_counter() - t0
    t0 = time.perf_counter()
    table.fold(fresh, ones, np.zeros(len(fresh)), np.zeros(len(fresh)), np.zeros(len(fresh), np.int64), False)
    out = {"dict_numpy": {"build_s": build, "fold_s": time.perf_counter() - t0}}
    try:
        from rocksdict import Options, Rdict, WriteBatch
    except ImportError:
        out["rocksdict"] = "not installed (pip install rocksdict)"
        return out

    def chunks(a: np.ndarray) -> list[bytes]:
        b, w = a.tobytes(), a.itemsize
        return [b[i : i + w] for i in range(0, len(b), w)]

    path = Path(tempfile.mkdtemp(prefix="bench-rocksdict-"))
    db = Rdict(str(path / "db"), Options(raw_mode=True))
    try:
        t0 = time.perf_counter()
        wb = WriteBatch(raw_mode=True)
        for key, v in zip(chunks(base.astype(">i8")), chunks(np.ones(k, np.int64)), strict=True):
            wb.put(key, v)
        db.write(wb)
        build = time.perf_counter() - t0
        t0 = time.perf_counter()
        bk = chunks(fresh.astype(">i8"))
        old = db[bk]
        counts = np.frombuffer(b"".join(x if x is not None else b"\0" * 8 for x in old), np.int64) + 1
        wb = WriteBatch(raw_mode=True)
        for key, v in zip(bk, chunks(counts), strict=True):
            wb.put(key, v)
        db.write(wb)
        out["rocksdict"] = {"build_s": build, "fold_s": time.perf_counter() - t0}
    finally:
        db.close()
        shutil.rmtree(path, ignore_errors=True)
    return out


def plot(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    colours = {"strata": "tab:blue", "hdfs": "tab:orange", "rocksdb": "tab:green"}
    for store in colours:
        for dist, style in (("uniform", "-o"), ("zipf", "--s")):
            pts = sorted((r["keys"], r["median_batch_s"]) for r in results if r["store"] == store and r["dist"] == dist)
            if pts:
                ax.plot(*zip(*pts, strict=True), style, color=colours[store], label=f"{store}, {dist}")
        fill = [f for r in results if r["store"] == store and r["dist"] == "uniform" for f in r["fill"]]
        if fill:
            ax.scatter([f["state_keys"] for f in fill], [f["s"] for f in fill], s=8, color=colours[store], alpha=0.35)
    ax.set_xscale("log")
    ax.set_xlabel("keys of state")
    ax.set_ylabel("batch time, s (median; dots: fill batches, all keys new)")
    ax.set_title("Keyed count: batch time against state size")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--keys", type=int, nargs="+", default=[10_000, 1_000_000])
    ap.add_argument("--batch", type=int, default=100_000, help="rows per micro-batch, the same for every store")
    ap.add_argument("--measure", type=int, default=6, help="batches measured after the state is filled")
    ap.add_argument(
        "--rounds", type=int, default=1, help="runs of every store per size and distribution, in alternating order"
    )
    ap.add_argument("--dists", nargs="+", default=["uniform", "zipf"], choices=["uniform", "zipf"])
    ap.add_argument("--stores", nargs="+", default=["strata", "hdfs", "rocksdb"], choices=["strata", "hdfs", "rocksdb"])
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--memory", default="8g", help="driver JVM heap (Spark's in-memory store holds the state)")
    ap.add_argument(
        "--no-warm-up", dest="warm_up", action="store_false", help="skip the unmeasured run of every store first"
    )
    ap.add_argument(
        "--warm-up-batches", type=int, default=WARM_UP_BATCHES, help="batches of each store's unmeasured run"
    )
    ap.add_argument("--engines", action="store_true", help="also the dict-vs-rocksdict fold micro-measurement")
    ap.add_argument("--quick", action="store_true", help="10k and 200k keys, 20k-row batches, 4 measured")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "state.json"))
    args = ap.parse_args()
    if args.quick:
        args.keys, args.batch, args.measure = [10_000, 200_000], 20_000, 4
    console = Console()
    root = Path(tempfile.mkdtemp(prefix="bench-state-"))
    spark = build_session(
        "bench-state",
        cores=args.cores,
        shuffle_partitions=args.cores,
        work_dir=root / "spark",
        settings=SparkSettings(
            (("spark.driver.memory", args.memory), ("spark.sql.streaming.numRecentProgressUpdates", "1000"))
        ),
    )
    spark.sparkContext.setLogLevel("FATAL")  # stopping a query mid-batch logs aborted writes: expected here
    results = []
    try:
        if args.warm_up:
            warm_up(spark, root, args)
        for k in args.keys:
            fill = math.ceil(k / args.batch)
            n = max(fill, WARM_UP) + args.measure
            for dist in args.dists:
                runs: dict[str, list] = {store: [] for store in args.stores}
                move_at = max(fill, WARM_UP) + min(2, args.measure - 2)  # Strata's move: after the third measured batch
                for round_ in range(args.rounds):
                    # odd rounds run the stores in reverse: the JVM still speeds up, which favours the later store
                    for store in args.stores if round_ % 2 == 0 else args.stores[::-1]:
                        where = root / f"{store}-{dist}-{k}-{round_}"
                        t0 = time.time()
                        progress, extra = run_store(spark, where, store, args, k, dist, n, move_at)
                        runs[store].append((progress, extra, time.time() - t0))
                        shutil.rmtree(where, ignore_errors=True)
                for store, done in runs.items():
                    progress = [p for run in done for p in run[0]]
                    r = {"store": store, "dist": dist, "keys": k, "rounds": len(done)}
                    r["wall_s"] = sum(run[2] for run in done)
                    r.update(summarise(progress, fill, args.batch))
                    r["round_median_batch_s"] = [summarise(run[0], fill, args.batch)["median_batch_s"] for run in done]
                    r.update(done[0][1])  # the first round's move and footers
                    results.append(r)
                    console.print(
                        f"{store:7s} {dist:7s} {k:>10,d} keys: {r['rows_per_s'] or 0:,.0f} rows/s, "
                        f"median batch {r['median_batch_s'] or 0:.2f} s (rounds "
                        + ", ".join(f"{m or 0:.2f}" for m in r["round_median_batch_s"])
                        + f"; {r['wall_s']:.0f} s wall)"
                    )
        micro = {str(k): engines(k, args.batch) for k in args.keys if k <= 2_000_000} if args.engines else None
    finally:
        with contextlib.suppress(Exception):
            spark.stop()
        shutil.rmtree(root, ignore_errors=True)

    table = Table(title=f"Keyed count, local[{args.cores}], {args.batch:,d} rows/batch, {args.measure} measured")
    for col in ("store", "keys", "rows/s", "median batch s", "vs rocksdb rows/s", "move: group rows", "move: MB read"):
        table.add_column(col, justify="left" if col == "store" else "right")
    by = {(r["store"], r["dist"], r["keys"]): r for r in results}
    for r in results:
        rock = by.get(("rocksdb", r["dist"], r["keys"]))
        ratio = f"{r['rows_per_s'] / rock['rows_per_s']:.2f}×" if rock and rock["rows_per_s"] else "–"
        move = r.get("move") or {}
        table.add_row(
            f"{r['store']} ({r['dist']})",
            f"{r['keys']:,d}",
            f"{r['rows_per_s']:,.0f}",
            f"{r['median_batch_s']:.2f}",
            ratio,
            f"{move['group_rows']:,d}" if move else "",
            f"{move['bytes_read'] / 1e6:.2f}" if move else "",
        )
    console.print(table)
    for r in results:
        if r["store"] == "strata" and r.get("io"):
            after = r["io"].get(r["move_at"] + 1, {})
            console.print(
                f"strata {r['dist']} {r['keys']:,d}: batch after the move read "
                + ", ".join(
                    f"task {p}: {m['bytes_read'] / 1e6:.2f} MB, rebuilt {m['rebuilt']}" for p, m in after.items()
                )
                + f"; replayed move of group {MOVED}: {r['move']['bytes_read'] / 1e6:.2f} MB in "
                f"{r['move']['seconds']:.3f} s (its snapshot {r['move']['group_snapshot_bytes'] / 1e6:.2f} MB, "
                f"all snapshots {r['move']['all_snapshots_bytes'] / 1e6:.2f} MB)"
            )
    if micro:
        console.print(f"fold engines (one {args.batch:,d}-key batch, half new): {json.dumps(micro)}")
    out = Path(args.out)
    out.parent.mkdir(exist_ok=True)
    for r in results:  # JSON keys are strings
        if "io" in r:
            r["io"] = {str(b): v for b, v in r["io"].items()}
    out.write_text(
        json.dumps(
            {
                "cores": args.cores,
                "batch_rows": args.batch,
                "measured_batches": args.measure,
                "rounds": args.rounds,
                "key_groups": KEY_GROUPS,
                "zipf_s": ZIPF_S,
                "machine": platform.platform(),
                "note": "shared 2-core machine: other work ran at the same time",
                "results": results,
                "engines": micro,
            },
            indent=2,
        )
    )
    plot(results, out.with_suffix(".png"))
    console.print(f"wrote {out} and {out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
