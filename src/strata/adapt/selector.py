"""The meta level: choose the composition for the next unit of work from the last one's score (Dean & Porter).

Each control window the :class:`Selector` (1) scores the window that just
ended under the composition it chose last time and feeds that reward to the
learner under the context it was chosen in, (2) measures the window's
features, and (3) asks the learner for the composition of the next window.
The controller enforces the choice safely: dispatch between units of work,
balancing from the next window, placement at the next (re)plan.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

from strata.adapt.blocks import Composition
from strata.adapt.features import ContextConfig, FeatureTracker, context, window_score, yields
from strata.adapt.learner import ContextualBandit, DiscountedUCB
from strata.hierarchy.jobs import job_maps
from strata.hierarchy.protocol import Observation
from strata.model import Scenario, chosen_templates


@dataclass
class Choice:
    """One window's decision, for reports: when, in which context, which arm, and the reward it then got."""

    time: float
    context: Hashable
    arm: int
    reward: float | None = None


class Scorer:
    """The per-window reward of a scenario's jobs (:func:`~strata.adapt.features.window_score`).

    Each job's yield is that of the template the engine reports running
    (``Observation.templates``; the first templates if it reports none).
    """

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        _, self.sources, _ = job_maps(scenario)
        self._yields: dict[tuple, dict[str, float]] = {}

    def __call__(self, obs: Observation) -> float | None:
        key = tuple(sorted(obs.templates.items()))
        if key not in self._yields:
            self._yields[key] = yields(self.scenario, chosen_templates(self.scenario, obs.templates))
        return window_score(obs, self._yields[key], self.sources)


@dataclass
class Fixed:
    """One composition throughout, scored like the learner's choices (the fixed baselines)."""

    scenario: Scenario
    composition: Composition
    choices: list[Choice] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._score = Scorer(self.scenario)

    def select(self, obs: Observation) -> Composition:
        if self.choices:
            self.choices[-1].reward = self._score(obs)
        self.choices.append(Choice(obs.now, "fixed", 0))
        return self.composition


@dataclass
class Selector:
    """Contextual non-stationary bandit over ``candidates`` (D-UCB per context by default).

    ``contextual=False`` uses one learner for every context (discounting alone
    tracks the changes).
    """

    scenario: Scenario
    candidates: Sequence[Composition]
    gamma: float = 0.97
    c: float = 0.3
    contextual: bool = True
    contexts: ContextConfig = field(default_factory=ContextConfig)
    seed: int = 0
    choices: list[Choice] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.candidates:
            raise ValueError("candidates: expected at least one composition")
        n = len(self.candidates)
        self.learner = ContextualBandit(lambda: DiscountedUCB(n, self.gamma, self.c, self.seed))
        self.tracker = FeatureTracker()
        self._score = Scorer(self.scenario)

    def select(self, obs: Observation) -> Composition:
        reward = self._score(obs)
        if self.choices:
            last = self.choices[-1]
            last.reward = reward
            if reward is not None:
                self.learner.update(last.context, last.arm, reward)
        ctx = context(self.tracker.update(obs), self.contexts) if self.contextual else "all"
        arm = self.learner.select(ctx)
        self.choices.append(Choice(obs.now, ctx, arm))
        return self.candidates[arm]
