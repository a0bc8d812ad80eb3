"""Source workloads: arrival times, keys and values of a source PE's messages.

The input definition is :mod:`strata.model.inputs`, shared with Spark: λ(t)
(:func:`~strata.model.inputs.rate_at`), Zipf ranks through the same CDF and
the same hot-key drift rule, values on the dyadic grid k/1024 in [0, 1)
(binary fractions: sums stay exact). What is the simulator's own is where its
uniform numbers come from, a NumPy random stream seeded by (simulation seed,
``SourceSpec.seed``, PE index) drawn in blocks (the same seed gives the same
stream), and how arrivals become instants: messages at continuous times.

Arrival processes (``strata.model.job``): constant spacing b/λ(t); Poisson
(homogeneous, or by thinning when the rate varies); on/off bursts and diurnal
modulation of the rate; replay of a trace file. With a batch of ``b`` records
per message the message rate is λ(t)/b. Constant arrivals with a varying rate
come where ∫λ reaches b (steps ≤ 10 ms).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from strata.model.inputs import Workload, drifted_key, rate_at, values_of, zipf_ranks
from strata.model.job import SourceSpec, TraceArrivals

_BLOCK = 4096
LEGACY_VALUE_RANGE = 100  # the integer values the simulator drew before values were shared with Spark


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
        self.inputs = Workload.of(spec)
        self.batch = batch
        self.rng = np.random.default_rng([seed, spec.seed, index])
        # Values come from a stream of their own (the shared grid k/1024); ``rng`` still advances by the block of
        # integers in [0, 100) it drew per value block before values were shared with Spark, so arrival instants and
        # keys are bit for bit what they were for the same seed, and every simulated figure measured on them stands.
        self.value_rng = np.random.default_rng([seed, spec.seed, index, 1])
        arr = spec.arrivals
        self.constant = arr.process == "constant"
        self.trace: list[float] | None = None
        if isinstance(arr, TraceArrivals):
            path = Path(arr.path)
            if not path.is_absolute() and base_dir is not None:
                path = base_dir / path
            self.trace = load_trace(path, arr.column)[batch - 1 :: batch].tolist()
            self.trace.reverse()
        self.rate_max = self.inputs.rate_max
        self.varies_periodically = self.inputs.periodic
        self.varies = self.inputs.varies
        self.thinning = arr.process != "poisson" or self.varies
        self._exp: list[float] = []
        self._uni: list[float] = []
        self._rank: list[int] = []
        self._val: list[float] = []
        self.t = 0.0

    def rate(self, t: float) -> float:
        """λ(t), records/s (:func:`strata.model.inputs.rate_at`)."""
        return rate_at(self.inputs, t)

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
        """A key for a record at time ``t``: the shared Zipf rank, rotated by the shared hot-key drift."""
        if not self._rank:
            if self.inputs.zipf_s == 0:  # uniform ranks: the s = 0 CDF's distribution, drawn as integers
                self._rank = self.rng.integers(0, self.inputs.key_count, _BLOCK).tolist()
            else:
                self._rank = zipf_ranks(self.inputs, self.rng.random(_BLOCK)).tolist()
        return drifted_key(self.inputs, self._rank.pop(), t)

    def value(self) -> float:
        """A record value on the shared dyadic grid k/1024 in [0, 1)."""
        if not self._val:
            self.rng.integers(0, LEGACY_VALUE_RANGE, _BLOCK)  # keeps ``rng``'s position (see __init__)
            self._val = values_of(self.value_rng.random(_BLOCK)).tolist()
        return self._val.pop()
