"""Meta level: emergent policy selection (Dean & Porter, "Towards Emergent Scheduling").

- ``blocks``: building blocks per level and the compositions made of them;
- ``features``: unit-of-work size, burstiness, skew; change detection; the per-window score;
- ``learner``: non-stationary bandits (discounted, sliding-window and factored UCB), per-segment memory;
- ``selector``: the meta level the hierarchy controller consults every window.
"""

from strata.adapt.blocks import BALANCING, DISPATCH, PLACEMENT, Composition, compositions
from strata.adapt.features import ChangeDetector, Features, FeatureTracker, window_score, yields
from strata.adapt.learner import DiscountedUCB, FactoredUCB, SegmentMemory, SlidingWindowUCB
from strata.adapt.selector import ArmChoice, Fixed, Scorer, Selector

__all__ = [
    "BALANCING",
    "DISPATCH",
    "PLACEMENT",
    "ArmChoice",
    "ChangeDetector",
    "Composition",
    "DiscountedUCB",
    "FactoredUCB",
    "FeatureTracker",
    "Features",
    "Fixed",
    "Scorer",
    "SegmentMemory",
    "Selector",
    "SlidingWindowUCB",
    "compositions",
    "window_score",
    "yields",
]
