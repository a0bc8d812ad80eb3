"""Jobs, templates, operators and streams (SODA §1.1 and §3).

A job has a rank (lower is better), a required flag and one or more templates;
a template is a DAG of operators (SODA's processing elements, PEs) joined by
streams. A stream may also come from another job's operator (``"job.op"``), so
jobs share streams and the joined job graph can have components spanning jobs.
"""

from __future__ import annotations

from enum import StrEnum
from functools import cached_property
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from strata.model.functions import (
    IdentityValue,
    LinearCapacity,
    ResourceFunction,
    ValueFunction,
)
from strata.model.quantities import Bytes


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class OperatorKind(StrEnum):
    SOURCE = "source"
    FILTER = "filter"
    MAP = "map"
    WINDOW_AGGREGATE = "window_aggregate"
    JOIN = "join"
    KEYED_STATEFUL = "keyed_stateful"
    SINK = "sink"


KEYED_KINDS = frozenset({OperatorKind.WINDOW_AGGREGATE, OperatorKind.KEYED_STATEFUL, OperatorKind.JOIN})


class Constraints(_Spec):
    """Placement constraints of one operator (SODA §4.2 macroW)."""

    required_labels: frozenset[str] = frozenset()
    colocate_with: frozenset[str] = Field(frozenset(), description="operators that must share its node")
    exlocate_from: frozenset[str] = Field(frozenset(), description="operators that must not share its node")
    fixed_node: str | None = None
    max_instances: int | None = Field(None, gt=0, description="most nodes the operator may span")


# ------------------------------------------------------------------ source workloads


class ConstantArrivals(_Spec):
    process: Literal["constant"] = "constant"


class PoissonArrivals(_Spec):
    process: Literal["poisson"] = "poisson"


class OnOffArrivals(_Spec):
    """Bursts: ``on_s`` seconds at ``burst_factor`` × rate every ``period_s`` seconds."""

    process: Literal["onoff"] = "onoff"
    period_s: float = Field(30.0, gt=0)
    on_s: float = Field(3.0, gt=0)
    burst_factor: float = Field(3.0, ge=1)


class DiurnalArrivals(_Spec):
    """rate × (1 + amplitude × sin(2π t / period_s))."""

    process: Literal["diurnal"] = "diurnal"
    period_s: float = Field(86400.0, gt=0)
    amplitude: float = Field(0.5, ge=0, le=1)


class TraceArrivals(_Spec):
    """Replay of a recorded trace: a CSV or Parquet file with a column of arrival times (s)."""

    process: Literal["trace"] = "trace"
    path: str
    column: str = "t"


Arrivals = Annotated[
    ConstantArrivals | PoissonArrivals | OnOffArrivals | DiurnalArrivals | TraceArrivals,
    Field(discriminator="process"),
]


class KeyDistribution(_Spec):
    """Keys 0..count-1 drawn from Zipf(s) (s = 0 is uniform), optionally drifting.

    With ``drift_period_s`` set, the rank → key mapping rotates by ``drift_step``
    keys every period, so the hot keys move over time (AutoFlow's setting).
    """

    count: int = Field(1000, gt=0)
    zipf_s: float = Field(0.0, ge=0)
    drift_period_s: float | None = Field(None, gt=0)
    drift_step: int = Field(1, ge=1)


class SourceSpec(_Spec):
    """What a source emits: its primal rate (records/s) or a rate curve, arrivals, keys."""

    rate: float = Field(gt=0, description="primal (nominal) rate, records/s")
    rate_curve: list[tuple[float, float]] | None = Field(
        None, description="[(t seconds, records/s), ...]: piecewise-linear rate over time"
    )
    arrivals: Arrivals = PoissonArrivals()
    keys: KeyDistribution = KeyDistribution()
    seed: int = 0
    path: str | None = Field(
        None,
        description="read records from this data directory (Spark's file source) "
        "instead of generating them; rate stays the planner's nominal rate",
    )
    format: Literal["json", "csv", "parquet"] = Field("json", description="file format of 'path'")


class WindowSpec(_Spec):
    """Event-time window: tumbling when slide_s is None, else sliding."""

    size_s: float = Field(gt=0)
    slide_s: float | None = Field(None, gt=0)
    watermark_s: float = Field(1.0, ge=0, description="allowed lateness before a window closes")


class AggregateSpec(_Spec):
    fn: Literal["count", "sum", "avg", "min", "max"] = "count"
    column: str = "value"


class JoinSpec(_Spec):
    """Stream–static join: the static side is generated (``rows`` keys) or read from ``path``."""

    rows: int = Field(1000, gt=0)
    path: str | None = None
    on: str = "key"


# ---------------------------------------------------------------- operators, streams


