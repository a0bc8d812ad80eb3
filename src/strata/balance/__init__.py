"""L1 task level: key groups → operator instances, live state migration (AutoFlow, Lu et al.).

``loads`` measures load per window, ``hotspot`` plans the moves of one round
(engine-agnostic: key groups in the simulator, partitions in Spark), ``lpt``
gives the best achievable balance to compare against, ``autoflow`` runs
the rounds as a periodic controller of the simulator, and ``presets`` names the
balancing blocks the meta level chooses from.
"""

from strata.balance.hotspot import BalanceConfig, Hotspot, RoundPlan, Transfer, diminish_hotspots
from strata.balance.loads import GroupLoads, SmoothedLoads, imbalance, instance_loads, window_loads
from strata.balance.lpt import Assignment, best_imbalance_bounds, lower_bound, lpt, lpt_ratio, optimal_makespan
from strata.balance.presets import PRESETS, preset

__all__ = [
    "PRESETS",
    "Assignment",
    "BalanceConfig",
    "GroupLoads",
    "Hotspot",
    "RoundPlan",
    "SmoothedLoads",
    "Transfer",
    "best_imbalance_bounds",
    "diminish_hotspots",
    "imbalance",
    "instance_loads",
    "lower_bound",
    "lpt",
    "lpt_ratio",
    "optimal_makespan",
    "preset",
    "window_loads",
]
