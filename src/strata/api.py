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

import argparse
import sys
from pathlib import Path

from strata.model.keyed import KeyedAggregate, keyed_aggregate
from strata.model.user import (
    DeclarationError,
    PythonJob,
    SinkSpec,
    declared_here,
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
    """Run the jobs this program declared under Strata (what ``strata run`` does with a jobs file); exits with
    ``strata run``'s code. Under ``spark-submit`` the submitted master is used; otherwise embedded Spark."""
    from rich.console import Console

    from strata.model import SpecError
    from strata.runners.live import RunRequest, run_live

    parser = argparse.ArgumentParser(prog=Path(sys.argv[0]).name, description="Run the declared jobs under Strata.")
    parser.add_argument("specs", nargs="*", help="YAML spec files whose cluster and jobs join the run")
    parser.add_argument("--duration", type=float, default=120.0, help="seconds to run before stopping cleanly")
    parser.add_argument("--out", type=Path, default=None, help="run directory (default runs/<program>)")
    parser.add_argument("--master", default=None, help="Spark master URL (default: spark-submit's, else local[*])")
    parser.add_argument("--no-control", action="store_true", help="plain Spark, for comparison")
    parser.add_argument("--fresh", action="append", default=[], help="start this job afresh ('all': every job)")
    parser.add_argument("--jobs", action="append", default=[], help="run only this job (repeatable)")
    parser.add_argument("--skip-jobs", action="append", default=[], help="leave this job out (repeatable)")
    args = parser.parse_args(argv)
    console, errors = Console(), Console(stderr=True)
    name = Path(sys.argv[0]).stem or "jobs"
    try:
        request = RunRequest(
            tuple(args.specs),
            args.duration,
            args.master or _submitted_master(),
            args.out or Path("runs") / name,
            "parquet",
            not args.no_control,
            tuple(args.fresh),
            tuple(args.jobs),
            tuple(args.skip_jobs),
        )
        code = run_live(request, console, errors, declared_here())
    except SpecError as err:
        for problem in err.problems:
            errors.print(f"[bold red]error[/] {problem}", highlight=False, soft_wrap=True)
        code = 2
    sys.exit(code)


def _submitted_master() -> str | None:
    """spark-submit's ``--master`` (it reaches the driver as a system property), or None outside spark-submit."""
    import os

    if not os.environ.get("SPARK_ENV_LOADED"):  # set by spark-submit's launcher scripts
        return None
    from pyspark import SparkConf

    return SparkConf().get("spark.master", None)
