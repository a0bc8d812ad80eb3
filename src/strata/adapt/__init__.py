"""Meta level: emergent policy selection (Dean & Porter, "Towards Emergent Scheduling").

- ``blocks``: building blocks per level and the compositions made of them;
- ``features``: unit-of-work size, burstiness, skew; change detection; the per-window score;
- ``credit``: per-level credit (one level's effect at a time), the safe-default switch rule, bounded exploration
  (a share of the windows, and trials only while what they found pays for what they cost);
- ``overload``: a queueing model of each node predicting each dispatch block's on-time share (overload-aware prior),
  and its what-if with the idle jobs at their declared rates;
- ``selector``: the meta level the hierarchy controller consults every window.
"""

from strata.adapt.blocks import BALANCING, DISPATCH, PLACEMENT, Composition, compositions
from strata.adapt.credit import Effect, ExplorationBudget, LevelCredit, differences, pays_back, significant
from strata.adapt.features import ChangeDetector, Features, FeatureTracker, window_score, yields
from strata.adapt.selector import ArmChoice, Fixed, Lookahead, Scorer, Segment, Selector

__all__ = [
    "BALANCING",
    "DISPATCH",
    "PLACEMENT",
    "ArmChoice",
    "ChangeDetector",
    "Composition",
    "Effect",
    "ExplorationBudget",
    "FeatureTracker",
    "Features",
    "Fixed",
    "LevelCredit",
    "Lookahead",
    "Scorer",
    "Segment",
    "Selector",
    "compositions",
    "differences",
    "pays_back",
    "significant",
    "window_score",
    "yields",
]
