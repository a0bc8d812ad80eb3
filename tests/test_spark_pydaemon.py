"""The embedded session's Python daemon (strata.spark.pydaemon): a worker whose JVM hung up exits quietly."""

from __future__ import annotations

import socket

import pytest
from pyspark import daemon

from strata.spark.pydaemon import quiet_worker


def hung_up() -> socket.socket:
    """A worker's end of a Unix socket whose JVM end is closed, as at the JVM's shutdown."""
    worker_end, jvm_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    jvm_end.close()
    return worker_end


def test_a_worker_whose_jvm_hung_up_exits_quietly(monkeypatch, capfd):
    monkeypatch.setenv("PYTHON_DAEMON_KILL_WORKER_ON_FLUSH_FAILURE", "1")  # as pydaemon.main and Spark set it
    with pytest.raises(BrokenPipeError):  # PySpark's own worker: the daemon prints this traceback
        daemon.worker(hung_up(), True)
    capfd.readouterr()
    assert quiet_worker(hung_up(), True) != 0  # non-zero: the daemon closes the worker
    assert "Traceback" not in capfd.readouterr().err


@pytest.mark.spark
def test_the_embedded_session_runs_python_through_it(spark):
    from pyspark.sql import functions as F

    conf = spark.sparkContext.getConf()
    assert conf.get("spark.python.daemon.module") == "strata.spark.pydaemon"
    assert conf.get("spark.python.unix.domain.socket.enabled") == "true"
    plus_one = F.udf(lambda v: v + 1, "long")
    assert [r[0] for r in spark.range(3).select(plus_one("id")).collect()] == [1, 2, 3]
