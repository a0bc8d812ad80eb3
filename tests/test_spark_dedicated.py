"""``strata run --dedicate JOB``: one jobs file as two Spark applications, the dedicated one at the caller's
priority and the rest at nice +10 (docs/spark.md, "A dedicated application")."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

STRATA = str(Path(sys.executable).with_name("strata"))

JOBS = """
import os
from pyspark.sql import functions as F
import strata.api as strata

fast = strata.job("fast", rank=1, required=True, target_latency_s=2.0)
slow = strata.job("slow", rank=2, target_latency_s=30.0)


def counted(spark):
    rows = spark.readStream.format("rate").option("rowsPerSecond", 20).load()
    # each application records the nice value its Python workers run at
    nice = F.udf(lambda v: os.getpriority(os.PRIO_PROCESS, 0), "int")
    return rows.select(F.col("timestamp").alias("event_time"), "value", nice("value").alias("nice"))


fast.template(counted)
slow.template(counted)
"""


@pytest.mark.spark
def test_dedicated_jobs_run_in_their_own_application_and_the_rest_at_nice_10(tmp_path):
    jobs = tmp_path / "jobs.py"
    jobs.write_text(JOBS)
    out = tmp_path / "out"
    run = subprocess.run(
        [STRATA, "run", str(jobs), "--dedicate", "fast", "--duration", "12", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:] + (out / "dedicated.log").read_text()[-3000:]
    assert "Traceback" not in run.stdout + run.stderr
    here = pd.read_csv(out / "metrics" / "summary.csv")
    there = pd.read_csv(out / "dedicated" / "metrics" / "summary.csv")
    assert list(here["job"]) == ["slow"] and list(there["job"]) == ["fast"]
    assert (here["outputs"] > 0).all() and (there["outputs"] > 0).all()
    niceness = {
        job: set(pd.read_parquet(root / "strata" / "jobs" / job / "output")["nice"])
        for job, root in (("slow", out), ("fast", out / "dedicated"))
    }
    base = subprocess.run([sys.executable, "-c", "import os; print(os.nice(0))"], capture_output=True, text=True)
    assert niceness == {"fast": {int(base.stdout)}, "slow": {int(base.stdout) + 10}}


@pytest.mark.spark
def test_dedicate_names_only_declared_jobs(tmp_path):
    jobs = tmp_path / "jobs.py"
    jobs.write_text(JOBS)
    run = subprocess.run(
        [STRATA, "run", str(jobs), "--dedicate", "fsat", "--duration", "5", "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 2
    assert "--dedicate: expected jobs of this run (fast, slow); found 'fsat'" in " ".join(run.stderr.split())
    assert "Traceback" not in run.stdout + run.stderr
