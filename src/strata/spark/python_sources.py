"""L0's rate cap on a user's own Python data source, batch by batch, with no restart (issue 18, deliverable 3).

A Python data source (``pyspark.sql.datasource``) whose stream reader takes
``latestOffset(start, limit)`` supports Spark's admission control: it must
return no more than ``limit`` allows (``ReadMaxRows``: at most that many rows
past ``start``). Strata cannot reach the reader object — Spark runs it in a
Python planner process of its own — so, as for its own synthetic source
(:mod:`strata.spark.sources`), the cap travels through the source's control
file (:class:`~strata.spark.sources.RateCap`): :func:`capped` makes a data
source that is the user's, except that its reader reads the control file at
every ``latestOffset`` and asks the user's reader for at most the cap
(``ReadMaxRows``; the smaller of the cap and Spark's own limit). ``0`` pauses
the source; no file, or ``null``, reads what Spark's limit allows. A new cap
applies at the next batch: nothing restarts, and the offsets stay the user's,
so the checkpoint is the user's reader's too.

The user registers the source in the template function as in any PySpark
code (``spark.dataSource.register(MySource)``); Strata's session
(:class:`strata.spark.user.LimitedSession`) also registers the capped twin,
and a stream read by the source's name reads the twin. Not capped: readers with
the old ``latestOffset()`` signature (their offsets cannot be limited from
outside) and ``simpleStreamReader`` sources (Spark gives them no limit).
"""

from __future__ import annotations

import inspect

from pyspark.sql.datasource import DataSource, DataSourceStreamReader
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows

from strata.spark.sources import RateCap

__all__ = ["CONTROL_OPTION", "CappedReader", "capped", "capped_name", "takes_limits"]

CONTROL_OPTION = "strata.control_file"


def takes_limits(reader: DataSourceStreamReader) -> bool:
    """Whether ``reader`` implements ``latestOffset(start, limit)`` (admission control), as Spark checks it."""
    return len(inspect.signature(reader.latestOffset).parameters) > 0


class CappedReader(DataSourceStreamReader):
    """The user's stream reader, with every ``latestOffset`` held to the control file's cap."""

    def __init__(self, inner: DataSourceStreamReader, cap: RateCap) -> None:
        self.inner = inner
        self.cap = cap

    def initialOffset(self) -> dict:
        return self.inner.initialOffset()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        rows = self.cap.get()
        if rows is None:
            return self.inner.latestOffset(start, limit)
        if rows == 0:
            return start  # paused: no new batch is planned
        if isinstance(limit, ReadMaxRows):
            rows = min(rows, limit.max_rows)
        return self.inner.latestOffset(start, ReadMaxRows(rows))

    def getDefaultReadLimit(self) -> ReadLimit:
        return self.inner.getDefaultReadLimit()

    def reportLatestOffset(self) -> dict | None:
        return self.inner.reportLatestOffset()

    def partitions(self, start: dict, end: dict):
        return self.inner.partitions(start, end)

    def read(self, partition):
        return self.inner.read(partition)

    def commit(self, end: dict) -> None:
        self.inner.commit(end)

    def stop(self) -> None:
        self.inner.stop()


def capped_name(source: type[DataSource]) -> str:
    """The name the capped twin of ``source`` is registered under."""
    return f"strata_capped_{source.name()}"


def capped(source: type[DataSource]) -> type[DataSource]:
    """A data source that is ``source`` with its stream reader held to the control file named by the option
    ``strata.control_file`` (without the option, or for a reader that takes no limit, ``source``'s own)."""
    name = capped_name(source)

    class Capped(source):  # type: ignore[misc, valid-type]
        @classmethod
        def name(cls) -> str:
            return name

        def streamReader(self, schema):
            inner = super().streamReader(schema)
            path = self.options.get(CONTROL_OPTION)
            return CappedReader(inner, RateCap(path)) if path and takes_limits(inner) else inner

    Capped.__name__ = Capped.__qualname__ = f"Capped{source.__name__}"
    return Capped
