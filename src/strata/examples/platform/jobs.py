"""A Spark team's own streaming queries under Strata: `strata run examples/platform/jobs.py`.

Plain PySpark, as the team would write it — a Python UDF, chained windowed
aggregations with watermarks, a stream–stream join, sessionization, a pandas
UDF, and a job reading another job's output — over directories of JSON files
that another process fills (`strata produce`). Each `strata.job(...)`
tells Strata what the query is worth (rank, required, latency target); Strata
decides admission, FAIR pools, read limits (maxFilesPerTrigger) and batch
order, and learns each query's cost from Spark's progress.

The input directories are under $STRATA_INPUT (default runs/platform/input).
The same file runs with `python jobs.py` or `spark-submit jobs.py`.
"""

import os

import numpy as np
import pandas as pd
from pyspark.sql import functions as F

import strata.api as strata

INPUT = os.environ.get("STRATA_INPUT", "runs/platform/input")
EVENTS = "id LONG, event_time TIMESTAMP, key LONG, value DOUBLE"
CLICKS = "id LONG, event_time TIMESTAMP, key LONG, value DOUBLE, impression LONG"


def suspicious(value):  # no type hints: PySpark would read them as a pandas UDF's
    """A rule a fraud team keeps in Python, run as a Python UDF."""
    return value is not None and value > 0.95


alerts = strata.job("alerts", rank=1, required=True, target_latency_s=2.0, weight=100)


@alerts.template
def udf_filter(spark):
    # the UDF is made here, not at import: PySpark 4 needs a session to make one, and Strata makes the session
    rule = F.udf(suspicious, "boolean")
    events = spark.readStream.format("json").schema(EVENTS).load(f"{INPUT}/events")
    return events.filter(rule(F.col("value")))


active = strata.job("active_users", rank=2, target_latency_s=30.0, event_time="window_end")


@active.template
def chained(spark):
    """Two aggregations in a row: events per user per 5 s window, then users with ≥ 2 events per window."""
    events = spark.readStream.format("json").schema(EVENTS).load(f"{INPUT}/events")
    per_user = (
        events.withWatermark("event_time", "2 seconds").groupBy(F.window("event_time", "5 seconds"), "key").count()
    )
    return (
        per_user.filter("count >= 2")
        .groupBy(F.window(F.window_time("window"), "5 seconds"))
        .agg(F.count("*").alias("users"))
        .select(F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"), "users")
    )


attributed = strata.job("attributed_clicks", rank=3, target_latency_s=20.0)


@attributed.template
def click_join(spark):
    """A stream–stream join: each click with the impression it came from, within 10 s."""
    impressions = (
        spark.readStream.format("json").schema(EVENTS).load(f"{INPUT}/events").withWatermark("event_time", "5 seconds")
    )
    clicks = (
        spark.readStream.format("json").schema(CLICKS).load(f"{INPUT}/clicks").withWatermark("event_time", "5 seconds")
    )
    i, c = impressions.alias("i"), clicks.alias("c")
    joined = i.join(
        c,
        F.expr("c.impression = i.id AND c.event_time BETWEEN i.event_time AND i.event_time + interval 10 seconds"),
    )
    return joined.select(F.col("c.id").alias("click"), F.col("i.id").alias("impression"), F.col("c.event_time"))


sessions = strata.job("sessions", rank=4, target_latency_s=30.0, event_time="session_end")


@sessions.template
def per_user(spark):
    """Sessionization: a user's events with gaps under 3 s form a session (the keys are Zipf-skewed)."""
    events = spark.readStream.format("json").schema(EVENTS).load(f"{INPUT}/events")
    return (
        events.withWatermark("event_time", "2 seconds")
        .groupBy(F.session_window("event_time", "3 seconds"), "key")
        .agg(F.count("*").alias("events"), F.sum("value").alias("value"))
        .select("key", "events", "value", F.col("session_window.end").alias("session_end"))
    )


def risk_model(value: pd.Series, key: pd.Series) -> pd.Series:
    """A scoring model a data-science team ships as a pandas UDF: 64 rounds of a small recurrent score."""
    x = value.to_numpy(dtype=float)
    k = (key.to_numpy() % 17).astype(float) / 17.0
    for _ in range(64):
        x = np.tanh(1.7 * x + 0.3 * k - 0.4)
    return pd.Series(1.0 / (1.0 + np.exp(-4.0 * x)))


enriched = strata.job("enriched", rank=5, target_latency_s=10.0)


@enriched.template
def scored(spark):
    risk = F.pandas_udf(risk_model, "double")
    events = spark.readStream.format("json").schema(EVENTS).load(f"{INPUT}/events")
    return events.withColumn("risk", risk("value", "key")).withColumn("tier", F.when(F.col("risk") > 0.9, "high"))


busy = strata.job("busy_windows", rank=3, target_latency_s=60.0, event_time="window_end", reads=active)


@busy.template
def over_threshold(spark):
    """Reads another job's output (a shared stream): the 5 s windows with at least 20 active users."""
    return active.stream(spark).filter("users >= 20").select("window_start", "window_end", "users")


if __name__ == "__main__":
    strata.main()
