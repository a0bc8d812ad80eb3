"""The meta level: choose the composition for the next unit of work from the last one's score (Dean & Porter).

Each control window the :class:`Selector`

1. scores the window that just ended and credits it to the composition that
   ran it (the blocks in force, which may differ from the last choice: a
   placement block acts only at the next plan) — fully if that composition
   also ran the window before (the backlog it inherited was its own), by
   ``switch_weight`` otherwise (part of what it was judged on was caused by
   its predecessor), and by ``switch_weight`` too after a change of segment
   until half the backlog standing at the change has drained (the previous
   workload's); the credit adds to
   the score the share of the standing backlog the window drained
   (:func:`~strata.adapt.features.learning_reward`), the part of a late
   window its own composition caused;
2. measures the window's features and asks a change detector whether the
   workload left its segment; if so the learner of the new segment takes
   over (:class:`~strata.adapt.learner.SegmentMemory`: a segment seen before
   resumes, a new one starts from the stated prior);
3. asks the learner (:class:`~strata.adapt.learner.FactoredUCB`) for the next composition.

A window that brings no evidence — no score (no job had input), or a score
whose ``horizon`` still reaches back to windows without one (start-up) — is
credited to nobody, and the composition in force is kept: switching on no
evidence only spends exploration.

No phase schedule, goal or model is given: segments are found from the
features alone; the only knowledge given is the stated prior over blocks
(:data:`~strata.adapt.blocks.PRIOR`). The controller enforces the choice safely: dispatch between
units of work, balancing from the next window, placement at the next (re)plan.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

import numpy as np

from strata.adapt.blocks import PRIOR, Composition
from strata.adapt.features import ChangeDetector, FeatureTracker, backlog, learning_reward, outcomes, score, yields
from strata.adapt.learner import FactoredUCB, SegmentMemory
from strata.model import Scenario, chosen_templates, job_maps
from strata.protocol.engine import Observation


@dataclass
class ArmChoice:
    """One window's decision, for reports: when, in which workload segment (``context``), which arm, its score."""

    time: float
    context: Hashable
    arm: int
    reward: float | None = None


class Scorer:
    """The reward of a scenario's jobs over the last ``horizon`` windows (:func:`~strata.adapt.features.score`).

    Each job's yield is that of the template the engine reports running
    (``Observation.templates``; the first templates if it reports none).
    ``horizon`` 1 scores each window alone (the simulator, where outputs flow
    record by record). On a micro-batch engine a window may hold no commit of
    a job whose outputs are on their way; summing on-time and expected
    outputs over a few windows keeps that aliasing out of the score.
    """

    def __init__(self, scenario: Scenario, horizon: int = 1) -> None:
        if horizon < 1:
            raise ValueError(f"horizon: expected ≥ 1 windows; found {horizon}")
        self.scenario = scenario
        _, self.sources, _ = job_maps(scenario)
        self._yields: dict[tuple, dict[str, float]] = {}
        self._recent: deque[dict[str, tuple]] = deque(maxlen=horizon)

    def __call__(self, obs: Observation) -> float | None:
        key = tuple(sorted(obs.templates.items()))
        if key not in self._yields:
            self._yields[key] = yields(self.scenario, chosen_templates(self.scenario, obs.templates))
        self._recent.append(outcomes(obs, self._yields[key], self.sources))
        total: dict[str, tuple[float, float]] = {}
        for window in self._recent:
            for job, (on, exp) in window.items():
                a, b = total.get(job, (0.0, 0.0))
                total[job] = (a + on, b + exp)
        return score(total)


@dataclass
class Fixed:
    """One composition throughout, scored like the learner's choices (the fixed baselines)."""

    scenario: Scenario
    composition: Composition
    horizon: int = 1
    choices: list[ArmChoice] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._score = Scorer(self.scenario, self.horizon)

    def select(self, obs: Observation, ran: Composition | None = None) -> Composition:
        reward = self._score(obs)  # every window enters the score's horizon, the first one too
        if self.choices:
            self.choices[-1].reward = reward
        self.choices.append(ArmChoice(obs.now, "fixed", 0))
        return self.composition


