"""Verdicts that never cry wolf: a query no replay reproduces is "not verifiable", never "records lost" (issue 29.6)."""

from __future__ import annotations

import pandas as pd
import pytest
from typer.testing import CliRunner

from strata.cli import app
from strata.report.console import verification_line
from strata.report.tables import Verdict, verdict
from strata.spark.replay import plan_reason, sql_calls

from .conftest import EXAMPLES


@pytest.mark.parametrize(
    ("text", "calls"),
    [
        ("rand() < 0.1", ["rand"]),
        ("RAND(42) < 0.1 and uuid() is not null", ["rand", "uuid"]),
        ("pmod(id, 10) = 0", []),
        ("value > 0.95", []),
        ("'rand()' = label", []),  # inside a string literal: not a call
        ("random_label = 'x'", []),  # a column whose name starts with a function's
        ("event_time < current_timestamp", ["current_timestamp"]),  # Spark SQL's bracket-less form
        ("monotonically_increasing_id() % 2 = 0 or now() > event_time", ["monotonically_increasing_id", "now"]),
    ],
)
def test_sql_calls_finds_exactly_the_nondeterministic_and_clock_functions(text, calls):
    assert sql_calls(text) == calls


def test_in_a_plan_a_clock_name_without_brackets_is_a_column():
    assert sql_calls("Project [current_date#12, value#3]", bare=False) == []
    assert sql_calls("Project [current_date() AS d#12]", bare=False) == ["current_date"]


def _checks(rows):
    base = {"rows_read": 100, "expected": 10, "delivered": 10, "missing": 0, "duplicated": 0, "wrong": 0}
    return pd.DataFrame([{**base, **r} for r in rows])


def test_verdict_counts_only_what_a_recomputation_could_verify():
    checks = _checks(
        [
            {"job": "alerts", "template": "exact", "unverifiable": ""},
            {"job": "counts", "template": "sampled", "missing": 7, "duplicated": 3, "unverifiable": "rand() in it"},
            {"job": "counts", "template": "sampled", "unverifiable": "rand() in it"},  # a second segment: one line
            {"job": "alerts", "template": "exact", "missing": 2, "wrong": 1, "unverifiable": ""},
        ]
    )
    assert verdict(checks) == Verdict(2, 200, 2, 0, 1, (("counts", "sampled", "rand() in it"),))
    # read back from CSV, an empty reason is NaN: still verifiable
    assert verdict(checks.assign(unverifiable=[None, "rand() in it", "rand() in it", None])).missing == 2
    # a checks table written before the column existed: every segment was verified
    assert verdict(checks.drop(columns="unverifiable")).missing == 9


def test_the_verification_line_says_not_verifiable_instead_of_lost():
    line = verification_line(
        _checks(
            [
                {"job": "alerts", "template": "exact", "unverifiable": ""},
                {"job": "counts", "template": "sampled", "unverifiable": "rand() in its query"},
            ]
        )
    )
    assert line.startswith("[green]exactly once[/]: every sink equals the reference recomputed from the 100 input")
    assert "(1 query segments, every mode)" in line
    assert "[yellow]not verifiable[/]: counts (sampled): rand() in its query" in line
    assert "mismatch" not in line


def test_validate_warns_at_the_nondeterministic_predicate(tmp_path):
    spec = tmp_path / "sampled.yaml"
    spec.write_text((EXAMPLES / "pipeline.yaml").read_text().replace("pmod(id, 10) = 0", "rand() < 0.1"))
    result = CliRunner().invoke(app, ["validate", str(spec)])
    assert result.exit_code == 0, result.output
    assert f"warning not verifiable on Spark: {spec}:59: jobs[1].templates[1].operators[1].predicate" in result.output
    assert "found rand() in 'rand() < 0.1'" in result.output
    clean = CliRunner().invoke(app, ["validate", str(EXAMPLES / "pipeline.yaml")])
    assert clean.exit_code == 0 and "not verifiable" not in clean.output


@pytest.mark.spark
def test_spark_analyser_names_what_no_replay_reproduces(spark):
    from pyspark.sql import functions as F

    stream = spark.readStream.format("rate").load()
    same = F.udf(lambda v: v, "long")
    assert plan_reason(stream.filter("pmod(value, 10) = 0")) is None
    assert plan_reason(stream.select(same("value"))) is None  # Spark's own default: a UDF is deterministic
    sampled = plan_reason(stream.filter("rand() < 0.1"))
    assert sampled == "rand() in its query: a replay or a recomputation draws other values"
    declared = plan_reason(stream.select(same.asNondeterministic()("value")))
    assert declared.startswith("a nondeterministic expression (e.g. a UDF so declared) in its query")
    clock = plan_reason(stream.select("value", F.current_timestamp().alias("seen")))
    assert clock == "current_timestamp() in its query: a recomputation cannot know the batch's clock"
