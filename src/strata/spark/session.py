"""SparkSession creation: embedded ``local[*]`` by default, any master on request.

The embedded session uses FAIR scheduling with a generated allocation file so
the controller can place each micro-batch in a pool (DESIGN.md, "How each level
maps onto Spark"). The user's Spark settings (:mod:`strata.spark.conf`) go over
Strata's defaults, except the few the engine relies on (:data:`STRATA_OWNED`);
Spark's log lines go to the run's log file (:mod:`strata.spark.logs`).
"""

from __future__ import annotations

import os
import socket
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from xml.sax.saxutils import quoteattr

from strata.spark.conf import SparkSettings, user_conf
from strata.spark.java import check_java
from strata.spark.logs import (
    JVM_OPTION,
    jvm_log_config,
    python_loggers_to,
    reconfigure,
    stderr_into,
    users_own_logging,
)

DEFAULT_POOLS: dict[str, int] = {"urgent": 8, "normal": 2, "bulk": 1}


def fair_allocation_xml(pools: dict[str, int]) -> str:
    """A FAIR scheduler allocation file with one pool per name and its weight."""
    body = "".join(
        f"  <pool name={quoteattr(name)}><schedulingMode>FAIR</schedulingMode>"
        f"<weight>{weight}</weight><minShare>0</minShare></pool>\n"
        for name, weight in pools.items()
    )
    return f'<?xml version="1.0"?>\n<allocations>\n{body}</allocations>\n'


STRATA_OWNED: dict[str, tuple[str | None, str]] = {
    "spark.scheduler.mode": ("FAIR", "the controller places each micro-batch in a FAIR pool"),
    "spark.scheduler.allocation.file": (None, "Strata declares its pools in its own allocation file"),
    # a filter pushed into the JSON/CSV reader drops records before Spark counts them: numInputRows would be
    # the records past the filter, and the learner's selectivity and cost per record are measured on it
    "spark.sql.json.filterPushdown.enabled": ("false", "the learner counts every record read"),
    "spark.sql.csv.filterPushdown.enabled": ("false", "the learner counts every record read"),
}
"""The settings the engine relies on: Strata's value (None: made per session) and why a user's is not used."""

DAEMON_MODULE = "spark.python.daemon.module"  # local masters: Strata's daemon, which freezes reused workers' heaps
STRATA_DAEMON = "strata.spark.worker_daemon"

FIRST_TIER_ONLY = "-XX:TieredStopAtLevel=1"
"""HotSpot's option for a JVM that compiles with C1 only (no C2): for applications whose batches are too small to
repay C2's compiling (:func:`strata.control.cells.light_compiling` decides which)."""

G1_REGIONS = "-XX:G1HeapRegionSize=16m"
"""Heap regions big enough that Spark's own buffers are not "humongous" objects to G1. A default 1 GiB driver heap
has 1 MiB regions, and G1 gives an object of half a region or more a region of its own, counts it as old and may
start a collection for it: every task result (a 1 MiB serialization chunk) and every micro-batch's task binary
broadcast (4 MiB blocks, ``spark.broadcast.blockSize``) did. Measured on the demo's alerts query alone in its cell
(JFR, 60 s, 28 Nov): 18 of 34 collections caused by humongous allocations."""

LOCAL_CHECKPOINTS: dict[str, str] = {
    "spark.sql.streaming.checkpointFileManagerClass": (
        "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
    ),
    "spark.hadoop.fs.file.impl": "org.apache.hadoop.fs.RawLocalFileSystem",
    "spark.hadoop.fs.file.impl.disable.cache": "true",  # a `file:` file system cached before the session: its class
}
"""Checkpoint writes without forked processes (issue 28: a cell's appetite). Spark's default checkpoint file manager
goes through Hadoop's ``FileContext`` and its checksummed local file system, which without Hadoop's native library
(PySpark ships none) forks ``chmod`` for every file it creates and ``readlink`` for every rename: about 95 ms of CPU
per micro-batch of one small query (benchmarks/bench_checkpoint_writes.py), more than its tasks use. Strata's
checkpoints are local (its Python side reads them: :mod:`strata.spark.files`), where a rename is atomic, so the
``FileSystem``-based manager over the raw local file system (no ``.crc`` side files) does the same with far fewer
forks. Defaults: a user's own settings win."""


def strata_owned(user: Mapping[str, str]) -> list[str]:
    """One line per user setting Strata overrides (:data:`STRATA_OWNED`), naming it, Strata's value and why."""
    lines = []
    for key, (value, why) in STRATA_OWNED.items():
        if key in user and user[key] != value:
            ours = f"Strata sets {value}" if value is not None else "Strata sets its own"
            lines.append(f"your Spark setting {key}={user[key]} is not used: {ours} ({why})")
    return lines


def session_conf(strata: Mapping[str, str], user: Mapping[str, str], master: str | None) -> dict[str, str]:
    """The session's settings: Strata's defaults, the user's over them except :data:`STRATA_OWNED`, an explicit
    ``master`` over both (as ``spark-submit --master`` beats ``--conf spark.master``); the user's driver Java
    options come first and Strata's are appended (both are needed)."""
    merged = {**strata, **{k: v for k, v in user.items() if k not in STRATA_OWNED}}
    java = "spark.driver.extraJavaOptions"
    if java in user and java in strata:
        merged[java] = f"{user[java]} {strata[java]}"
    if master:
        merged["spark.master"] = master
    return merged


