"""The simulator under the control loop: what ``strata simulate`` runs.

One function wires the pieces: the simulator's engine adapter
(:class:`~strata.sim.adapter.SimEngine`), the dispatch strategies it may be
told to switch between (``strata.dispatch``, given to the engine, which
imports no policy), and the :class:`~strata.control.controller.Controller`
(or :class:`~strata.control.loop.Plain` for the uncontrolled run), driven by
:func:`strata.control.loop.run`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace

from strata.control.controller import Controller, HierarchyConfig
from strata.control.loop import Plain, StepHook, run
from strata.dispatch import Priors, dispatcher
from strata.model import Scenario
from strata.protocol.engine import Decisions
from strata.protocol.units import DispatchFactory
from strata.sim.adapter import DispatchMaker, SimEngine
from strata.sim.options import SimOptions


def sim_dispatch(scenario: Scenario) -> DispatchMaker:
    """Strategy name and admitted templates → node dispatch factory, with Cameo's priors from the spec."""
    cache: dict[tuple, DispatchFactory] = {}

    def make(name: str, admitted: Mapping[str, str]) -> DispatchFactory:
        key = (name, tuple(sorted(admitted.items())))
        if key not in cache:
            cache[key] = dispatcher(name, Priors.from_scenario(scenario, admitted))
        return cache[key]

    return make


class Given(Plain):
    """No scheduler, on a given plan's admitted templates (``strata simulate --plan``; the simulation is built on
    the plan's placement)."""

    def __init__(self, scenario: Scenario, templates: Mapping[str, str]) -> None:
        super().__init__(scenario)
        self.templates = dict(templates)

    def start(self, now: float) -> Decisions:
        return Decisions(0, admitted=dict(self.templates), reasons=("plan file",))


def simulate(
    scenario: Scenario,
    duration: float,
    *,
    control: bool = True,
    config: HierarchyConfig | None = None,
    seed: int = 1,
    templates: Mapping[str, str] | None = None,
    placement: Mapping | None = None,
    progress: Callable[[float, int], None] | None = None,
    on_step: StepHook | None = None,
    options: SimOptions | None = None,
) -> tuple[SimEngine, Controller | Plain]:
    """Simulate ``duration`` seconds under the Controller (``control``) or none; returns the engine and controller.

    ``templates``/``placement`` (a plan file's) run that plan with no
    controller; ``options`` are the simulator's (:class:`~strata.sim.options.SimOptions`; ``seed`` overrides
    its seed). Every ``config.window_s`` simulated seconds the loop observes, steps and applies;
    ``on_step(observation, decisions)`` sees each step.
    """
    config = config or HierarchyConfig()
    options = replace(options or SimOptions(), seed=seed)
    # The plan's window model follows the engine's records per source message (strata.model.traffic).
    if config.plan.batch != options.batch:
        config = replace(config, plan=replace(config.plan, batch=options.batch))
    if templates is not None:
        if control:
            raise ValueError("a given plan runs without the controller (it would re-plan at once)")
        policy: Controller | Plain = Given(scenario, templates)
        options = replace(options, placement=placement)
    else:
        policy = Controller(scenario, config) if control else Plain(scenario)
    engine = SimEngine(scenario, options, dispatch=sim_dispatch(scenario), progress=progress)
    window = config.window_s if control else min(config.window_s, duration)
    run(engine, policy, window_s=window, until=duration, on_step=on_step)
    return engine, policy
