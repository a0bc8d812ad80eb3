"""Source workloads: arrival processes, Zipf keys with hot-key drift, record values.

One :class:`SourceStream` per source PE yields the arrival times of its
messages and a key and integer value for each. Everything is drawn from a
NumPy generator seeded by (simulation seed, ``SourceSpec.seed``, PE index), in
blocks for speed, so the same seed gives the same stream.

Arrival processes (``strata.model.job``): constant spacing 1/λ(t); Poisson
(homogeneous, or by thinning when the rate varies); on/off bursts and diurnal
modulation of the rate; replay of a trace file. λ(t) is the primal rate or the
piecewise-linear ``rate_curve``, times the process's modulation. With a batch of
``b`` records per message the message rate is λ(t)/b.
Constant arrivals with a varying rate come where ∫λ reaches b (steps ≤ 10 ms).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from strata.model.functions import interp
from strata.model.job import DiurnalArrivals, OnOffArrivals, PoissonArrivals, SourceSpec, TraceArrivals

_BLOCK = 4096
VALUE_RANGE = 100  # record values are integers in [0, VALUE_RANGE): sums stay exact


def load_trace(path: Path, column: str) -> np.ndarray:
    """Arrival times (s, sorted) from a CSV or Parquet file's ``column``."""
    import pandas as pd

    frame = pd.read_parquet(path) if path.suffix in {".parquet", ".pq"} else pd.read_csv(path)
    if column not in frame.columns:
        raise ValueError(f"trace {path}: expected a column {column!r}; found columns {list(frame.columns)}")
    return np.sort(frame[column].to_numpy(dtype=float))


class SourceStream:
    """Arrival times, keys and values of one source PE's messages."""

    def __init__(self, spec: SourceSpec, seed: int, index: int, batch: int = 1, base_dir: Path | None = None) -> None:
        self.spec = spec
        self.batch = batch
        self.rng = np.random.default_rng([seed, spec.seed, index])
        arr = spec.arrivals
        self.constant = arr.process == "constant"
        self.trace: list[float] | None = None
        if isinstance(arr, TraceArrivals):
            path = Path(arr.path)
            if not path.is_absolute() and base_dir is not None:
                path = base_dir / path
            self.trace = load_trace(path, arr.column)[batch - 1 :: batch].tolist()
            self.trace.reverse()
        base_max = max(p[1] for p in spec.rate_curve) if spec.rate_curve else spec.rate
        mod_max = 1.0
        if isinstance(arr, OnOffArrivals):
            mod_max = arr.burst_factor
        elif isinstance(arr, DiurnalArrivals):
            mod_max = 1.0 + arr.amplitude
        self.rate_max = base_max * mod_max
        self.varies_periodically = isinstance(arr, OnOffArrivals | DiurnalArrivals)
        self.varies = spec.rate_curve is not None or mod_max != 1.0 or isinstance(arr, DiurnalArrivals)
        self.thinning = not isinstance(arr, PoissonArrivals) or self.varies
        keys = spec.keys
        if keys.zipf_s > 0:
            weights = 1.0 / np.arange(1, keys.count + 1, dtype=float) ** keys.zipf_s
            self.cdf = np.cumsum(weights / weights.sum())
        else:
            self.cdf = None
        self._exp: list[float] = []
        self._uni: list[float] = []
        self._rank: list[int] = []
        self._val: list[int] = []
        self.t = 0.0

    def rate(self, t: float) -> float:
        """λ(t), records/s."""
        spec = self.spec
        lam = interp(spec.rate_curve, t) if spec.rate_curve else spec.rate
        arr = spec.arrivals
        if isinstance(arr, OnOffArrivals):
            if t % arr.period_s < arr.on_s:
                lam *= arr.burst_factor
        elif isinstance(arr, DiurnalArrivals):
            lam *= 1.0 + arr.amplitude * math.sin(2 * math.pi * t / arr.period_s)
        return lam

    def _draw_exp(self) -> float:
        if not self._exp:
            self._exp = self.rng.standard_exponential(_BLOCK).tolist()
        return self._exp.pop()

    def _draw_uni(self) -> float:
        if not self._uni:
            self._uni = self.rng.random(_BLOCK).tolist()
        return self._uni.pop()

    def next_time(self) -> float | None:
        """The next message's arrival time (None: the trace is exhausted, or the rate stays 0)."""
        if self.trace is not None:
            return self.trace.pop() if self.trace else None
        b = self.batch
        if self.constant:
            # The next arrival is where ∫λ reaches b, integrated in steps of at most 10 ms.
            need = float(b)
            curve = self.spec.rate_curve
            while True:
                lam = self.rate(self.t)
                if lam > 0 and need <= lam * 0.01:
                    self.t += need / lam
                    return self.t
                if lam <= 0 and (not curve or self.t >= curve[-1][0]) and not self.varies_periodically:
                    return None
                need -= lam * 0.01
                self.t += 0.01
        if self.thinning:
            # Thinning (Lewis & Shedler): candidate points at λmax, kept with probability λ(t)/λmax.
            lam_max = self.rate_max / b
            if lam_max <= 0:
                return None
            curve = self.spec.rate_curve
            while True:
                self.t += self._draw_exp() / lam_max
                lam = self.rate(self.t)
                if self._draw_uni() * self.rate_max < lam:
                    return self.t
                # Past the curve's last point the rate stays where it ended: at 0, no arrival ever comes.
                if lam <= 0 and curve and self.t >= curve[-1][0] and not self.varies_periodically:
                    return None
        self.t += self._draw_exp() * b / self.spec.rate
        return self.t

    def key(self, t: float) -> int:
        """A key for a record at time ``t``: Zipf rank, rotated by the hot-key drift."""
        keys = self.spec.keys
        if not self._rank:
            if self.cdf is None:
                self._rank = self.rng.integers(0, keys.count, _BLOCK).tolist()
            else:
                idx = np.searchsorted(self.cdf, self.rng.random(_BLOCK), side="right")
                self._rank = np.minimum(idx, keys.count - 1).tolist()
        rank = self._rank.pop()
        if keys.drift_period_s is not None:
            rank += keys.drift_step * int(t // keys.drift_period_s)
        return rank % keys.count

    def value(self) -> int:
        if not self._val:
            self._val = self.rng.integers(0, VALUE_RANGE, _BLOCK).tolist()
        return self._val.pop()
