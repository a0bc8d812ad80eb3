"""Users' own PySpark queries under Strata: declared in Python, run by the control loop, checked against pandas.

The input is JSON files written by :class:`strata.runners.producer.Producer` (records of a seeded source
spec, so pandas recomputes exactly what the queries must have written). Known answers: a Python-UDF filter
writes exactly the records its rule keeps; two chained window aggregations write, per 2 s window, the number
of keys with ≥ 2 records; a stream–stream join writes each click once with its impression; a job reading the
alerts' output (a shared stream) writes exactly the alerts it selects.
"""

from __future__ import annotations

import textwrap
import time

import numpy as np
import pandas as pd
import pytest

from strata.control.estimation import attribute
from strata.model import SourceSpec, SpecError
from strata.model.user import DeclarationError, collecting, job, load_jobs, memory, with_python_jobs
from strata.protocol.engine import Decisions
from strata.runners.producer import Producer, clicks
from strata.runners.spark_loop import RunConfig
from strata.spark.engine import EngineConfig, SparkEngine
from strata.spark.files import planned_files
from strata.spark.pipelines import PipelineOptions
from strata.spark.user import UserPipeline
from tests.conftest import rows_read, run_until

EVENTS = "id LONG, event_time TIMESTAMP, key LONG, value DOUBLE"
CLICKS = "id LONG, event_time TIMESTAMP, key LONG, value DOUBLE, impression LONG"
SOURCE = SourceSpec(rate=400, keys={"count": 30, "zipf_s": 1.0}, seed=7)


def written(root, seconds: float = 6.0, file_s: float = 0.5) -> dict[str, pd.DataFrame]:
    """Events and clicks for ``seconds`` of event time, written as files (the producer run to its end)."""
    epoch = time.time() - seconds  # every record is already due: the files are written at once
    out = {}
    for name, extra in (("events", None), ("clicks", clicks(0.8, 1.0))):
        p = Producer(root / name, SOURCE, epoch, seconds, file_s=file_s, extra=extra)
        hi = p.timeline.rows_before_tick(round(seconds / p.tick_s))
        step = round(file_s / p.tick_s)
        for tick in range(step, round(seconds / p.tick_s) + 1, step):  # one file per file_s of event time
            lo, up = p.timeline.rows_before_tick(tick - step), p.timeline.rows_before_tick(tick)
            if up > lo:
                p.write(lo, up)
        out[name] = p.rows(0, hi)
    return out


