"""Per-level credit, the safe-default switch rule and bounded exploration (emergent scheduling, Dean & Porter).

The emergent scheduler learns which composition suits the workload. One
bandit arm per whole composition confounds the levels: a window's reward is
credited to the dispatch, balancing and placement blocks together, and a
block's mean then mixes whatever the other levels were doing when it ran.
Here every estimate is the effect of **one** level's choice with the others
held fixed:

- the meta level runs an *incumbent* composition; a *trial* changes one
  level's block and nothing else; the trial's reward minus the incumbent's
  reward next to it (the windows just before the trial, or the same windows
  on a forked copy of the engine: a counterfactual with the same arrivals) is
  one sample of that block's effect, :class:`Effect`;
- :class:`LevelCredit` keeps, per level, the effect of each block value
  relative to the incumbent's value of that level, and re-bases them when the
  incumbent changes (additive main effects: the old values' effects minus the
  adopted one's);
- :func:`significant` is the safe-default rule: a block replaces the
  incumbent's only when its estimated gain exceeds ``z`` standard errors of
  its measured noise (and a minimum gain), on at least ``n_min`` samples;
  with less evidence the incumbent stays — at the start of a workload, the
  composition the levels would run alone;
- :class:`ExplorationBudget` bounds what trials cost: trial windows never
  exceed a stated share of the windows run so far;
- :func:`pays_back` bounds it by what trials have been measured to cost and
  to find: a trial starts only when the gain trials have found, over the
  windows the choice is expected to stand, outweighs what they have cost.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field


@dataclass
class Effect:
    """Running mean and variance of one block's effect samples (Welford), plus a floor on the variance.

    ``floor``: the variance one sample is known to carry at least (the noise of
    the windows it was measured on); with one or two samples the sample
    variance says nothing, so the larger of the two is used.
    """

    n: int = 0
    mean: float = 0.0
    m2: float = 0.0
    floor: float = 0.0

    def add(self, x: float, floor: float = 0.0) -> None:
        self.n += 1
        d = x - self.mean
        self.mean += d / self.n
        self.m2 += d * (x - self.mean)
        self.floor += (floor - self.floor) / self.n

    @property
    def variance(self) -> float:
        """Per-sample variance: the sample variance (n ≥ 2) or the floor, whichever is larger."""
        sample = self.m2 / (self.n - 1) if self.n >= 2 else 0.0
        return max(sample, self.floor)

    @property
    def mean_square(self) -> float:
        """Mean of the squared samples (bias² plus their population variance): of an error, how far off it runs."""
        return self.mean**2 + self.m2 / self.n if self.n else 0.0

    @property
    def se(self) -> float:
        """Standard error of the mean (inf with no sample)."""
        return math.sqrt(self.variance / self.n) if self.n else math.inf


def significant(effect: Effect, z: float = 2.0, n_min: int = 1, margin: float = 0.01) -> bool:
    """The safe-default rule: the effect is a gain larger than ``z`` of its standard errors and than ``margin``.

    Fewer than ``n_min`` samples is too little evidence whatever they say.
    """
    return effect.n >= n_min and effect.mean - z * effect.se > margin


@dataclass
class LevelCredit:
    """Per level, block value → :class:`Effect` of running it instead of the incumbent's value of that level."""

    levels: int
    effects: list[dict[Hashable, Effect]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.effects:
            self.effects = [{} for _ in range(self.levels)]

    def effect(self, level: int, value: Hashable) -> Effect:
        return self.effects[level].setdefault(value, Effect())

    def record(self, level: int, value: Hashable, gain: float, floor: float = 0.0) -> None:
        """One sample: ``value`` at ``level`` did ``gain`` better than the incumbent's value, the rest unchanged."""
        self.effect(level, value).add(gain, floor)

    def best(self, z: float = 2.0, n_min: int = 1, margin: float = 0.01) -> tuple[int, Hashable] | None:
        """The (level, value) whose gain is significant and largest (:func:`significant`); None if none is."""
        found = [
            (e.mean - z * e.se, level, value)
            for level, values in enumerate(self.effects)
            for value, e in values.items()
            if significant(e, z, n_min, margin)
        ]
        if not found:
            return None
        _, level, value = max(found, key=lambda t: t[0])
        return level, value

    def adopt(self, level: int, value: Hashable, old: Hashable) -> None:
        """``value`` replaces ``old`` at ``level``: that level's effects are re-based on it.

        Each other value's effect becomes its old effect minus the adopted
        one's (its variance adds the adopted one's), the replaced value's is
        the adopted one's negated; the adopted value has no effect on itself.
        The other levels' effects were measured with ``old`` in place and are
        kept: a main-effects model, until new samples overrule them.
        """
        gained = self.effects[level].pop(value, Effect())
        rebased: dict[Hashable, Effect] = {}
        for v, e in self.effects[level].items():
            n = min(e.n, gained.n)
            if n:
                # The difference of two means: its squared standard error is the sum of theirs.
                rebased[v] = Effect(n, e.mean - gained.mean, 0.0, n * (e.se**2 + gained.se**2))
        if gained.n:
            rebased[old] = Effect(gained.n, -gained.mean, gained.m2, gained.floor)
        self.effects[level] = rebased


@dataclass
class ExplorationBudget:
    """Trial windows never exceed ``share`` of the windows run (counting the trial asked for)."""

    share: float = 0.15
    windows: int = 0
    spent: int = 0

    def __post_init__(self) -> None:
        if not 0.0 <= self.share < 1.0:
            raise ValueError(f"share: expected 0 ≤ share < 1; found {self.share}")

    def tick(self, trial: bool) -> None:
        """One window run; ``trial``: it ran a trial."""
        self.windows += 1
        self.spent += int(trial)

    def allows(self, length: int) -> bool:
        """Whether a trial of ``length`` windows, starting now, keeps the spent share within ``share``."""
        return self.spent + length <= self.share * (self.windows + length) + 1e-9


def pays_back(found: Sequence[float], costs: Sequence[float], horizon: float, n_min: int = 2) -> bool:
    """Bounded exploration by the value of the information (Dean & Porter's exploration cost, measured): whether a
    trial is expected to pay for itself.

    ``found``: per past trial, the gain per window it found that the switch
    rule would adopt (:func:`significant` on that sample alone; 0 when
    none — a gain within the noise is not found, it is noise); ``costs``: what
    each cost, in score × windows (the incumbent's level before it minus the
    rewards of the trial's windows and of the incumbent's windows after it:
    the trial and the transient it leaves); ``horizon``: the windows a block
    the trial finds would run. The trial pays back when the mean gain found,
    over ``horizon``, is at least the mean cost. With fewer than ``n_min``
    past trials nothing is known of either, and the trial starts (the
    exploration budget still bounds it).
    """
    if len(found) < n_min or len(costs) < n_min:
        return True
    return sum(found) / len(found) * horizon >= sum(costs) / len(costs)


def differences(trial: Sequence[float | None], incumbent: Sequence[float | None]) -> list[float]:
    """Window-by-window gains of ``trial`` over ``incumbent`` (paired: the same windows on two forks).

    A window either side left unscored (no job had input) is no sample.
    """
    return [t - i for t, i in zip(trial, incumbent, strict=True) if t is not None and i is not None]
