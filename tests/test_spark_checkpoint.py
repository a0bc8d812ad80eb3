"""The checkpoint guard's pieces without Spark: fingerprints, their differences, where a checkpoint stopped."""

from __future__ import annotations

import json

from strata.model import Scenario
from strata.spark import checkpoint


def job(predicate: str = "value < 0.5", cost: float = 1e-4):
    return Scenario.model_validate(
        {
            "cluster": {"nodes": [{"name": "n0", "cores": 2}]},
            "jobs": [
                {
                    "id": "copy",
                    "rank": 1,
                    "templates": [
                        {
                            "operators": [
                                {"name": "s", "kind": "source", "source": {"rate": 200, "keys": {"count": 10}}},
                                {"name": "f", "kind": "filter", "predicate": predicate, "cost_per_record": cost},
                                {"name": "o", "kind": "sink"},
                            ],
                            "streams": [{"from": "s", "to": "f"}, {"from": "f", "to": "o"}],
                        }
                    ],
                }
            ],
        }
    ).jobs[0]


def print_of(j, sink: str = "parquet") -> dict:
    return checkpoint.fingerprint(j, j.templates[0], sink, {"state_partitions": 2, "managed": []})


def test_a_planning_prior_is_not_part_of_the_query_but_a_predicate_is():
    base = print_of(job())
    assert checkpoint.differences(base, print_of(job(cost=5e-3))) == []  # the planner's prior, not a result
    assert checkpoint.differences(base, print_of(job("value < 0.3"))) == [
        "operators[1].predicate: 'value < 0.5' → 'value < 0.3'"
    ]
    assert checkpoint.differences(base, print_of(job(), sink="memory")) == ["sink: 'parquet' → 'memory'"]


def test_differences_name_added_and_removed_fields():
    assert checkpoint.differences({"a": 1}, {"a": 1, "b": 2}) == ["b: added (2)"]
    assert checkpoint.differences({"a": 1, "b": 2}, {"a": 1}) == ["b: removed (was 2)"]
    assert checkpoint.differences({"x": [1, 2]}, {"x": [1, 2, 3]}) == ["x: [1, 2] → [1, 2, 3]"]


def test_the_last_committed_batch_and_its_end_row_are_read_from_the_checkpoint(tmp_path):
    query = tmp_path / "checkpoints" / "copy"
    (query / "offsets").mkdir(parents=True)
    (query / "commits").mkdir()
    for batch, row in ((0, 100), (1, 250), (2, 400)):
        meta = json.dumps({"batchWatermarkMs": 0})
        (query / "offsets" / str(batch)).write_text(f"v1\n{meta}\n{json.dumps({'row': row, 'epoch': 1.0})}")
    for batch in (0, 1):  # batch 2 was planned but never committed: a restart replays it
        (query / "commits" / str(batch)).write_text("v1\n{}")
    assert checkpoint.last_commit(tmp_path / "checkpoints") == (1, 250)
    assert checkpoint.last_commit(tmp_path / "nothing") == (None, None)


def test_segments_are_listed_oldest_first_and_a_job_is_set_aside_without_mixing(tmp_path):
    job_dir = tmp_path / "jobs" / "copy"
    for index, template in ((1, "sampled"), (0, "exact")):
        checkpoint.record(job_dir / f"{index}-{template}", {"template": template}, start_row=10 * index)
    found = checkpoint.segments(job_dir)
    assert [(s.index, s.template, s.start_row, s.fingerprint) for s in found] == [
        (0, "exact", 0, {"template": "exact"}),
        (1, "sampled", 10, {"template": "sampled"}),
    ]
    assert checkpoint.set_aside(job_dir).name == "copy.old-1"
    job_dir.mkdir()
    assert checkpoint.set_aside(job_dir).name == "copy.old-2"
    assert not job_dir.exists()
