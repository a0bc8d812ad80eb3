"""Online learners over compositions: bandits that forget (emergent scheduling's learning problem).

Dean & Porter's emergent scheduler learns the best composition at runtime,
and name the hard part: workloads diverge, rarely repeat and arrive
sporadically, so the best arm changes. Standard non-stationary bandits
(rewards in [0, 1], arms by index):

- :class:`DiscountedUCB` — Garivier & Moulines (ALT 2011), D-UCB: counts and
  reward sums decay by γ each step, index = discounted mean +
  ``c`` · sqrt(ξ log n_γ / N_γ(i)); old evidence fades, so a change of the
  best arm is found again in about 1 / (1 − γ) steps;
- :class:`SlidingWindowUCB` — the same paper's SW-UCB: only the last
  ``window`` plays count;
- :class:`FactoredUCB` — D-UCB over arms built from blocks (a composition is
  one block per level): besides each arm's own statistics it keeps one per
  block value, so an arm never played is estimated from its blocks (playing
  ``fifo/off`` teaches something about every ``fifo`` arm), and a block value
  never played makes every arm holding it untried. A composition space
  grows as a product; the evidence needed grows as the sum of the levels;
- :class:`SegmentMemory` — learners per stationary segment of the workload
  (found by a change detector on workload features), kept with the features'
  centroid, so a workload that comes back resumes what it learnt and a new
  one starts from a weak copy of the last (a warm start, not a blank).

Every choice is deterministic given the seed (ties broken by a seeded RNG).
"""

from __future__ import annotations

import copy
import math
from collections import deque
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np


class DiscountedUCB:
    """D-UCB over ``arms`` arms; ``gamma`` the discount per play, ``c`` the exploration weight, ξ = 0.5.

    ``floor``: discounting stops at this many plays for an arm that had them.
    Plain D-UCB (``floor=0``) lets an arm's count fade to nothing, so its
    bonus grows without bound and every arm is tried again every
    ~1/(1 − γ) steps — however badly it did. When a bad trial is costly and
    lasting (a placement persists until the next plan), a floor keeps the
    bonus of a tried arm bounded (about ``c`` · sqrt(ξ log n / floor)): it is
    tried again only if the others fall to within that of its mean.
    """

    def __init__(self, arms: int, gamma: float = 0.95, c: float = 0.3, seed: int = 0, floor: float = 0.0) -> None:
        if arms < 1 or not 0.0 < gamma <= 1.0 or c < 0 or floor < 0:
            raise ValueError("need arms ≥ 1, 0 < gamma ≤ 1, c ≥ 0 and floor ≥ 0")
        self.arms, self.gamma, self.c, self.floor = arms, gamma, c, floor
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

    def update(self, arm: int | None, reward: float, weight: float = 1.0) -> None:
        """One step: a play of ``arm`` (None: of none of these arms, only the discount applies).

        ``weight`` < 1 counts a play whose reward the arm only partly caused.
        """
        kept = np.maximum(self.n * self.gamma, np.minimum(self.n, self.floor))
        with np.errstate(divide="ignore", invalid="ignore"):
            self.s = np.where(self.n > 0, self.s * kept / self.n, 0.0)
        self.n = kept
        if arm is not None:
            self.n[arm] += weight
            self.s[arm] += weight * min(1.0, max(0.0, reward))

    def means(self) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(self.n > 0, self.s / self.n, np.nan)

    def weakened(self, weight: float) -> DiscountedUCB:
        """A copy whose every arm keeps its mean on at most ``weight`` plays (a prior, easily overruled)."""
        out = DiscountedUCB(self.arms, self.gamma, self.c, floor=self.floor)
        out._rng = np.random.default_rng(self._rng.integers(2**32))
        out.n = np.minimum(self.n, weight)
        out.s = np.where(self.n > 0, self.s / np.where(self.n > 0, self.n, 1.0), 0.0) * out.n
        return out


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


