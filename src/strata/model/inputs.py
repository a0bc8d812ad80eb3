"""One input definition per source spec, shared by the simulator and Spark.

A :class:`~strata.model.job.SourceSpec` defines its records through the
functions of this module, and both engines generate through them:

- **λ(t)** (:func:`rate_factor`): ``rate`` or the piecewise-linear
  ``rate_curve`` (flat outside its points), times ``burst_factor`` during the
  first ``on_s`` seconds of every ``period_s`` (on/off arrivals) or times
  ``1 + amplitude·sin(2πt/period_s)`` (diurnal arrivals), never below 0;
  :func:`rate_at` is the same at one time in plain Python, and
  :func:`expected_counts` its midpoint integral over ticks.
- **Keys** (:func:`zipf_ranks`, :func:`drifted_keys`): a Zipf(s) rank over
  ``count`` keys by the inverse of :func:`zipf_cdf` (s = 0: uniform); with
  drift, rank r at time t is key ``(r + drift_step·⌊t / drift_period_s⌋) mod count``.
- **Values** (:func:`values_of`): ``k / 1024`` with k uniform in 0..1023, a
  dyadic grid in [0, 1). Binary fractions add exactly in floating point, so
  the simulator's per-key sums compare exactly with its offline reference, and
  ``value > x`` keeps ``(1023 - ⌊1024·x⌋) / 1024`` of the records on both engines.

What stays engine-specific is where the uniform numbers and the arrival
instants come from. Spark needs record i to be a pure function of i (any
micro-batch replays identically), so it hashes i (:func:`uniform`) and spreads
Poisson (or, for constant arrivals, floor-difference) counts per tick of
``tick_s`` evenly inside the tick (:class:`Timeline`, :func:`record_columns`). The
simulator draws the uniforms sequentially from its seeded random stream and emits
messages at continuous times (``strata.sim.workload``). Both follow λ(t) above.

Only numpy is imported here: Spark's Python planner and worker processes load
this module and must start within Spark's connect-back timeout.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

CHUNK = 1024  # ticks per seeded Poisson draw: a chunk is the unit of random access
VALUE_LEVELS = 1024  # values are k / VALUE_LEVELS, k uniform in 0..VALUE_LEVELS-1
GENERATED_PROCESSES = ("constant", "poisson", "onoff", "diurnal")
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


# ------------------------------------------------------------------ hashing


def splitmix64(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finaliser on uint64 (wrapping arithmetic), a fast well-mixed hash."""
    with np.errstate(over="ignore"):
        z = x.astype(np.uint64) + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def uniform(seed: int, stream: int, i: np.ndarray) -> np.ndarray:
    """Uniform [0, 1) floats (53 bits), one per index, independent across (seed, stream)."""
    with np.errstate(over="ignore"):
        salt = splitmix64(np.array([seed * 1_000_003 + stream], dtype=np.uint64))[0]
        h = splitmix64(i.astype(np.uint64) ^ salt)
    return (h >> np.uint64(11)).astype(np.float64) * 2.0**-53


# ------------------------------------------------------------------ the spec as plain data


@dataclass(frozen=True)
class Workload:
    """A source spec as plain data (``SourceSpec.model_dump()``): what the synthetic sources read.

    Kept free of the model classes so Spark's Python planner and worker
    processes import only numpy (and pyarrow).
    """

    rate: float
    rate_curve: tuple[tuple[float, float], ...] | None
    arrivals: dict[str, Any]
    key_count: int
    zipf_s: float
    drift_period_s: float | None
    drift_step: int
    seed: int

    @classmethod
    def of(cls, spec: Any) -> Workload:
        """From a SourceSpec or its dumped dict."""
        d = spec if isinstance(spec, dict) else spec.model_dump(mode="json")
        keys = d.get("keys") or {}
        curve = d.get("rate_curve")
        return cls(
            float(d["rate"]),
            tuple((float(t), float(r)) for t, r in curve) if curve else None,
            dict(d.get("arrivals") or {"process": "poisson"}),
            int(keys.get("count", 1000)),
            float(keys.get("zipf_s", 0.0)),
            keys.get("drift_period_s"),
            int(keys.get("drift_step", 1)),
            int(d.get("seed", 0)),
        )

    @property
    def process(self) -> str:
        return self.arrivals.get("process", "poisson")

    @property
    def periodic(self) -> bool:
        """Whether λ(t) has a periodic modulation (on/off or diurnal)."""
        return self.process in ("onoff", "diurnal")

    @property
    def modulation_max(self) -> float:
        """The largest factor the arrival process multiplies the base rate by."""
        if self.process == "onoff":
            return float(self.arrivals["burst_factor"])
        if self.process == "diurnal":
            return 1.0 + float(self.arrivals["amplitude"])
        return 1.0

    @property
    def rate_max(self) -> float:
        """An upper bound of λ(t) (exact: the curve's peak times the modulation's)."""
        base = max(r for _, r in self.rate_curve) if self.rate_curve else self.rate
        return base * self.modulation_max

    @property
    def varies(self) -> bool:
        """Whether λ(t) is not the constant ``rate``."""
        return self.rate_curve is not None or self.modulation_max != 1.0 or self.process == "diurnal"

    @property
    def ends_at_zero(self) -> bool:
        """Whether λ(t) is 0 for ever after the rate curve's last point (no arrival ever comes)."""
        return bool(self.rate_curve) and self.rate_curve[-1][1] <= 0 and not self.periodic


