"""Spark's own log lines under Strata's control: into the run's log file, on the terminal only when asked.

Strata reports what goes wrong itself, located (a misspelt column names the template's file and line); Spark's
log lines — the JVM's log4j2 output and PySpark's JSON ``SQLQueryContextLogger`` / ``DataFrameQueryContextLogger``
records, both on stderr by default — would print first and bury it. So every session Strata starts sends Spark's
WARN and above to one log file (the run directory's), and ``verbose`` adds them on stderr as Spark prints them.
A user's own ``log4j2.properties`` (in ``$SPARK_CONF_DIR``, or ``-Dlog4j2.configurationFile`` in their
``spark.driver.extraJavaOptions``) is theirs: Strata then leaves the JVM's logging alone.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

PYSPARK_LOGGERS = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")
"""PySpark's loggers that print an analysis error as JSON on stderr before the exception reaches Strata."""

PY4J_LOGGERS = ("py4j.clientserver", "py4j.java_gateway")
"""py4j's loggers: the callback server logs the traceback of every ``foreachBatch`` call that raised — a batch
cancelled because Strata stopped its query, or a user's error that Strata reports itself, located, from the
query's exception."""

JVM_OPTION = "-Dlog4j2.configurationFile"


def log4j2_properties(log_file: Path, verbose: bool) -> str:
    """A log4j2 configuration: WARN and above to ``log_file`` (Spark's own pattern), and to stderr with
    ``verbose``; the loggers Spark's defaults quieten stay quiet."""
    refs = "rootLogger.appenderRef.file.ref = file\n" + ("rootLogger.appenderRef.console.ref = console\n" * verbose)
    console = (
        "appender.console.type = Console\nappender.console.name = console\nappender.console.target = SYSTEM_ERR\n"
        "appender.console.layout.type = PatternLayout\n"
        "appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex\n"
    )
    quiet = {
        "org.sparkproject.jetty": "warn",
        "org.apache.hadoop.hive.metastore.RetryingHMSHandler": "fatal",
        "org.apache.hadoop.hive.metastore.ObjectStore": "error",
        "org.apache.parquet.CorruptStatistics": "error",
    }
    loggers = "".join(
        f"logger.q{i}.name = {name}\nlogger.q{i}.level = {level}\n" for i, (name, level) in enumerate(quiet.items())
    )
    return (
        "rootLogger.level = warn\n"
        + refs
        + "appender.file.type = File\nappender.file.name = file\n"
        + f"appender.file.fileName = {log_file}\nappender.file.append = true\n"
        + "appender.file.layout.type = PatternLayout\n"
        + "appender.file.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex\n"
        + (console if verbose else "")
        + loggers
    )


def users_own_logging(conf: Mapping[str, str], environ: Mapping[str, str]) -> bool:
    """Whether the user configures log4j2 themselves (their ``log4j2.properties`` in ``$SPARK_CONF_DIR``, or a
    ``-Dlog4j2.configurationFile`` in ``spark.driver.extraJavaOptions``)."""
    folder = environ.get("SPARK_CONF_DIR")
    return JVM_OPTION in conf.get("spark.driver.extraJavaOptions", "") or bool(
        folder and (Path(folder) / "log4j2.properties").is_file()
    )


def jvm_log_config(work: Path, log_file: Path, verbose: bool) -> Path:
    """Write the log4j2 configuration under ``work``; its path (for ``-Dlog4j2.configurationFile`` at the JVM's
    start, and :func:`reconfigure` for a JVM already running)."""
    path = work / "log4j2.properties"
    path.write_text(log4j2_properties(log_file, verbose))
    return path


def reconfigure(spark, config: Path) -> None:
    """Point a running JVM's log4j2 at ``config`` (a JVM started before this session, e.g. by ``spark-submit``
    or an earlier session of this process, did not get the option at its start)."""
    jvm = spark.sparkContext._jvm
    jvm.org.apache.logging.log4j.core.config.Configurator.reconfigure(jvm.java.net.URI.create(config.as_uri()))


@contextmanager
def stderr_into(log_file: Path, keep_terminal: bool) -> Iterator[None]:
    """While the JVM starts (inside the block), this process's stderr is ``log_file`` (unless ``keep_terminal``:
    ``--verbose``, the user's own logging, a JVM already running): the JVM and the Python workers it starts keep
    that stderr, so what they print outside log4j (the JVM's ``WARNING: Using incubator modules``, a worker's
    traceback) goes to the run's log too."""
    if keep_terminal:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with log_file.open("ab") as log:
            os.dup2(log.fileno(), 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def python_loggers_to(log_file: Path, verbose: bool) -> None:
    """PySpark's query-context loggers and py4j's write to ``log_file`` (and stderr with ``verbose``) instead of
    stderr."""
    from pyspark.logger import PySparkLogger

    for logger in [PySparkLogger.getLogger(n) for n in PYSPARK_LOGGERS] + [logging.getLogger(n) for n in PY4J_LOGGERS]:
        logger.propagate = False
        for handler in list(logger.handlers):
            logger.removeHandler(handler)
            handler.close()
        logger.addHandler(logging.FileHandler(log_file))
        if verbose:
            logger.addHandler(logging.StreamHandler(sys.stderr))