class FactoredUCB:
    """D-UCB over arms that are tuples of block values (one per level), sharing evidence through the blocks.

    An arm played (discounted plays ≥ ``own``) is indexed on its own
    statistics, like D-UCB. An arm not yet played is indexed by an additive
    (main-effects) estimate — the overall mean plus, per level, how far its
    block value's mean (over every play of an arm holding it) lies from the
    overall mean — plus the mean of its block values' confidence bonuses; it
    is untried (∞) while one of its block values is. Block means mix the
    other levels' values they were played with, which is why an arm's own
    evidence takes over as soon as it has any.

    ``prior``: per level, block value → a prior mean entered as one play of
    that value (knowledge available before any play, e.g. from published
    comparisons); a value with a prior is not untried, so it is explored only
    when its prior plus bonus beats what was observed. Like any play it is
    discounted down to ``floor`` and overruled by evidence. The overall mean
    counts real plays only.
    """

    def __init__(
        self,
        arms: Sequence[tuple[Hashable, ...]],
        gamma: float = 0.99,
        c: float = 0.3,
        own: float = 0.5,
        floor: float = 1.0,
        seed: int = 0,
        prior: Sequence[Mapping[Hashable, float]] = (),
    ) -> None:
        if not arms or len({len(a) for a in arms}) != 1:
            raise ValueError("arms: expected one or more tuples of the same length")
        if len(prior) > len(arms[0]):
            raise ValueError(f"prior: expected at most one mapping per level ({len(arms[0])}); found {len(prior)}")
        self.arms = [tuple(a) for a in arms]
        self.own = own
        self.values = [sorted({a[k] for a in self.arms}, key=str) for k in range(len(self.arms[0]))]
        self._slot = [[vals.index(a[k]) for k, vals in enumerate(self.values)] for a in self.arms]
        self.whole = DiscountedUCB(len(self.arms), gamma, c, seed, floor)
        self.blocks = [DiscountedUCB(len(vals), gamma, c, seed + 1 + k, floor) for k, vals in enumerate(self.values)]
        for k, means in enumerate(prior):
            for value, mean in means.items():
                if value in self.values[k]:
                    j = self.values[k].index(value)
                    self.blocks[k].n[j] += 1.0
                    self.blocks[k].s[j] += min(1.0, max(0.0, mean))
        self._rng = np.random.default_rng(seed)

    def index(self) -> np.ndarray:
        whole = self.whole.index()
        total = self.whole.n.sum()
        overall = self.whole.s.sum() / total if total > 0 else 0.0
        means = [b.means() for b in self.blocks]
        bonus = [b.index() - np.nan_to_num(m) for b, m in zip(self.blocks, means, strict=True)]
        out = np.empty(len(self.arms))
        for i, slots in enumerate(self._slot):
            if self.whole.n[i] >= self.own:
                out[i] = whole[i]
                continue
            if any(np.isnan(means[k][j]) or np.isinf(bonus[k][j]) for k, j in enumerate(slots)):
                out[i] = np.inf
                continue
            # Main effects: each block value's mean says how much better than average it did.
            estimate = overall + sum(means[k][j] - overall for k, j in enumerate(slots))
            out[i] = estimate + float(np.mean([bonus[k][j] for k, j in enumerate(slots)]))
        return out

    def select(self, allowed: np.ndarray | None = None) -> int:
        """The arm of highest index among ``allowed`` (a boolean mask; all arms if None)."""
        idx = self.index()
        if allowed is not None:
            idx = np.where(allowed, idx, -np.inf)
        best = np.flatnonzero(idx >= idx.max() - 1e-12)
        if len(best) > 1 and np.isinf(idx[best[0]]):
            # Untried arms go in the order of what is known of their blocks (a prior, or plays): known-good first.
            known = np.array([self._known(i) for i in best])
            best = best[known >= known.max() - 1e-12]
        return int(best[0] if len(best) == 1 else self._rng.choice(best))

    def _known(self, arm: int) -> float:
        """Sum over levels of the arm's block means, 0.5 (uninformative) for a value never played."""
        means = [b.means()[j] for b, j in zip(self.blocks, self._slot[arm], strict=True)]
        return float(sum(0.5 if np.isnan(m) else m for m in means))

    def update(
        self, arm: int | None, reward: float, weight: float = 1.0, ran: tuple[Hashable, ...] | None = None
    ) -> None:
        """Credit ``arm``'s own statistics (None: no arm's) and the blocks of ``ran`` (default: ``arm``'s).

        Block values no arm holds are ignored.
        """
        if arm is None and ran is None:
            raise ValueError("update: expected an arm, the blocks that ran, or both")
        self.whole.update(arm, reward, weight)
        blocks = self.arms[arm] if ran is None else tuple(ran)
        for k, (vals, b) in enumerate(zip(self.values, self.blocks, strict=True)):
            b.update(vals.index(blocks[k]) if blocks[k] in vals else None, reward, weight)

    def means(self) -> np.ndarray:
        """Each arm's own discounted mean (NaN if never played)."""
        return self.whole.means()

    def weakened(self, weight: float) -> FactoredUCB:
        """A copy keeping every mean on at most ``weight`` plays: the warm start of a new segment."""
        out = copy.copy(self)  # the arm layout is shared; the statistics are new
        out.whole = self.whole.weakened(weight)
        out.blocks = [b.weakened(weight) for b in self.blocks]
        out._rng = np.random.default_rng(self._rng.integers(2**32))
        return out


@dataclass
class SegmentMemory:
    """The learners of the workload's stationary segments, each kept with the centroid of its features.

    :meth:`switch` is called when a change detector reports a new segment:
    the current learner is stored under ``centroid``; a stored segment whose
    centroid lies within ``radius`` (Chebyshev distance) of the new features
    is resumed. A new segment starts from ``start()`` when given — a learner
    knowing only what was known before any play — else from the current
    learner weakened to ``prior`` plays per arm (what was good before is tried
    first, and overruled by a few windows of evidence). The warm start carries
    the old segment's block estimates, and those mix the levels: a block that
    did not matter there (placement, when every job is pinned) inherits the
    score of the blocks it was played with, and is tried on that in a segment
    where it matters.
    """

    current: FactoredUCB | DiscountedUCB
    radius: float = 0.3
    prior: float = 1.0
    start: Callable[[], FactoredUCB | DiscountedUCB] | None = None
    stored: list[tuple[np.ndarray, FactoredUCB | DiscountedUCB]] = field(default_factory=list)

    def switch(self, centroid: np.ndarray, features: np.ndarray) -> bool:
        """Store the current segment, enter the one ``features`` belong to; True if it was seen before."""
        self.stored.append((np.asarray(centroid, float), self.current))
        near = [(float(np.max(np.abs(c - features))), k) for k, (c, _) in enumerate(self.stored[:-1])]
        near = [(d, k) for d, k in near if d <= self.radius]
        if near:
            _, k = min(near)
            _, self.current = self.stored.pop(k)
            return True
        self.current = self.start() if self.start is not None else self.current.weakened(self.prior)
        return False
