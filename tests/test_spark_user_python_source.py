"""L0's rate cap on a user's own Python data source: rows per batch change at the next batch, nothing restarts,
nothing is lost or read twice (strata.spark.python_sources)."""

from __future__ import annotations

import time

import pytest
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable

from strata.model.user import collecting, job, memory
from strata.spark.pipelines import PipelineOptions
from strata.spark.user import UserPipeline

ROWS = 200


class Range(InputPartition):
    def __init__(self, lo: int, hi: int) -> None:
        self.lo, self.hi = lo, hi


class CounterReader(DataSourceStreamReader):
    """Rows 0..rows-1, all available at once; honours ReadMaxRows as Spark's contract asks."""

    def __init__(self, rows: int) -> None:
        self.rows = rows

    def initialOffset(self) -> dict:
        return {"i": 0}

    def latestOffset(self, start: dict, limit) -> dict:
        end = self.rows if isinstance(limit, ReadAllAvailable) else min(self.rows, start["i"] + limit.max_rows)
        return {"i": end}

    def partitions(self, start: dict, end: dict):
        return [Range(start["i"], end["i"])]

    def read(self, partition):
        import datetime

        base = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
        for i in range(partition.lo, partition.hi):
            yield (i, base + datetime.timedelta(milliseconds=i))

    def commit(self, end: dict) -> None:
        pass


class Counter(DataSource):
    @classmethod
    def name(cls) -> str:
        return "counter"

    def schema(self) -> str:
        return "id LONG, event_time TIMESTAMP"

    def streamReader(self, schema) -> CounterReader:
        return CounterReader(int(self.options.get("rows", ROWS)))


def batches(pipeline: UserPipeline) -> list[int]:
    """Rows read by each batch so far (batches that read nothing left out)."""
    return [p["numInputRows"] for p in pipeline.query.recentProgress if p["numInputRows"]]


@pytest.mark.spark
def test_a_rate_cap_on_a_python_data_source_changes_rows_per_batch_at_the_next_batch(spark, tmp_path):
    with collecting() as declared:
        counted = job("counted", rank=1, sink=memory())

        @counted.template
        def read(spark):
            spark.dataSource.register(Counter)
            return spark.readStream.format("counter").option("rows", ROWS).load()

    (declared,) = declared
    model = declared.model()
    pipeline = UserPipeline(
        spark,
        model,
        model.templates[0],
        tmp_path / "jobs" / "counted" / "0-read",
        PipelineOptions(sink="memory", trigger_s=0.5),
        declared=declared,
    )
    assert pipeline.rate_cap is not None and pipeline.read_limit is None  # per batch, no restart
    pipeline.rate_cap.set(7)
    pipeline.start()
    try:
        while sum(batches(pipeline)) < 21:
            time.sleep(0.1)
        before = len(batches(pipeline))
        pipeline.rate_cap.set(40)
        pipeline.query.processAllAvailable()
    finally:
        pipeline.query.stop()
    read = batches(pipeline)
    assert max(read[:before]) <= 7
    assert max(read[before + 1 :]) == 40  # the batch after the one in flight reads up to the new cap
    assert max(read) <= 40 and sum(read) == ROWS
    out = pipeline.result()
    assert sorted(out["id"]) == list(range(ROWS))  # nothing lost or read twice
