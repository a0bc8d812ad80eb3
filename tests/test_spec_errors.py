"""Every class of bad spec exits 2 with a located message (file, line, path, expected, found)."""

from __future__ import annotations

import textwrap

import pytest
from typer.testing import CliRunner

from strata.cli import app

runner = CliRunner()

GOOD_JOB = """
  - id: a
    rank: 1
    templates:
      - operators:
          - {name: s, kind: source, source: {rate: 10}}
          - {name: f, kind: filter}
          - {name: k, kind: sink}
        streams:
          - {from: s, to: f}
          - {from: f, to: k}
"""
CLUSTER = """
cluster:
  nodes:
    - {name: n0, cores: 4, labels: [ssd]}
"""


def run_validate(tmp_path, text: str):
    spec = tmp_path / "spec.yaml"
    spec.write_text(textwrap.dedent(text))
    result = runner.invoke(app, ["validate", str(spec)])
    return spec, result


CASES = {
    "unknown field": (
        CLUSTER + "jobs:" + GOOD_JOB.replace("rank: 1", "rank: 1\n    colour: red"),
        ["jobs[0].colour", "unknown field 'colour'", ":8:"],
    ),
    "wrong type": (
        CLUSTER + "jobs:" + GOOD_JOB.replace("rank: 1", "rank: high"),
        ["jobs[0].rank", "valid integer", "'high'"],
    ),
    "stream names a missing operator": (
        CLUSTER + "jobs:" + GOOD_JOB.replace("{from: f, to: k}", "{from: f, to: kk}"),
        ["jobs[0].templates[0].streams[1].to", "an operator of template", "'kk'", ":15:"],
    ),
    "cycle": (
        CLUSTER
        + "jobs:"
        + GOOD_JOB.replace(
            "- {name: f, kind: filter}", "- {name: f, kind: filter}\n          - {name: g, kind: map}"
        ).replace(
            "- {from: f, to: k}", "- {from: f, to: g}\n          - {from: g, to: f}\n          - {from: g, to: k}"
        ),
        ["jobs[0].templates[0].streams", "acyclic", "cycle", "f → g → f"],
    ),
    "zero capacity": (
        CLUSTER.replace("cores: 4", "cores: 0") + "jobs:" + GOOD_JOB,
        ["cluster.nodes[0].cores", "greater than 0", "found 0"],
    ),
    "negative capacity": (
        CLUSTER.replace("cores: 4, ", "cores: 4, nic: -5, ") + "jobs:" + GOOD_JOB,
        ["cluster.nodes[0].nic", "greater than 0", "-5"],
    ),
    "colocate and exlocate the same pair": (
        CLUSTER
        + "jobs:"
        + GOOD_JOB.replace(
            "- {name: f, kind: filter}",
            "- {name: f, kind: filter, constraints: {colocate_with: [s], exlocate_from: [s]}}",
        ),
        ["jobs[0].templates[0].operators[1].constraints.exlocate_from", "not also in colocate_with", "'s'"],
    ),
    "colocate one way, exlocate the other": (
        CLUSTER
        + "jobs:"
        + GOOD_JOB.replace(
            "- {name: f, kind: filter}", "- {name: f, kind: filter, constraints: {colocate_with: [s]}}"
        ).replace("{name: s, kind: source,", "{name: s, kind: source, constraints: {exlocate_from: [f]},"),
        ["constraints.colocate_with", "'s' exlocates 'f'"],
    ),
    "required label no node has": (
        CLUSTER
        + "jobs:"
        + GOOD_JOB.replace(
            "- {name: f, kind: filter}", "- {name: f, kind: filter, constraints: {required_labels: [gpu]}}"
        ),
        ["jobs[0].templates[0].operators[1].constraints.required_labels", "labels some node has", "gpu"],
    ),
    "required job that cannot fit alone": (
        CLUSTER
        + "jobs:"
        + GOOD_JOB.replace("rank: 1", "rank: 1\n    required: true").replace(
            "- {name: f, kind: filter}", "- {name: f, kind: filter, cpu_min: 9}"
        ),
        ["jobs[0].required", "fits the cluster's 4 cores", "cpu_min 9 cores"],
    ),
    "fixed node not in cluster": (
        CLUSTER
        + "jobs:"
        + GOOD_JOB.replace("- {name: f, kind: filter}", "- {name: f, kind: filter, constraints: {fixed_node: n9}}"),
        ["constraints.fixed_node", "a node of the cluster", "'n9'"],
    ),
    "bad unit": (
        CLUSTER.replace("cores: 4, ", "cores: 4, memory: 16 gigs, ") + "jobs:" + GOOD_JOB,
        ["cluster.nodes[0].memory", "a size such as", "16 gigs"],
    ),
    "unknown value function kind": (
        CLUSTER + "jobs:" + GOOD_JOB.replace("{from: f, to: k}", "{from: f, to: k, value: {kind: cubic}}"),
        ["jobs[0].templates[0].streams[1].value", "cubic"],
    ),
    "not yaml": ("cluster: [unclosed", ["valid YAML"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_spec_is_located_and_exits_2(tmp_path, case):
    text, needles = CASES[case]
    spec, result = run_validate(tmp_path, text)
    assert result.exit_code == 2, result.output
    message = result.stderr if hasattr(result, "stderr") else result.output
    assert str(spec) in message
    for needle in needles:
        assert needle in message, f"{needle!r} not in {message!r}"


def test_good_spec_passes(tmp_path):
    _, result = run_validate(tmp_path, CLUSTER + "jobs:" + GOOD_JOB)
    assert result.exit_code == 0, result.output


def test_several_problems_reported_together(tmp_path):
    text = CLUSTER.replace("cores: 4", "cores: -1") + "jobs:" + GOOD_JOB.replace("rank: 1", "rank: x")
    _, result = run_validate(tmp_path, text)
    assert result.exit_code == 2
    assert "cluster.nodes[0].cores" in result.stderr and "jobs[0].rank" in result.stderr


def test_split_files_locate_in_their_own_file(tmp_path):
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(textwrap.dedent(CLUSTER))
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(textwrap.dedent("jobs:" + GOOD_JOB.replace("{from: f, to: k}", "{from: f, to: zz}")))
    result = runner.invoke(app, ["validate", str(cluster), str(jobs)])
    assert result.exit_code == 2
    assert f"{jobs}:" in result.stderr and "'zz'" in result.stderr
    ok = runner.invoke(app, ["validate", str(cluster), str(tmp_path / "missing.yaml")])
    assert ok.exit_code == 2 and "missing.yaml" in ok.stderr
