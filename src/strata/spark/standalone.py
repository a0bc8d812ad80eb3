"""A Spark standalone cluster on this machine: one master and N workers, started with the PySpark wheel's own
``bin/spark-class`` (issue 28, Deliver 4: cells as applications on a cluster, each with its ``spark.cores.max``).

The daemons are JVMs in process groups of their own, working in ``work_dir`` (the workers' executors too) and
given ``PR_SET_PDEATHSIG`` (:mod:`strata.spark.orphans`): leaving the context stops each group (SIGTERM, then
SIGKILL), and a SIGKILL of this process takes the master and workers with it; a worker's executors exit when
their worker does (Spark's WorkerWatcher). The master runs with ``spark.port.maxRetries=0``, so a port taken
meanwhile fails the start instead of moving the master silently to the next port.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pyspark.find_spark_home import _find_spark_home

from strata.spark.java import check_java
from strata.spark.orphans import parent_death_signal

MASTER = "org.apache.spark.deploy.master.Master"
WORKER = "org.apache.spark.deploy.worker.Worker"
STOP_GRACE_S = 10.0
LOG_TAIL = 2000  # characters of a daemon's log quoted in an error


class StandaloneError(RuntimeError):
    """The standalone cluster could not start: a port taken, a daemon that exited, workers that did not register."""


def master_json(host: str, ui_port: int, timeout_s: float = 5.0) -> dict[str, Any]:
    """The master's state as its web UI serves it at ``/json/``: ``aliveworkers``, ``cores``, ``coresused``,
    ``workers`` and ``activeapps`` (each application's granted ``cores``), ..."""
    with urllib.request.urlopen(f"http://{host}:{ui_port}/json/", timeout=timeout_s) as response:
        return json.load(response)


def check_free(host: str, port: int, what: str) -> None:
    """A located :class:`StandaloneError` if ``port`` on ``host`` cannot be bound."""
    with socket.socket() as probe:
        try:
            probe.bind((host, port))
        except OSError as e:
            raise StandaloneError(
                f"the standalone {what} port {port} on {host} is taken ({e.strerror}): another Spark master? "
                f"Pass a free one."
            ) from None


def tail(log: Path) -> str:
    text = log.read_text(errors="replace") if log.exists() else ""
    return text[-LOG_TAIL:] or "(empty log)"


@contextlib.contextmanager
def standalone_cluster(
    workers: int = 2,
    cores: int = 1,
    memory: str = "1g",
    host: str = "127.0.0.1",
    port: int = 7077,
    ui_port: int = 8080,
    work_dir: str | Path | None = None,
    timeout_s: float = 60.0,
) -> Iterator[str]:
    """Start a master on ``host:port`` (web UI on ``ui_port``) and ``workers`` workers of ``cores`` cores and
    ``memory`` each, wait until every worker is registered (the master's ``/json/`` counts them alive), yield the
    master's ``spark://host:port`` URL, and stop them all on exit. Daemon logs go to ``work_dir/logs``.

    Raises :class:`StandaloneError` when a port is taken, a daemon exits, or the master or its workers are not up
    within ``timeout_s`` (each message quotes the daemon's log)."""
    check_java()
    spark_class = Path(_find_spark_home()) / "bin" / "spark-class"
    if not spark_class.exists():
        raise StandaloneError(f"{spark_class} is missing: this PySpark installation cannot start a standalone cluster")
    check_free(host, port, "master")
    check_free(host, ui_port, "master web UI")
    work = Path(work_dir) if work_dir is not None else Path(tempfile.mkdtemp(prefix="strata-standalone-"))
    logs = work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "SPARK_HOME": str(spark_class.parent.parent),
        "SPARK_LOCAL_IP": host,
        "SPARK_LOG_DIR": str(logs),
        "SPARK_WORKER_DIR": str(work / "workers"),
        "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false -Dspark.port.maxRetries=0",
        # the daemons only book-keep: the quick JIT and a small serial heap start them in half the CPU time
        "SPARK_DAEMON_JAVA_OPTS": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
        "SPARK_DAEMON_MEMORY": "256m",
    }
    url = f"spark://{host}:{port}"
    daemons: list[tuple[str, subprocess.Popen, Path]] = []

    def start(name: str, *args: str) -> None:
        log = logs / f"{name}.out"
        with log.open("w") as out:
            process = subprocess.Popen(
                [str(spark_class), *args],
                env=env,
                cwd=work,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=parent_death_signal(),
            )
        daemons.append((name, process, log))

    def wait_for(ready, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not ready():
            for name, process, log in daemons:
                if process.poll() is not None:
                    raise StandaloneError(f"the standalone {name} exited with code {process.returncode}:\n{tail(log)}")
            if time.monotonic() > deadline:
                logs_text = "\n".join(f"--- {name} ---\n{tail(log)}" for name, _, log in daemons)
                raise StandaloneError(f"{what} within {timeout_s:.0f} s; logs:\n{logs_text}")
            time.sleep(0.25)

    def alive_workers() -> int | None:
        try:
            return master_json(host, ui_port, timeout_s=2.0)["aliveworkers"]
        except (OSError, ValueError, KeyError):
            return None

    try:
        start("master", MASTER, "--host", host, "--port", str(port), "--webui-port", str(ui_port))
        wait_for(lambda: alive_workers() is not None, f"the standalone master did not answer on {host}:{ui_port}")
        for i in range(workers):
            start(
                f"worker-{i}",
                *(WORKER, url, "--host", host, "--cores", str(cores), "--memory", memory),
                *("--webui-port", "0", "--work-dir", str(work / "workers" / str(i))),
            )
        wait_for(lambda: alive_workers() == workers, f"{workers} workers did not register with {url}")
        yield url
    finally:
        for _, process, _ in reversed(daemons):  # workers first: the master outlives them, as Spark stops them
            stop(process)


def stop(process: subprocess.Popen) -> None:
    """Stop a daemon's process group: SIGTERM (Spark's shutdown hooks stop its executors), SIGKILL if it lingers."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(STOP_GRACE_S)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)  # what is left of the group: executors, a launcher
    process.wait()
