"""A stateful query killed before it logged its first batch starts again on its checkpoint.

Spark writes an offset-log entry to a temporary file and renames it into place. A SIGKILL between the two (the
CI run of `test_spark_user_restart` caught one) leaves ``offsets/.0.<uuid>.tmp``; on restart the offset log
holds no batch, the query starts from batch 0, and Spark refuses a non-empty log there. Known answers: Spark's
refusal on the leftover, and after :func:`clear_unplanned` the per-key counts of the input, each once.
"""

from __future__ import annotations

import json

import pytest

from strata.spark.checkpoint import clear_unplanned

ROWS = [{"key": k % 3, "value": float(k)} for k in range(10)]  # keys 0, 1, 2: 4, 3, 3 rows


def leftover(query) -> None:
    (query / "offsets").mkdir(parents=True)
    (query / "offsets" / ".0.6b1f0c2e-tmp.tmp").write_text('v1\n{"batchWatermarkMs":0,')


def count_keys(spark, source, query):
    stream = spark.readStream.format("json").schema("key LONG, value DOUBLE").load(str(source))
    return (
        stream.groupBy("key")
        .count()
        .writeStream.outputMode("complete")
        .format("memory")
        .queryName(f"counts_{query.name}")
        .option("checkpointLocation", str(query))
        .trigger(availableNow=True)
        .start()
    )


@pytest.mark.spark
def test_a_query_killed_before_its_first_batch_was_logged_starts_again(spark, tmp_path):
    source = tmp_path / "in"
    source.mkdir()
    (source / "part-0.json").write_text("\n".join(json.dumps(r) for r in ROWS))

    refused = tmp_path / "refused"
    leftover(refused)
    with pytest.raises(Exception, match="STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY"):
        count_keys(spark, source, refused).awaitTermination(60)

    started = tmp_path / "started"
    leftover(started)
    assert clear_unplanned(started) == ["offsets/.0.6b1f0c2e-tmp.tmp"]
    count_keys(spark, source, started).awaitTermination(60)
    counts = {r["key"]: r["count"] for r in spark.sql("select * from counts_started").collect()}
    assert counts == {0: 4, 1: 3, 2: 3}


def test_a_checkpoint_with_a_logged_batch_is_left_as_it_is(tmp_path):
    query = tmp_path / "q"
    for log, names in (("offsets", ["0", "1", ".2.x.tmp"]), ("commits", ["0"]), ("state", ["0"])):
        (query / log).mkdir(parents=True)
        for n in names:
            (query / log / n).write_text("v1")
    assert clear_unplanned(query) == []
    assert sorted(p.name for p in (query / "offsets").iterdir()) == [".2.x.tmp", "0", "1"]
    assert clear_unplanned(tmp_path / "never-started") == []
