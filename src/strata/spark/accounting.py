"""Core-seconds per micro-batch from Spark's own accounting (DESIGN.md rule 8; issue 29 item 1).

A batch's wall time on a loaded machine is mostly waiting for cores; its tasks' CPU time is not. Per query run and
batch, :class:`BatchAccounting` sums the task metrics of the batch's jobs as Spark's status store holds them:
``executorCpuTime`` (ns: CPU of the executor's task threads), ``executorRunTime`` (ms: the tasks' wall time) and
the task count per stage.

How the batch's jobs are found: a streaming query's thread runs every job of a micro-batch — the ones
``foreachBatch`` starts included — in the job group ``runId`` with the description ``"…batch = N"``
(``StreamExecution``/``MicroBatchExecution`` set both as local properties). ``statusTracker().getJobIdsForGroup``
lists a run's jobs inside the JVM (one py4j call); each new job is read once (``statusStore().job``, then
``lastStageAttempt`` per stage) and forgotten when settled. Why the status store rather than its alternatives:
it exists with the UI disabled (the REST API ``/api/v1/applications/<id>/stages`` does not, and costs an HTTP
round trip per window), and it needs no JVM code of our own (a ``SparkListener`` would have to be compiled and
shipped as a jar). It retains ``spark.ui.retainedJobs`` (1,000) jobs: a window of 2 s is read long before that.

Python code (UDFs, pandas UDFs, a Python data source's reads) runs in Python workers, whose CPU no task metric
holds: the task thread waits on a socket. :func:`python_cpu_seconds` reads the workers' CPU from ``/proc`` (the
PySpark daemon under the driver's JVM, found by its module — :mod:`strata.spark.worker_daemon` on a local master —,
and every process forked from it: local mode, where the executor is the driver's JVM), and :func:`spread` splits a
window's Python CPU over its batches in proportion to each batch's task time outside the JVM's CPU (run − cpu).
Elsewhere (a cluster's executors on other machines) the Python part reads 0 and a batch's cost is its JVM CPU only.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

K = TypeVar("K")
_BATCH = re.compile(r"(?m)^batch = (\d+)\s*$")


@dataclass(frozen=True)
class BatchCost:
    """What Spark's task metrics say of one micro-batch's jobs."""

    cpu_s: float  # executor CPU time of its tasks (JVM threads), core-seconds
    run_s: float  # executor run time of its tasks (wall), seconds summed over tasks
    tasks: int  # tasks run (skipped stages excluded)
    width: int  # most tasks of any one of its stages: the cores the batch can use at once


def batch_of(description: str | None) -> int | None:
    """The micro-batch id in a streaming job's description (``"<name>\\nid = …\\nrunId = …\\nbatch = 7"`` → 7)."""
    m = _BATCH.search(description or "")
    return int(m.group(1)) if m else None


def combine(stages: list[tuple[float, float, int]]) -> BatchCost:
    """A batch's cost from its stages' (cpu ns, run ms, tasks); a stage that ran no task (skipped) adds nothing."""
    ran = [s for s in stages if s[2] > 0 and (s[0] > 0 or s[1] > 0)]
    return BatchCost(
        cpu_s=sum(s[0] for s in ran) / 1e9,
        run_s=sum(s[1] for s in ran) / 1e3,
        tasks=sum(s[2] for s in ran),
        width=max((s[2] for s in ran), default=0),
    )


def spread(total: float, weights: Mapping[K, float]) -> dict[K, float]:
    """``total`` split over the keys in proportion to their (non-negative) weights; evenly when all weigh 0."""
    if not weights:
        return {}
    w = {k: max(0.0, v) for k, v in weights.items()}
    whole = sum(w.values())
    if whole <= 0:
        return dict.fromkeys(w, total / len(w))
    return {k: total * v / whole for k, v in w.items()}


