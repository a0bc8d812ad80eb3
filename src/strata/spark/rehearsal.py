"""The input a user's own query is rehearsed on before its run, in place of its sources (issue 28, "Strata
decides the deployment"; docs/spark.md, "Cells").

A Spark team warms a query Strata has never seen by running it for a few micro-batches on data like its own. A
rehearsal does that without disturbing the run: each file source the query loads is read from a directory of
its own under the rehearsal's scratch directory, holding either a copy of the first :data:`SAMPLE_FILES` files
already in the source's directory (a copy: a source that cleans up what it read, Spark's ``cleanSource``, must
not touch the run's files), or, when there are none yet, :data:`SAMPLE_FILES` files of :data:`SAMPLE_ROWS`
rows of the schema the user declared for the source, written by Spark in the source's format: JSON, Parquet or
ORC, whose readers take what Spark's writers write whatever options the user set, and CSV, written with the
options the user's reader was given (``header``, ``sep``, ``quote``, ``timestampFormat``, … are options of
Spark's CSV writer too, which ignores the reader's own). A source that cannot stand in (Kafka, a table, a
Python data source; a directory with no file yet and no schema declared, or text, which has no schema of its
own) refuses the rehearsal: :attr:`Rehearsal.refused` says why in one line, and the query is not started.
Rows a reader option reads otherwise than they were written make the rehearsal fail or read nulls: the query
is then skipped or warmed on those, never run on the run's input.
"""

from __future__ import annotations

import glob
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path

SAMPLE_FILES = 3  # files a rehearsed source holds: read one a batch, so the query runs this many batches
SAMPLE_ROWS = 1000  # rows of each written file, when the source's directory has no file yet
SAMPLE_SPAN_S = 10.0  # the written rows' timestamps spread over this many seconds up to the rehearsal
WRITTEN_FORMATS = ("json", "parquet", "orc", "csv")


@dataclass
class Rehearsal:
    """Stand-in input for one user query's rehearsal, under ``scratch``; ``refused``: why it cannot run (the
    first source that could not stand in), None while every source has."""

    spark: object
    scratch: Path
    refused: str | None = None
    sources: list[Path] = field(default_factory=list)  # the stand-in directories, in the order loaded

    def refuse(self, reason: str) -> None:
        self.refused = self.refused or reason

    def stand_in(self, fmt: str, path: str, schema, options: Mapping[str, object] | None = None) -> str:
        """The directory the rehearsal reads in place of the file source ``path`` (format ``fmt``; ``schema``:
        the one the user declared, a DDL string or StructType, or None; ``options``: its reader's), filled with
        its sample; ``path`` itself when the source cannot stand in (:attr:`refused` says why; the query is then
        never started)."""
        here = self.scratch / str(len(self.sources))
        if copy_sample(path, here, SAMPLE_FILES) == 0:
            if schema is None or fmt not in WRITTEN_FORMATS:
                what = "no schema declared" if schema is None else f"{fmt} rows are not written for it"
                self.refuse(f"no input yet in {path} ({what})")
                return path
            try:
                write_rows(self.spark, schema, fmt, here, options if fmt == "csv" else None)
            except Exception as e:  # a schema no row can be made for (a non-nullable nested field): say so
                self.refuse(f"no input yet in {path}, and no rows of its schema ({type(e).__name__}: {e})"[:300])
                return path
        self.sources.append(here)
        return str(here)


def _hidden(relative: Path) -> bool:
    """Spark's file sources skip names starting with ``_`` or ``.`` (metadata, checksums, files being written)."""
    return any(part.startswith(("_", ".")) for part in relative.parts)


def copy_sample(path: str, into: Path, files: int) -> int:
    """Copy the first ``files`` data files (by name) a local file source ``path`` (a directory, a file or a glob)
    reads into ``into``, keeping their paths below the directory (partition directories such as
    ``batch_id=3/``); the number copied (0 for a source that is not on the local file system)."""
    local = path.removeprefix("file:")
    if "://" in local:
        return 0
    matches = [Path(m) for m in sorted(glob.glob(local))] if any(c in local for c in "*?[") else [Path(local)]
    found: list[tuple[Path, Path]] = []
    for match in matches:
        if match.is_file():
            found.append((match, Path(match.name)))
        elif match.is_dir():
            below = sorted(f.relative_to(match) for f in match.rglob("*") if f.is_file())
            found += [(match / r, r) for r in below if not _hidden(r)]
    for source, relative in found[:files]:
        (into / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, into / relative)
    return min(len(found), files)


def sample_value(dtype, i: int, n: int, now: datetime):
    """Row ``i`` of ``n``'s value of a column of Spark type ``dtype``: integers count up, fractions spread over
    [0, 1), timestamps over the :data:`SAMPLE_SPAN_S` seconds up to ``now``; nested types are null."""
    from pyspark.sql import types as T

    if isinstance(dtype, T.BooleanType):
        return i % 2 == 0
    if isinstance(dtype, (T.ByteType, T.ShortType)):
        return i % 100
    if isinstance(dtype, T.IntegralType):
        return i
    if isinstance(dtype, T.DecimalType):
        return Decimal(i % 10) if dtype.precision > dtype.scale else Decimal(0)
    if isinstance(dtype, T.FractionalType):
        return i / n
    if isinstance(dtype, T.StringType):
        return str(i)
    if isinstance(dtype, (T.TimestampType, T.TimestampNTZType)):
        return now - timedelta(seconds=SAMPLE_SPAN_S * (n - i) / n)
    if isinstance(dtype, T.DateType):
        return now.date()
    if isinstance(dtype, T.BinaryType):
        return bytes([i % 256])
    return None


def write_rows(spark, schema, fmt: str, into: Path, options: Mapping[str, object] | None = None) -> None:
    """:data:`SAMPLE_FILES` files of :data:`SAMPLE_ROWS` rows of ``schema`` (DDL or StructType) in ``fmt``, written
    with the writer ``options`` (a CSV source's reader options: the writer ignores those it does not know)."""
    struct = spark.createDataFrame([], schema).schema
    n = SAMPLE_FILES * SAMPLE_ROWS
    now = datetime.now()
    rows = [tuple(sample_value(f.dataType, i, n, now) for f in struct.fields) for i in range(n)]
    frame = spark.createDataFrame(rows, struct).repartition(SAMPLE_FILES)
    frame.write.format(fmt).options(**(options or {})).mode("overwrite").save(str(into))