class Operator(_Spec):
    """One processing element (PE).

    ``cost_per_record`` is core-seconds of cpu per input record; ``selectivity``
    output records per input record. The resource function defaults to
    ``LinearCapacity``: rate_out = selectivity × min(Σ rates_in, cpu / cost).
    """

    name: str = Field(min_length=1, pattern=r"^[A-Za-z_][A-Za-z0-9_\-]*$")
    kind: OperatorKind
    cpu_min: float = Field(0.0, ge=0, description="least useful cpu, cores")
    cpu_max: float = Field(64.0, gt=0, description="most useful cpu, cores")
    cost_per_record: float = Field(1e-5, ge=0, description="core-seconds per input record")
    selectivity: float = Field(1.0, ge=0, description="output records per input record")
    state_bytes: Bytes = Field(0.0, ge=0, description="keyed state held, bytes")
    memory: Bytes = Field(64 * 2**20, ge=0, description="memory footprint, bytes")
    instances: int = Field(1, gt=0, description="parallel instances")
    key_groups: int = Field(0, ge=0, description="key groups (0 = unkeyed; keyed kinds default 128)")
    resource: ResourceFunction = LinearCapacity()
    constraints: Constraints = Constraints()
    source: SourceSpec | None = None
    window: WindowSpec | None = None
    aggregate: AggregateSpec | None = None
    join: JoinSpec | None = None
    predicate: str | None = Field(None, description="filter: a Spark SQL boolean expression")
    expressions: list[str] | None = Field(None, description="map: Spark SQL select expressions")

    @model_validator(mode="after")
    def _kind_fields(self) -> Operator:
        if self.cpu_min > self.cpu_max:
            raise ValueError(f"cpu_min {self.cpu_min} exceeds cpu_max {self.cpu_max}")
        if (self.kind is OperatorKind.SOURCE) != (self.source is not None):
            raise ValueError("a source operator needs a 'source' block, and only sources have one")
        if self.window is not None and self.kind is not OperatorKind.WINDOW_AGGREGATE:
            raise ValueError("'window' is only for window_aggregate operators")
        if self.kind is OperatorKind.WINDOW_AGGREGATE and self.window is None:
            raise ValueError("a window_aggregate operator needs a 'window' block")
        if self.kind in KEYED_KINDS and self.key_groups == 0:
            object.__setattr__(self, "key_groups", 128)
        return self

    @property
    def keyed(self) -> bool:
        return self.key_groups > 0


class Stream(_Spec):
    """A directed arc from one operator to another.

    ``src`` may name another job's operator as ``"job.operator"`` (a shared
    stream). ``weight`` defaults to 1 on streams into sinks and 0 elsewhere, as
    SODA assigns weights from topology unless set.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    src: str = Field(alias="from")
    dst: str = Field(alias="to")
    bytes_per_record: float = Field(200.0, gt=0)
    weight: float | None = Field(None, ge=0)
    value: ValueFunction = IdentityValue()

    @property
    def is_external(self) -> bool:
        return "." in self.src


class Template(_Spec):
    """One alternative data-flow graph for a job."""

    name: str = Field("default", min_length=1)
    operators: list[Operator] = Field(min_length=1)
    streams: list[Stream] = []

    @cached_property
    def operator(self) -> dict[str, Operator]:
        return {op.name: op for op in self.operators}

    def weight_of(self, stream: Stream) -> float:
        if stream.weight is not None:
            return stream.weight
        return 1.0 if self.operator[stream.dst].kind is OperatorKind.SINK else 0.0

    @property
    def cpu_min(self) -> float:
        return sum(op.cpu_min for op in self.operators)

    @property
    def memory(self) -> float:
        return sum(op.memory + op.state_bytes for op in self.operators)


class Job(_Spec):
    """A job as the planner sees it. A job declared in Python also carries its declaration
    (:class:`strata.model.user.PythonJob`: each template's ``build(spark)`` function, the sink, the event-time
    column) in ``declared``, so one object travels from the spec to the engine; it is not part of the spec
    (never dumped, never compared by the checkpoint guard, which hashes the code itself)."""

    id: str = Field(min_length=1, pattern=r"^[A-Za-z_][A-Za-z0-9_\-]*$")
    rank: int = Field(ge=0, description="lower is better")
    required: bool = False
    target_latency_s: float = Field(60.0, gt=0, description="end-to-end latency target (Cameo's L)")
    templates: list[Template] = Field(min_length=1)
    # Any: strata.model.user imports this module (a PythonJob, or None for a job declared in YAML)
    declared: Any = Field(None, exclude=True, repr=False)

    def template(self, name: str) -> Template:
        for t in self.templates:
            if t.name == name:
                return t
        raise KeyError(f"job {self.id!r} has no template {name!r}")