# ------------------------------------------------------------------ rate λ(t)


def rate_factor(spec: Workload, t: np.ndarray) -> np.ndarray:
    """λ(t), records/s at times ``t`` (seconds since the source's epoch): THE rate of the spec."""
    t = np.asarray(t, dtype=np.float64)
    if spec.rate_curve:
        xs, ys = zip(*spec.rate_curve, strict=True)
        base = np.interp(t, xs, ys)
    else:
        base = np.full_like(t, spec.rate, dtype=np.float64)
    a = spec.arrivals
    if spec.process == "onoff":
        base = np.where(np.mod(t, a["period_s"]) < a["on_s"], base * a["burst_factor"], base)
    elif spec.process == "diurnal":
        base = base * (1.0 + a["amplitude"] * np.sin(2 * np.pi * t / a["period_s"]))
    return np.maximum(base, 0.0)


def rate_at(spec: Workload, t: float) -> float:
    """:func:`rate_factor` at one time, in plain Python (the simulator asks once per arrival candidate)."""
    if spec.rate_curve:
        pts = spec.rate_curve
        if t <= pts[0][0]:
            base = pts[0][1]
        elif t >= pts[-1][0]:
            base = pts[-1][1]
        else:
            i = bisect_right(pts, t, key=lambda p: p[0])
            (x0, y0), (x1, y1) = pts[i - 1], pts[i]
            base = y0 + (y1 - y0) * (t - x0) / (x1 - x0)
    else:
        base = spec.rate
    a = spec.arrivals
    if spec.process == "onoff":
        if t % a["period_s"] < a["on_s"]:
            base *= a["burst_factor"]
    elif spec.process == "diurnal":
        base *= 1.0 + a["amplitude"] * math.sin(2 * math.pi * t / a["period_s"])
    return max(base, 0.0)


def expected_counts(spec: Workload, first_tick: int, ticks: int, tick_s: float) -> np.ndarray:
    """Expected records in ticks ``first_tick .. first_tick+ticks-1`` of ``tick_s``: λ at each midpoint × tick_s."""
    k = np.arange(first_tick, first_tick + ticks, dtype=np.float64)
    return rate_factor(spec, (k + 0.5) * tick_s) * tick_s


# ------------------------------------------------------------------ keys and values


@lru_cache(maxsize=16)
def zipf_cdf(count: int, s: float) -> np.ndarray:
    """Cumulative probabilities of ranks 0..count-1 under Zipf(s) (s = 0: uniform)."""
    w = 1.0 / np.arange(1, count + 1, dtype=np.float64) ** s
    cdf = np.cumsum(w)
    return cdf / cdf[-1]


def zipf_ranks(spec: Workload, u: np.ndarray) -> np.ndarray:
    """Zipf ranks (0 = hottest) from uniforms ``u`` in [0, 1), by the inverse of :func:`zipf_cdf`."""
    rank = np.searchsorted(zipf_cdf(spec.key_count, spec.zipf_s), u, side="right")
    return np.minimum(rank, spec.key_count - 1).astype(np.int64)


