"""A fourth team's streaming queries, written blind: no Strata code was changed or tuned for them before their
first measured run (the benchmarks' third unseen workload, after ``team_b`` and ``team_c``).

A cold-chain logistics team's jobs, plain PySpark in its own style — a broadcast join to a device registry, a
vectorised pandas UDF, DataFrame aggregations with watermarks — over the directories
:func:`strata.runners.producer.team_d_input` fills under $STRATA_INPUT:

- ``telemetry_json/``: the readings (``id, event_time, key, value``) as JSON lines;
- ``telemetry_csv/``: the same readings as CSV with a header;
- ``devices/``: a static registry, one row per device (``key, dim``) as Parquet, written before any query starts.

The queries: a temperature excursion alert, each reading against its own device's limit (rank 1, required,
target 1.5 s), a load per depot in tumbling 15 s windows, an arrival-time model in a pandas UDF (rank 3, bulk
and heavy), and a sliding 30 s fleet summary. Every result is a deterministic function of the input (no
``rand()``, no clock). Run with ``bench_platform.py --workload team_d`` or
``strata run benchmarks/workloads/team_d/jobs.py``.
"""

import os

import numpy as np
import pandas as pd
from pyspark.sql import functions as F

import strata.api as strata

INPUT = os.environ.get("STRATA_INPUT", "runs/team_d/input")
SCHEMA = "id BIGINT, event_time TIMESTAMP, key BIGINT, value DOUBLE"
# a CSV file's columns map to the schema by position: the producer writes them in this order
CSV_SCHEMA = "id BIGINT, key BIGINT, value DOUBLE, event_time TIMESTAMP"

excursions = strata.job("excursions", rank=1, required=True, target_latency_s=1.5, weight=45)


@excursions.template
def against_limits(spark):
    devices = spark.read.parquet(f"{INPUT}/devices").withColumn("limit_c", F.expr("0.55 + 0.4 * dim"))
    readings = spark.readStream.schema(SCHEMA).json(f"{INPUT}/telemetry_json")
    return (
        readings.join(F.broadcast(devices), "key")
        .where(F.col("value") > F.col("limit_c"))
        .select("id", "event_time", F.col("key").alias("device"), "value", "limit_c")
    )


depot_load = strata.job("depot_load", rank=2, target_latency_s=40.0, event_time="window_end")


@depot_load.template
def per_depot(spark):
    readings = spark.readStream.option("header", "true").schema(CSV_SCHEMA).csv(f"{INPUT}/telemetry_csv")
    return (
        readings.withWatermark("event_time", "5 seconds")
        .groupBy(F.window("event_time", "15 seconds"), (F.col("key") % 24).alias("depot"))
        .agg(F.count("*").alias("readings"), F.round(F.avg("value"), 6).alias("mean_value"))
        .select(F.col("window.end").alias("window_end"), "depot", "readings", "mean_value")
    )


@F.pandas_udf("double")
def eta_minutes(value: pd.Series, key: pd.Series) -> pd.Series:
    """The routing model: a damped fixed-point iteration per shipment, vectorised with numpy."""
    x = value.to_numpy(dtype=float)
    drift = (key.to_numpy(dtype=float) % 17) / 17.0
    for _ in range(3000):
        x = 0.5 * np.cos(x + drift) + 0.5 * x
    return pd.Series(np.round(60.0 * x, 9))


eta = strata.job("eta", rank=3, target_latency_s=45.0)


@eta.template
def routed(spark):
    readings = spark.readStream.option("header", "true").schema(CSV_SCHEMA).csv(f"{INPUT}/telemetry_csv")
    return readings.select("id", "event_time", "key", eta_minutes("value", "key").alias("eta_min"))


fleet_summary = strata.job("fleet_summary", rank=4, target_latency_s=90.0, event_time="window_end")


@fleet_summary.template
def sliding(spark):
    readings = spark.readStream.schema(SCHEMA).json(f"{INPUT}/telemetry_json")
    return (
        readings.withWatermark("event_time", "5 seconds")
        .groupBy(F.window("event_time", "30 seconds", "10 seconds"))
        .agg(
            F.count("*").alias("readings"),
            F.approx_count_distinct("key").alias("devices"),
            F.round(F.max("value"), 6).alias("hottest"),
        )
        .select(F.col("window.end").alias("window_end"), "readings", "devices", "hottest")
    )


if __name__ == "__main__":
    strata.main()
