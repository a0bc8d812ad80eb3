"""A keyed aggregation over a user's own streaming DataFrame, kept in Strata's movable store (issue 17).

Spark's own ``groupBy(key).agg(...)`` keeps its state in Spark's state store,
partitioned by a hash of the key that is fixed for the life of the query, so
L1 (AutoFlow, key-group migration) cannot move a hot key group of it. A job
declared in Python can instead declare its keyed aggregation with
:func:`keyed_aggregate`: the aggregation then runs per micro-batch in
:class:`strata.spark.state.KeyedStateStore`, and the planner sees it as a keyed
PE of the job's chain (``input → query → <name> → out``), so the balancer reads
its load per key group and moves key groups between batches, with no restart::

    sessions = strata.job("sessions", rank=2, target_latency_s=30)
    per_user = strata.keyed_aggregate(sessions, key="user", aggregate="count",
                                      window="10 seconds", watermark="2 seconds", key_groups=32)

    @sessions.template
    def counts(spark):
        clicks = spark.readStream.format("json").schema(SCHEMA).load("in/clicks")
        return per_user(clicks.filter("value > 0"))

The declaration is made where the job is declared, not inside the template,
because the planner's model of the job exists before any template runs (the
templates need a session). Nothing here imports PySpark: the DataFrame is only
inspected (``isStreaming``, ``columns``, its schema's type names) and handed to
:mod:`strata.spark.keyed`.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from strata.model.job import AggregateSpec, Job, Operator, OperatorKind, Stream, Template, WindowSpec

if TYPE_CHECKING:
    from strata.model.user import PythonJob

AGGREGATES = ("count", "sum", "avg", "min", "max")
RESERVED = ("input", "query", "out")  # the other PEs of a Python job's chain (strata.model.user)
INTEGRAL = ("long", "integer", "short", "byte")
UNITS = {
    "ms": 1e-3,
    "millisecond": 1e-3,
    "milliseconds": 1e-3,
    "s": 1.0,
    "sec": 1.0,
    "secs": 1.0,
    "second": 1.0,
    "seconds": 1.0,
    "m": 60.0,
    "min": 60.0,
    "mins": 60.0,
    "minute": 60.0,
    "minutes": 60.0,
    "h": 3600.0,
    "hour": 3600.0,
    "hours": 3600.0,
    "d": 86400.0,
    "day": 86400.0,
    "days": 86400.0,
}
DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z]+)\s*$")
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]*$")


def _error(where: str, expected: str, found: object) -> Exception:
    from strata.model.user import DeclarationError  # user.py refers to this module's declarations

    return DeclarationError(where, expected, found)


def seconds(where: str, x: object, zero: bool = False) -> float:
    """A duration as Spark writes it (``"10 seconds"``, ``"500 milliseconds"``, ``"1 minute"``) or seconds."""
    if isinstance(x, int | float) and not isinstance(x, bool):
        value = float(x)
    elif isinstance(x, str) and (m := DURATION.match(x.lower())) and m.group(2) in UNITS:
        value = float(m.group(1)) * UNITS[m.group(2)]
    else:
        value = -1.0
    if value < 0 or (value == 0 and not zero):
        raise _error(where, f"a duration {'≥' if zero else '>'} 0 such as '10 seconds' or 10 (seconds)", x)
    return value


@dataclass(frozen=True, eq=False)
class KeyedAggregate:
    """A job's declared keyed aggregation (:func:`keyed_aggregate`): call it on the template's streaming
    DataFrame and return the result from the template."""

    job: str
    name: str
    key: str
    aggregate: str
    value: str | None
    window: WindowSpec | None
    event_time: str
    key_groups: int
    origin: str

    def __call__(self, df: Any) -> KeyedFrame:
        """``df`` aggregated by this declaration: what the template returns (the aggregation is the query's last
        step; Strata runs it per micro-batch in its movable store, and the job's sink writes its output)."""
        where = f"{self.name}(df)"
        if not getattr(df, "isStreaming", False):
            found = "a batch DataFrame" if hasattr(df, "isStreaming") else type(df).__name__
            raise _error(where, "a streaming DataFrame (spark.readStream…)", found)
        columns = list(df.columns)
        wanted = [self.key, self.event_time, *([self.value] if self.value else [])]
        missing = [c for c in wanted if c not in columns]
        if missing:
            raise _error(where, f"columns {wanted} (key, event time, aggregated value)", f"columns {columns}")
        types = {f.name: f.dataType.typeName() for f in df.schema.fields}
        if types[self.key] not in (*INTEGRAL, "string"):
            raise _error(where, f"an integral or string key column {self.key!r}", f"type {types[self.key]}")
        if types[self.event_time] not in ("timestamp", "timestamp_ntz"):
            raise _error(where, f"a timestamp event-time column {self.event_time!r}", f"type {types[self.event_time]}")
        numeric = (*INTEGRAL, "float", "double", "decimal")
        if self.value and not types[self.value].startswith(numeric):
            raise _error(where, f"a numeric column {self.value!r} to aggregate", f"type {types[self.value]}")
        return KeyedFrame(self, df, "string" if types[self.key] == "string" else "long")

    def operator(self, cost_per_record: float, selectivity: float) -> Operator:
        """The keyed PE the planner sees (its key groups are what L1 moves)."""
        return Operator(
            name=self.name,
            kind=OperatorKind.KEYED_STATEFUL if self.window is None else OperatorKind.WINDOW_AGGREGATE,
            key_groups=self.key_groups,
            window=self.window,
            aggregate=AggregateSpec(fn=self.aggregate, column=self.value or "value"),
            cost_per_record=cost_per_record,
            selectivity=selectivity,
        )

    def into(self, job: Job) -> Job:
        """``job``'s model with this aggregation between its ``query`` PE and its sink: the query keeps its cost
        prior and passes every row on; the aggregate gets the job's declared selectivity and an equal cost prior
        (both are learned from the batches), and the output's weight and value move onto its stream to the sink."""
        templates = []
        for tpl in job.templates:
            ops: list[Operator] = []
            for op in tpl.operators:
                if op.name == "query":
                    ops += [
                        op.model_copy(update={"selectivity": 1.0}),
                        self.operator(op.cost_per_record, op.selectivity),
                    ]
                else:
                    ops.append(op)
            streams: list[Stream] = []
            for st in tpl.streams:
                if st.src == "query":
                    streams += [Stream(src="query", dst=self.name), st.model_copy(update={"src": self.name})]
                else:
                    streams.append(st)
            # a new Template, not a copy: a copy would keep the old one's cached operator index
            templates.append(Template(name=tpl.name, operators=ops, streams=streams))
        return job.model_copy(update={"templates": templates})


@dataclass(frozen=True)
class KeyedFrame:
    """A template's result: the rows to aggregate (``df``) and the declaration that aggregates them."""

    declaration: KeyedAggregate
    df: Any
    key_type: str  # "long" or "string": the store's key column


def keyed_aggregate(
    job: PythonJob,
    key: str,
    aggregate: str = "count",
    value: str | None = None,
    *,
    window: str | float | None = None,
    slide: str | float | None = None,
    watermark: str | float | None = None,
    key_groups: int = 64,
    name: str = "keyed",
    event_time: str | None = None,
) -> KeyedAggregate:
    """Declare ``job``'s keyed aggregation in Strata's movable store (AutoFlow §3: key groups L1 can move).

    Per ``key`` (an integral or string column), ``aggregate`` (count, sum, avg, min or max) of ``value`` (count
    without a value counts rows), per event-time window when ``window`` is given (tumbling, or sliding by
    ``slide``; windows close once the newest event time seen − ``watermark`` passes their end and are written
    once, as Spark's append mode). Unwindowed, every batch writes the updated keys' new values (Spark's update
    mode): a key's current value is its row of the latest batch. ``key_groups`` is the unit L1 moves;
    ``name`` the keyed PE's name in the job's model; ``event_time`` the input's event-time column (default: the
    job's ``event_time``, which the output names the same: the newest record's time per key, the window end
    for windows). Output columns: [``window_start``, ``window_end``,] key, the aggregate's name, event time.
    """
    from strata.model.user import PythonJob

    if not isinstance(job, PythonJob):
        raise _error("keyed_aggregate(job)", "a job declared with strata.job(...)", job)
    at = f"keyed_aggregate({job.id!r})"
    if getattr(job, "keyed", None) is not None:
        raise _error(f"{at}", "one keyed aggregate per job", f"a second one after {job.keyed.name!r}")
    if not isinstance(key, str) or not key:
        raise _error(f"{at}: key", "the name of the key column", key)
    if aggregate not in AGGREGATES:
        raise _error(f"{at}: aggregate", " or ".join(AGGREGATES), aggregate)
    if value is not None and (not isinstance(value, str) or not value):
        raise _error(f"{at}: value", "the name of the column to aggregate", value)
    if value is None and aggregate != "count":
        raise _error(f"{at}: value", f"the column whose {aggregate} to keep", None)
    if not isinstance(key_groups, int) or isinstance(key_groups, bool) or not 1 <= key_groups <= 4096:
        raise _error(f"{at}: key_groups", "an integer in 1..4096 (the unit the balancer moves)", key_groups)
    if not isinstance(name, str) or not NAME.match(name) or name in RESERVED:
        raise _error(f"{at}: name", f"a PE name of letters, digits, '_' or '-', not {' or '.join(RESERVED)}", name)
    if event_time is not None and event_time != job.event_time:
        raise _error(
            f"{at}: event_time",
            f"the job's event-time column {job.event_time!r} (the output names it the same)",
            event_time,
        )
    spec = None
    if window is not None:
        size = seconds(f"{at}: window", window)
        step = seconds(f"{at}: slide", slide) if slide is not None else None
        if step is not None and step > size:
            raise _error(f"{at}: slide", f"a slide ≤ the window ({size:g} s)", slide)
        if watermark is None:
            raise _error(f"{at}: watermark", "how late a record may come, e.g. '2 seconds' (windows need one)", None)
        spec = WindowSpec(size_s=size, slide_s=step, watermark_s=seconds(f"{at}: watermark", watermark, zero=True))
    elif slide is not None or watermark is not None:
        what = "slide" if slide is not None else "watermark"
        raise _error(f"{at}: {what}", "no slide or watermark without a window (every key is kept)", slide or watermark)
    frame = sys._getframe(1)
    declared = KeyedAggregate(
        job=job.id,
        name=name,
        key=key,
        aggregate=aggregate,
        value=value,
        window=spec,
        event_time=job.event_time,
        key_groups=key_groups,
        origin=f"{frame.f_code.co_filename}:{frame.f_lineno}",
    )
    job.keyed = declared
    return declared


def with_keyed(job: Job, keyed: KeyedAggregate | None) -> Job:
    """``job`` with ``keyed`` placed in each template's chain (unchanged without one)."""
    return job if keyed is None else keyed.into(job)


__all__ = ["KeyedAggregate", "KeyedFrame", "keyed_aggregate", "seconds", "with_keyed"]
