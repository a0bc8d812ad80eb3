"""Strata in a Spark team's own project, without Spark (issue 31): their Spark settings merged as spark-submit
merges them, templates declared in loops, the options `strata.main()` takes, the decisions timeline at 100+
decisions."""

from __future__ import annotations

import functools
import io
import logging
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from strata.cli import app
from strata.model import SpecError
from strata.model.callables import describe, name_of, takes_one_argument, where_defined
from strata.model.user import DeclarationError, collecting, job, load_jobs
from strata.report import plots
from strata.report.html import DPI, _timeline
from strata.report.tables import decisions_by_lane
from strata.runners.live import RunRequest
from strata.spark.conf import ConfError, SparkSettings, parse_conf, read_properties, user_conf
from strata.spark.logs import log4j2_properties, python_loggers_to, users_own_logging
from strata.spark.session import driver_java_options, session_conf, strata_owned

# ---------------------------------------------------------------------- Spark settings


def test_conf_over_properties_file_over_spark_defaults(tmp_path):
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    (conf_dir / "spark-defaults.conf").write_text(
        "# the cluster's defaults\n"
        "spark.a   from-defaults\n"
        "spark.b   from-defaults\n"
        "spark.c   from-defaults\n"
        "spark.executor.extraJavaOptions -Dx=1 \\\n"
        "    -Dy=2\n"
    )
    props = tmp_path / "team.properties"
    props.write_text("! the team's\nspark.b=from-properties\nspark.c : from-properties\n\nspark.d from-properties\n")
    merged = user_conf(["spark.c=from-cli", "spark.e=x=y"], props, {"SPARK_CONF_DIR": str(conf_dir)})
    assert merged == {
        "spark.a": "from-defaults",
        "spark.b": "from-properties",
        "spark.c": "from-cli",
        "spark.executor.extraJavaOptions": "-Dx=1 -Dy=2",
        "spark.d": "from-properties",
        "spark.e": "x=y",
    }
    # without SPARK_CONF_DIR, $SPARK_HOME/conf (as spark-submit); with neither, no defaults file
    home = tmp_path / "home"
    (home / "conf").mkdir(parents=True)
    (home / "conf" / "spark-defaults.conf").write_text("spark.a 1\n")
    assert user_conf([], None, {"SPARK_HOME": str(home)}) == {"spark.a": "1"}
    assert user_conf(["spark.a=2"], None, {}) == {"spark.a": "2"}


def test_bad_settings_are_located(tmp_path):
    with pytest.raises(ConfError, match=r"--conf: expected KEY=VALUE .*found 'spark\.sql\.shuffle\.partitions'"):
        parse_conf(["spark.sql.shuffle.partitions"])
    with pytest.raises(ConfError, match=r"--conf: expected KEY=VALUE"):
        parse_conf(["=3"])
    missing = tmp_path / "nope.properties"
    with pytest.raises(ConfError, match=rf"--properties-file {missing}: expected a readable Spark properties file"):
        read_properties(missing, "--properties-file")
    bad = tmp_path / "bad.properties"
    bad.write_text("spark.a 1\n= 2\n")
    with pytest.raises(ConfError, match=rf"{bad}:2: expected 'key value'"):
        read_properties(bad, "--properties-file")


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--conf", "nonsense"], "--conf: expected KEY=VALUE"),
        (["--properties-file", "/no/such/file"], "--properties-file /no/such/file: expected a readable"),
    ],
)
def test_bad_settings_exit_2_before_spark_starts(tmp_path, args, said):
    jobs = tmp_path / "jobs.py"
    jobs.write_text("import strata.api as strata\n")
    result = CliRunner().invoke(app, ["run", str(jobs), "--out", str(tmp_path / "out"), *args])
    assert result.exit_code == 2
    assert said in result.output and "Traceback" not in result.output
    assert not (tmp_path / "out").exists()


def test_the_users_settings_win_except_what_the_engine_relies_on():
    strata = {
        "spark.master": "local[*]",
        "spark.scheduler.mode": "FAIR",
        "spark.sql.shuffle.partitions": "2",
        "spark.driver.extraJavaOptions": "-Xss16m",
    }
    user = {
        "spark.sql.shuffle.partitions": "8",
        "spark.scheduler.mode": "FIFO",
        "spark.master": "spark://h:7077",
        "spark.driver.extraJavaOptions": "-Dteam=1",
        "spark.jars.packages": "org.apache.spark:spark-sql-kafka-0-10_2.13:4.0.0",
    }
    conf = session_conf(strata, user, None)
    assert conf == {
        "spark.master": "spark://h:7077",
        "spark.scheduler.mode": "FAIR",
        "spark.sql.shuffle.partitions": "8",
        "spark.driver.extraJavaOptions": "-Dteam=1 -Xss16m",
        "spark.jars.packages": "org.apache.spark:spark-sql-kafka-0-10_2.13:4.0.0",
    }
    assert session_conf(strata, user, "local[2]")["spark.master"] == "local[2]"  # --master beats --conf
    (line,) = strata_owned(user)
    assert line.startswith("your Spark setting spark.scheduler.mode=FIFO is not used: Strata sets FAIR")
    assert strata_owned({"spark.scheduler.mode": "FAIR", "spark.sql.shuffle.partitions": "8"}) == []


