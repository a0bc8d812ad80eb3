"""Every reused Python worker's heap is frozen after its task on a local master (strata.spark.worker_daemon)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.spark


def test_a_local_session_runs_strata_daemon_and_a_users_udf_runs_in_a_frozen_worker(spark):
    from pyspark.sql.functions import udf

    assert spark.conf.get("spark.python.daemon.module") == "strata.spark.worker_daemon"

    @udf("long")
    def frozen(_):
        import gc

        return gc.get_freeze_count()

    counts = [spark.range(1, numPartitions=1).select(frozen("id")).first()[0] for _ in range(6)]
    # a worker's first task runs before any freeze; each later task in a reused worker finds its heap frozen
    # (local[2]: at most two workers, so at most two of six sequential one-task jobs run in a fresh worker)
    assert sum(c > 0 for c in counts) >= 4
