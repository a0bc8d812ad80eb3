"""A user's keyed aggregation in Strata's movable store (``strata.keyed_aggregate``), checked against pandas.

The input is JSON files of a seeded source written by
:class:`strata.runners.producer.Producer`, so pandas recomputes exactly
what each batch must have written: which files went into which batch is read
from the query's checkpoint (:func:`strata.spark.files.planned_files`), so an
unwindowed aggregate is checked batch by batch (each batch's rows are the
running totals of its keys up to that batch: a batch folded in twice, or lost,
shows), and a windowed one window by window (each closed window once).
"""

from __future__ import annotations

import textwrap
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from pyspark.errors import StreamingQueryException

import strata.api as strata
from strata.control.estimation import attribute
from strata.model import OperatorKind, SourceSpec, SpecError
from strata.model.user import DeclarationError, collecting, load_jobs, with_python_jobs
from strata.protocol.engine import Decisions
from strata.protocol.units import Move
from strata.runners.producer import Producer
from strata.runners.spark_loop import RunConfig
from strata.spark.engine import SETTLE_S, EngineConfig, SparkEngine
from strata.spark.files import planned_files
from tests.conftest import rows_read, run_until

EVENTS = "id LONG, event_time TIMESTAMP, key LONG, value DOUBLE"
SOURCE = SourceSpec(rate=400, keys={"count": 40, "zipf_s": 1.1}, seed=3)


def staged(root: Path, seconds: float, file_s: float = 0.5) -> tuple[list[Path], pd.DataFrame]:
    """The source's records for ``seconds`` of event time as files in ``root`` (in order) and as one frame."""
    p = Producer(root, SOURCE, time.time() - seconds, seconds, file_s=file_s)
    step = round(file_s / p.tick_s)
    for tick in range(step, round(seconds / p.tick_s) + 1, step):
        lo, hi = p.timeline.rows_before_tick(tick - step), p.timeline.rows_before_tick(tick)
        if hi > lo:
            p.write(lo, hi)
    return sorted(root.glob("part-*.json")), p.rows(0, p.timeline.rows_before_tick(round(seconds / p.tick_s)))


def rows_by_batch(checkpoint: Path, events: pd.DataFrame, files: list[Path]) -> pd.Series:
    """The batch that read each record (from the checkpoint's file log), aligned with ``events``."""
    batch_of = {Path(f).name: b for f, b in planned_files(checkpoint).items()}
    first = [int(f.name[len("part-") : -len(".json")]) for f in files]  # a file holds records [lo, next lo)
    which = np.searchsorted(np.asarray(first), events["id"].to_numpy(), side="right") - 1
    return pd.Series([batch_of.get(files[i].name, -1) for i in which], index=events.index)


def running_totals(events: pd.DataFrame, batch: pd.Series, keep: pd.Series) -> pd.DataFrame:
    """What an unwindowed keyed sum writes per batch: each key the batch touched, with its total so far."""
    kept = events[keep].assign(batch_id=batch[keep], user="u" + events.loc[keep, "key"].astype(str))
    per = kept.groupby(["user", "batch_id"])["value"].sum().groupby(level="user").cumsum()
    return per.rename("sum").reset_index()


def check_running_totals(out: pd.DataFrame, reference: pd.DataFrame) -> None:
    got = out.sort_values(["batch_id", "user"]).reset_index(drop=True)
    want = reference.sort_values(["batch_id", "user"]).reset_index(drop=True)
    assert list(zip(got["batch_id"], got["user"], strict=True)) == list(
        zip(want["batch_id"], want["user"], strict=True)
    )
    np.testing.assert_allclose(got["sum"].to_numpy(), want["sum"].to_numpy(), rtol=1e-9)


