"""The Parquet sink writes a small batch from the driver and a big one with Spark's writer, and one directory
holding both reads back as one table: the same rows, the same types, each batch written once."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest

from strata.spark.sinks import ParquetSink, driver_writable

pytestmark = pytest.mark.spark

START = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def batch(spark, first: int, n: int):
    """Rows ``first`` … ``first + n - 1``: id, a key, a decimal, a null string, an event time ``id`` s after
    :data:`START`."""
    return spark.sql(
        "SELECT id, CAST(id % 3 AS INT) AS key, CAST(id AS DECIMAL(10, 1)) / 2 AS value, "
        "CAST(NULL AS STRING) AS note, "
        "TIMESTAMP'2026-01-01 00:00:00 UTC' + make_interval(0, 0, 0, 0, 0, 0, id) AS event_time "
        f"FROM range({first}, {first + n})"
    )


def micros(ids) -> list[int]:
    return [int((START + dt.timedelta(seconds=i)).timestamp() * 1_000_000) for i in ids]


def test_small_batches_are_written_from_the_driver_and_read_back_with_spark_s_types(spark, tmp_path):
    sink = ParquetSink(tmp_path / "out", driver_rows=4)
    # batch 0: no batch before it, so Spark's writer (one file per task of its 2 partitions)
    assert sorted(sink.write(batch(spark, 0, 4).repartition(2), 0)) == micros(range(4))
    # batch 1 follows 4 rows (≤ 4): one file from the driver, _SUCCESS beside it, no staging left
    times = sink.write(batch(spark, 4, 5), 1)
    assert sorted(times) == micros(range(4, 9))
    assert sorted(p.name for p in (tmp_path / "out" / "batch_id=1").iterdir()) == ["_SUCCESS", "part-00000.parquet"]
    assert [p.name for p in (tmp_path / "out").iterdir() if p.name.startswith(".")] == []
    # batch 2 follows 5 rows (> 4): Spark's writer again
    sink.write(batch(spark, 9, 2).repartition(2), 2)
    assert len(list((tmp_path / "out" / "batch_id=2").glob("*.parquet"))) == 2

    frame = sink.read().sort_values("id")
    assert list(frame["id"]) == list(range(11))
    assert list(frame["batch_id"]) == [0] * 4 + [1] * 5 + [2] * 2
    assert list(frame["value"].astype(float)) == [i / 2 for i in range(11)]
    assert frame["note"].isna().all()
    spark_read = spark.read.parquet(str(tmp_path / "out")).orderBy("id").collect()
    assert [r["event_time"].replace(tzinfo=None) for r in spark_read] == [
        (START + dt.timedelta(seconds=i)).replace(tzinfo=None) for i in range(11)
    ]


def test_a_replayed_batch_written_from_the_driver_keeps_its_files(spark, tmp_path):
    sink = ParquetSink(tmp_path / "out")
    sink.write(batch(spark, 0, 2), 0)
    sink.write(batch(spark, 2, 3), 1)  # from the driver
    written = tmp_path / "out" / "batch_id=1" / "part-00000.parquet"
    stamp = written.stat().st_mtime_ns
    times = sink.write(batch(spark, 2, 3), 1)  # the replay of batch 1: executed, not rewritten
    assert written.stat().st_mtime_ns == stamp
    assert sorted(times) == micros(range(2, 5))
    assert len(sink.read()) == 5


def test_a_partial_directory_is_replaced_by_the_driver_s_write(spark, tmp_path):
    sink = ParquetSink(tmp_path / "out")
    sink.write(batch(spark, 0, 1), 0)
    partial = tmp_path / "out" / "batch_id=1"
    partial.mkdir()
    (partial / "part-00007-torn.parquet").write_bytes(b"PAR1")  # an attempt that died before _SUCCESS
    times = sink.write(batch(spark, 1, 2), 1)
    assert sorted(p.name for p in partial.iterdir()) == ["_SUCCESS", "part-00000.parquet"]
    assert sorted(times) == micros([1, 2])


def test_an_empty_batch_from_the_driver_writes_no_file_and_no_time(spark, tmp_path):
    sink = ParquetSink(tmp_path / "out")
    sink.write(batch(spark, 0, 1), 0)
    empty = sink.write(batch(spark, 0, 0), 1)
    assert empty.dtype == np.int64 and empty.size == 0
    assert [p.name for p in (tmp_path / "out" / "batch_id=1").iterdir()] == ["_SUCCESS"]
    assert list(sink.read()["id"]) == [0]


def test_only_types_both_writers_write_alike_go_through_the_driver(spark, tmp_path):
    assert driver_writable(batch(spark, 0, 1))
    assert driver_writable(spark.sql("SELECT map('a', array(current_timestamp())) AS m, named_struct('x', 1.5) AS s"))
    assert not driver_writable(spark.sql("SELECT TIMESTAMP_NTZ'2026-01-01 00:00:00' AS t"))
    assert not driver_writable(spark.sql("SELECT array(INTERVAL '1' DAY) AS gaps"))
    # a TIMESTAMP_NTZ batch after a small one keeps Spark's writer: one file per task
    sink = ParquetSink(tmp_path / "out")
    ntz = "SELECT id, TIMESTAMP_NTZ'2026-01-01 00:00:00' AS event_time FROM range(4)"
    sink.write(spark.sql(ntz).repartition(2), 0)
    sink.write(spark.sql(ntz).repartition(2), 1)
    assert len(list((tmp_path / "out" / "batch_id=1").glob("*.parquet"))) == 2