def declare(root) -> list:
    from pyspark.sql import functions as F

    def rule(v):
        return v is not None and v > 0.9

    with collecting() as jobs:
        alerts = job("alerts", rank=1, required=True, target_latency_s=2.0)  # Parquet: another job reads it

        @alerts.template
        def udf_filter(spark):
            events = spark.readStream.format("json").schema(EVENTS).load(str(root / "events"))
            return events.filter(F.udf(rule, "boolean")(F.col("value")))

        chained = job("chained", rank=2, target_latency_s=30.0, sink=memory(), event_time="window_end")

        @chained.template
        def two_aggregations(spark):
            events = spark.readStream.format("json").schema(EVENTS).load(str(root / "events"))
            per_key = events.withWatermark("event_time", "1 second").groupBy(F.window("event_time", "2 seconds"), "key")
            return (
                per_key.count()
                .filter("count >= 2")
                .groupBy(F.window(F.window_time("window"), "2 seconds"))
                .agg(F.count("*").alias("keys"))
                .select(F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"), "keys")
            )

        joined = job("joined", rank=3, target_latency_s=20.0, sink=memory())

        @joined.template
        def click_join(spark):
            imps = spark.readStream.format("json").schema(EVENTS).load(str(root / "events"))
            clicks = spark.readStream.format("json").schema(CLICKS).load(str(root / "clicks"))
            i = imps.withWatermark("event_time", "3 seconds").alias("i")
            c = clicks.withWatermark("event_time", "3 seconds").alias("c")
            cond = "c.impression = i.id AND c.event_time BETWEEN i.event_time AND i.event_time + interval 5 seconds"
            return i.join(c, F.expr(cond)).select(
                F.col("c.id").alias("click"), F.col("i.id").alias("impression"), F.col("c.event_time")
            )

        even = job("even_alerts", rank=4, target_latency_s=20.0, sink=memory(), reads=alerts)

        @even.template
        def of_alerts(spark):
            return alerts.stream(spark).filter("key % 2 = 0").select("id", "event_time", "key", "batch_id")

    return jobs


YAML = """
cluster: {nodes: [{name: local, cores: 2}]}
jobs:
  - id: generated
    rank: 4
    templates:
      - operators:
          - {name: s, kind: source, source: {rate: 50, keys: {count: 10}, seed: 2}}
          - {name: f, kind: filter, predicate: "value > 0.5"}
          - {name: o, kind: sink}
        streams: [{from: s, to: f}, {from: f, to: o}]
"""


@pytest.mark.spark
def test_python_jobs_and_a_yaml_job_run_under_strata_and_equal_pandas(spark, tmp_path):
    inputs = written(tmp_path / "in")
    spec = tmp_path / "generated.yaml"
    spec.write_text(YAML)
    scenario = with_python_jobs(declare(tmp_path / "in"), [spec], "mixed")
    assert [j.id for j in scenario.jobs] == ["generated", "alerts", "chained", "joined", "even_alerts"]
    # the planner sees the shared stream: the reader's query is fed by the alerts' query, and nothing else
    (reader,) = scenario.job["even_alerts"].templates
    assert [(st.src, st.dst) for st in reader.streams] == [("alerts.query", "query"), ("query", "out")]
    events, clicks = inputs["events"], inputs["clicks"]

    def enough(engine) -> bool:
        rows = rows_read(engine)
        chained = engine.running.get("chained")
        return (
            rows.get("alerts", 0) >= len(events)
            and rows.get("even_alerts", 0) >= (events["value"] > 0.9).sum()
            and rows.get("joined", 0) >= len(events) + len(clicks)
            and chained is not None
            and not chained.pipeline.result().empty
        )

    result = run_until(spark, scenario, tmp_path / "run", RunConfig(sink="memory"), enough, timeout_s=90.0)
    engine = result.engine
    assert not engine.failures()
    by_job = {s.job: s.pipeline for s in engine.segments}
    assert isinstance(by_job["alerts"], UserPipeline) and not isinstance(by_job["generated"], UserPipeline)

    # the Python UDF's filter: exactly the records the rule keeps, each once
    out = by_job["alerts"].result()
    assert sorted(out["id"]) == sorted(events.loc[events["value"] > 0.9, "id"])

    # the shared stream: the reader got every alert once, as the alerts' batches wrote them
    out = by_job["even_alerts"].result()
    kept = events[(events["value"] > 0.9) & (events["key"] % 2 == 0)]
    assert sorted(out["id"]) == sorted(kept["id"])
    written_by = by_job["alerts"].result().set_index("id")["batch_id"].astype(int)
    assert (out.set_index("id")["batch_id"].astype(int) == written_by.reindex(out["id"])).all()

    # the join: every click once, with its impression
    out = by_job["joined"].result()
    assert sorted(zip(out["click"], out["impression"], strict=True)) == sorted(
        zip(clicks["id"], clicks["impression"], strict=True)
    )

    # two chained aggregations: every window written is right and written once (append mode); the windows
    # written are a prefix of the reference's (the last ones wait for a watermark that later data would move)
    out = by_job["chained"].result()
    ws = events["event_time"].dt.floor("2s")
    per_key = events.assign(ws=ws).groupby(["ws", "key"]).size()
    ref = per_key[per_key >= 2].groupby(level="ws").size()
    got = out.assign(ws=pd.to_datetime(out["window_start"], utc=True)).set_index("ws")["keys"]
    assert not got.index.duplicated().any() and len(got) >= 1
    assert got.to_dict() == {w: int(ref[w]) for w in got.index}
    assert list(got.sort_index().index) == list(ref.index[: len(got)])

    # sink-side latency from the declared event-time column, observed for the Python jobs
    assert by_job["alerts"].written and all(t.dtype == np.int64 for t in by_job["alerts"].written.values())


@pytest.mark.spark
def test_a_read_limit_changes_files_per_batch_at_the_next_batch_with_nothing_lost(spark, tmp_path):
    events = written(tmp_path / "in", seconds=8.0)["events"]
    (declared,) = [j for j in declare(tmp_path / "in") if j.id == "alerts"]
    model = declared.model()
    pipeline = UserPipeline(
        spark,
        model,
        model.templates[0],
        tmp_path / "run" / "0-udf_filter",
        PipelineOptions(sink="memory", trigger_s=1.0),
        declared=declared,
    )
    pipeline.restart(2)  # the query starts reading at most 2 files a batch (one batch a second)
    try:
        while len(pipeline.records) < 2:
            time.sleep(0.2)
        pipeline.stop_between_batches()
        before = max(r["batch_id"] for r in pipeline.records)
        pipeline.restart(5)  # the batch planned before the stop is replayed as planned, then 5 files a batch
        pipeline.query.processAllAvailable()  # every file read and committed (a stop may fall between batches)
        pipeline.stop_between_batches()
    finally:
        if pipeline.query.isActive:
            pipeline.query.stop()
    per_batch = pd.Series(planned_files(pipeline.checkpoint)).value_counts().sort_index()
    assert per_batch[per_batch.index <= before].max() <= 2
    assert per_batch[per_batch.index > before].max() == 5  # batches after the restart read up to 5 files
    out = pipeline.result()
    assert sorted(out["id"]) == sorted(events.loc[events["value"] > 0.9, "id"])  # nothing lost or read twice
    assert pipeline.restarts == 2


@pytest.mark.spark
def test_a_template_switch_on_a_user_query_continues_from_the_next_unread_file(spark, tmp_path):
    from pyspark.sql import functions as F

    events = written(tmp_path / "stage", seconds=8.0)["events"]
    root = tmp_path / "in" / "events"
    root.mkdir(parents=True)
    files = sorted((tmp_path / "stage" / "events").iterdir())

    def arrive(batch):  # the producer's files appear in the directory, renamed in whole
        for f in batch:
            f.rename(root / f.name)

    with collecting() as declared:
        j = job("switch", rank=1, sink=memory())

        @j.template
        def wide(spark):
            return spark.readStream.format("json").schema(EVENTS).load(str(root)).filter("value > 0.5")

        @j.template
        def narrow(spark):
            df = spark.readStream.format("json").schema(EVENTS).load(str(root))
            return df.filter("value > 0.5").select("id", "event_time", F.lit("narrow").alias("via"))

    scenario = with_python_jobs(declared, [], "switch", cores=2)
    config = EngineConfig(epoch=time.time(), sink="memory")
    engine = SparkEngine(spark, scenario, tmp_path / "run", config, attribute=attribute)
    try:
        arrive(files[:6])
        engine.apply(Decisions(0, admitted={"switch": "wide"}))
        first = engine.running["switch"].pipeline
        deadline = time.time() + 60
        while sum(engine.progress.of(first.query).values()) < 1 and time.time() < deadline:
            time.sleep(0.2)
        engine.apply(Decisions(1, admitted={"switch": "narrow"}))
        second = engine.running["switch"].pipeline
        arrive(files[6:])
        deadline = time.time() + 60
        while (
            sum(engine.progress.of(first.query).values()) + sum(engine.progress.of(second.query).values()) < len(events)
            and time.time() < deadline
        ):
            time.sleep(0.2)
        engine.stop_all()
    finally:
        engine.close()
    a, b = first.result(), second.result()
    assert len(a) > 0 and len(b) > 0 and (b["via"] == "narrow").all()
    # the new template read on from the first file the old one had not taken: nothing lost, nothing twice
    assert sorted([*a["id"], *b["id"]]) == sorted(events.loc[events["value"] > 0.5, "id"])
    assert engine.decisions[-1]["kind"] == "template"


@pytest.mark.spark
def test_a_query_reading_a_directory_takes_its_directory_trigger(spark, tmp_path):
    written(tmp_path / "in", seconds=1.0)
    root = tmp_path / "in" / "events"
    with collecting() as declared:
        critical = job("critical", rank=1, target_latency_s=2.0, sink=memory())

        @critical.template
        def listed(spark):
            return spark.readStream.format("json").schema(EVENTS).load(str(root))

        other = job("other", rank=2, target_latency_s=2.0, sink=memory())

        @other.template
        def also_listed(spark):
            return spark.readStream.format("json").schema(EVENTS).load(str(root))

    scenario = with_python_jobs(declared, [], "listing", cores=2)
    config = EngineConfig(epoch=time.time(), sink="memory", directory_triggers={"critical": 0.1})
    engine = SparkEngine(spark, scenario, tmp_path / "run", config, attribute=attribute)
    try:
        engine.apply(
            Decisions(
                0,
                admitted={"critical": "listed", "other": "also_listed"},
                triggers=dict.fromkeys(("critical", "other"), 0.5),
            )
        )

        def trigger(name: str) -> str:  # the trigger Spark's stream execution runs
            return str(engine.running[name].pipeline.query._jsq.streamingQuery().trigger().toString())

        assert trigger("critical") == "ProcessingTimeTrigger(100)"
        assert trigger("other") == "ProcessingTimeTrigger(500)"  # no directory trigger: the decided one
        said = {d["job"]: d["detail"] for d in engine.decisions if d["kind"] == "admit"}
        assert said == {
            "critical": "template listed; lists its directories every 0.1 s",
            "other": "template also_listed",
        }
        engine.stop_all()
    finally:
        engine.close()


# ---------------------------------------------------------------------- declarations (no Spark)


def test_a_bad_declaration_is_located_at_its_line(tmp_path):
    f = tmp_path / "jobs.py"
    f.write_text(
        textwrap.dedent(
            """
            import strata.api as strata

            ok = strata.job("ok", rank=1)
            bad = strata.job("bad", rank=-1)
            """
        )
    )
    with pytest.raises(SpecError) as err:
        load_jobs(f)
    (problem,) = err.value.problems
    assert problem.file == str(f) and problem.line == 5
    assert "rank" in problem.expected and "-1" in problem.found


def test_a_jobs_file_that_fails_or_declares_nothing_is_located(tmp_path):
    f = tmp_path / "jobs.py"
    f.write_text("import strata.api as strata\nx = 1\ny = x / 0\n")
    with pytest.raises(SpecError) as err:
        load_jobs(f)
    assert err.value.problems[0].line == 3 and "ZeroDivisionError" in err.value.problems[0].found
    f.write_text("x = 1\n")
    with pytest.raises(SpecError, match=r"at least one strata\.job"):
        load_jobs(f)
    f.write_text("import strata.api as strata\nj = strata.job('j', rank=1)\n")
    with pytest.raises(SpecError, match="at least one @template"):
        load_jobs(f)


def test_a_template_must_take_the_session_and_names_are_checked():
    with collecting():
        j = job("j", rank=1)
        with pytest.raises(DeclarationError, match="build\\(spark\\)"):
            j.template("no_session")(lambda: None)
        with pytest.raises(DeclarationError, match="declared once"):
            job("j", rank=2)
        with pytest.raises(DeclarationError, match="value function"):
            job("k", rank=1, value={"kind": "nonsense"})


def test_a_shared_stream_must_name_a_job_of_the_run_that_writes_parquet(tmp_path):
    f = tmp_path / "jobs.py"
    body = textwrap.dedent(
        """
        import strata.api as strata

        producer = strata.job("producer", rank=1, sink=strata.{sink})
        producer.template("p")(lambda spark: spark)
        reader = strata.job("reader", rank=2, reads={reads})
        reader.template("r")(lambda spark: spark)
        """
    )
    f.write_text(body.format(sink="memory()", reads="producer"))
    with pytest.raises(SpecError) as err:
        with_python_jobs(load_jobs(f), [], "t")
    (problem,) = err.value.problems
    assert problem.line == 6 and "strata.parquet()" in problem.expected and "memory" in problem.found
    f.write_text(body.format(sink="parquet()", reads="'elsewhere'"))
    with pytest.raises(SpecError, match="elsewhere"):
        with_python_jobs(load_jobs(f), [], "t")
    f.write_text(body.format(sink="parquet()", reads="'reader'"))  # a job cannot read itself
    with pytest.raises(SpecError, match="other jobs"):
        load_jobs(f)
    with collecting():
        j = job("j", rank=1)
        with pytest.raises(DeclarationError, match="the session Strata passes"):
            j.stream(object())


def test_the_planner_sees_a_python_job_as_a_chain_with_its_value_function():
    with collecting():
        j = job("j", rank=3, required=True, target_latency_s=4, weight=10, value={"kind": "linear", "slope": 2})

        @j.template
        def only(spark):
            return spark

        model = j.model()
    (tpl,) = model.templates
    assert [op.name for op in tpl.operators] == ["input", "query", "out"]
    out = next(st for st in tpl.streams if st.dst == "out")
    assert model.rank == 3 and model.required and model.target_latency_s == 4
    assert tpl.weight_of(out) == 10 and out.value(5.0) == pytest.approx(10.0)  # slope 2 × 5 records/s


def test_the_producer_writes_the_source_records_and_bad_options_exit_2(tmp_path):
    from typer.testing import CliRunner

    from strata.cli import app

    result = CliRunner().invoke(app, ["produce", str(tmp_path / "p"), "--duration", "1.2", "--rate", "50"])
    assert result.exit_code == 0, result.output
    files = sorted((tmp_path / "p" / "events").glob("part-*.json"))
    frame = pd.concat([pd.read_json(f, lines=True) for f in files], ignore_index=True)
    p = Producer(
        tmp_path / "q",
        SourceSpec(
            rate=50,
            arrivals={"process": "onoff", "period_s": 20, "on_s": 5, "burst_factor": 3},
            keys={"count": 200, "zipf_s": 1.1},
            seed=5,
        ),
        0.0,
        1.2,
    )
    ref = p.rows(0, len(frame))
    assert list(frame["id"]) == list(range(len(frame))) and list(frame["key"]) == list(ref["key"])
    bad = CliRunner().invoke(app, ["produce", str(tmp_path / "p"), "--rate", "-3"])
    assert bad.exit_code == 2 and "--rate" in bad.output and "Traceback" not in bad.output