def declare(root: Path) -> list:
    """Two jobs on the same directory: a running sum per user (string key) and a windowed count per key."""
    from pyspark.sql import functions as F

    with collecting() as jobs:
        totals = strata.job("totals", rank=1, target_latency_s=10.0, sink=strata.memory())
        per_user = strata.keyed_aggregate(totals, key="user", aggregate="sum", value="value", key_groups=16)

        @totals.template
        def sums(spark):
            events = spark.readStream.format("json").schema(EVENTS).load(str(root))
            users = events.filter("value > 0.2").withColumn("user", F.concat(F.lit("u"), F.col("key").cast("string")))
            return per_user(users)

        windows = strata.job("windows", rank=2, target_latency_s=20.0, sink=strata.memory())
        per_key = strata.keyed_aggregate(
            windows, key="key", window="2 seconds", watermark="1 second", key_groups=8, name="per_key"
        )

        @windows.template
        def counts(spark):
            return per_key(spark.readStream.format("json").schema(EVENTS).load(str(root)))

    return jobs


# ---------------------------------------------------------------------- declarations (no Spark)


def test_the_planner_sees_the_keyed_aggregate_as_a_keyed_pe_of_the_chain(tmp_path):
    jobs = declare(tmp_path)
    scenario = with_python_jobs(jobs, [], "keyed", cores=2)
    totals, windows = scenario.job["totals"].templates[0], scenario.job["windows"].templates[0]
    assert [op.name for op in totals.operators] == ["input", "query", "keyed", "out"]
    keyed = totals.operator["keyed"]
    assert keyed.kind is OperatorKind.KEYED_STATEFUL and keyed.key_groups == 16 and keyed.aggregate.fn == "sum"
    window = windows.operator["per_key"]
    assert window.kind is OperatorKind.WINDOW_AGGREGATE and window.key_groups == 8
    assert (window.window.size_s, window.window.slide_s, window.window.watermark_s) == (2.0, None, 1.0)
    # the output's weight moved onto the aggregate's stream to the sink; the query feeds the aggregate
    into_out = next(st for st in totals.streams if st.dst == "out")
    assert into_out.src == "keyed" and totals.weight_of(into_out) == 1.0
    assert any(st.src == "query" and st.dst == "keyed" for st in totals.streams)


def test_bad_keyed_aggregate_arguments_are_located_at_their_line(tmp_path):
    f = tmp_path / "jobs.py"
    f.write_text(
        textwrap.dedent(
            """
            import strata.api as strata

            j = strata.job("j", rank=1)
            per_user = strata.keyed_aggregate(j, key="user", aggregate="sum")
            """
        )
    )
    with pytest.raises(SpecError) as err:
        load_jobs(f)
    (problem,) = err.value.problems
    assert problem.file == str(f) and problem.line == 5
    assert "value" in problem.expected and "None" in problem.found
    with collecting():
        j = strata.job("k", rank=1)
        with pytest.raises(DeclarationError, match="duration"):
            strata.keyed_aggregate(j, key="u", window="ten seconds", watermark=1)
        with pytest.raises(DeclarationError, match="windows need one"):
            strata.keyed_aggregate(j, key="u", window="10 seconds")
        with pytest.raises(DeclarationError, match="without a window"):
            strata.keyed_aggregate(j, key="u", watermark="1 second")
        with pytest.raises(DeclarationError, match="count or sum"):
            strata.keyed_aggregate(j, key="u", aggregate="median", value="v")
        with pytest.raises(DeclarationError, match="key_groups"):
            strata.keyed_aggregate(j, key="u", key_groups=0)
        with pytest.raises(DeclarationError, match="not input or query or out"):
            strata.keyed_aggregate(j, key="u", name="out")
        strata.keyed_aggregate(j, key="u", window=10, slide="5 s", watermark=0)
        with pytest.raises(DeclarationError, match="one keyed aggregate per job"):
            strata.keyed_aggregate(j, key="u")


