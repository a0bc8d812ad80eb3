"""Resource and value functions (SODA §3, "Glossary of key new SODA terms").

A *resource function* (RF) maps the rates of a PE's input streams and the cpu
given to it to the rate of the stream it produces. A *value function* maps a
stream's rate to its goodness; importance = weight × value(rate).

Both kinds are small pydantic models with a ``kind`` discriminator so they can be
written in spec files, and each is also a plain callable. To add a kind, write a
model with a unique ``kind`` literal and the method below, and add it to the
union at the end of this module.
"""

from __future__ import annotations

import itertools
from bisect import bisect_right
from collections.abc import Sequence
from typing import Annotated, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, field_validator


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def interp(points: Sequence[tuple[float, float]], x: float) -> float:
    """Linear interpolation through sorted ``points``, flat outside their range."""
    xs = [p[0] for p in points]
    if x <= xs[0]:
        return points[0][1]
    if x >= xs[-1]:
        return points[-1][1]
    i = bisect_right(xs, x)
    (x0, y0), (x1, y1) = points[i - 1], points[i]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


def _check_points(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    if len(points) < 2:
        raise ValueError("needs at least two points")
    xs = [p[0] for p in points]
    if any(b <= a for a, b in itertools.pairwise(xs)):
        raise ValueError(f"x values must be strictly increasing, got {xs}")
    if any(p[1] < 0 for p in points):
        raise ValueError("values must be non-negative")
    return points


def is_concave(points: Sequence[tuple[float, float]]) -> bool:
    """Whether the piecewise-linear curve through ``points`` has non-increasing slopes."""
    slopes = [(y1 - y0) / (x1 - x0) for (x0, y0), (x1, y1) in itertools.pairwise(points)]
    return all(b <= a + 1e-12 for a, b in itertools.pairwise(slopes))


# ---------------------------------------------------------------- value functions


class IdentityValue(_Frozen):
    """value(r) = r."""

    kind: Literal["identity"] = "identity"

    def __call__(self, rate: float) -> float:
        return rate

    @property
    def concave(self) -> bool:
        return True


class LinearValue(_Frozen):
    """value(r) = max(0, slope × r + intercept)."""

    kind: Literal["linear"] = "linear"
    slope: float = Field(1.0, ge=0)
    intercept: float = 0.0

    def __call__(self, rate: float) -> float:
        return max(0.0, self.slope * rate + self.intercept)

    @property
    def concave(self) -> bool:
        return self.intercept >= 0


class PiecewiseLinearValue(_Frozen):
    """value(r) interpolated through ``points`` [(rate, value), ...]; flat beyond them.

    Concave or not: a curve with increasing slopes (an economy of scale) is allowed
    and makes the planner use dynamic programming instead of greedy allocation.
    """

    kind: Literal["piecewise_linear"] = "piecewise_linear"
    points: list[tuple[float, float]]

    @field_validator("points")
    @classmethod
    def _valid(cls, v: list[tuple[float, float]]) -> list[tuple[float, float]]:
        return _check_points(v)

    def __call__(self, rate: float) -> float:
        return interp(self.points, rate)

    @property
    def concave(self) -> bool:
        return is_concave(self.points)


class StepValue(_Frozen):
    """value(r) = the value of the highest threshold ≤ r, 0 below the first.

    ``steps`` = [(threshold_rate, value), ...], thresholds increasing. A step
    function is never concave: rates below a threshold are worth nothing.
    """

    kind: Literal["step"] = "step"
    steps: list[tuple[float, float]] = Field(min_length=1)

    @field_validator("steps")
    @classmethod
    def _increasing(cls, v: list[tuple[float, float]]) -> list[tuple[float, float]]:
        xs = [s[0] for s in v]
        if any(b <= a for a, b in itertools.pairwise(xs)):
            raise ValueError(f"thresholds must be strictly increasing, got {xs}")
        return v

    def __call__(self, rate: float) -> float:
        i = bisect_right([s[0] for s in self.steps], rate + 1e-12)
        return self.steps[i - 1][1] if i else 0.0

    @property
    def concave(self) -> bool:
        return False


ValueFunction = Annotated[
    IdentityValue | LinearValue | PiecewiseLinearValue | StepValue,
    Field(discriminator="kind"),
]


# ------------------------------------------------------------- resource functions


class ResourceFunctionProtocol(Protocol):
    """The interface every resource function implements."""

    def capacity(self, cpu: float, cost_per_record: float) -> float:
        """Records/s of input the PE can process with ``cpu`` cores."""
        ...

    def cpu_for(self, input_rate: float, cost_per_record: float) -> float:
        """Least cpu that processes ``input_rate`` records/s (inf if unreachable)."""
        ...

    @property
    def concave(self) -> bool: ...


class LinearCapacity(_Frozen):
    """rate_out = selectivity × min(Σ rates_in, cpu / cost_per_record) (the default RF)."""

    kind: Literal["linear"] = "linear"

    def capacity(self, cpu: float, cost_per_record: float) -> float:
        if cost_per_record <= 0:
            return float("inf")
        return max(0.0, cpu) / cost_per_record

    def cpu_for(self, input_rate: float, cost_per_record: float) -> float:
        return max(0.0, input_rate) * max(0.0, cost_per_record)

    @property
    def concave(self) -> bool:
        return True


class PiecewiseLinearCapacity(_Frozen):
    """Processing capacity (records/s) interpolated over cpu through measured ``points``.

    ``points`` = [(cpu cores, records/s), ...] as a resource-function learner would
    tabulate them; rate_out = selectivity × min(Σ rates_in, capacity(cpu)). The
    operator's cost per record is ignored: the table is the cost model.
    """

    kind: Literal["table"] = "table"
    points: list[tuple[float, float]]

    @field_validator("points")
    @classmethod
    def _valid(cls, v: list[tuple[float, float]]) -> list[tuple[float, float]]:
        v = _check_points(v)
        ys = [p[1] for p in v]
        if any(b < a for a, b in itertools.pairwise(ys)):
            raise ValueError("capacity must not decrease as cpu grows")
        return v

    def capacity(self, cpu: float, cost_per_record: float) -> float:
        return interp(self.points, cpu)

    def cpu_for(self, input_rate: float, cost_per_record: float) -> float:
        if input_rate <= self.points[0][1]:
            return self.points[0][0] if input_rate > 0 else 0.0
        for (x0, y0), (x1, y1) in zip(self.points, self.points[1:], strict=False):
            if y0 <= input_rate <= y1 and y1 > y0:
                return x0 + (x1 - x0) * (input_rate - y0) / (y1 - y0)
        return float("inf")

    @property
    def concave(self) -> bool:
        return is_concave(self.points)


ResourceFunction = Annotated[LinearCapacity | PiecewiseLinearCapacity, Field(discriminator="kind")]
