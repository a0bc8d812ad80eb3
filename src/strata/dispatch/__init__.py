"""L2 runtime dispatch: which pending message or micro-batch runs next (Cameo, Xu et al., NSDI'21).

- ``priority``: the deadline ``t_MF + L − C_OM − C_path`` and critical-path costs, pure math.
- ``profiling``: moving-average costs, reply contexts carrying them upstream, a batch-cost model.
- ``strategies``: least laxity (Cameo), EDF, SJF, FIFO, proportional fair share; user strategies.
- ``queues``: the two-level (operator, message) priority queue.
- ``policy``: a node's dispatcher for the simulator's ``DispatchPolicy`` hook.
- ``slots``: slot-based static isolation, the Flink-like baseline.
- ``gate``: the micro-batch gate's policy (which pending batch of which query goes next, in which pool).
"""

from strata.dispatch.gate import URGENT_POOL, GateConfig, GateCore, Pending, batch_frontier
from strata.dispatch.policy import Priors, StrategyDispatch, dispatcher
from strata.dispatch.priority import critical_path, deadline, frontier, next_due, window_routes
from strata.dispatch.profiling import CostProfile, LinearCost, ReplyContexts
from strata.dispatch.queues import TwoLevelQueue
from strata.dispatch.slots import SlotDispatch, apportion, model_demand, slot_dispatcher
from strata.dispatch.strategies import (
    ALIASES,
    STRATEGIES,
    EarliestDeadline,
    FairShare,
    Fifo,
    LeastLaxity,
    ShortestJob,
    Strategy,
    WorkUnit,
    rank,
    strategy,
)

__all__ = [
    "ALIASES",
    "STRATEGIES",
    "URGENT_POOL",
    "CostProfile",
    "EarliestDeadline",
    "FairShare",
    "Fifo",
    "GateConfig",
    "GateCore",
    "LeastLaxity",
    "LinearCost",
    "Pending",
    "Priors",
    "ReplyContexts",
    "ShortestJob",
    "SlotDispatch",
    "Strategy",
    "StrategyDispatch",
    "TwoLevelQueue",
    "WorkUnit",
    "apportion",
    "batch_frontier",
    "critical_path",
    "deadline",
    "dispatcher",
    "frontier",
    "model_demand",
    "next_due",
    "rank",
    "slot_dispatcher",
    "strategy",
    "window_routes",
]
