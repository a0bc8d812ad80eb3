"""The meta level: keep the composition the levels would run alone until evidence says another wins (Dean & Porter).

Each control window the :class:`Selector`

1. scores the window that just ended (:class:`Scorer`; credited as
   :func:`~strata.adapt.features.learning_reward`: the score plus the share of
   the standing backlog it drained) and files it under the composition that
   ran it (``ran``: the blocks in force, which may differ from the last
   choice, a placement block acting only at the next plan) — the
   incumbent's, or a trial's; the first ``settle`` windows after a change of
   composition are filed under neither (their backlog is the predecessor's);
2. measures the window's features and asks a change detector whether the
   workload left its segment; a segment seen before resumes its incumbent and
   credit, a new one starts from the **default** composition (the levels'
   own) with no evidence — and, when a ``lookahead`` is given, asks it to run
   the incumbent and every one-level alternative on forks of the engine for
   a few windows (model-predictive: the same arrivals on every fork, so the
   differences are the compositions' own doing);
3. per level, credits a trial by its own effect
   (:class:`~strata.adapt.credit.LevelCredit`: a trial changes one level's
   block; its reward minus the incumbent's just before it is a sample of that
   block's effect), replaces the incumbent's block when the gain is larger
   than its measured noise (:func:`~strata.adapt.credit.significant`) — or,
   when the incumbent has kept no job on time for ``collapse`` windows, its
   dispatch block when another is both measured and predicted better
   (:meth:`Selector._abandon`) — and otherwise starts the most promising trial the exploration budget allows
   (:class:`~strata.adapt.credit.ExplorationBudget`: trial windows never
   exceed ``explore`` of the windows run), once the incumbent's windows
   since it last changed are past their transient, and that is expected to pay back
   (:func:`~strata.adapt.credit.pays_back`: what trials of that level have
   found, over the windows the segment has lasted, against what they have
   cost, their transient included — Dean & Porter's question of what
   learning the composition at runtime gains over a fixed one, asked of
   each trial);
4. where the queueing model cannot tell the dispatch orders apart on the
   workload running, hedges for the jobs declared but idle
   (:func:`~strata.adapt.overload.with_declared`): Dean & Porter's hard case
   of workloads that arrive sporadically — a job that starts behind a
   standing backlog its order serves first is late from its first window,
   before any selector can see it (not from a deadline order: its overdue
   work runs last, so no backlog outlasts a switch).

Every switch waits for evidence beyond one draw: a measured block needs two
trials' samples (``n_min``), a switch on the model's prediction alone the
same prediction ``persist`` windows in a row, while a change of workload
is unconfirmed the default runs, and no trial leaves the default's dispatch
block unless the model confidently predicts a gain beyond its measured
error, on scores and on past trials' gains (``away``; issue 30's item 4, a
switch predicted to win by more than its measured noise, asked of a trial).

A window that brings no evidence — no score (no job had input), or a score
whose ``horizon`` still reaches back to windows without one (start-up) — is
filed under nobody. No phase schedule, goal or model is given: segments are
found from the features alone; the only knowledge given is the order in
which untried blocks are tried (:data:`~strata.adapt.blocks.PRIOR`). The
controller enforces the choice safely: dispatch between units of work,
balancing from the next window, placement at the next (re)plan.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from strata.adapt.blocks import PRIOR, Composition
from strata.adapt.credit import Effect, ExplorationBudget, LevelCredit, differences, pays_back, significant
from strata.adapt.features import (
    ChangeDetector,
    FeatureTracker,
    backlog,
    declared_rates,
    learning_reward,
    outcomes,
    score,
    unit_costs,
    yields,
)
from strata.adapt.overload import DISCIPLINE, NodeLoads, PredictedScores, predicted_score, with_declared
from strata.model import Scenario, chosen_templates, job_maps
from strata.protocol.engine import Observation

LEVELS = ("dispatch", "balancing", "placement")

Lookahead = Callable[[Sequence[Composition], int], Mapping[Composition, Sequence[float | None]] | None]
"""Compositions and a number of windows → each composition's window scores on a fork of the engine from now
(the same arrivals on every fork); None when it declines (its cost budget is spent). Injected by the runner:
the meta level imports no engine."""


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
class Segment:
    """One stationary stretch of the workload: its features' centroid, incumbent, per-level credit and noise.

    ``noise``: the incumbent's settled window rewards (their variance is the
    noise a trial's gain is measured against); ``looked``: whether the
    lookahead has been run for it; ``start``: when it began (or resumed).
    """

    incumbent: Composition
    credit: LevelCredit = field(default_factory=lambda: LevelCredit(len(LEVELS)))
    noise: Effect = field(default_factory=Effect)
    centroid: np.ndarray | None = None
    looked: bool = False
    start: float = 0.0


@dataclass
class Selector:
    """Per-level credit over ``candidates`` from a safe default, one incumbent per workload segment.

    ``default``: the composition kept while evidence is short (None: the
    levels' own, :class:`Composition`'s defaults, if a candidate, else the
    first candidate); ``explore``: the share of windows trials may take;
    ``trial``: windows a trial runs, per level (dispatch, balancing,
    placement); ``settle``: windows after any change of composition filed
    under neither side; ``bracket``: the incumbent's settled windows on each
    side a trial is compared with (and at least 2 before one starts, to know
    their noise); ``z``, ``n_min``, ``margin``: the switch rule
    (:func:`~strata.adapt.credit.significant`); ``n_max``: trials of one
    block per segment;
    ``horizon``: windows the score sums over (:class:`Scorer`); ``change``:
    the detector (``ChangeDetector(threshold=inf)``: one segment
    throughout); ``lookahead``: forks of the engine (:data:`Lookahead`),
    run for ``lookahead_windows`` at the start of each new segment, for the
    alternatives of ``lookahead_levels`` (dispatch: it acts from the next
    unit of work, within a short fork; a balancing mode acts over windows
    and a placement at the next plan, beyond it);
    ``blocks_prior``: per level, block value → prior mean, the order untried
    blocks are tried in (``()``: by name); ``model``: whether the queueing
    model of :mod:`strata.adapt.overload` predicts each dispatch block's
    score — it orders untried dispatch blocks ahead of ``blocks_prior``, keeps
    from trials the ones it confidently predicts no better than the
    incumbent's (a predicted tie included, only as confidently), and
    switches the incumbent's dispatch when its predicted gain exceeds ``z``
    times its measured error on the incumbent (root mean square over at
    least ``n_model`` windows) and ``margin``. ``payback``: trials start only
    at levels whose past trials are expected to pay back over the windows
    the segment has lasted (:func:`~strata.adapt.credit.pays_back`);
    ``transient``: the incumbent's windows after a trial charged to its cost
    (the first ``bracket`` of them, its after-windows, included), and the
    incumbent's windows after it changes in which no trial starts (they
    still carry the backlog its predecessor left: no baseline); ``hedge``:
    dispatch blocks never told apart from the incumbent's by the model on
    the workload running are switched to when confidently predicted better
    with the idle jobs at their declared rates (:meth:`_hedge_pick`).
    ``reopen``: after a change of workload segment, the windows (once the
    incumbent has a baseline) in which the dispatch level is re-evaluated
    (:meth:`_reevaluate`; 0: never). ``collapse``: settled windows in a row
    in which the incumbent kept no job on time (score ≤ ``margin``) after
    which its dispatch block gives way to the best-supported alternative
    (:meth:`_abandon`; 0: never). ``persist``: settled windows in a row in
    which the model's one-window prediction put the same dispatch block
    confidently above the incumbent's, and above what the incumbent scored,
    after which that block is tried whatever the level's past trials found
    (:meth:`_outpredicted`; 0: never), and the windows in a row in which the
    prediction over the horizon must put the same block confidently above the
    incumbent's before the incumbent switches to it on that prediction alone.
    ``away``: while the incumbent runs the default's dispatch block, another
    dispatch block is tried (:meth:`_start_trial`) only when the model
    confidently predicts it better (:meth:`_model_gain`): until its error is
    measured, the default's order runs untried against (without ``model``,
    measured credit alone decides).
    """

    scenario: Scenario
    candidates: Sequence[Composition]
    default: Composition | None = None
    explore: float = 0.2
    trial: tuple[int, ...] = (1, 2, 2)
    settle: int = 0
    bracket: int = 1
    blocks_prior: Sequence[Mapping[str, float]] = PRIOR
    z: float = 1.0
    # Two samples of a block's effect before it replaces the incumbent's: one trial's gain is measured against the
    # incumbent's noise over the few windows of its segment so far, and at z = 1 about one trial in six of a block
    # no better would pass on noise alone; a second sample gives the effect a spread of its own (tuning's base60
    # seed 2, coarse phase: sjf adopted at 72 s on one window, 0.77 against 0.58 and 0.68 around it, then 0.5-0.6
    # a window to the phase's end; fixed edf/threshold 0.82 there, sjf/threshold 0.57).
    n_min: int = 2
    n_max: int = 3
    margin: float = 0.01
    horizon: int = 1
    change: ChangeDetector = field(default_factory=ChangeDetector)
    lookahead: Lookahead | None = None
    lookahead_windows: int = 2
    lookahead_levels: tuple[int, ...] = (0,)
    model: bool = True
    n_model: int = 2
    payback: bool = True
    transient: int = 4
    hedge: bool = True
    reopen: int = 3
    collapse: int = 3
    persist: int = 3
    away: bool = True
    choices: list[ArmChoice] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.candidates:
            raise ValueError("candidates: expected at least one composition")
        if len(self.trial) != len(LEVELS) or min(self.trial) <= self.settle:
            raise ValueError(f"trial: expected windows per level {LEVELS}, each > {self.settle}; found {self.trial}")
        if self.default is None:
            self.default = Composition() if Composition() in self.candidates else self.candidates[0]
        if self.default not in self.candidates:
            raise ValueError(f"default: expected one of the candidates; found {self.default.name}")
        self.budget = ExplorationBudget(self.explore)
        self.segment = Segment(self.default)
        self.stored: list[Segment] = []
        self.tracker = FeatureTracker(job_of=job_maps(self.scenario)[0])
        self.cores = {n.name: float(n.cores) for n in self.scenario.cluster.nodes}
        targets = {j.id: j.target_latency_s for j in self.scenario.jobs}
        job_of, sources, _ = job_maps(self.scenario)
        self.loads = NodeLoads(job_of, targets, self.cores, sources=sources, costs=unit_costs(self.scenario))
        self.model_switches = 0
        self.hedge_switches = 0
        self._declared = declared_rates(self.scenario)
        self._reopen = 0  # windows left in which the dispatch level is re-evaluated (``reopen``)
        self._reevaluated: set[str] = set()  # dispatch blocks re-evaluated since the last change
        self.reopened = 0  # re-evaluation trials started
        self._starved = 0  # the incumbent's settled windows in a row that kept no job on time (``collapse``)
        self._hold = 0  # the incumbent's windows left in the transient of its last change: no trial's baseline
        self.abandoned = 0  # collapsed incumbents' dispatch blocks given up (:meth:`_abandon`)
        # The dispatch block the one-window model has put above the incumbent's, with the windows in a row it has
        # (``persist``; :meth:`_outpredicted`).
        self._behind: tuple[str, int] | None = None
        self.outpredicted = 0  # trials started on a persistent one-window prediction
        # The dispatch block the model's prediction over the horizon puts confidently above the incumbent's, with the
        # windows in a row it has (``persist``: a switch on the prediction alone waits for that many).
        self._ahead: tuple[str, int] | None = None
        # Dispatch blocks the model predicted apart from the incumbent's since it last changed (or the segment began).
        self._told_apart: set[str] = set()
        self._loads: dict[str, list] = {}  # node → the window's job loads (strata.adapt.overload.NodeLoads)
        self._cores: dict[str, float] = {}
        self._min_rate = 0.0
        self.model_error = Effect()  # score − predicted score of what ran, since the incumbent last changed
        # Measured − predicted gain of every dispatch trial the model predicted, over the selector's life (``away``).
        self.gain_error = Effect()
        self._trial_gain: float | None = None  # the predicted gain of the dispatch trial running or pending
        # Dispatch block → predicted score of the coming window (computed when read).
        self._predicted: Mapping[str, float | None] = {}
        self._foreseen: dict[str, float | None] = {}  # dispatch block → predicted score over the segment's horizon
        self._now = 0.0
        self.lookahead_calls = 0
        self._score = Scorer(self.scenario, self.horizon)
        self._segments = 0
        self._index = {c: i for i, c in enumerate(self.candidates)}
        self._values = [sorted({_blocks(c)[k] for c in self.candidates}) for k in range(len(LEVELS))]
        self._neighbours: dict[Composition, list] = {}  # composition → its one-level alternatives
        self._ran: Composition | None = None
        self._run_for = 0  # windows in a row ``_ran`` has run
        self._queued = 0
        self._scored = 0  # windows in a row with a score: the horizon is whole once it reaches ``horizon``
        self._recent: deque[float] = deque(maxlen=max(2, self.bracket))  # the incumbent's settled rewards since it ran
        # The last settled windows, whatever ran them: (composition, reward); a new segment's baseline is among them.
        self._settled: deque[tuple[Composition, float]] = deque(maxlen=self.change.confirm)
        self._trial: tuple[int, str, Composition] | None = None  # (level, block value, composition)
        self._trial_left = 0
        self._trial_rewards: list[float] = []
        self._trial_baseline: list[float] = []
        # A trial ended, awaiting the incumbent's windows after it: (level, value, trial, before, after).
        self._pending: tuple[int, str, list[float], list[float], list[float]] | None = None
        # Per level, every trial's (gain found, cost) over the selector's life: what exploring has found and cost.
        self.explored: list[list[tuple[float, float]]] = [[] for _ in LEVELS]
        self._span = 1.0  # the last window's length, s
        # The last credited trial's transient being charged to its cost: (level, index in explored, the
        # incumbent's level before it, windows left).
        self._transient: tuple[int, int, float, int] | None = None

    def select(self, obs: Observation, ran: Composition | None = None) -> Composition:
        """The composition for the next window; ``ran``: what was in force over the one that ended.

        The controller passes ``ran`` because a placement block acts only
        when a plan is made (and L0 may refuse it): a window runs under the
        placer of the plan in force, and is filed under that. Without
        ``ran``, the last choice ran.
        """
        reward = self._score(obs)
        queued = backlog(obs)
        self._now = obs.now
        self._span = max(obs.window.now - obs.window.start, 1e-9)
        self._scored = self._scored + 1 if reward is not None else 0
        if self.choices:
            self.choices[-1].reward = reward
            ran = ran or self.candidates[self.choices[-1].arm]
        self._run_for = self._run_for + 1 if ran == self._ran else 1
        if self._scored >= self.horizon and ran is not None and self._run_for > self.settle:
            credited = learning_reward(reward, self._queued, queued)
            # The model predicts dispatch blocks only: a window another level's trial ran (a balancing mode's
            # migrations, another placement), or the transient it left, measures that block's effect, not the
            # model's error.
            other = _blocks(ran)[1:] != _blocks(self.segment.incumbent)[1:] or any(
                t is not None and t[0] != 0 for t in (self._pending, self._transient)
            )
            self._file(ran, credited)
            if ran == self.segment.incumbent and self._trial is None:
                self._starved = self._starved + 1 if reward <= self.margin else 0
                self._behind = self._outpredicted(reward)
            self._settled.append((ran, credited))
            if self._predicted.get(ran.dispatch) is not None and not other:
                self.model_error.add(reward - self._predicted[ran.dispatch])
        self._ran, self._queued = ran, queued
        if self.model:
            self._predict(obs)
        self.budget.tick(self._trial is not None)
        if self._trial is not None:
            self._trial_left -= 1
            if self._trial_left <= 0:
                self._end_trial()
        self._credit_pending()
        if self.change.update(self.tracker.update(obs)):
            self._enter(self.change.previous, self.change.centroid)
            self._reopen = self.reopen
            self._reevaluated = set()
        if self.model:
            self._foresee(obs)
            pick = self._model_pick(self.segment.incumbent.dispatch, self._foreseen)
            kept = self._ahead is not None and self._ahead[0] == pick
            self._ahead = None if pick is None else (pick, self._ahead[1] + 1 if kept else 1)
        if self.lookahead is not None and not self.segment.looked and self._scored >= self.horizon:
            self._look()
        if self.change.suspect:
            # The workload may have left the segment: what was learnt of it may not hold, and the default runs
            # until the change is confirmed or refuted; a trial's windows would no longer be comparable. Not the
            # model's pick from this window's loads: one window is one draw, and with deadline orders that serve
            # overdue work last the default no longer collapses at a change into overload (the domino such a pick
            # was a way out of). Round 8's fine-long-coarse-skew seed 702: fair picked so at 38 s, kept as the
            # coarse phase's incumbent to 88 s, 0.62-0.67 a window where edf's trials scored 0.98-0.99.
            self._trial = self._pending = None
            comp = self.default
        else:
            self._adopt()
            if self._trial is None and self._scored >= self.horizon:
                self._start_trial()
            comp = self._trial[2] if self._trial is not None else self.segment.incumbent
        self.choices.append(ArmChoice(obs.now, self._segments, self._index[comp]))
        return comp

    def _file(self, ran: Composition, reward: float) -> None:
        """A settled window's reward, under the incumbent or the trial that ran it."""
        if self._trial is not None and ran == self._trial[2]:
            self._trial_rewards.append(reward)
        elif ran == self.segment.incumbent:
            self._hold = max(0, self._hold - 1)
            self._recent.append(reward)
            self.segment.noise.add(reward)
            if self._pending is not None:
                self._pending[-1].append(reward)
            elif self._transient is not None:
                level, k, before, left = self._transient
                found, cost = self.explored[level][k]
                self.explored[level][k] = (found, cost + before - reward)
                self._transient = (level, k, before, left - 1) if left > 1 else None

    def _end_trial(self) -> None:
        """The trial waits for the incumbent's next settled window: its gain is measured against both sides."""
        level, value, _ = self._trial
        if self._trial_rewards and self._trial_baseline:
            self._pending = (level, value, self._trial_rewards, self._trial_baseline, [])
        self._trial = None
        self._trial_rewards = []

    def _credit_pending(self) -> None:
        """A trial's gain over the mean of the incumbent's windows before and after it: one sample of its block.

        Bracketing the trial cancels a trend in the workload (a backlog
        draining, a burst rising) that a comparison with the windows before
        alone would credit to the trial.
        """
        if self._pending is None or len(self._pending[-1]) < self.bracket:
            return
        level, value, trial, before, after = self._pending
        base = (float(np.mean(before)) + float(np.mean(after))) / 2
        # Means of noisy windows: the gain's variance is the noise over each side's windows.
        floor = self.segment.noise.variance * (1 / len(trial) + (1 / len(before) + 1 / len(after)) / 4)
        gain = float(np.mean(trial)) - base
        if level == 0 and self._trial_gain is not None:
            self.gain_error.add(gain - self._trial_gain)
        self.segment.credit.record(level, value, gain, floor)
        # What the trial found (a gain the switch rule would adopt on this sample alone) and what it cost: its
        # windows and the incumbent's after it (the transient it left) below the incumbent's level before it.
        found = gain if significant(Effect(1, gain, 0.0, floor), self.z, 1, self.margin) else 0.0
        level_before = float(np.mean(before))
        self.explored[level].append((found, sum(level_before - r for r in trial + after)))
        self._pending = None
        # A trial's effect on the incumbent outlasts the window after it (a backlog left in another order, a
        # migration): the next ``transient`` windows of the incumbent are charged to its cost as well.
        left = self.transient - len(after)
        self._transient = (level, len(self.explored[level]) - 1, level_before, left) if left > 0 else None

    def _enter(self, centroid: np.ndarray, features: np.ndarray) -> None:
        """A change of segment: a stored one within the detector's threshold resumes, else the default starts."""
        self.segment.centroid = np.asarray(centroid, float)
        self.stored.append(self.segment)
        near = [(float(np.max(np.abs(s.centroid - features))), k) for k, s in enumerate(self.stored[:-1])]
        near = [(d, k) for d, k in near if d <= self.change.threshold]
        if near:
            self.segment = self.stored.pop(min(near)[1])
        else:
            self.segment = Segment(self.default)
        self.segment.start = self._now
        self._segments += 1
        self._trial = None
        self._transient = None  # the windows from here are another workload's
        self._told_apart = set()
        self._pending = None
        self._starved = 0
        self._behind = None
        self._ahead = None
        self._hold = 0
        self._trial_rewards = []
        # The windows that confirmed the change ran the new workload: those its incumbent ran are its baseline.
        carried = [reward for comp, reward in self._settled if comp == self.segment.incumbent]
        self._recent.clear()
        for reward in carried:
            self._recent.append(reward)
            self.segment.noise.add(reward)

    def _reevaluate(self) -> tuple[int, str, Composition] | None:
        """The dispatch alternative not yet re-evaluated since the last change that the model's prediction over
        the horizon (:meth:`_foresee`) puts above the incumbent's by most, and by more than ``margin``; None if none.

        After a change of workload segment the orders are re-evaluated on
        the model's point prediction, not only when it is confident of it:
        its error was measured on the workload before, and what the level's
        past trials found and cost (:meth:`_paying`) was too (round 7's
        long-skew-coarse-fine seed 602: sjf predicted 0.25 above fair from
        the fine phase's first window, the error 0.27 from the coarse phase's
        bursts, the dispatch level's trials not paying back; fair, the coarse
        phase's incumbent, kept 28 s scoring 0.00-0.50). The prediction is no
        evidence of a win: it only picks the trial, whose measured gain the
        switch rule judges against the incumbent's noise, within the budget;
        a block re-evaluated is dropped of what was measured of it before the
        change (in a resumed segment, on an earlier stretch of the workload).
        """
        inc = self.segment.incumbent.dispatch
        alts = {
            a[1]: a
            for a in self._alternatives()
            if a[0] == 0 and a[1] not in self._reevaluated and not self._held(a[1])
        }
        value = predicted_winner(
            inc, {v: self._foreseen.get(v) for v in {inc, *alts}}, self.margin, prefer=self.default.dispatch
        )
        return alts[value] if value is not None else None

    def _held(self, value: str) -> bool:
        """Whether a trial of dispatch ``value`` is held back by ``away``: the incumbent runs the default's dispatch
        block and the model does not confidently predict ``value`` better over the segment's horizon (Dean &
        Porter's bounded exploration: no window spent on a block predicted no better).

        The deadline order is the best fixed order of every group measured,
        and a trial of another costs its windows and the transient it leaves,
        found or not: select15's trials of llf, sjf and fair, started in
        every segment as untried blocks or re-evaluated on the model's point
        prediction, ran 25-61 windows a group and scored 2.2-5.0
        window-scores below fixed edf/threshold in those windows alone, the
        larger part of the gap to the edf compositions
        (benchmarks/results/adapt_shapes_*_select15.json; docs/hierarchy.md).
        """
        if not (self.model and self.away and self.segment.incumbent.dispatch == self.default.dispatch):
            return False
        gain = self._model_gain(value, self.default.dispatch, self._foreseen)
        if gain is None:
            return True
        # The model's error on the score of what ran says little of its error on a gain: a predicted gain is held
        # to what past dispatch trials measured against what it predicted of them too (round 8's
        # fine-long-coarse-skew+start-arrival+loss seed 703, after the first change: sjf and fair tried on
        # confident predictions at 46 and 50 s scored 0.30 and 0.25 below fixed edf/threshold; an sjf trial at
        # 34 s had measured 0.55 below it).
        err = self.gain_error
        return err.n > 0 and gain - self.z * err.mean_square**0.5 <= self.margin

    def _alternatives(self) -> list[tuple[int, str, Composition]]:
        """The candidates differing from the incumbent in one level: (level, its block value, composition)."""
        incumbent = self.segment.incumbent
        if incumbent not in self._neighbours:
            inc = _blocks(incumbent)
            out = []
            for k, values in enumerate(self._values):
                for v in values:
                    comp = replace(incumbent, **{LEVELS[k]: v})
                    if v != inc[k] and comp in self._index:
                        out.append((k, v, comp))
            self._neighbours[incumbent] = out
        return self._neighbours[incumbent]

    def _look(self) -> None:
        """Run the incumbent and its one-level alternatives on forks; each paired window gain is a sample."""
        alts = [a for a in self._alternatives() if a[0] in self.lookahead_levels]
        if not alts:
            self.segment.looked = True
            return
        inc = self.segment.incumbent
        scores = self.lookahead([inc] + [c for _, _, c in alts], self.lookahead_windows)
        if scores is None:
            return
        self.lookahead_calls += 1
        self.segment.looked = True
        for level, value, comp in alts:
            for gain in differences(scores[comp], scores[inc]):
                self.segment.credit.record(level, value, gain)

    def _predict(self, obs: Observation) -> None:
        """The queueing model's score of the coming window under each dispatch block of the candidates."""
        self._loads = self.loads.update(obs)
        self._cores = {n: 0.0 if n in obs.nodes_down else c for n, c in self.cores.items()}
        span = max(obs.window.now - obs.window.start, 1e-9)
        self._min_rate = 5.0 / span  # the score's 5-record floor
        self._predicted = PredictedScores(self._values[0], self._loads, self._cores, self._min_rate, span)

    def _foresee(self, obs: Observation) -> None:
        """Each dispatch block's predicted score over the horizon the choice is expected to stand.

        The workload segment's remaining length is unknown; the estimate
        that assumes nothing about it is the time it has lasted so far (Gott's
        Δt argument: a stretch seen at a random moment of its life has as
        much ahead as behind, in the median), and at least one window. Over a
        longer horizon a block that drains the standing backlog recovers
        while one that cannot does not (:func:`~strata.adapt.overload.on_time_share`).
        """
        span = max(obs.window.now - obs.window.start, 1e-9)
        horizon = max(span, obs.now - self.segment.start)
        self._foreseen = {
            v: predicted_score(self._loads, self._cores, v, self._min_rate, horizon) for v in self._values[0]
        }
        base = self._foreseen.get(self.segment.incumbent.dispatch)
        self._told_apart |= {
            v
            for v, p in self._foreseen.items()
            if (p is None) != (base is None) or (p is not None and abs(p - base) > self.margin)
        }

    def _model_gain(
        self, value: str, base: str, scores: Mapping[str, float | None], upper: bool = False
    ) -> float | None:
        """The model's predicted gain (``scores``) of dispatch ``value`` over ``base``, when it is confident of it.

        Confident: the gain minus ``z`` times the model's measured error
        exceeds ``margin`` (a predicted win), or with ``upper`` the gain plus
        ``z`` errors stays within ``margin`` (a predicted non-win); else None.
        The error is the root mean square of (score − prediction) over the
        windows since the incumbent last changed, under its balancing and
        placement blocks whatever the dispatch (bias and spread both): the
        model is trusted only as far as it has predicted what ran, and not
        before ``n_model`` windows. A window of another level's trial, or of
        the transient charged to that trial's cost, is left out: the model
        predicts dispatch blocks only, and such a window measures the other
        block's effect (round 4's long-fine+skew-loss+late-arrival seed 303:
        one window of a balancing trial, 0.91 below the prediction, kept the
        error above sjf's predicted gain over llf for the rest of the phase).
        """
        err = self.model_error
        if not self.model or err.n < self.n_model or value == base:
            return None
        if scores.get(base) is None or scores.get(value) is None:
            return None
        rms = err.mean_square**0.5
        gain = scores[value] - scores[base]
        confident = gain + self.z * rms <= self.margin if upper else gain - self.z * rms > self.margin
        return gain if confident else None

    def _outpredicted(self, reward: float) -> tuple[str, int] | None:
        """The dispatch block the model's one-window prediction for the window the incumbent just ran put
        confidently above the incumbent's (:meth:`_model_gain`) and above ``reward``, what the incumbent scored, by
        more than ``margin`` — with the windows in a row it has (None: no block).

        The prediction over the segment's horizon (:meth:`_foresee`) assumes a
        deadline order drains an overdue backlog; inside a domino it does not
        (every output late behind the overdue work it serves first), and that
        prediction ties it with the orders that serve fresh work first while the
        one-window prediction, made from the standing backlog, tells them apart
        window after window (round 9's fine-skew-coarse seed 901, skewed phase:
        after a two-window balancing trial at 76-78 s llf/threshold scored
        0.06-0.34 a window for 35 s, predicted 0.09-0.41 for the window, sjf
        0.56-0.78, the horizon predictions tied within 0.03; fixed sjf and llf
        0.95-1.00 there; the dispatch level's trials no longer paid back and no
        trial started). A prediction that persists for ``persist`` windows
        and that the incumbent's own scores bear out is evidence enough to try
        the block — a trial, within the budget, judged by the switch rule.
        """
        inc = self.segment.incumbent.dispatch
        value = self._model_pick(inc, self._predicted)
        if value is None or self._predicted[value] <= reward + self.margin:
            return None
        return value, self._behind[1] + 1 if self._behind is not None and self._behind[0] == value else 1

    def _hedge_pick(self, base: str) -> str | None:
        """A dispatch block the model has not told apart from ``base`` on the workload so far (predicted within
        ``margin``, or neither scored, in every window since the incumbent last changed) and confidently predicts
        better on the what-if of :func:`~strata.adapt.overload.with_declared` (None if none).

        Where the orders cannot be told apart by what runs now, they differ
        in what a job that starts will queue behind: under a deadline order,
        a node's overdue backlog first (the domino), so a job starting there
        is late from its first window, a backlog that outlasts the switch to
        an order that would have served it. The order predicted to serve the
        idle jobs better, should they start, costs nothing now and is in
        force when they do. A block with a measured effect in the segment is
        left out: what was measured of it outweighs a what-if.
        """
        measured = self.segment.credit.effects[0]
        ties = [v for v in self._values[0] if v not in self._told_apart and (v not in measured or measured[v].n == 0)]
        # A deadline order serves overdue work last (``Strategy.overdue``): the backlog a job that starts finds ahead
        # of it is overdue within a target's length and then runs after its records — no backlog outlasts a switch,
        # the hazard hedged against (tuning's base60 seed 1: sjf hedged to at 64 s, the coarse phase's start, on
        # the what-if, 0.5-0.6 a window to 102 s; fixed edf/threshold 0.83 there).
        if not self.hedge or DISCIPLINE[base] == "deadline" or not [v for v in ties if v != base]:
            return None
        what_if = with_declared(self._loads, self._declared, self._min_rate)
        hedged = {v: predicted_score(what_if, self._cores, v, self._min_rate, self._span) for v in {*ties, base}}
        return self._model_pick(base, hedged)

    def _model_pick(self, base: str, scores: Mapping[str, float | None]) -> str | None:
        """The dispatch block the model confidently predicts to beat ``base`` by most (None if none); of blocks
        predicted alike, the default's (the safe default: a tie is no evidence for another), then the last by name.

        llf and edf are one discipline to the model: a gain predicted for one is predicted for the other, and
        the tie went by name to llf (tuning's base60 seed 1, coarse phase: fair, the interim pick, gave way at
        72 s to llf on a tie with edf, both 1.0; fixed llf/threshold 0.77 there, edf/threshold 0.83).
        """
        gains = {v: g for v in scores if (g := self._model_gain(v, base, scores)) is not None}
        return max(gains, key=lambda v: (gains[v], v == self.default.dispatch, v)) if gains else None

    def _adopt(self) -> None:
        """Replace the incumbent's block whose gain is significant, measured or predicted (none while a trial runs)."""
        if self._trial is not None or self._pending is not None:
            return
        if self.collapse and self._starved >= self.collapse and self._abandon():
            return
        best = self.segment.credit.best(self.z, self.n_min, self.margin)
        if best is None:
            inc = self.segment.incumbent.dispatch
            # A switch on the prediction alone waits until the same block has been predicted confidently better in
            # ``persist`` windows in a row: one window's loads are one draw of a bursty workload, and the model's
            # error is measured on the few windows since the incumbent last changed (round 8's
            # fine-long-coarse-skew seed 701, coarse phase: edf → sjf → edf → fair → edf → fair → edf on the
            # prediction of single windows at 34-88 s, edf's share of the window ranging 0.36-0.98; fixed
            # edf/threshold 0.83 over the run, the adaptive 0.79).
            if self._ahead is not None and self._ahead[1] < max(1, self.persist):
                return
            value = self._ahead[0] if self._ahead is not None else None
            if value is None:
                value = self._hedge_pick(inc)
                if value is None or replace(self.segment.incumbent, dispatch=value) not in self._index:
                    return
                self.hedge_switches += 1
                self._switch(0, value)
                return
            best = (0, value)
            self.model_switches += 1
            # The prediction is evidence of the block's effect: filed as one sample (with the model's error as its
            # noise), the block's measured effects re-base on it and do not switch straight back on a sample the
            # model outweighs.
            err = self.model_error
            gain = self._model_gain(value, inc, self._foreseen)
            self.segment.credit.record(0, value, gain, err.mean_square)
        self._switch(*best)

    def _abandon(self) -> bool:
        """Give up the incumbent's dispatch block after ``collapse`` windows in a row that kept no job on time,
        for the alternative measured best in the segment (the largest mean effect, above 0) if the model's point
        prediction over the segment's horizon (:meth:`_foresee`) also puts it above the incumbent's by more than
        ``margin``; False when none is.

        The safe-default rule keeps the incumbent until an alternative's gain clears its noise, to keep what
        works from being lost on noise; an incumbent that keeps nothing on time has nothing to lose, and no
        order scores below 0. Under sustained overload a deadline order can collapse this way (every job late
        behind an overdue backlog, the domino) long after its windows' spread over the segment has made every
        trial's gain look like noise (round 8's coarse-skew-fine+skew-arrival+fine-loss seed 701: llf 0.00 a
        window from 190 s to the end of the fine phase, sjf's three trials +0.15 on average, not adopted; fixed
        sjf 0.66 there; sjf predicted 0.62–0.65 against llf's 0.56–0.58). The choice needs no significance: it
        only leaves a block measured at nothing. It needs the two kinds of evidence to agree: a gain measured
        earlier in the segment may be of another regime (a node lost, an overdue backlog built) — where every
        order keeps nothing on time the model predicts none better (round 7's long-skew-coarse-fine seed 602 at
        22–104 s, n1 down: every order 0.00 a window), and a switch there gains nothing and moves the run off
        the path it was on.
        """
        inc = self._foreseen.get(self.segment.incumbent.dispatch)
        measured = {
            v: e.mean
            for v, e in self.segment.credit.effects[0].items()
            if e.n
            and e.mean > 0
            and replace(self.segment.incumbent, dispatch=v) in self._index
            and inc is not None
            and (self._foreseen.get(v) or 0.0) > inc + self.margin
        }
        if not measured:
            return False
        value = max(measured, key=lambda v: (measured[v], v))
        self.abandoned += 1
        self._switch(0, value)
        return True

    def _switch(self, level: int, value: str) -> None:
        """The incumbent's block of ``level`` becomes ``value`` (a candidate's), its credit re-based on it."""
        inc = self.segment.incumbent
        comp = replace(inc, **{LEVELS[level]: value})
        if comp not in self._index:
            return
        self.segment.credit.adopt(level, value, _blocks(inc)[level])
        self.segment.incumbent = comp
        self.segment.noise = Effect()
        self._starved = 0
        self._behind = None
        self._ahead = None
        self._hold = self.transient
        self.model_error = Effect()
        self._told_apart = set()
        self._recent.clear()

    def _start_trial(self) -> None:
        """The most promising one-level change the budget allows, once the incumbent has a baseline.

        In the ``reopen`` windows after a change of workload, the dispatch
        block of :meth:`_reevaluate` first, whatever the level's past trials
        found. Otherwise dispatch blocks the model confidently predicts no
        better than the incumbent's are left out. None starts in the
        ``transient`` windows after the incumbent changed (their backlog is
        its predecessor's). Untried
        blocks first (dispatch, then balancing, then placement; within
        a level the one that mattered most in stored segments, then by
        prior), then the tried one of highest optimistic gain
        (mean + ``z`` standard errors) if that could still clear ``margin`` and
        it has had fewer than ``n_max`` trials in the segment (a block that
        could not show a gain in that many is left, and the budget kept for a
        later workload).
        """
        # A new incumbent's first ``transient`` windows carry the backlog its predecessor left — under a deadline
        # order, an overdue backlog served first, every output late — and a trial bracketed by them measures that
        # transient, not the blocks' effects (round 9's coarse-fine-long-skew seed 901, fine phase: llf adopted on
        # the model's prediction at 64 s scored 0.00, 0.00, then 0.94-1.00; a one-window sjf trial at 68 s, 0.50,
        # was +0.5 against the two zeros, with no noise measured in them, and took the incumbent back to sjf, 0.50
        # a window for the rest of the phase). The trial waits until the incumbent's windows are its own.
        if self._pending is not None or len(self._recent) < 2 or self._hold > 0:
            return
        if self.persist and self._behind is not None and self._behind[1] >= self.persist:
            value = self._behind[0]
            comp = replace(self.segment.incumbent, dispatch=value)
            e = self.segment.credit.effects[0].get(value)
            if comp in self._index and (e is None or e.n < self.n_max) and self.budget.allows(self.trial[0]):
                self.outpredicted += 1
                self._begin((0, value, comp))
                return
        if self._reopen > 0:
            pick = self._reevaluate()
            if pick is not None and self.budget.allows(self.trial[0]):
                self.reopened += 1
                self._reevaluated.add(pick[1])
                self.segment.credit.effects[0].pop(pick[1], None)
                self._begin(pick)
                return
            self._reopen -= 1
        credit = self.segment.credit
        inc = self.segment.incumbent.dispatch
        paying = self._paying()
        untried, tried = [], []
        for level, value, comp in self._alternatives():
            if level not in paying:
                continue
            # A dispatch block the model confidently predicts no better than the incumbent's is not tried: a trial
            # of it would spend windows on a composition predicted worse (and, under load, leave the incumbent a
            # backlog in an order it serves late), and the budget goes where a gain is possible. One it predicts
            # to tie with the incumbent's is left out as confidently, no more: its classes are jobs per node, and
            # orders it cannot tell apart may differ (round 4's skew-fine-coarse+early-arrival seed 301: sjf
            # predicted to tie with llf at 14-36 s, the model's error 0.50-0.67; from 24 s fixed sjf/threshold
            # scored 0.63-1.00 a window where the incumbent llf scored 0.00-0.31).
            if level == 0 and self._model_gain(value, inc, self._foreseen, upper=True) is not None:
                continue
            if level == 0 and self._held(value):
                continue
            e = credit.effects[level].get(value)
            prior = self.blocks_prior[level].get(value, 0.0) if level < len(self.blocks_prior) else 0.0
            if e is None or e.n == 0:
                predicted = self._foreseen.get(value) if level == 0 else None
                key = (
                    level,
                    -self._mattered(level, value),
                    -(predicted or 0.0),
                    -prior,
                    value,
                )
                untried.append((key, (level, value, comp)))
            elif e.n < self.n_max and e.mean + self.z * e.se > self.margin:
                tried.append((-(e.mean + self.z * e.se), (level, value, comp)))
        pick = min(untried)[1] if untried else (min(tried, key=lambda t: t[0])[1] if tried else None)
        if pick is not None and self.budget.allows(self.trial[pick[0]]):
            self._begin(pick)

    def _begin(self, pick: tuple[int, str, Composition]) -> None:
        """Start the trial of ``pick`` (level, block value, composition) against the incumbent's last windows."""
        self._trial = pick
        self._behind = None
        self._transient = None  # the windows from here are the new trial's
        self._trial_left = self.trial[pick[0]]
        self._trial_rewards = []
        self._trial_baseline = list(self._recent)[-self.bracket :]
        inc, value = self.segment.incumbent.dispatch, pick[1]
        predicted = [self._foreseen.get(v) for v in (value, inc)]
        self._trial_gain = predicted[0] - predicted[1] if pick[0] == 0 and None not in predicted else None

    def _paying(self) -> set[int]:
        """The levels whose trials are expected to pay back (:func:`~strata.adapt.credit.pays_back`) over the
        windows a block found now would run: as many as the segment has lasted (Gott's Δt, as for the model's
        horizon), at least one."""
        if not self.payback:
            return set(range(len(LEVELS)))
        horizon = max(1.0, (self._now - self.segment.start) / self._span)
        return {
            k
            for k, record in enumerate(self.explored)
            if pays_back([f for f, _ in record], [c for _, c in record], horizon)
        }

    def _mattered(self, level: int, value: str) -> float:
        """The largest effect, either way, ``value`` had in a stored segment (0 if none measured it).

        A block that changed the outcome elsewhere — for better or worse — is
        more likely to change it here than one that did what the incumbent did
        (edf next to llf): it is tried first.
        """
        return max(
            (abs(s.credit.effects[level][value].mean) for s in self.stored if value in s.credit.effects[level]),
            default=0.0,
        )


def predicted_winner(
    incumbent: str, predicted: Mapping[str, float | None], margin: float, prefer: str | None = None
) -> str | None:
    """The block of ``predicted`` (block → predicted score) above ``incumbent``'s by most and by more than
    ``margin`` (ties: ``prefer``, then the last by name); None if none is, or the incumbent has no prediction."""
    base = predicted.get(incumbent)
    if base is None:
        return None
    gains = {v: p - base for v, p in predicted.items() if v != incumbent and p is not None and p - base > margin}
    return max(gains, key=lambda v: (gains[v], v == prefer, v)) if gains else None


def _blocks(c: Composition) -> tuple[str, str, str]:
    return (c.dispatch, c.balancing, c.placement)
