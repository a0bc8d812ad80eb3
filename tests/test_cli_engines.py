"""strata validate knows the engines, several files and Python jobs files (issue 16, deliverable 4)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from strata.cli import app

from .conftest import EXAMPLES, ROOT

runner = CliRunner()
PIPELINE = (EXAMPLES / "pipeline.yaml").read_text()


def test_validate_says_which_engine_runs_each_job_and_why_not(tmp_path):
    spec = tmp_path / "sql.yaml"
    spec.write_text(
        PIPELINE.replace('predicate: "value > 0.95"', 'predicate: "value >>> "').replace(
            "pmod(id, 10) = 0", "frobnicate(value) < 0.1"
        )
    )
    result = runner.invoke(app, ["validate", str(spec)])
    assert result.exit_code == 0, result.output
    assert "simulator; not Spark (1 problem below)" in result.output
    assert f"note Spark (strata run): {spec}:21: jobs[0].templates[0].operators[1].predicate: " in result.output
    assert "expected a complete Spark SQL expression; found 'value >>> '" in result.output
    assert f"{spec}:59: jobs[1].templates[1].operators[1].predicate" in result.output
    assert "unknown function 'frobnicate'" in result.output
    strict = runner.invoke(app, ["validate", "--engine", "spark", str(spec)])
    assert strict.exit_code == 2 and "error Spark (strata run)" in strict.output
    assert runner.invoke(app, ["validate", "--engine", "sim", str(spec)]).exit_code == 0


def test_shared_streams_and_two_aggregations_are_spark_refusals(tmp_path):
    spec = tmp_path / "agg.yaml"
    spec.write_text(
        PIPELINE.replace(
            "          - {from: clicks, to: per_key}\n",
            "          - {from: clicks, to: per_key}\n",
        ).replace('kind: filter, predicate: "pmod(id, 10) = 0"', "kind: window_aggregate, window: {size_s: 5}")
    )
    result = runner.invoke(app, ["validate", "--engine", "spark", str(spec)])
    assert result.exit_code == 2, result.output
    assert "at most one aggregation per template on Spark" in result.output
    assert "jobs[1].templates[1].operators[2].kind" in result.output


def test_several_complete_files_are_validated_one_by_one():
    files = [str(p) for p in sorted(EXAMPLES.glob("*.yaml"))]
    result = runner.invoke(app, ["validate", *files])
    assert result.exit_code == 0, result.output
    assert "2 complete scenario files validated one by one" in result.output
    assert "demo (" in result.output and "pipeline (" in result.output
    assert "Spark and simulator" in result.output


def test_parts_of_one_scenario_are_merged_only_when_none_is_complete_or_asked(tmp_path):
    head, jobs = PIPELINE.split("jobs:", 1)
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(head)
    only_jobs = tmp_path / "jobs.yaml"
    only_jobs.write_text("jobs:" + jobs)
    merged = runner.invoke(app, ["validate", str(cluster), str(only_jobs)])
    assert merged.exit_code == 0, merged.output
    assert "2 files merged into one scenario (none is complete on its own)" in merged.output
    mixed = runner.invoke(app, ["validate", str(EXAMPLES / "demo.yaml"), str(only_jobs)])
    assert mixed.exit_code == 2
    assert "not complete on its own (pass --merge" in mixed.output
    assert f"{only_jobs}:1: <document>: expected a 'cluster' section" in mixed.output
    asked = runner.invoke(app, ["validate", "--merge", str(cluster), str(only_jobs)])
    assert asked.exit_code == 0 and "merged into one scenario (--merge)" in asked.output


TEAM_B = ROOT / "benchmarks" / "workloads" / "team_b" / "jobs.py"


def _rows(output: str) -> dict[str, list[str]]:
    """The summary table's rows by job id: each cell's text."""
    cells = [[c.strip() for c in line.split("│")[1:-1]] for line in output.splitlines() if line.startswith("│")]
    return {row[0]: row for row in cells}


def test_a_python_jobs_file_is_validated_as_strata_run_loads_it():
    result = runner.invoke(app, ["validate", str(TEAM_B)])
    assert result.exit_code == 0, result.output
    rows = _rows(result.output)
    ranks = {job: row[1] for job, row in rows.items()}
    assert ranks == {"anomalies": "1", "bucket_counts": "2", "route_scores": "3", "enriched": "4", "orders_once": "5"}
    assert rows["anomalies"][2] == "yes" and rows["bucket_counts"][2] == ""
    assert rows["anomalies"][3:6] == ["1", "3", "1.5"]
    assert rows["orders_once"][6] == "Spark only (Python query, jobs.py:97)"
    assert "Spark and simulator" not in result.output
    assert "5 Python job(s): each query is built and analysed by Spark when it runs" in result.output
    strict = runner.invoke(app, ["validate", "--engine", "sim", str(TEAM_B)])
    assert strict.exit_code == 2
    assert f"error the simulator: {TEAM_B}:39: expected job 'anomalies': a job the simulator can run" in strict.output
    assert runner.invoke(app, ["validate", "--engine", "spark", str(TEAM_B)]).exit_code == 0


def test_yaml_and_python_files_are_one_run(tmp_path):
    jobs = tmp_path / "extra.py"
    jobs.write_text(
        "import strata.api as strata\n\nextra = strata.job('extra', rank=7, target_latency_s=4)\n\n\n"
        "@extra.template\ndef full(spark):\n    return spark.readStream.format('rate').load()\n"
    )
    result = runner.invoke(app, ["validate", str(EXAMPLES / "pipeline.yaml"), str(jobs)])
    assert result.exit_code == 0, result.output
    assert "2 files validated as one run, as `strata run` takes them" in result.output
    rows = _rows(result.output)
    assert rows["extra"][1] == "7" and rows["extra"][6] == "Spark only (Python query, extra.py:3)"
    assert [row[6] for job, row in rows.items() if job != "extra"] == ["Spark and simulator"] * (len(rows) - 1)


@pytest.mark.parametrize(
    ("declaration", "line", "expected"),
    [
        (
            "j = strata.job('a', rank=-1)\n",
            3,
            "expected job('a'): rank: an integer ≥ 0 (lower is more important); found -1",
        ),
        (
            "j = strata.job('a', rank=1)\nj.template('full')(42)\n",
            4,
            "expected job 'a': template: a callable taking the session as its one required argument",
        ),
        ("j = strata.job('a', rank=1)\n", 3, "expected job 'a': at least one @template; found none"),
        ("j = strata.job('a', rank=1\n", 3, "expected valid Python; found"),
    ],
)
def test_a_bad_declaration_is_located_with_exit_2(tmp_path, declaration, line, expected):
    jobs = tmp_path / "jobs.py"
    jobs.write_text("import strata.api as strata\n\n" + declaration)
    result = runner.invoke(app, ["validate", str(jobs)])
    assert result.exit_code == 2, result.output
    assert f"error {jobs}:{line}: {expected}" in result.output
    assert "Traceback" not in result.output and isinstance(result.exception, SystemExit)


def test_a_file_needing_a_session_at_import_is_not_failed_without_spark(tmp_path):
    jobs = tmp_path / "jobs.py"
    # what a UDF with a type string (F.udf(f, 'double')) raises at import while no session exists, raised as
    # such: whether a session exists depends on which tests ran before in the process
    jobs.write_text(
        "from pyspark.errors import PySparkRuntimeError\nimport strata.api as strata\n\n"
        "raise PySparkRuntimeError(errorClass='SESSION_OR_CONTEXT_NOT_EXISTS', messageParameters={})\n"
    )
    result = runner.invoke(app, ["validate", str(jobs)])
    assert result.exit_code == 0, result.output
    assert f"warning not validated without Spark: {jobs}:4: expected a file that runs; found PySparkRuntimeError" in (
        result.output.replace("\n", "")
    )
    assert "SESSION_OR_CONTEXT_NOT_EXISTS" in result.output