def driver_java_options(work: Path, user: Mapping[str, str]) -> str:
    """Strata's driver JVM options (they follow the user's ``spark.driver.extraJavaOptions``): Derby's home under
    ``work``; a 16 MiB thread stack, since stopping a foreachBatch query makes Spark regex-match the Python
    traceback (``StreamExecution.isInterruptionException``), which overflows the default 1 MiB; and
    :data:`G1_REGIONS` unless the user sets a region size of their own."""
    java = f"-Dderby.system.home={work} -Xss16m"
    if "G1HeapRegionSize" not in user.get("spark.driver.extraJavaOptions", ""):
        java += f" {G1_REGIONS}"
    return java


def build_session(
    app_name: str = "strata",
    master: str | None = None,
    cores: int | None = None,
    shuffle_partitions: int = 4,
    pools: dict[str, int] | None = None,
    ui: bool = False,
    work_dir: str | Path | None = None,
    settings: SparkSettings | None = None,
    log_file: str | Path | None = None,
):
    """Create (or return the running) SparkSession.

    ``settings``: the user's Spark settings (default: ``spark-defaults.conf`` under ``$SPARK_CONF_DIR``, as
    :func:`strata.spark.conf.user_conf` reads it), over Strata's defaults except :data:`STRATA_OWNED`;
    ``master`` None means theirs, else embedded ``local[cores or *]``. Spark's log lines go to ``log_file``
    (default ``work_dir/spark.log``; on stderr too with ``settings.verbose``: :mod:`strata.spark.logs`).
    Java is checked first so a missing or old JDK fails with the exact install instruction, then a
    standalone master's address (:func:`check_master`), so an unreachable one fails in seconds with one line
    instead of Spark's minute of retries.
    """
    settings = settings if settings is not None else SparkSettings(tuple(user_conf().items()))
    user = {**submitted_conf(), **settings.as_dict}
    work = Path(work_dir or tempfile.mkdtemp(prefix="strata-spark-")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    log = Path(log_file) if log_file is not None else work / "spark.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    alloc = work / "fairscheduler.xml"
    alloc.write_text(fair_allocation_xml(pools or DEFAULT_POOLS))
    own_logging = users_own_logging(user, os.environ)
    java = driver_java_options(work, user)
    log_config = None if own_logging else jvm_log_config(work, log.resolve(), settings.verbose)
    if log_config is not None:
        java += f" {JVM_OPTION}={log_config.as_uri()}"
    strata = {
        "spark.app.name": app_name,
        "spark.master": f"local[{cores or '*'}]",
        **{key: value for key, (value, _) in STRATA_OWNED.items() if value is not None},
        "spark.scheduler.allocation.file": str(alloc),
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.showConsoleProgress": "false",
        "spark.ui.enabled": "true" if ui else "false",
        "spark.sql.streaming.stopGracefullyOnShutdown": "true",
        "spark.sql.warehouse.dir": str(work / "warehouse"),
        "spark.driver.extraJavaOptions": java,
        "spark.python.worker.reuse": "true",
        **LOCAL_CHECKPOINTS,
    }
    conf = session_conf(strata, user, master)
    if conf["spark.master"].startswith("local") and DAEMON_MODULE not in user:
        conf[DAEMON_MODULE] = STRATA_DAEMON
    check_java()
    check_master(conf["spark.master"])
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    jvm_running = SparkContext._gateway is not None  # started before this session: it missed the Java option
    python_loggers_to(log, settings.verbose)
    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    with stderr_into(log, settings.verbose or own_logging or jvm_running):
        session = builder.getOrCreate()
    if log_config is not None and jvm_running:
        reconfigure(session, log_config)
    return session


def submitted_conf() -> dict[str, str]:
    """Under ``spark-submit`` (which starts the JVM first and hands this process its gateway), the settings it
    was given — ``--master``, ``--conf``, its properties files — as the running JVM holds them; else empty."""
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        return {}
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()  # connects to spark-submit's JVM, whose system properties hold them
    return dict(SparkConf().getAll())


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


def warm_python_workers(spark) -> None:
    """Start the session's Python workers, one per core, with pandas and Arrow imported in them, before any
    query's first batch needs them (PySpark reuses its workers: ``spark.python.worker.reuse``, on by default).

    A cold worker costs a query's first batch seconds — a cell started for a run measured its latency-critical
    query's first batches at 4.7 s against 0.6 s once warm (bench_platform, strata-cells) — and a fleet's cells
    start together, so that cost would fall after the sources' epoch, as a backlog."""
    cores = spark.sparkContext.defaultParallelism
    numbers = spark.range(0, 2 * cores, numPartitions=cores)
    numbers.mapInPandas(lambda frames: frames, numbers.schema).count()
    numbers.rdd.map(lambda row: row.id).count()
