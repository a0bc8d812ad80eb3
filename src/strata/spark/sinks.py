"""Sinks written from ``foreachBatch``: Parquet (idempotent per batch id), memory and console.

Every sink returns the event times (µs since the Unix epoch) of the rows it
wrote, so the pipeline measures per-record end-to-end latency at the sink.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Protocol

import numpy as np
import pandas as pd
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DateType,
    MapType,
    NumericType,
    StringType,
    StructType,
    TimestampType,
)


class Sink(Protocol):
    def write(self, df, batch_id: int) -> np.ndarray:
        """Write one micro-batch; return the event times (µs) of the rows written."""

    def read(self) -> pd.DataFrame:
        """Everything written so far, with a ``batch_id`` column."""


NO_EVENT_TIME = np.iinfo(np.int64).min
"""The event time :func:`event_micros` gives a row whose event-time column is null (NaT's own int64 value): it
was written, but its latency cannot be measured."""


def event_micros(values) -> np.ndarray:
    """Timestamps (naive ones are UTC, the session's time zone) as µs since the Unix epoch; a null is
    :data:`NO_EVENT_TIME`, so the array still has one entry per row written."""
    series = pd.to_datetime(pd.Series(values))
    if series.empty:
        return np.zeros(0, np.int64)
    if series.dt.tz is None:
        series = series.dt.tz_localize("UTC")
    return series.dt.tz_convert("UTC").astype("datetime64[us, UTC]").astype("int64").to_numpy()


def timed(event_micros: np.ndarray) -> np.ndarray:
    """The event times of the rows a batch wrote that have one."""
    return event_micros[event_micros != NO_EVENT_TIME]


def driver_writable(df) -> bool:
    """Whether a batch's rows written by pyarrow read back with the types Spark's writer gives them: every column
    of a type both write alike (numbers, decimals, strings, binary, booleans, dates, timestamps with a time zone,
    and arrays, maps and structs of them). Not a ``TIMESTAMP_NTZ`` (pyarrow writes every timestamp one way, Spark
    two), an interval or a variant (each its own encoding), nor a void column (which Spark does not write)."""
    return all(_alike(field.dataType) for field in df.schema.fields)


def _alike(kind: DataType) -> bool:
    if isinstance(kind, ArrayType):
        return _alike(kind.elementType)
    if isinstance(kind, MapType):
        return _alike(kind.keyType) and _alike(kind.valueType)
    if isinstance(kind, StructType):
        return all(_alike(field.dataType) for field in kind.fields)
    return isinstance(kind, NumericType | StringType | BinaryType | BooleanType | DateType | TimestampType)


def timestamp_options(df) -> dict:
    """``pyarrow.parquet.write_table``'s timestamp options for the physical type Spark's writer uses in ``df``'s
    session (``spark.sql.parquet.outputTimestampType``: INT96 by default, else INT64 micros or millis)."""
    kind = df.sparkSession.conf.get("spark.sql.parquet.outputTimestampType", "INT96").upper()
    if kind == "INT96":
        return {"use_deprecated_int96_timestamps": True}
    return {"coerce_timestamps": "ms" if kind == "TIMESTAMP_MILLIS" else "us", "allow_truncated_timestamps": False}


class ParquetSink:
    """``<directory>/batch_id=<b>/``, each batch written once. A replay of a batch whose write completed
    (``_SUCCESS``, the committer's last step) keeps the files and only executes the batch: a replay recomputes
    the same rows, and a job reading this directory as a stream (a shared stream) would take rewritten files
    for new ones. A replay of a batch whose write did not complete overwrites the partial directory. Spark's
    own file sink does the same with its log of committed batches.

    A batch that follows one of at most ``driver_rows`` output rows is written from the driver: its rows are
    collected as Arrow (bounded by Spark's ``spark.driver.maxResultSize``) and written as one file into a hidden
    directory that is then renamed into place, ``_SUCCESS`` inside — atomic, where Spark's committer renames file
    by file. Spark's file writer costs every task a Hadoop configuration to deserialize, a Parquet writer and a
    commit, and every batch a job commit: with this write and G1 regions sized to Spark's buffers
    (:data:`strata.spark.session.G1_REGIONS`), the demo's alerts cell (~40 rows out a batch) took 0.21-0.23
    cores against 0.34-0.43 before (docs/spark.md, Cells, "Small batches and the JVM's heap"). A big batch
    keeps Spark's parallel writer. The file has the physical types Spark's writer gives the session's
    ``outputTimestampType``, so one directory read back whole (:meth:`read`) has one schema."""

    def __init__(self, directory: str | Path, event_time: str = "event_time", driver_rows: int = 10_000):
        self.directory = Path(directory)
        self.event_time = event_time
        self.driver_rows = driver_rows
        self.last_rows: int | None = None  # the output rows of the batch before, once one was written here

    def write(self, df, batch_id: int) -> np.ndarray:
        target = self.directory / f"batch_id={batch_id}"
        if (target / "_SUCCESS").exists():
            # still run the batch (Spark's noop sink): its stateful operators commit their state for this batch
            # only when the plan is executed, and the next batch checks that they did
            df.write.format("noop").mode("overwrite").save()
            times = self._written_times(target)
        elif self.last_rows is not None and self.last_rows <= self.driver_rows and driver_writable(df):
            times = self._write_from_driver(df, target)
        else:
            df.write.mode("overwrite").parquet(str(target))
            times = self._written_times(target)
        self.last_rows = times.size
        return times

    def _written_times(self, target: Path) -> np.ndarray:
        files = sorted(target.glob("*.parquet"))
        if not files:
            return np.zeros(0, np.int64)
        times = (
            pq.read_table(files, columns=[self.event_time])
            if len(files) == 1
            else ds.dataset([str(f) for f in files]).to_table(columns=[self.event_time])
        )
        return event_micros(times.column(self.event_time).to_pandas())

    def _write_from_driver(self, df, target: Path) -> np.ndarray:
        table = df.toArrow()
        staging = self.directory / f".{target.name}.{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        if table.num_rows:
            pq.write_table(table, staging / "part-00000.parquet", store_schema=False, **timestamp_options(df))
        (staging / "_SUCCESS").touch()
        shutil.rmtree(target, ignore_errors=True)  # a partial write of an earlier attempt
        os.replace(staging, target)
        return event_micros(table.column(self.event_time).to_pandas())

    def read(self) -> pd.DataFrame:
        if not self.directory.exists() or not any(self.directory.glob("batch_id=*/*.parquet")):
            return pd.DataFrame()
        table = ds.dataset(
            str(self.directory), format="parquet", partitioning="hive", exclude_invalid_files=True
        ).to_table()
        return table.to_pandas()

    def clear(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


class MemorySink:
    """Batches kept in the driver as pandas frames, keyed by batch id (a replay replaces its batch)."""

    def __init__(self, event_time: str = "event_time") -> None:
        self.batches: dict[int, pd.DataFrame] = {}
        self.event_time = event_time

    def write(self, df, batch_id: int) -> np.ndarray:
        frame = df.toPandas()
        self.batches[batch_id] = frame
        return event_micros(frame[self.event_time]) if self.event_time in frame else np.zeros(0, np.int64)

    def read(self) -> pd.DataFrame:
        if not self.batches:
            return pd.DataFrame()
        return pd.concat([f.assign(batch_id=b) for b, f in sorted(self.batches.items())], ignore_index=True)


class ConsoleSink(MemorySink):
    """Prints each batch (for debugging); keeps it in memory too."""

    def __init__(self, name: str, rows: int = 20):
        super().__init__()
        self.name, self.rows = name, rows

    def write(self, df, batch_id: int) -> np.ndarray:
        times = super().write(df, batch_id)
        frame = self.batches[batch_id]
        print(f"--- {self.name} batch {batch_id}: {len(frame)} rows\n{frame.head(self.rows).to_string()}")
        return times


class FunctionSink:
    """The user's ``foreachBatch`` function (or a table append), timed at the sink: the batch is persisted so the
    event times of what the function wrote are read from the same rows, not recomputed."""

    def __init__(self, write, event_time: str = "event_time") -> None:
        self.write_batch = write
        self.event_time = event_time

    def write(self, df, batch_id: int) -> np.ndarray:
        cached = df.persist()
        try:
            self.write_batch(cached, batch_id)
            if self.event_time not in cached.columns:
                return np.zeros(0, np.int64)
            return event_micros(cached.select(self.event_time).toPandas()[self.event_time])
        finally:
            cached.unpersist()

    def read(self) -> pd.DataFrame:
        """What the function wrote is the user's to read back."""
        return pd.DataFrame()
