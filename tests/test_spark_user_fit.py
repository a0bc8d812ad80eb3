"""Strata in a Spark team's own project, on Spark (issue 31).

Known answers: a setting given with ``--conf`` is what the session holds, over ``--properties-file``, over
``$SPARK_CONF_DIR/spark-defaults.conf``, over Strata's defaults, except the scheduler mode Strata keeps (and says
so); a misspelt column prints Strata's located error and no Spark log line (Spark's lines, PySpark's JSON
``DataFrameQueryContextLogger`` line among them, are in the run's
``spark.log``; ``--verbose`` shows them); twenty jobs declared in a loop — ``i=i`` defaults and
``functools.partial`` — each write exactly their own shard.
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from strata.model.user import collecting, job, memory, with_python_jobs
from strata.runners.spark_loop import RunConfig, run_mode

STRATA = str(Path(sys.executable).with_name("strata"))
EVENTS = "id LONG, event_time TIMESTAMP, key LONG, value DOUBLE"
SPARK_LINE = re.compile(r"\b(WARN|ERROR|INFO)\b [\w$.]+:|\"logger\"|QueryContextLogger")


def events(folder: Path, n: int = 200) -> pd.DataFrame:
    """One JSON file of ``n`` records, keys 0..19 in turn, all already due."""
    folder.mkdir(parents=True, exist_ok=True)
    now = pd.Timestamp.now(tz="UTC").floor("ms")
    frame = pd.DataFrame(
        {"id": range(n), "event_time": [now - pd.Timedelta(seconds=2)] * n, "key": [k % 20 for k in range(n)]}
    )
    frame["value"] = frame["id"] / n
    rows = frame.assign(event_time=frame["event_time"].map(lambda t: t.isoformat()))
    (folder / "part-0.json").write_text("\n".join(json.dumps(r) for r in rows.to_dict("records")) + "\n")
    return frame


JOBS = """
import json
import strata.api as strata

EVENTS = "{schema}"

seen = strata.job("seen", rank=1)

@seen.template
def build(spark):
    keys = ["spark.team.cli", "spark.team.props", "spark.team.defaults", "spark.sql.shuffle.partitions",
            "spark.scheduler.mode"]
    with open("{seen}", "w") as f:
        json.dump({{k: spark.conf.get(k, None) for k in keys}}, f)
    return spark.readStream.format("json").schema(EVENTS).load("{input}")

misspelt = strata.job("misspelt", rank=2)

@misspelt.template
def select(spark):
    events = spark.readStream.format("json").schema(EVENTS).load("{input}")
    return events.select("event_time", "valeu")
"""


def strata_run(tmp_path: Path, *extra: str) -> tuple[subprocess.CompletedProcess, Path, Path]:
    events(tmp_path / "input")
    jobs = tmp_path / "jobs.py"
    seen = tmp_path / "seen.json"
    jobs.write_text(JOBS.format(schema=EVENTS, seen=seen, input=tmp_path / "input"))
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir(exist_ok=True)
    (conf_dir / "spark-defaults.conf").write_text(
        "spark.team.defaults  from-defaults\nspark.team.props  from-defaults\nspark.team.cli  from-defaults\n"
    )
    props = tmp_path / "team.properties"
    props.write_text("spark.team.props=from-properties\nspark.team.cli=from-properties\n")
    env = {**os.environ, "SPARK_CONF_DIR": str(conf_dir)}
    out = tmp_path / "out"
    args = [STRATA, "run", str(jobs), "--out", str(out), "--duration", "10", "--properties-file", str(props)]
    run = subprocess.run([*args, *extra], capture_output=True, text=True, env=env, timeout=300)
    return run, seen, out


@pytest.mark.spark
def test_settings_reach_the_session_and_a_misspelt_column_is_strata_s_line_alone(tmp_path):
    conf = ["--conf", "spark.team.cli=from-cli", "--conf", "spark.sql.shuffle.partitions=3"]
    run, seen, out = strata_run(tmp_path, *conf, "--conf", "spark.scheduler.mode=FIFO")
    assert json.loads(seen.read_text()) == {
        "spark.team.cli": "from-cli",
        "spark.team.props": "from-properties",
        "spark.team.defaults": "from-defaults",
        "spark.sql.shuffle.partitions": "3",  # the user's, over Strata's default of 2
        "spark.scheduler.mode": "FAIR",  # Strata's: its pools
    }
    assert run.returncode == 2
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert lines[0].startswith("note your Spark setting spark.scheduler.mode=FIFO is not used: Strata sets FAIR")
    assert lines[1].startswith(f"error {tmp_path / 'jobs.py'}:") and "valeu" in lines[1]
    assert "a query Spark can analyse" in run.stderr
    assert not [line for line in (run.stdout + run.stderr).splitlines() if SPARK_LINE.search(line)]
    assert "Traceback" not in run.stdout + run.stderr
    log = (out / "spark.log").read_text()
    assert "DataFrameQueryContextLogger" in log and "valeu" in log  # PySpark's JSON line: collected, not lost
    assert "WARNING: Using incubator modules" in log  # the JVM's own stderr, outside log4j


@pytest.mark.spark
def test_verbose_shows_spark_s_own_lines(tmp_path):
    run, _, out = strata_run(tmp_path, "--verbose")
    assert run.returncode == 2
    assert "DataFrameQueryContextLogger" in run.stderr and "valeu" in run.stderr
    assert "DataFrameQueryContextLogger" in (out / "spark.log").read_text()


def shard_of(root: Path, spark, i: int):
    from pyspark.sql import functions as F

    return spark.readStream.format("json").schema(EVENTS).load(str(root)).filter(F.col("key") == i)


@pytest.mark.spark
def test_twenty_jobs_declared_in_a_loop_each_write_their_own_shard(spark, tmp_path):
    frame = events(tmp_path / "input")
    with collecting() as declared:
        for i in range(10):
            j = job(f"default{i}", rank=1, sink=memory())

            def build(spark, i=i):
                return shard_of(tmp_path / "input", spark, i)

            j.template(build)
        for i in range(10, 20):
            job(f"partial{i}", rank=1, sink=memory()).template(functools.partial(shard_of, tmp_path / "input", i=i))
        jobs = list(declared)
    scenario = with_python_jobs(jobs, [], "loop", cores=2)
    engines = []

    def done() -> bool:  # each shard holds 10 of the 200 records
        segments = engines[0].segments if engines else []
        return len(segments) == 20 and all(len(s.pipeline.result()) >= 10 for s in segments)

    epoch, memory_sinks = time.time(), RunConfig(sink="memory")
    hooks = {"should_stop": done, "on_engine": engines.append}
    result = run_mode(spark, scenario, "strata", tmp_path / "run", memory_sinks, epoch, epoch + 150, **hooks)
    assert not result.engine.failures()
    by_job = {s.job: s.pipeline.result() for s in result.engine.segments}
    assert sorted(by_job) == sorted([f"default{i}" for i in range(10)] + [f"partial{i}" for i in range(10, 20)])
    for name, out in by_job.items():
        i = int(name.removeprefix("default").removeprefix("partial"))
        assert sorted(out["id"]) == sorted(frame.loc[frame["key"] == i, "id"]), name
