"""Co-operating hierarchy (Dangwal et al., Meta's hierarchical multi-objective schedulers on Turbine).

The controller composes the levels of DESIGN.md — L0 planner (``strata.plan``),
L1 balancer (``strata.balance``), L2 dispatch (``strata.dispatch``), meta
policy selection (``strata.adapt``) — passing budgets down and signals up.
Engines implement :class:`~strata.protocol.engine.Engine`. See docs/hierarchy.md.
"""

from strata.protocol.engine import Decisions, Engine, Observation, Placement, WindowStats

__all__ = ["Decisions", "Engine", "Observation", "Placement", "WindowStats"]
