"""PySpark's worker daemon, with each reused worker's heap frozen after its task (local masters only).

PySpark's daemon (``pyspark/daemon.py``) runs a full ``gc.collect()`` in a reused worker after every task: 46–56
ms a call on this machine once numpy, pyarrow and pyspark are loaded, whatever the task did — a user's pandas UDF
or ``mapInPandas`` on a few rows included (:mod:`strata.spark.worker_heap`). Strata's own Python tasks freeze their
worker's heap themselves; this daemon does it after every task of any kind, so a team's own Python code (UDFs,
data sources) stops paying the collection too. It is the daemon Spark starts when ``spark.python.daemon.module``
names it (:func:`strata.spark.session.build_session` does for a local master, where the workers run this
interpreter and find Strata installed; executors elsewhere keep PySpark's own).

Only the name ``worker`` of PySpark's daemon is wrapped (the daemon's loop calls it by that name for each task on
a forked worker): the fork, the authentication and the task itself are PySpark's, and the freeze runs after the
task's output is flushed, so no task waits for it.
"""

from __future__ import annotations

from pyspark import daemon

from strata.spark.worker_heap import freeze_worker_heap

_task = daemon.worker


def worker(sock, authenticated: bool) -> int:
    """One task on a forked worker, as PySpark's daemon runs it, then the worker's heap frozen."""
    try:
        return _task(sock, authenticated)
    finally:
        freeze_worker_heap()


daemon.worker = worker

if __name__ == "__main__":
    daemon.manager()
