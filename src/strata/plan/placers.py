"""The placement blocks L0 offers the meta level, by name, with one signature (SODA and its baselines).

- ``planner``: SODA's epoch (:func:`strata.plan.epoch.plan`);
- ``greedy``: rank-legal greedy admission and placement (:func:`strata.plan.baselines.greedy`);
- ``round-robin``: SODA's RR baseline (:func:`strata.plan.baselines.rr`).

A placer is ``(scenario, previous, options) -> Plan``; the baselines do not plan
incrementally and ignore ``previous`` (and every option but the weights and the engine's batch).
"""

from __future__ import annotations

from collections.abc import Callable

from strata.model import Scenario
from strata.plan.baselines import greedy, rr
from strata.plan.epoch import Options, plan
from strata.plan.plan import Plan

Placer = Callable[[Scenario, "Plan | None", Options], Plan]


def _greedy(scenario: Scenario, previous: Plan | None, options: Options) -> Plan:
    return greedy(scenario, options.weights, options.batch)


def _round_robin(scenario: Scenario, previous: Plan | None, options: Options) -> Plan:
    return rr(scenario, options.weights, options.batch)


PLACERS: dict[str, Placer] = {"planner": plan, "greedy": _greedy, "round-robin": _round_robin}


def placer(name: str) -> Placer:
    """The placement block ``name``; an unknown name fails naming the choices."""
    try:
        return PLACERS[name]
    except KeyError:
        raise ValueError(f"unknown placer {name!r}; choose from {list(PLACERS)}") from None