def drifted_keys(spec: Workload, rank: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Keys of Zipf ranks at times ``t``: the rank → key map rotates by ``drift_step`` every ``drift_period_s``."""
    rank = np.asarray(rank, dtype=np.int64)
    if spec.drift_period_s:
        rank = rank + spec.drift_step * np.floor_divide(np.asarray(t, dtype=np.float64), spec.drift_period_s).astype(
            np.int64
        )
    return np.mod(rank, spec.key_count).astype(np.int64)


def drifted_key(spec: Workload, rank: int, t: float) -> int:
    """:func:`drifted_keys` for one record (plain Python, for the simulator's per-message path)."""
    if spec.drift_period_s:
        rank += spec.drift_step * int(t // spec.drift_period_s)
    return rank % spec.key_count


def values_of(u: np.ndarray) -> np.ndarray:
    """Record values from uniforms ``u`` in [0, 1): ``⌊u·1024⌋ / 1024``, uniform on the dyadic grid k/1024."""
    return np.floor(np.asarray(u, dtype=np.float64) * VALUE_LEVELS) / VALUE_LEVELS


def value_share_above(x: float) -> float:
    """The share of values ``> x`` (what a filter ``value > x`` keeps), for x in [0, 1)."""
    return (VALUE_LEVELS - 1 - int(np.floor(x * VALUE_LEVELS))) / VALUE_LEVELS


# ------------------------------------------------------------------ Spark's pure-function synthetic source


@dataclass
class Timeline:
    """Records per tick and their prefix sums, extended lazily and cached.

    The number of records in tick k is a function of (seed, k) only: for
    constant arrivals the floor-differences of the cumulative expected count
    (:func:`expected_counts`), otherwise (Poisson, and the Poisson-modulated
    on/off and diurnal processes) a Poisson draw from a random stream seeded by
    (seed, chunk of :data:`CHUNK` ticks). ``starts[k]`` is the index of the
    first record of tick k, so tick k holds records ``starts[k] .. starts[k+1]-1``.
    """

    spec: Workload
    tick_s: float = 0.1
    _counts: list[np.ndarray] = field(default_factory=list)
    _starts: np.ndarray = field(default_factory=lambda: np.zeros(1, dtype=np.int64))
    _expected_total: float = 0.0

    def __post_init__(self) -> None:
        if self.spec.process not in GENERATED_PROCESSES:
            raise ValueError(f"arrivals {self.spec.process!r} cannot be generated")

    @property
    def ticks(self) -> int:
        return len(self._starts) - 1

    def _extend(self) -> None:
        c = len(self._counts)
        lam = expected_counts(self.spec, c * CHUNK, CHUNK, self.tick_s)
        if self.spec.process != "constant":
            counts = np.random.default_rng([self.spec.seed, c]).poisson(lam).astype(np.int64)
        else:
            cum = self._expected_total + np.cumsum(lam)
            floors = np.floor(np.concatenate(([self._expected_total], cum))).astype(np.int64)
            counts = np.diff(floors)
            self._expected_total = float(cum[-1])
        self._counts.append(counts)
        self._starts = np.concatenate((self._starts, self._starts[-1] + np.cumsum(counts)))

    def starts_until(self, tick: int) -> np.ndarray:
        """Prefix sums covering ticks 0..tick (inclusive end boundary)."""
        while self.ticks < tick:
            self._extend()
        return self._starts[: tick + 1]

    def rows_before_tick(self, tick: int) -> int:
        """Number of records whose tick is < ``tick``."""
        return int(self.starts_until(tick)[tick])

    def tick_of_row(self, row: int) -> int:
        """The tick holding record ``row``."""
        while self._starts[-1] <= row:
            self._extend()
        return int(np.searchsorted(self._starts, row, side="right") - 1)

    def segments(self, lo: int, hi: int) -> list[tuple[int, int, int]]:
        """(tick, first row of tick, rows in tick) for every non-empty tick overlapping rows [lo, hi)."""
        if hi <= lo:
            return []
        k0, k1 = self.tick_of_row(lo), self.tick_of_row(hi - 1)
        s = self._starts
        return [(k, int(s[k]), int(s[k + 1] - s[k])) for k in range(k0, k1 + 1) if s[k + 1] > s[k]]


def record_columns(
    spec: Workload,
    tick_s: float,
    segments: list[tuple[int, int, int]],
    lo: int,
    hi: int,
) -> dict[str, np.ndarray]:
    """Columns of records [lo, hi): id, t (seconds since epoch, float), key, value.

    Records of a tick are spread evenly inside it, so event times never
    decrease with the record index; the key's uniform is hash stream 1 of i,
    the value's hash stream 2.
    """
    if hi <= lo:
        return {"id": np.zeros(0, np.int64), "t": np.zeros(0), "key": np.zeros(0, np.int64), "value": np.zeros(0)}
    ids = np.arange(lo, hi, dtype=np.int64)
    ks = np.array([k for k, _, _ in segments], dtype=np.int64)
    firsts = np.array([f for _, f, _ in segments], dtype=np.int64)
    ns = np.array([n for _, _, n in segments], dtype=np.int64)
    seg = np.searchsorted(firsts, ids, side="right") - 1
    t = (ks[seg] + (ids - firsts[seg] + 0.5) / ns[seg]) * tick_s
    key = drifted_keys(spec, zipf_ranks(spec, uniform(spec.seed, 1, ids)), t)
    return {"id": ids, "t": t, "key": key, "value": values_of(uniform(spec.seed, 2, ids))}


def static_dimension(rows: int, seed: int = 0) -> dict[str, np.ndarray]:
    """The generated static side of a stream–static join: key 0..rows-1 and a hashed attribute ``dim``."""
    keys = np.arange(rows, dtype=np.int64)
    return {"key": keys, "dim": uniform(seed, 3, keys)}
