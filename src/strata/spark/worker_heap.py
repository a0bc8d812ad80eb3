"""A reused Python worker's long-lived heap, kept out of the full collection PySpark runs after every task.

PySpark's daemon runs a full ``gc.collect()`` in a reused worker after every task (``pyspark/daemon.py``). With
numpy, pyarrow, pydantic and pyspark loaded that walks some 100,000 objects, 46–56 ms a call on this machine,
whatever the task did. Strata's Python tasks (the keyed store's, :mod:`strata.spark.state`; the generated source's
reads, :mod:`strata.spark.sources`) therefore move what their worker holds for good out of the collector's reach
(``gc.freeze``): an application whose workers ran only one of them paid it on every task (issue 28: a cell holding
only the latency-critical job spent 0.13 s of Python CPU a 2-task batch against 0.01 s in the demo's one session,
whose workers the keyed store had frozen; docs/spark.md, "Python workers").

What a worker holds for good is mostly its modules, and a task that imports a module (a first task, or a task of
another kind in the same worker) is when it grows, so the heap is frozen again whenever the worker has loaded
modules since the last freeze. Frozen objects are still freed by reference counting when dropped, only never
scanned for cycles.
"""

from __future__ import annotations

import gc
import sys

_loaded_at_freeze = 0  # len(sys.modules) when this process last froze its heap (0: never)


def freeze_worker_heap() -> bool:
    """Collect and freeze this process's heap if it has loaded modules since it last did; whether it did. Called by
    a task in a Python worker after its work, before it returns its output."""
    global _loaded_at_freeze
    loaded = len(sys.modules)
    if loaded == _loaded_at_freeze:
        return False
    gc.collect()  # the garbage made so far, before the rest is frozen
    gc.freeze()
    _loaded_at_freeze = loaded
    return True
