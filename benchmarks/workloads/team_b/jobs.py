"""A second team's streaming queries, the benchmarks' workload Strata was not developed on.

Written as a Spark team writes its jobs — plain PySpark, options and shortcuts as the team likes them — over
CSV and Parquet directories that :func:`strata.runners.producer.team_b_input` fills under $STRATA_INPUT:

- ``events_csv/``, ``events_parquet/``: the same records (``id, event_time, key, value``) in two formats;
- ``orders_csv/``: those records delivered at least once (some twice, identical);
- ``users/``: a static table, one row per key (``key, dim``), written before the queries start.

The queries: a pandas-UDF filter over CSV (rank 1, required, target 1.5 s), a windowed count over Parquet
with a watermark, a CPU-heavy Python UDF over Parquet (rank 3, target 30 s), a stream–static join with the
users table, and a deduplication of the orders. Every result is a deterministic function of the input (no
``rand()``, no clock), so each sink can be recomputed. Run with ``bench_platform.py --workload team_b`` or
``strata run benchmarks/workloads/team_b/jobs.py``.
"""

import math
import os

import numpy as np
import pandas as pd
from pyspark.sql import functions as F

import strata.api as strata

INPUT = os.environ.get("STRATA_INPUT", "runs/team_b/input")
EVENT_SCHEMA = "id BIGINT, event_time TIMESTAMP, key BIGINT, value DOUBLE"
# Spark maps a CSV file's columns to a given schema by position (the header line is skipped, not read), so the
# CSV schema lists the columns in the files' order
CSV_SCHEMA = "id BIGINT, key BIGINT, value DOUBLE, event_time TIMESTAMP"


def out_of_band(value: pd.Series, key: pd.Series) -> pd.Series:
    """The monitoring team's rule, vectorised: a reading far above its sensor's expected level."""
    expected = 0.45 + 0.1 * np.cos(key.to_numpy(dtype=float))
    return pd.Series(value.to_numpy(dtype=float) - expected > 0.45)


anomalies = strata.job("anomalies", rank=1, required=True, target_latency_s=1.5, weight=50)


@anomalies.template
def banded(spark):
    is_anomaly = F.pandas_udf(out_of_band, "boolean")
    readings = spark.readStream.option("header", "true").schema(CSV_SCHEMA).csv(f"{INPUT}/events_csv")
    return readings.where(is_anomaly("value", "key"))


bucket_counts = strata.job("bucket_counts", rank=2, target_latency_s=30.0, event_time="window_end")


@bucket_counts.template
def tumbling(spark):
    """Readings per sensor bucket per 10 s window, emitted once the watermark passes the window."""
    readings = spark.readStream.schema(EVENT_SCHEMA).parquet(f"{INPUT}/events_parquet")
    return (
        readings.withWatermark("event_time", "3 seconds")
        .groupBy(F.window("event_time", "10 seconds"), (F.col("key") % 8).alias("bucket"))
        .agg(F.count(F.lit(1)).alias("readings"), F.round(F.sum("value"), 6).alias("total"))
        .select(F.col("window.end").alias("window_end"), "bucket", "readings", "total")
    )


def settle(value, key):  # no type hints: PySpark would read them as a pandas UDF's
    """The routing team's cost model, kept in plain Python: a few thousand rounds of a fixed-point iteration."""
    x, bias = value, (key % 31) / 31.0
    for _ in range(8000):
        x = math.cos(x + bias)
    return x


route_scores = strata.job("route_scores", rank=3, target_latency_s=30.0)


@route_scores.template
def python_udf(spark):
    score = F.udf(settle, "double")
    readings = spark.readStream.format("parquet").schema(EVENT_SCHEMA).load(f"{INPUT}/events_parquet")
    return readings.select("id", "event_time", "key", score("value", "key").alias("score"))


enriched = strata.job("enriched", rank=4, target_latency_s=20.0)


@enriched.template
def with_users(spark):
    """Each reading with its user's attribute from the static table (readings of unknown users dropped)."""
    users = spark.read.option("header", True).schema("key BIGINT, dim DOUBLE").csv(f"{INPUT}/users")
    readings = spark.readStream.schema(EVENT_SCHEMA).parquet(f"{INPUT}/events_parquet")
    return (
        readings.join(users.where("dim >= 0.1"), "key")
        .withColumn("weighted", F.col("value") * F.col("dim"))
        .select("id", "event_time", "key", "weighted")
    )


orders_once = strata.job("orders_once", rank=5, target_latency_s=60.0)


@orders_once.template
def deduplicated(spark):
    """Orders arrive at least once; each order once (its id and time: the watermark then bounds the state)."""
    orders = spark.readStream.option("header", "true").schema(CSV_SCHEMA).csv(f"{INPUT}/orders_csv")
    return orders.withWatermark("event_time", "5 seconds").dropDuplicates(["id", "event_time"])


if __name__ == "__main__":
    strata.main()
