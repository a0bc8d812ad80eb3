"""L0 fleet planner: SODA's epoch-based optimiser (Wolf et al.; ../shared/SEEDS.md).

``plan(scenario, previous, options)`` runs macroQ (admission, templates, cpu
goals), macroW (candidate nodes), microQ (goals revised for the candidates) and
microW (fractional assignment) within one time budget and returns a
JSON-round-trippable :class:`Plan`. Baselines (RAND, RR, greedy) and the exact
macroQ MILP live in :mod:`strata.plan.baselines` and :mod:`strata.plan.exact`;
:data:`PLACERS` names the placement blocks the meta level chooses from.
"""

from strata.plan.epoch import Options, plan, replan
from strata.plan.micro_w import Limits
from strata.plan.placers import PLACERS, Placer, placer
from strata.plan.plan import Phase, Plan, PlanError
from strata.plan.quality import Weights

__all__ = [
    "PLACERS",
    "Limits",
    "Options",
    "Phase",
    "Placer",
    "Plan",
    "PlanError",
    "Weights",
    "placer",
    "plan",
    "replan",
]
