"""A third team's streaming queries, written after the schedulers they run under: no Strata code was changed or
tuned for them before their first measured run (the benchmarks' second unseen workload, after ``team_b``).

A payments team's jobs, plain PySpark in its own style — SQL expressions, JSON files, a ``mapInPandas`` model —
over the directories :func:`strata.runners.producer.team_c_input` fills under $STRATA_INPUT:

- ``payments_json/``: the records (``id, event_time, key, value``) as JSON lines;
- ``payments_parquet/``: the same records as Parquet.

The queries: a rule-based fraud check in SQL (rank 1, required, target 2 s), a sliding-window volume per
merchant group with a watermark (20 s windows every 5 s), a feature model scored with numpy in ``mapInPandas``
(rank 3, bulk and heavy), and session windows per card (a 4 s gap). Every result is a deterministic function of
the input (no ``rand()``, no clock), so each sink can be recomputed. Run with
``bench_platform.py --workload team_c`` or ``strata run benchmarks/workloads/team_c/jobs.py``.
"""

import os

import numpy as np
import pandas as pd
from pyspark.sql import functions as F

import strata.api as strata

INPUT = os.environ.get("STRATA_INPUT", "runs/team_c/input")
SCHEMA = "id BIGINT, event_time TIMESTAMP, key BIGINT, value DOUBLE"

fraud = strata.job("fraud", rank=1, required=True, target_latency_s=2.0, weight=40)


@fraud.template
def rules(spark):
    payments = spark.readStream.schema(SCHEMA).json(f"{INPUT}/payments_json")
    return payments.selectExpr(
        "id",
        "event_time",
        "key AS card",
        "round(value * 1000, 2) AS amount",
        "CASE WHEN value > 0.97 THEN 'block' WHEN value > 0.9 AND key % 7 = 0 THEN 'review' END AS verdict",
    ).where("verdict IS NOT NULL")


volume = strata.job("volume", rank=2, target_latency_s=30.0, event_time="window_end")


@volume.template
def sliding(spark):
    payments = spark.readStream.schema(SCHEMA).json(f"{INPUT}/payments_json")
    by_group = payments.withWatermark("event_time", "4 seconds").groupBy(
        F.window("event_time", "20 seconds", "5 seconds").alias("w"), F.expr("key % 16 AS merchant_group")
    )
    volumes = by_group.agg(F.expr("count(*) AS payments"), F.expr("round(max(value), 6) AS largest"))
    return volumes.selectExpr("w.end AS window_end", "merchant_group", "payments", "largest")


FEATURES = np.linspace(0.5, 4.0, 64)


def score(batches):
    """The risk model: 64 harmonic features of each amount, reduced through a fixed projection (numpy)."""
    for frame in batches:
        phase = np.outer(frame["value"].to_numpy(dtype=float), FEATURES)
        feats = np.concatenate([np.sin(phase), np.cos(phase)], axis=1)
        for _ in range(40):  # the model's refinement rounds
            feats = np.tanh(feats @ np.eye(128)[::-1] * 0.9 + 0.05)
        yield pd.DataFrame({"id": frame["id"], "event_time": frame["event_time"], "risk": feats.mean(axis=1).round(9)})


risk = strata.job("risk", rank=3, target_latency_s=45.0)


@risk.template
def model(spark):
    payments = spark.readStream.schema(SCHEMA).parquet(f"{INPUT}/payments_parquet")
    return payments.mapInPandas(score, "id BIGINT, event_time TIMESTAMP, risk DOUBLE")


card_sessions = strata.job("card_sessions", rank=4, target_latency_s=60.0, event_time="session_end")


@card_sessions.template
def gaps(spark):
    payments = spark.readStream.schema(SCHEMA).parquet(f"{INPUT}/payments_parquet")
    return (
        payments.where("key < 200")
        .withWatermark("event_time", "3 seconds")
        .groupBy(F.session_window("event_time", "4 seconds"), "key")
        .agg(F.count("*").alias("payments"), F.round(F.sum("value"), 6).alias("spent"))
        .select(F.col("session_window.end").alias("session_end"), "key", "payments", "spent")
    )


if __name__ == "__main__":
    strata.main()
