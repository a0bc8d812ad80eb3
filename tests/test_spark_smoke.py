"""The Spark toolchain works: Java is found and a streaming query runs to completion."""

from __future__ import annotations

import pytest

from strata.spark.java import check_java, parse_major


def test_parse_java_versions():
    assert parse_major('openjdk version "17.0.15" 2025-04-15') == 17
    assert parse_major('java version "1.8.0_292"') == 8
    assert parse_major('openjdk version "21" 2023-09-19') == 21
    assert parse_major("garbage") is None


def test_missing_java_says_what_to_install(monkeypatch):
    from strata.spark import java

    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setattr(java.shutil, "which", lambda _: None)
    with pytest.raises(java.JavaError, match="openjdk-17"):
        check_java()


def count_by_key(spark, name: str, **options):
    """A stateful query over Spark's rate source into a memory table ``name``, run to completion."""
    df = spark.readStream.format("rate").option("rowsPerSecond", 50).load()
    writer = df.selectExpr("value % 3 AS k").groupBy("k").count().writeStream.format("memory").queryName(name)
    query = writer.outputMode("complete").options(**options).trigger(availableNow=True).start()
    query.awaitTermination(120)
    return query


@pytest.mark.spark
def test_trivial_streaming_query_runs(spark):
    query = count_by_key(spark, "smoke")
    assert query.exception() is None
    assert spark.sql("SELECT count(*) AS n FROM smoke").collect()[0]["n"] <= 3


@pytest.mark.spark
def test_checkpoints_are_written_without_checksum_side_files(spark, tmp_path):
    """Strata's sessions write checkpoints through the FileSystem-based manager over the raw local file system
    (spark.session.LOCAL_CHECKPOINTS: no forked chmod/readlink per file): the logs and the state are there, and
    none of the ``.crc`` files Hadoop's checksummed local file system writes beside each file."""
    query = count_by_key(spark, "smoke_checkpoint", checkpointLocation=str(tmp_path / "checkpoint"))
    assert query.exception() is None
    written = [p for p in (tmp_path / "checkpoint").rglob("*") if p.is_file()]
    assert {"offsets", "commits", "state"} <= {p.relative_to(tmp_path / "checkpoint").parts[0] for p in written}
    assert [p.name for p in written if p.name.endswith(".crc")] == []
