"""strata validate knows the engines and several files (issue 16, deliverable 4)."""

from __future__ import annotations

from typer.testing import CliRunner

from strata.cli import app

from .conftest import EXAMPLES

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