@pytest.mark.spark
def test_a_template_that_misuses_the_keyed_aggregate_is_located(spark, tmp_path):
    from strata.spark.pipelines import PipelineOptions
    from strata.spark.user import UserPipeline

    staged(tmp_path / "in", 1.0)
    root = tmp_path / "in"
    with collecting():
        j = strata.job("j", rank=1, sink=strata.memory())
        agg = strata.keyed_aggregate(j, key="key", aggregate="max", value="id")

        @j.template
        def forgot(spark):
            return spark.readStream.format("json").schema(EVENTS).load(str(root))

        @j.template
        def wrong_column(spark):
            return agg(spark.readStream.format("json").schema(EVENTS).load(str(root)).drop("id"))

    model = j.model()
    for t, needle in ((0, "the result of keyed(df)"), (1, "columns ['key', 'event_time', 'id']")):
        with pytest.raises(SpecError) as err:
            UserPipeline(spark, model, model.templates[t], tmp_path / "run" / str(t), PipelineOptions(), declared=j)
        (problem,) = err.value.problems
        assert needle in problem.expected and problem.file.endswith("test_spark_user_keyed.py")


# ---------------------------------------------------------------------- under Strata


@pytest.mark.spark
def test_keyed_aggregates_under_strata_equal_pandas_and_report_key_group_loads(spark, tmp_path):
    files, events = staged(tmp_path / "in", 6.0)
    scenario = with_python_jobs(declare(tmp_path / "in"), [], "keyed", cores=2)
    kept = int((events["value"] > 0.2).sum())
    loads: dict[str, dict[int, int]] = {"totals.keyed": {}, "windows.per_key": {}}
    routed: set[str] = set()

    def step(_mode, obs, _decisions, _row) -> None:
        routed.update(obs.window.routing)
        for kg in obs.window.key_groups:
            if kg.pe in loads:
                loads[kg.pe][kg.key_group] = loads[kg.pe].get(kg.key_group, 0) + kg.records

    def enough(engine) -> bool:
        rows = rows_read(engine)
        # Spark pushes the filter into the JSON reader: the totals query's input rows are those it keeps
        return rows.get("totals", 0) >= kept and rows.get("windows", 0) >= len(events)

    config = RunConfig(sink="memory", state_partitions=2)
    result = run_until(spark, scenario, tmp_path / "run", config, enough, on_step=step)
    engine = result.engine
    assert not engine.failures()
    by_job = {s.job: s.pipeline for s in engine.segments}
    assert by_job["totals"].store is not None and by_job["windows"].store is not None

    # the running sums: every batch's rows are its keys' totals up to that batch, string keys kept
    totals = by_job["totals"]
    batch = rows_by_batch(totals.checkpoint, events, files)
    assert (batch >= 0).all()
    check_running_totals(totals.result(), running_totals(events, batch, events["value"] > 0.2))

    # the windows: each window whose end the final watermark passed, once, with its count
    out = by_job["windows"].result()
    end = events["event_time"].max() - pd.Timedelta(seconds=1)
    ref = events.assign(ws=events["event_time"].dt.floor("2s")).groupby(["ws", "key"]).size()
    ref = ref[ref.index.get_level_values("ws") + pd.Timedelta(seconds=2) <= end]
    got = out.assign(ws=pd.to_datetime(out["window_start"], utc=True)).set_index(["ws", "key"])["count"]
    assert not got.index.duplicated().any()
    assert got.sort_index().to_dict() == ref.sort_index().to_dict()
    assert (out["event_time"] == out["window_end"]).all()  # a window's event time is its end (Cameo's t_MF)

    # the balancer's inputs: routing tables and per-key-group loads of both keyed PEs, summing to the rows read
    assert {"totals.keyed", "windows.per_key"} <= routed
    assert sum(loads["windows.per_key"].values()) == len(events)
    assert sum(loads["totals.keyed"].values()) == int((events["value"] > 0.2).sum())