@dataclass
class Selector:
    """Factored discounted UCB over ``candidates``, one learner per workload segment (change detection).

    ``gamma``: discount per window inside a segment (slow drift); ``c``:
    exploration weight; ``switch_weight``: credit of a window that followed a
    switch; ``prior``: plays per arm a new segment's warm start keeps, and
    the floor under which discounting does not take a tried arm's count;
    ``dwell``: windows a balancing mode and a placement block run before
    another may replace them (dispatch may change every window); ``horizon``:
    windows the score sums over (:class:`Scorer`);
    ``change``: the detector (``ChangeDetector(threshold=inf)`` for one
    segment throughout); ``blocks_prior``: per level, block value → prior mean
    (:data:`~strata.adapt.blocks.PRIOR`; ``()`` for none); ``warm_start``: a
    new segment starts from the last segment's learner weakened to ``prior``
    plays per arm instead of from ``blocks_prior`` alone (a workload that
    moved by a factor of 3 in unit size or skew is a new problem; on the
    phase benchmark the warm start carried block estimates confounded by the
    previous phase — round-robin placement scored well where every job was
    pinned — into the skewed phase, where it then explored them).
    """

    scenario: Scenario
    candidates: Sequence[Composition]
    gamma: float = 0.99
    c: float = 0.2
    switch_weight: float = 0.5
    prior: float = 1.0
    dwell: int = 3
    horizon: int = 1
    change: ChangeDetector = field(default_factory=ChangeDetector)
    seed: int = 0
    blocks_prior: Sequence[dict[str, float]] = PRIOR
    warm_start: bool = False
    choices: list[ArmChoice] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.candidates:
            raise ValueError("candidates: expected at least one composition")
        arms = [self._blocks(c) for c in self.candidates]

        def start() -> FactoredUCB:
            return FactoredUCB(arms, self.gamma, self.c, floor=self.prior, seed=self.seed, prior=self.blocks_prior)

        self.memory = SegmentMemory(
            start(), radius=self.change.threshold, prior=self.prior, start=None if self.warm_start else start
        )
        self.tracker = FeatureTracker()
        self._score = Scorer(self.scenario, self.horizon)
        self._segment = 0
        self._segments = 0
        self._ran: Composition | None = None
        self._queued = 0
        self._inherited: int | None = None  # the backlog at the last change of segment, until half of it drains
        self._scored = 0  # windows in a row with a score: the horizon is whole once it reaches ``horizon``

    @staticmethod
    def _blocks(c: Composition) -> tuple[str, str, str]:
        return (c.dispatch, c.balancing, c.placement)

    def select(self, obs: Observation, ran: Composition | None = None) -> Composition:
        """The composition for the next window; ``ran``: what was in force over the one that ended.

        The controller passes ``ran`` because a placement block acts only
        when a plan is made (and L0 may refuse it): a window runs under the
        placer of the plan in force. The window's reward is credited to
        ``ran`` — its blocks, and its own statistics if it is a candidate —
        not to the choice: a placement chosen but not yet enacted would
        otherwise collect the scores of the plan before it (and be retried on
        them). Without ``ran``, the last choice ran.
        """
        reward = self._score(obs)
        queued = backlog(obs)
        self._scored = self._scored + 1 if reward is not None else 0
        evidence = self._scored >= self.horizon
        if self.choices:
            last = self.choices[-1]
            last.reward = reward
            ran = ran or self.candidates[last.arm]
            if evidence:
                stayed = self._ran is None or self._ran == ran
                credit = learning_reward(reward, self._queued, queued)
                # Until the backlog standing at a change of segment is drained, part of each window's lateness is
                # the previous workload's: like a switch, the window is only partly the composition's doing.
                weight = 1.0 if stayed and self._inherited is None else self.switch_weight
                if self._inherited is not None and queued <= self._inherited / 2:
                    self._inherited = None
                played = self._index(ran)
                self.memory.current.update(played, credit, weight, ran=self._blocks(ran))
            self._ran = ran
        self._queued = queued
        features = self.tracker.update(obs)
        if self.change.update(features):
            self.memory.switch(self.change.previous, self.change.centroid)
            self._inherited = queued
            self._segments += 1
            self._segment = self._segments
        arm = self._held(ran)
        if evidence or arm is None:
            arm = self.memory.current.select(self._allowed())
        self.choices.append(ArmChoice(obs.now, self._segment, arm))
        return self.candidates[arm]

    def _held(self, ran: Composition | None) -> int | None:
        """The arm in force: the last choice, or before any the composition the engine runs if it is a candidate."""
        if self.choices:
            return self.choices[-1].arm
        return self._index(ran)

    def _index(self, comp: Composition | None) -> int | None:
        return list(self.candidates).index(comp) if comp in self.candidates else None

    def _allowed(self) -> np.ndarray | None:
        """Arms that keep the slow blocks (balancing, placement) unless they have run ``dwell`` windows.

        Dispatch acts on the next unit of work and may change every window;
        a balancing mode or a placement acts over several windows (moves,
        migrations, a plan), and switching them every window only thrashes.
        """
        if not self.choices:
            return None
        now = self.candidates[self.choices[-1].arm]
        held = 0
        for c in reversed(self.choices):
            if (self.candidates[c.arm].balancing, self.candidates[c.arm].placement) != (now.balancing, now.placement):
                break
            held += 1
        if held >= self.dwell:
            return None
        return np.array([(c.balancing, c.placement) == (now.balancing, now.placement) for c in self.candidates])