class BatchAccounting:
    """Per query run: batch id → :class:`BatchCost`, for batches whose jobs have all ended."""

    def __init__(self, spark) -> None:
        jsc = spark.sparkContext._jsc.sc()
        self._store = jsc.statusStore()
        self._tracker = jsc.statusTracker()
        self._done: dict[str, dict[int, list[tuple[float, float, int]]]] = {}  # run → batch → its stages
        self._seen: dict[str, set[int]] = {}  # run → job ids read and settled
        self._open: dict[str, set[int]] = {}  # run → batches with a job still running

    def costs(self, run_id: str) -> dict[int, BatchCost]:
        """Batch id → cost of every batch of the run whose jobs have all ended (reads only jobs not read yet)."""
        run_id = str(run_id)
        seen = self._seen.setdefault(run_id, set())
        done = self._done.setdefault(run_id, {})
        open_: set[int] = set()
        for job_id in self._tracker.getJobIdsForGroup(run_id):
            if job_id in seen:
                continue
            job = self._store.job(job_id)
            description = job.description()
            batch = batch_of(description.get() if description.isDefined() else None)
            if batch is None:
                seen.add(job_id)
                continue
            if job.status().toString() == "RUNNING":
                open_.add(batch)
                continue
            ids = job.stageIds()
            stages = []
            for i in range(ids.size()):
                stage = self._store.lastStageAttempt(ids.apply(i))
                stages.append((float(stage.executorCpuTime()), float(stage.executorRunTime()), int(stage.numTasks())))
            done.setdefault(batch, []).extend(stages)
            seen.add(job_id)
        self._open[run_id] = open_
        return {b: combine(s) for b, s in done.items() if b not in open_}

    def forget(self, run_id: str, batches: set[int]) -> None:
        """Drop settled batches the caller has taken (their job ids stay known, so they are not read again)."""
        done = self._done.get(str(run_id), {})
        for b in batches:
            done.pop(b, None)


PYSPARK_DAEMON = "pyspark.daemon"  # PySpark's own worker daemon module (spark.python.daemon.module's default)
PYSPARK_WORKER = "pyspark.worker"  # the module a task's Python worker runs (spark.python.worker.module's default)

_HZ = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat(pid: str) -> tuple[int, float] | None:
    """(parent pid, CPU seconds of the process and of its children it has reaped) from ``/proc/<pid>/stat``."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[1]), sum(int(x) for x in fields[11:15]) / _HZ  # utime, stime, cutime, cstime


def _command(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]
    except OSError:
        return []


def runs_tasks(command: list[str], daemon: str = PYSPARK_DAEMON, worker: str = PYSPARK_WORKER) -> bool:
    """Whether a process's command (its arguments) is the daemon that forks the workers of tasks: ``-m daemon``
    with the tasks' worker module, or none. Spark starts its Python planners with the same daemon module and a
    planner's module (``pyspark.sql.worker.plan_data_source_read``, …): the planning of a query, not task work."""
    if "-m" not in command:
        return False
    i = command.index("-m")
    return command[i + 1 : i + 2] == [daemon] and command[i + 2 :] in ([], [worker])


def tree_cpu(procs: Mapping[int, tuple[int, float]], roots: Iterable[int]) -> float:
    """CPU seconds of the ``roots`` and every process under them (pid → (parent, cpu s)), each counted once: a
    child the daemon has reaped is in the daemon's own figure (cutime/cstime), so the sum stays continuous as
    workers come and go."""
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in procs.items():
        children.setdefault(parent, []).append(pid)
    total, todo = 0.0, [r for r in roots if r in procs]
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        total += procs[pid][1]
    return total


def python_cpu_seconds(jvm_pid: int, daemon: str = PYSPARK_DAEMON, worker: str = PYSPARK_WORKER) -> float:
    """CPU seconds the PySpark workers under the JVM ``jvm_pid`` have used so far: its children that are the
    tasks' daemon (:func:`runs_tasks`; ``daemon`` and ``worker``: the session's ``spark.python.daemon.module`` and
    ``spark.python.worker.module``) and every worker forked from them. 0 where /proc is absent."""
    procs = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if entry.isdigit() and (s := _stat(entry)) is not None:
            procs[int(entry)] = s
    daemons = [
        pid for pid, (parent, _) in procs.items() if parent == jvm_pid and runs_tasks(_command(pid), daemon, worker)
    ]
    return tree_cpu(procs, daemons)
