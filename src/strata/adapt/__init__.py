"""Meta level: emergent policy selection (Dean & Porter, "Towards Emergent Scheduling").

- ``blocks``: building blocks per level and the compositions made of them;
- ``features``: unit-of-work size, burstiness, skew; the per-window score;
- ``learner``: non-stationary bandits (discounted and sliding-window UCB), contextual;
- ``selector``: the meta level the hierarchy controller consults every window.
"""

from strata.adapt.blocks import BALANCING, DISPATCH, PLACEMENT, Composition, compositions
from strata.adapt.features import ContextConfig, Features, FeatureTracker, context, window_score, yields
from strata.adapt.learner import ContextualBandit, DiscountedUCB, SlidingWindowUCB
from strata.adapt.selector import Choice, Fixed, Scorer, Selector

__all__ = [
    "BALANCING",
    "DISPATCH",
    "PLACEMENT",
    "Choice",
    "Composition",
    "ContextConfig",
    "ContextualBandit",
    "DiscountedUCB",
    "FeatureTracker",
    "Features",
    "Fixed",
    "Scorer",
    "Selector",
    "SlidingWindowUCB",
    "compositions",
    "context",
    "window_score",
    "yields",
]
