"""The meta level on a micro-batch engine (Spark): its candidates, its score's horizon, and the switch to it.

On Spark the meta level (:class:`strata.adapt.Selector`, Dean & Porter's
emergent selection) chooses the gate's dispatch strategy and L1's balancing
preset; Spark places nothing, so the placement block stays the config's.
Three things differ from the simulator, and are derived here from the
scenario and the config rather than tuned:

- **Candidates** (:func:`candidates`): the composition the levels run alone
  (the config's own blocks) and every composition that changes one of its
  levels to a block of :data:`DISPATCH` or :data:`BALANCING` — per-level credit
  (:class:`strata.adapt.LevelCredit`) compares one level's change at a time.
- **The score's horizon** (:func:`score_horizon`): a micro-batch commits its
  outputs at its trigger, and a window aggregation emits once per event-time
  window; a control window shorter than either can hold no output of a job
  whose outputs are on their way. The score sums over as many control windows
  as the longest trigger or declared window spans.
- **Settling and trials** (:func:`selector`): after a change of composition,
  the next ``horizon − 1`` windows' scores still sum windows the predecessor
  ran, so they are filed under neither (``settle``); a trial runs until two
  of its windows are scored on its own outputs alone (``settle + 2``). Under
  the exploration budget (a fifth of the windows) a trial that long cannot
  start before ``4 × trial`` windows have run: a short run keeps the
  composition the levels would run alone unless the queueing model predicts a
  win larger than its measured error (docs/hierarchy.md, "The meta level on
  Spark").

Pure: plain data in, plain data out.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

from strata.adapt import Composition, Selector
from strata.control.controller import HierarchyConfig
from strata.model import Scenario

DISPATCH = ("llf", "edf", "fifo")
"""The gate's orders the meta level chooses among on Spark: least laxity (Cameo), earliest deadline (the default:
:class:`strata.adapt.Composition`), and arrival order (what Spark's own FIFO scheduler does)."""
BALANCING = ("aggressive", "off")
"""L1's presets on Spark: move key groups whenever it helps (a move costs nothing extra in the managed store, the
default), or never (Spark's hash routing)."""
ADAPTIVE = "adaptive"
OFF = "off"


def default_composition(control: HierarchyConfig) -> Composition:
    """The composition the levels run alone: the config's own blocks."""
    return Composition(control.dispatch, control.balancing, control.placer)


def candidates(control: HierarchyConfig) -> list[Composition]:
    """The config's composition first, then each that changes one of its levels to a block of :data:`DISPATCH`
    (in that order), then of :data:`BALANCING`."""
    base = default_composition(control)
    out = [base]
    for level, blocks in (("dispatch", DISPATCH), ("balancing", BALANCING)):
        for block in blocks:
            comp = replace(base, **{level: block})
            if comp not in out:
                out.append(comp)
    return out


def score_horizon(scenario: Scenario, control: HierarchyConfig) -> int:
    """Control windows the score sums over: the longest trigger (:meth:`HierarchyConfig.triggers`) or declared
    event-time window of ``scenario``, over the control window, rounded up (at least 1)."""
    spans = list(control.triggers(scenario).values())
    spans += [
        op.window.size_s
        for job in scenario.jobs
        for tpl in job.templates
        for op in tpl.operators
        if op.window is not None
    ]
    return max(1, math.ceil(max(spans, default=0.0) / control.window_s - 1e-9))


def selector(control: HierarchyConfig) -> Callable[[Scenario], Selector]:
    """The meta level's factory (``HierarchyConfig.meta``) for a micro-batch engine: a
    :class:`~strata.adapt.Selector` over :func:`candidates` from the config's own composition, its score summed
    over :func:`score_horizon`, windows after a change settling for ``horizon − 1``; the switch rule and the
    exploration budget are the Selector's own."""

    def build(scenario: Scenario) -> Selector:
        horizon = score_horizon(scenario, control)
        settle = horizon - 1
        return Selector(
            scenario,
            candidates(control),
            default=default_composition(control),
            horizon=horizon,
            settle=settle,
            trial=(settle + 2,) * 3,
        )

    return build


def with_meta(control: HierarchyConfig, choice: str) -> HierarchyConfig:
    """``control`` with the meta level ``choice``: ``"off"`` (the config's composition, no meta level),
    ``"adaptive"`` (:func:`selector`) or a composition ``"dispatch/balancing"`` run fixed throughout.

    Raises ValueError naming the choices when ``choice`` is none of them."""
    if choice == OFF:
        return replace(control, meta=None)
    if choice == ADAPTIVE:
        return replace(control, meta=selector(control))
    try:
        comp = Composition.parse(choice)
    except (TypeError, ValueError) as e:
        raise ValueError(
            f"meta: expected {OFF!r}, {ADAPTIVE!r} or a composition 'dispatch/balancing'; found {choice!r} ({e})"
        ) from None
    return replace(control, meta=None, dispatch=comp.dispatch, balancing=comp.balancing, placer=comp.placement)
