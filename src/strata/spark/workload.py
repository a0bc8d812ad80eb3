"""Deterministic workload rows: record i's event time, key and value are pure functions of i.

A source's timeline is cut into ticks of ``tick_s`` seconds. The number of
records in tick k is a function of (seed, k) only: for constant arrivals the
floor-differences of the cumulative expected count, otherwise (Poisson, and
the Poisson-modulated on/off and diurnal processes) a Poisson draw from a
generator seeded by (seed, chunk of ticks). The expected
count follows the rate (or the piecewise-linear ``rate_curve``) times the
burst factor of on/off arrivals or the diurnal factor. Records of a tick are
spread evenly inside it, so event times never decrease with the record index.

Keys are Zipf(s) over ``count`` keys through a seeded inverse CDF of a hash of
i; with drift, the rank → key mapping rotates by ``drift_step`` every
``drift_period_s``. Values are a second hash of i, uniform in [0, 1). Because
nothing depends on the order of calls, any micro-batch replays identically.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

CHUNK = 1024  # ticks per seeded Poisson draw: a chunk is the unit of random access
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def splitmix64(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finaliser on uint64 (wrapping arithmetic), a fast well-mixed hash."""
    with np.errstate(over="ignore"):
        z = x.astype(np.uint64) + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def uniform(seed: int, stream: int, i: np.ndarray) -> np.ndarray:
    """Uniform [0, 1) floats, one per index, independent across (seed, stream)."""
    with np.errstate(over="ignore"):
        salt = splitmix64(np.array([seed * 1_000_003 + stream], dtype=np.uint64))[0]
        h = splitmix64(i.astype(np.uint64) ^ salt)
    return (h >> np.uint64(11)).astype(np.float64) * 2.0**-53


@lru_cache(maxsize=16)
def zipf_cdf(count: int, s: float) -> np.ndarray:
    """Cumulative probabilities of ranks 0..count-1 under Zipf(s) (s = 0: uniform)."""
    w = 1.0 / np.arange(1, count + 1, dtype=np.float64) ** s
    cdf = np.cumsum(w)
    return cdf / cdf[-1]


GENERATED_PROCESSES = ("constant", "poisson", "onoff", "diurnal")


@dataclass(frozen=True)
class Workload:
    """A source spec as plain data (``SourceSpec.model_dump()``): what the generator reads.

    Kept free of the model classes so Spark's Python planner and worker
    processes, which must start within Spark's connect-back timeout, import
    only numpy and pyarrow.
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


def rate_factor(spec: Workload, t: np.ndarray) -> np.ndarray:
    """Rate in records/s at times ``t`` (seconds since the source's epoch)."""
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


@dataclass
class Timeline:
    """Records per tick and their prefix sums, extended lazily and cached.

    ``starts[k]`` is the index of the first record of tick k, so tick k holds
    records ``starts[k] .. starts[k+1]-1``.
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
        k = np.arange(c * CHUNK, (c + 1) * CHUNK, dtype=np.float64)
        lam = rate_factor(self.spec, (k + 0.5) * self.tick_s) * self.tick_s
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


def generate(
    spec: Workload,
    tick_s: float,
    segments: list[tuple[int, int, int]],
    lo: int,
    hi: int,
) -> dict[str, np.ndarray]:
    """Columns of records [lo, hi): id, t (seconds since epoch, float), key, value."""
    if hi <= lo:
        return {"id": np.zeros(0, np.int64), "t": np.zeros(0), "key": np.zeros(0, np.int64), "value": np.zeros(0)}
    ids = np.arange(lo, hi, dtype=np.int64)
    ks = np.array([k for k, _, _ in segments], dtype=np.int64)
    firsts = np.array([f for _, f, _ in segments], dtype=np.int64)
    ns = np.array([n for _, _, n in segments], dtype=np.int64)
    seg = np.searchsorted(firsts, ids, side="right") - 1
    t = (ks[seg] + (ids - firsts[seg] + 0.5) / ns[seg]) * tick_s
    rank = np.searchsorted(zipf_cdf(spec.key_count, spec.zipf_s), uniform(spec.seed, 1, ids), side="right")
    rank = np.minimum(rank, spec.key_count - 1)
    if spec.drift_period_s:
        rank = rank + spec.drift_step * np.floor(t / spec.drift_period_s).astype(np.int64)
    key = np.mod(rank, spec.key_count).astype(np.int64)
    return {"id": ids, "t": t, "key": key, "value": uniform(spec.seed, 2, ids)}


def static_dimension(rows: int, seed: int = 0) -> dict[str, np.ndarray]:
    """The generated static side of a stream–static join: key 0..rows-1 and a hashed attribute ``dim``."""
    keys = np.arange(rows, dtype=np.int64)
    return {"key": keys, "dim": uniform(seed, 3, keys)}
