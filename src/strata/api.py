"""Strata's Python API: declare your own Structured Streaming queries as jobs, and run them under Strata.

::

    import strata.api as strata
    from pyspark.sql import functions as F

    alerts = strata.job("alerts", rank=1, required=True, target_latency_s=2.0)

    @alerts.template
    def full(spark):
        events = spark.readStream.format("json").schema("event_time TIMESTAMP, value DOUBLE").load("in/events")
        return events.filter(F.col("value") > 0.9)

    if __name__ == "__main__":  # python jobs.py / spark-submit jobs.py; `strata run jobs.py` does the same
        strata.main()

A keyed aggregation whose state Strata's balancer can move between partitions (skewed keys) is declared with
:func:`keyed_aggregate` and applied in the template (:mod:`strata.model.keyed`)::

    per_user = strata.keyed_aggregate(alerts, key="user", aggregate="count", window="10 seconds", watermark="2 s")

    @alerts.template
    def counts(spark):
        return per_user(spark.readStream.format("json").schema(SCHEMA).load("in/clicks"))

Declarations are :mod:`strata.model.user`; running is ``strata run`` (:mod:`strata.runners.live`).
"""

from __future__ import annotations

import sys
from pathlib import Path

from strata.model.keyed import KeyedAggregate, keyed_aggregate
from strata.model.user import (
    DeclarationError,
    PythonJob,
    SinkSpec,
    foreach_batch,
    job,
    memory,
    parquet,
    table,
)

__all__ = [
    "DeclarationError",
    "KeyedAggregate",
    "PythonJob",
    "SinkSpec",
    "foreach_batch",
    "job",
    "keyed_aggregate",
    "main",
    "memory",
    "parquet",
    "table",
]


def main(argv: list[str] | None = None) -> None:
    """Run the jobs this program declared under Strata: ``strata run``'s own command (the same options: one
    parser), on this program's jobs and any spec files given; exits with its code. Under ``spark-submit`` the
    submitted master and settings are used; otherwise embedded Spark. ``argv`` defaults to the command line."""
    import typer

    from strata.cli import run

    program = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    program.command()(run)
    program(args=sys.argv[1:] if argv is None else argv, prog_name=Path(sys.argv[0]).name)
