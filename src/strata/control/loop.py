"""The one control loop: observe → step → apply, on the engine's clock (DESIGN.md rule 7).

Every engine runs under this loop — ``strata run`` (Spark), ``strata simulate``
(the simulator) and both modes of ``strata demo`` — with the Flink
autoscaler's separation of collection (``engine.observe``), evaluation
(``controller.step``, a pure policy) and execution (``engine.apply``). The loop
reads no clock of its own: time is the engine's (wall-clock on Spark,
simulated in the simulator), so the same code drives both.

A *controller* is anything with ``start(now) → Decisions`` and
``step(Observation) → Decisions``: the hierarchy's
:class:`~strata.control.controller.Controller`, or :class:`Plain` (every job
on its first template, nothing else decided — plain Spark, the baseline and
``--no-control``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from strata.model import Scenario
from strata.protocol.engine import Decisions, Engine, Observation


class Policy(Protocol):
    """What the loop evaluates: the first decisions, then one set per observed window."""

    def start(self, now: float) -> Decisions: ...

    def step(self, obs: Observation) -> Decisions: ...


class Plain:
    """No scheduler: every job admitted with its first template, then nothing changed (Spark's defaults).

    ``triggers``: the processing-time triggers the user set (job → s; the demo gives plain Spark the ones Strata
    picks, so the two modes differ only in what Strata decides while they run)."""

    def __init__(self, scenario: Scenario, triggers: dict[str, float] | None = None) -> None:
        self.scenario = scenario
        self.triggers = triggers
        self.epoch = 0

    def start(self, now: float) -> Decisions:
        admitted = {j.id: j.templates[0].name for j in self.scenario.jobs}
        return Decisions(0, admitted=admitted, triggers=self.triggers, reasons=("start",))

    def step(self, obs: Observation) -> Decisions:
        return Decisions(0)


StepHook = Callable[[Observation, Decisions], None]


def run(
    engine: Engine,
    controller: Policy,
    *,
    window_s: float,
    until: float,
    on_step: StepHook | None = None,
    should_stop: Callable[[], bool] | None = None,
    start: bool = True,
) -> int:
    """Drive ``engine`` under ``controller`` until engine time ``until``; returns the number of steps.

    With ``start``, ``controller.start`` is enforced first (``start=False``
    continues a run whose engine is already going). Then every ``window_s``
    of engine time the window is observed, evaluated and enforced, and
    ``on_step(observation, decisions)`` is told. The loop ends at ``until``,
    when the engine cannot go on (``advance`` returns False: every query
    ended), or when ``should_stop()`` says so (a signal), always after a
    complete step.
    """
    if window_s <= 0:
        raise ValueError(f"window_s: expected seconds > 0; found {window_s}")
    if start:
        engine.apply(controller.start(engine.now()))
    done = 0
    while (now := engine.now()) < until - 1e-9:
        if should_stop is not None and should_stop():
            break
        alive = engine.advance(min(now + window_s, until))
        obs = engine.observe()
        decisions = controller.step(obs)
        engine.apply(decisions)
        done += 1
        if on_step is not None:
            on_step(obs, decisions)
        if not alive:
            break
    return done