@pytest.mark.spark
def test_a_key_group_move_and_a_replayed_batch_keep_the_output_exactly_once(spark, tmp_path):
    files, events = staged(tmp_path / "stage", 8.0)
    root = tmp_path / "in"
    root.mkdir()
    scenario = with_python_jobs([j for j in declare(root) if j.id == "totals"], [], "keyed-moves", cores=2)
    engine = SparkEngine(
        spark,
        scenario,
        tmp_path / "run",
        EngineConfig(epoch=time.time(), sink="memory", state_partitions=2),
        attribute=attribute,
    )

    class DieOnce:
        """Kills the query after batch 1's state and output are committed, before Spark commits the batch."""

        died = False

        def before(self, pipeline, batch_id: int) -> None:
            pass

        def after(self, pipeline, record: dict) -> None:
            if record["batch_id"] == 1 and not DieOnce.died:
                DieOnce.died = True
                raise RuntimeError("killed after the store's commit")

    def arrive(batch: list[Path]) -> None:
        for f in batch:
            f.rename(root / f.name)

    def wait_for(pipeline, rows: int) -> None:
        deadline = time.time() + 90
        while sum(engine.progress.of(pipeline.query).values()) < rows and time.time() < deadline:
            assert pipeline.query.isActive or pipeline.query.exception() is not None
            time.sleep(0.2)

    def kept(below: int) -> int:  # input rows Spark counts: it pushes the filter into the JSON reader
        return int(((events["value"] > 0.2) & (events["id"] < below)).sum())

    third = len(files) // 3
    try:
        engine.apply(Decisions(0, admitted={"totals": "sums"}))
        pipeline = engine.running["totals"].pipeline
        pipeline.hooks.append(DieOnce())
        arrive(files[:third])
        wait_for(pipeline, 1)  # batch 0
        arrive(files[third : 2 * third])  # batch 1: dies after its commit
        with pytest.raises(StreamingQueryException, match="killed after the store's commit"):
            pipeline.query.awaitTermination(90)
        assert DieOnce.died and pipeline.query.exception() is not None
        pipeline.start()  # from the checkpoint: batch 1 is replayed, its manifest already written
        wait_for(pipeline, kept(int(files[2 * third].name[5:17])))
        # a committed batch is observed once Spark's task metrics for it settle (at most SETTLE_S later)
        deadline = time.time() + 2 * SETTLE_S
        while True:
            obs = engine.observe()
            loads = {kg.key_group: kg.records for kg in obs.window.key_groups if kg.pe == "totals.keyed"}
            if loads or time.time() > deadline:
                break
            time.sleep(0.25)
        assert loads and obs.window.routing["totals.keyed"] == pipeline.store.routing
        # L1's knob: the two hottest key groups to the other partition, applied at the next batch
        hot = sorted(loads, key=loads.get, reverse=True)[:2]
        before = pipeline.store.routing
        engine.apply(Decisions(1, moves=[Move("totals.keyed", g, 1 - before[g]) for g in hot]))
        assert all(pipeline.store.routing[g] == 1 - before[g] for g in hot)
        moved_at = max(r["batch_id"] for r in pipeline.records)
        arrive(files[2 * third :])
        wait_for(pipeline, kept(len(events)))
        engine.stop_all()
    finally:
        engine.close()
    assert [d["kind"] for d in engine.decisions].count("moves") == 1
    after = [r for r in pipeline.records if r["batch_id"] > moved_at]
    assert after
    for r in after:  # batches after the move count the moved groups' rows on their new partition
        want = [0, 0]
        for g, n in r["group_rows"].items():
            want[pipeline.store.routing[g]] += n
        assert r["partition_rows"] == want
    batch = rows_by_batch(pipeline.checkpoint, events, files)
    assert (batch >= 0).all() and batch.max() >= moved_at + 1
    check_running_totals(pipeline.result(), running_totals(events, batch, events["value"] > 0.2))
