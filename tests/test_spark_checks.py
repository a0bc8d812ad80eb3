"""What Spark cannot run is refused before any session starts, with a located message (exit 2)."""

from __future__ import annotations

import itertools

import pytest
from typer.testing import CliRunner

from strata.cli import app
from strata.model import Job
from strata.spark.pipelines import check_template, operator_chain

HEAD = "cluster: {nodes: [{name: n0, cores: 2}]}\njobs:\n"


def job(*ops: dict, streams: list[tuple[str, str]] | None = None) -> Job:
    names = [o["name"] for o in ops]
    pairs = streams if streams is not None else list(itertools.pairwise(names))
    return Job.model_validate(
        {
            "id": "j",
            "rank": 1,
            "templates": [{"operators": list(ops), "streams": [{"from": a, "to": b} for a, b in pairs]}],
        }
    )


SRC = {"name": "s", "kind": "source", "source": {"rate": 10}}
OUT = {"name": "o", "kind": "sink"}
WIN = {"name": "w", "kind": "window_aggregate", "window": {"size_s": 5}}
KEY = {"name": "k", "kind": "keyed_stateful"}
JOIN = {"name": "x", "kind": "join"}


def problems(j: Job) -> list[tuple[tuple, str]]:
    return [(p.path, p.expected) for p in check_template(j, j.templates[0], ("jobs", 0, "templates", 0))]


def test_a_plain_chain_is_accepted_in_stream_order():
    j = job(SRC, {"name": "f", "kind": "filter", "predicate": "value > 0"}, KEY, OUT)
    assert problems(j) == []
    shuffled = job(OUT, KEY, SRC, streams=[("s", "k"), ("k", "o")])
    assert operator_chain(shuffled.templates[0]) == [2, 1, 0]


@pytest.mark.parametrize(
    ("ops", "streams", "where", "expected"),
    [
        ((SRC, WIN, KEY, OUT), None, ("operators", 2, "kind"), "at most one aggregation"),
        ((SRC, KEY, JOIN, OUT), None, ("operators", 2, "kind"), "stream–static join before the aggregation"),
        ((SRC, {"name": "f", "kind": "filter"}, OUT), None, ("operators", 1, "predicate"), "boolean expression"),
        ((SRC, {"name": "m", "kind": "map"}, OUT), None, ("operators", 1, "expressions"), "select expressions"),
        (
            (SRC, {**WIN, "window": {"size_s": 2, "slide_s": 5}}, OUT),
            None,
            ("operators", 1, "window", "slide_s"),
            "a slide ≤ size_s",
        ),
        ((SRC, KEY, WIN, OUT), [("s", "k"), ("s", "w"), ("k", "o"), ("w", "o")], ("operators", 0), "a chain source"),
        (
            ({**SRC, "source": {"rate": 5, "arrivals": {"process": "trace", "path": "t.csv"}}}, OUT),
            None,
            ("operators", 0, "source", "arrivals", "process"),
            "trace replay does not run on Spark",
        ),
    ],
)
def test_unsupported_combinations_are_located(ops, streams, where, expected):
    found = problems(job(*ops, streams=streams))
    assert any(path == ("jobs", 0, "templates", 0, *where) and expected in exp for path, exp in found), found


def test_strata_run_refuses_an_unsupported_spec_before_starting_spark(tmp_path):
    spec = tmp_path / "two_aggs.yaml"
    spec.write_text(
        HEAD
        + """\
  - id: j
    rank: 1
    templates:
      - operators:
          - {name: s, kind: source, source: {rate: 10}}
          - {name: w, kind: window_aggregate, window: {size_s: 5}}
          - {name: k, kind: keyed_stateful}
          - {name: o, kind: sink}
        streams: [{from: s, to: w}, {from: w, to: k}, {from: k, to: o}]
"""
    )
    result = CliRunner().invoke(app, ["run", str(spec), "--out", str(tmp_path / "run")])
    assert result.exit_code == 2
    assert f"{spec}:9: jobs[0].templates[0].operators[2].kind: expected at most one aggregation" in result.output
    assert not (tmp_path / "run").exists()


def test_strata_run_rejects_an_unknown_sink(tmp_path):
    result = CliRunner().invoke(app, ["run", "nothing.yaml", "--sink", "kafka"])
    assert result.exit_code == 2 and "--sink" in result.output
