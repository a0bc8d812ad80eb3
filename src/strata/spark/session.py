"""SparkSession creation: embedded ``local[*]`` by default, any master on request.

The embedded session uses FAIR scheduling with a generated allocation file so
the controller can place each micro-batch in a pool (DESIGN.md, "How each level
maps onto Spark").
"""

from __future__ import annotations

import os
import socket
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from xml.sax.saxutils import quoteattr

from strata.spark.java import check_java

DEFAULT_POOLS: dict[str, int] = {"urgent": 8, "normal": 2, "bulk": 1}


def fair_allocation_xml(pools: dict[str, int]) -> str:
    """A FAIR scheduler allocation file with one pool per name and its weight."""
    body = "".join(
        f"  <pool name={quoteattr(name)}><schedulingMode>FAIR</schedulingMode>"
        f"<weight>{weight}</weight><minShare>0</minShare></pool>\n"
        for name, weight in pools.items()
    )
    return f'<?xml version="1.0"?>\n<allocations>\n{body}</allocations>\n'


def build_session(
    app_name: str = "strata",
    master: str | None = None,
    cores: int | None = None,
    shuffle_partitions: int = 4,
    pools: dict[str, int] | None = None,
    ui: bool = False,
    work_dir: str | Path | None = None,
    extra_conf: Iterable[tuple[str, str]] = (),
):
    """Create (or return the running) SparkSession.

    ``master`` None means embedded ``local[cores or *]``. Java is checked first
    so a missing or old JDK fails with the exact install instruction, then a
    standalone master's address (:func:`check_master`), so an unreachable one
    fails in seconds with one line instead of Spark's minute of retries.
    """
    check_java()
    if master:
        check_master(master)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    work = Path(work_dir or tempfile.mkdtemp(prefix="strata-spark-"))
    work.mkdir(parents=True, exist_ok=True)
    alloc = work / "fairscheduler.xml"
    alloc.write_text(fair_allocation_xml(pools or DEFAULT_POOLS))
    builder = (
        SparkSession.builder.appName(app_name)
        .master(master or f"local[{cores or '*'}]")
        .config("spark.scheduler.mode", "FAIR")
        .config("spark.scheduler.allocation.file", str(alloc))
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
        # a filter pushed into the JSON/CSV reader drops records before Spark counts them: numInputRows would be
        # the records past the filter, and the learner's selectivity and cost per record are measured on it
        .config("spark.sql.json.filterPushdown.enabled", "false")
        .config("spark.sql.csv.filterPushdown.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.ui.enabled", "true" if ui else "false")
        .config("spark.sql.streaming.stopGracefullyOnShutdown", "true")
        .config("spark.sql.warehouse.dir", str(work / "warehouse"))
        # A bigger thread stack: stopping a foreachBatch query makes Spark regex-match the Python
        # traceback (StreamExecution.isInterruptionException), which overflows the default 1 MiB stack.
        .config("spark.driver.extraJavaOptions", f"-Dderby.system.home={work} -Xss16m")
        .config("spark.python.worker.reuse", "true")
    )
    for key, value in extra_conf:
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


class MasterUnreachable(ValueError):
    """No Spark master answers at the ``spark://`` address given."""


def check_master(master: str, timeout_s: float = 5.0) -> None:
    """For a standalone ``spark://host:port[,host:port…]`` master, that one of its addresses accepts connections.

    Other masters (``local[…]``, ``yarn``, ``k8s://…``) are left to Spark.
    """
    if not master.startswith("spark://"):
        return
    reasons = []
    for address in master[len("spark://") :].split(","):
        host, _, port = address.strip().rpartition(":")
        if not host or not port.isdigit():
            raise MasterUnreachable(f"--master {master}: expected spark://HOST:PORT; found {address!r}")
        try:
            with socket.create_connection((host, int(port)), timeout=timeout_s):
                return
        except OSError as e:
            reasons.append(f"{host}:{port} ({e.strerror or e})")
    raise MasterUnreachable(f"--master {master}: no Spark master answers at {', '.join(reasons)}")
