"""Online learners over compositions: bandits that forget (emergent scheduling's learning problem).

Dean & Porter's emergent scheduler learns the best composition at runtime,
and name the hard part: workloads diverge, rarely repeat and arrive
sporadically, so the best arm changes. Two standard non-stationary bandits
(rewards in [0, 1], arms by index):

- :class:`DiscountedUCB` — Garivier & Moulines (ALT 2011), D-UCB: counts and
  reward sums decay by γ each step, index = discounted mean +
  ``c`` · sqrt(ξ log n_γ / N_γ(i)); old evidence fades, so a change of the
  best arm is found again in about 1 / (1 − γ) steps;
- :class:`SlidingWindowUCB` — the same paper's SW-UCB: only the last
  ``window`` plays count.

:class:`ContextualBandit` keeps one such learner per workload context (the
discretised features of :mod:`strata.adapt.features`), so a workload that
comes back finds the arm it learnt, while a new context starts fresh.
Every choice is deterministic given the seed (ties broken by a seeded RNG).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

import numpy as np


class DiscountedUCB:
    """D-UCB over ``arms`` arms; ``gamma`` the discount per play, ``c`` the exploration weight, ξ = 0.5."""

    def __init__(self, arms: int, gamma: float = 0.95, c: float = 0.3, seed: int = 0) -> None:
        if arms < 1 or not 0.0 < gamma <= 1.0 or c < 0:
            raise ValueError("need arms ≥ 1, 0 < gamma ≤ 1 and c ≥ 0")
        self.arms, self.gamma, self.c = arms, gamma, c
        self.n = np.zeros(arms)  # discounted plays
        self.s = np.zeros(arms)  # discounted reward sums
        self._rng = np.random.default_rng(seed)

    def index(self) -> np.ndarray:
        """Each arm's upper confidence index (inf for an arm never played or faded to nothing)."""
        total = self.n.sum()
        with np.errstate(divide="ignore", invalid="ignore"):
            mean = np.where(self.n > 0, self.s / self.n, 0.0)
            bonus = self.c * np.sqrt(0.5 * math.log(max(total, 1.0 + 1e-9)) / self.n)
        return np.where(self.n > 1e-9, mean + bonus, np.inf)

    def select(self) -> int:
        idx = self.index()
        best = np.flatnonzero(idx >= idx.max() - 1e-12)
        return int(best[0] if len(best) == 1 else self._rng.choice(best))

    def update(self, arm: int, reward: float) -> None:
        self.n *= self.gamma
        self.s *= self.gamma
        self.n[arm] += 1.0
        self.s[arm] += min(1.0, max(0.0, reward))

    def means(self) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(self.n > 0, self.s / self.n, np.nan)


class SlidingWindowUCB:
    """SW-UCB: UCB on the last ``window`` plays only."""

    def __init__(self, arms: int, window: int = 50, c: float = 0.3, seed: int = 0) -> None:
        if arms < 1 or window < 1 or c < 0:
            raise ValueError("need arms ≥ 1, window ≥ 1 and c ≥ 0")
        self.arms, self.c = arms, c
        self.history: deque[tuple[int, float]] = deque(maxlen=window)
        self._rng = np.random.default_rng(seed)

    def index(self) -> np.ndarray:
        n = np.zeros(self.arms)
        s = np.zeros(self.arms)
        for arm, r in self.history:
            n[arm] += 1
            s[arm] += r
        with np.errstate(divide="ignore", invalid="ignore"):
            bonus = self.c * np.sqrt(0.5 * math.log(max(len(self.history), 1)) / n)
            return np.where(n > 0, s / n + bonus, np.inf)

    def select(self) -> int:
        idx = self.index()
        best = np.flatnonzero(idx >= idx.max() - 1e-12)
        return int(best[0] if len(best) == 1 else self._rng.choice(best))

    def update(self, arm: int, reward: float) -> None:
        self.history.append((arm, min(1.0, max(0.0, reward))))


@dataclass
class ContextualBandit:
    """One bandit per context; ``make`` builds the learner for a context seen for the first time."""

    make: Callable[[], DiscountedUCB | SlidingWindowUCB]
    bandits: dict[Hashable, DiscountedUCB | SlidingWindowUCB] = field(default_factory=dict)

    def _of(self, context: Hashable) -> DiscountedUCB | SlidingWindowUCB:
        if context not in self.bandits:
            self.bandits[context] = self.make()
        return self.bandits[context]

    def select(self, context: Hashable) -> int:
        return self._of(context).select()

    def update(self, context: Hashable, arm: int, reward: float) -> None:
        self._of(context).update(arm, reward)
