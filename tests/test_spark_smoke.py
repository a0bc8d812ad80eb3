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


@pytest.mark.spark
def test_trivial_streaming_query_runs(spark):
    df = spark.readStream.format("rate").option("rowsPerSecond", 50).load()
    query = (
        df.selectExpr("value % 3 AS k")
        .groupBy("k")
        .count()
        .writeStream.format("memory")
        .queryName("smoke")
        .outputMode("complete")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    assert spark.sql("SELECT count(*) AS n FROM smoke").collect()[0]["n"] <= 3