def test_strata_s_driver_options_size_g1_regions_unless_the_user_does():
    work = Path("/w")
    assert driver_java_options(work, {}) == "-Dderby.system.home=/w -Xss16m -XX:G1HeapRegionSize=16m"
    theirs = {"spark.driver.extraJavaOptions": "-XX:G1HeapRegionSize=4m"}
    assert driver_java_options(work, theirs) == "-Dderby.system.home=/w -Xss16m"
    assert session_conf({"spark.driver.extraJavaOptions": driver_java_options(work, theirs)}, theirs, None) == {
        "spark.driver.extraJavaOptions": "-XX:G1HeapRegionSize=4m -Dderby.system.home=/w -Xss16m"
    }


def test_every_cell_gets_the_same_settings(tmp_path):
    """A fleet's child cell is started from its pickled spec: the run's request, the user's Spark settings in it."""
    import pickle

    from strata.runners.cell import CellSpec
    from strata.runners.spark_loop import RunConfig

    settings = SparkSettings((("spark.a", "1"), ("spark.b", "x y")), True)
    request = RunRequest(("jobs.py",), dedicated=("alerts",), spark=settings)
    spec = pickle.loads(pickle.dumps(CellSpec("c1", request, tmp_path / "strata", RunConfig())))
    assert spec.request.spark == settings and spec.request.spark.as_dict == {"spark.a": "1", "spark.b": "x y"}
    assert spec.home == Path("runs/latest") / "cells" / "c1"


def test_spark_log_lines_go_to_the_log_file_and_to_the_terminal_only_when_verbose(tmp_path):
    quiet = log4j2_properties(tmp_path / "spark.log", verbose=False)
    loud = log4j2_properties(tmp_path / "spark.log", verbose=True)
    assert f"appender.file.fileName = {tmp_path / 'spark.log'}" in quiet
    assert "rootLogger.level = warn" in quiet
    assert "appenderRef.console" not in quiet and "SYSTEM_ERR" not in quiet
    assert "rootLogger.appenderRef.console.ref = console" in loud and "SYSTEM_ERR" in loud
    # a team's own log4j2 configuration is theirs
    assert users_own_logging({"spark.driver.extraJavaOptions": "-Dlog4j2.configurationFile=x"}, {})
    (tmp_path / "log4j2.properties").write_text("rootLogger.level = info\n")
    assert users_own_logging({}, {"SPARK_CONF_DIR": str(tmp_path)})
    assert not users_own_logging({}, {})


def test_a_foreach_batch_traceback_goes_to_the_log_file_not_the_terminal(tmp_path, capsys):
    # py4j's callback server logs every foreachBatch call that raised, e.g. a batch cancelled by a query's stop
    python_loggers_to(tmp_path / "python.log", verbose=False)
    logging.getLogger("py4j.clientserver").error("There was an exception while executing the Python Proxy")
    assert "Python Proxy" in (tmp_path / "python.log").read_text()
    assert "Python Proxy" not in capsys.readouterr().err


def test_main_takes_exactly_strata_runs_options(tmp_path, monkeypatch):
    """`strata.main()` is `strata run`'s own command: its options, its checks, its exit codes."""
    import typer

    from strata.api import main

    run_command = typer.main.get_command(app).commands["run"]
    options = sorted(o for p in run_command.params if p.param_type_name == "option" for o in p.opts)
    assert {"--conf", "--properties-file", "--verbose", "--dedicate", "--sink", "--jobs"} <= set(options)
    monkeypatch.setattr("sys.argv", [str(tmp_path / "jobs.py")])
    with collecting():
        job("alerts", rank=1).template(lambda spark: spark)
        for argv, said in (
            (["--dedicate", "alerts", "--jobs", "alerts"], "--dedicate: expected no --jobs with it"),
            (["--sink", "kafka"], "--sink: expected parquet, memory or console"),
            (["--conf", "spark.a"], "--conf: expected KEY=VALUE"),
        ):
            err = io.StringIO()
            # its private _file, not the file property: undoing a set property would pin the console to the
            # stream pytest captured at the time, and later tests would lose what it prints
            monkeypatch.setattr("strata.cli.errors._file", err)
            with pytest.raises(SystemExit) as exited:
                main(argv)
            assert exited.value.code == 2 and said in err.getvalue()
        help_out = io.StringIO()
        monkeypatch.setattr("sys.stdout", help_out)
        with pytest.raises(SystemExit) as exited:
            main(["--help"])
        assert exited.value.code == 0
    shown = help_out.getvalue()
    assert all(o in shown for o in options)


# ---------------------------------------------------------------------- templates: any one-argument callable


class Shards:
    def build(self, spark, i=0):
        return (spark, i)

    def __call__(self, spark):
        return spark


def shard(spark, i):
    return (spark, i)


