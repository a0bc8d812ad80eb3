"""A user's Spark settings, given the way Spark users give them, merged the way ``spark-submit`` merges them.

Three layers, the later winning key by key (Spark's ``SparkSubmitArguments``, with SPARK-48392's loading of
``spark-defaults.conf`` next to a properties file): ``$SPARK_CONF_DIR/spark-defaults.conf`` (else
``$SPARK_HOME/conf/spark-defaults.conf``), ``--properties-file FILE``, ``--conf KEY=VALUE``. The result sits above
Strata's own session defaults; only the settings the engine relies on stay Strata's
(:func:`strata.spark.session.strata_owned`). Pure: files and the environment in, plain data out; no Spark.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

DEFAULTS_FILE = "spark-defaults.conf"
_SEPARATOR = re.compile(r"\s*[=:]\s*|\s+")  # java.util.Properties: the first '=', ':' or run of blanks


class ConfError(ValueError):
    """A Spark setting that cannot be read: which option or file (and line), what was expected, what was found."""


@dataclass(frozen=True)
class SparkSettings:
    """What the user asked of every Spark application Strata starts: ``conf`` (merged, in order) and whether
    Spark's own log lines reach the terminal (``verbose``) rather than only the run's log file."""

    conf: tuple[tuple[str, str], ...] = ()
    verbose: bool = False

    @property
    def as_dict(self) -> dict[str, str]:
        return dict(self.conf)


def parse_conf(items: Iterable[str], option: str = "--conf") -> dict[str, str]:
    """``KEY=VALUE`` strings (``spark-submit --conf``) → a dict; the last of a repeated key wins."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfError(f"{option}: expected KEY=VALUE (e.g. spark.sql.shuffle.partitions=8); found {item!r}")
        out[key.strip()] = value.strip()
    return out


def read_properties(path: str | Path, option: str) -> dict[str, str]:
    """A Spark properties file (``spark-defaults.conf`` format, Java properties): ``key value`` or ``key=value``
    per line, ``#``/``!`` comments, a trailing backslash continuing a line; values trimmed as Spark trims them."""
    path = Path(path)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        reason = getattr(e, "strerror", None) or str(e)
        raise ConfError(f"{option} {path}: expected a readable Spark properties file; found {reason}") from None
    out: dict[str, str] = {}
    pending = ""
    for number, raw in enumerate(text.splitlines(), start=1):
        line = pending + raw.lstrip() if pending else raw.strip()
        if not pending and (not line or line[0] in "#!"):
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending = line[:-1]
            continue
        pending = ""
        match = _SEPARATOR.search(line)
        key, value = (line[: match.start()], line[match.end() :]) if match else (line, "")
        if not key:
            raise ConfError(f"{option} {path}:{number}: expected 'key value' or 'key=value'; found {raw.strip()!r}")
        out[key] = value.strip()
    return out


def defaults_file(environ: Mapping[str, str]) -> Path | None:
    """Where ``spark-submit`` looks for ``spark-defaults.conf``: ``$SPARK_CONF_DIR``, else ``$SPARK_HOME/conf``;
    None when neither holds one."""
    folder = environ.get("SPARK_CONF_DIR") or (
        str(Path(environ["SPARK_HOME"]) / "conf") if environ.get("SPARK_HOME") else None
    )
    path = Path(folder) / DEFAULTS_FILE if folder else None
    return path if path is not None and path.is_file() else None


def user_conf(
    conf: Iterable[str] = (),
    properties_file: str | Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The user's Spark settings with ``spark-submit``'s precedence: ``--conf`` over ``--properties-file`` over
    ``spark-defaults.conf``. Bad input raises :class:`ConfError` naming the option or file and line."""
    environ = os.environ if environ is None else environ
    merged: dict[str, str] = {}
    found = defaults_file(environ)
    if found is not None:
        merged.update(read_properties(found, "spark-defaults.conf"))
    if properties_file is not None:
        merged.update(read_properties(properties_file, "--properties-file"))
    merged.update(parse_conf(conf))
    return merged