def test_any_callable_of_the_session_is_a_template():
    assert takes_one_argument(lambda spark, i=3: i)
    assert takes_one_argument(functools.partial(shard, i=3))
    assert takes_one_argument(Shards().build) and takes_one_argument(Shards())
    assert not takes_one_argument(shard) and not takes_one_argument(lambda: 1) and not takes_one_argument(3)
    assert not takes_one_argument(functools.partial(shard, 1, 2))
    assert [name_of(f) for f in (functools.partial(shard, i=1), Shards().build, Shards(), lambda s: s)] == [
        "shard",
        "build",
        "Shards",
        "lambda",
    ]
    file, line = where_defined(functools.partial(shard, i=1))
    assert file == __file__ and line == shard.__code__.co_firstlineno
    assert where_defined(Shards()) == (__file__, Shards.__call__.__code__.co_firstlineno)
    text = describe(shard)
    assert text == f"shard(spark, i) at {__file__}:{shard.__code__.co_firstlineno}"


def test_a_refused_template_is_named_by_qualified_name_and_place():
    with collecting():
        j = job("j", rank=1)
        with pytest.raises(DeclarationError) as err:
            j.template(Shards.build)  # the class's function, not bound: self and spark both required
    line = Shards.build.__code__.co_firstlineno
    assert "one required argument" in err.value.expected
    assert err.value.found == f"Shards.build(self, spark, i=0) at {__file__}:{line}"


def test_twenty_jobs_in_a_loop_with_defaults_and_with_partial_are_declared(tmp_path):
    f = tmp_path / "loop.py"
    f.write_text(
        textwrap.dedent(
            """
            import functools
            import strata.api as strata

            def shard(spark, i):
                return i

            for i in range(20):
                j = strata.job(f"default{i}", rank=1)
                def build(spark, i=i):
                    return i
                j.template(build)
                strata.job(f"partial{i}", rank=2).template(functools.partial(shard, i=i))
            """
        )
    )
    jobs = load_jobs(f)
    assert len(jobs) == 40
    assert [j.templates["build"](None) for j in jobs if j.id.startswith("default")] == list(range(20))
    assert [j.templates["shard"](None) for j in jobs if j.id.startswith("partial")] == list(range(20))
    f.write_text("import strata.api as strata\nfor i in range(2):\n    strata.job(f'j{i}', rank=1).template(len)\n")
    assert len(load_jobs(f)) == 2  # a builtin taking one argument is a callable of the session too
    f.write_text("import strata.api as strata\ndef build(spark, i):\n    pass\nstrata.job('j', rank=1).template(build)")
    with pytest.raises(SpecError) as err:
        load_jobs(f)
    (problem,) = err.value.problems
    assert problem.line == 4 and problem.found == f"build(spark, i) at {f}:2"


# ---------------------------------------------------------------------- the report at 100+ decisions


def many_decisions(n: int = 120, seed: int = 3) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    kinds = ["pool", "rate cap", "moves", "template", "admit"]
    return pd.DataFrame(
        {
            "mode": "strata",
            "t": rng.uniform(-5, 60, n),
            "epoch": 1,
            "kind": [kinds[k] for k in rng.integers(0, len(kinds), n)],
            "job": [f"job{k}" for k in rng.integers(0, 4, n)],
            "detail": [f"w{k} (0.{k} cores), kg{k}→p{k % 4}" for k in range(n)],
            "reasons": "hotspot",
        }
    )


def test_the_timeline_at_120_decisions_has_one_row_per_kind_and_job_and_no_overlapping_labels():
    decisions = many_decisions()
    gate = pd.DataFrame({"mode": ["strata"], "t": [1.0], "query": ["job0"], "wait_s": [0.1], "pool": ["urgent"]})
    timeline = plots.decisions_timeline(decisions, gate, 60.0)
    fig, ax = timeline.figure, timeline.lanes_axes
    lanes = set(zip(decisions["kind"], decisions["job"], strict=True))
    assert len(ax.get_yticks()) == len(lanes) == 20
    assert [t for t in ax.texts] == []  # no per-decision text: details are hover text and the table
    assert len(timeline.marks) == 120
    renderer = fig.canvas.get_renderer()
    boxes = [label.get_window_extent(renderer) for label in ax.get_yticklabels()]
    assert all(not a.overlaps(b) for k, a in enumerate(boxes) for b in boxes[k + 1 :])
    # each hover area of the HTML sits on its decision's marker in the PNG (a coloured pixel, not the background)
    html_text = _timeline(timeline)
    import base64
    import re

    import matplotlib.image

    png = base64.b64decode(re.search(r"base64,([^\"]+)", html_text).group(1))
    image = matplotlib.image.imread(io.BytesIO(png), format="png")
    areas = [tuple(map(int, c.split(","))) for c in re.findall(r'coords="([^"]+)"', html_text)]
    assert len(areas) == 120 and image.shape[1] == round(fig.get_figwidth() * DPI)
    assert all(image[y, x, :3].min() < 0.9 for x, y, _ in areas)
    rows = decisions_by_lane(decisions)
    assert len(rows) == 20 and sum(int(r["decisions"]) for r in rows) == 120
