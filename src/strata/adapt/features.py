"""Workload features and the per-window score the learner maximises (emergent scheduling, Dean & Porter).

The emergent scheduler's insight is that task granularity decides which
scheduler wins. The features here are measured from an engine's window,
with no user-given goal or model:

- **unit size**: mean service time of a unit of work offered (per job,
  core-seconds per record processed, Σ busy / Σ records over its instances
  that spent time; averaged over jobs weighted by their ingest);
- **burstiness**: coefficient of variation of total ingest over the last
  ``history`` (10) windows;
- **skew**: max / mean load over the key groups of keyed operators (1 =
  flat; independent of the routing, so balancing does not hide it); 1 when
  keyed jobs are offered less than ``keyed_share`` (10%) of the work offered
  (ingest × unit size; with no ``job_of``, of the work processed) — the skew
  of a trickle is noise (one record in one group reads as 16×).

:class:`ChangeDetector` watches unit size and skew (on a log scale) and
reports when the workload has left its segment — the learner's cue to stop
trusting what it learnt. :func:`window_score` is the reward: per running job,
on-time outputs over the outputs its ingest should produce (so starving a job
costs as much as making it late), averaged over jobs — in [0, 1].
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import networkx as nx
import numpy as np

from strata.model import Scenario, joined_graph, offered_rates, propagate
from strata.model.job import Operator, OperatorKind
from strata.model.traffic import as_emitted
from strata.protocol.engine import Observation


@dataclass(frozen=True, slots=True)
class Features:
    unit_s: float
    burstiness: float
    skew: float


@dataclass
class FeatureTracker:
    """Features of each window; keeps the ingest history burstiness needs and each job's last unit size.

    The unit size is a property of the workload, not of the schedule: the
    mean over jobs, weighted by their ingest in the window, of each job's
    service time per record (its instances' Σ busy / Σ records, the last
    measured if it processed nothing in the window). The size of the units a
    window *processed* would depend on the composition — shortest-first
    serves the short units of a backlog first — and a change detector fed
    with it would see the meta level's own switches as changes of workload.
    ``job_of``: PE → job (``strata.model.job_maps``); without it every PE is
    one job (the processed mix).
    """

    history: int = 10
    keyed_share: float = 0.1
    job_of: Mapping[str, str] = field(default_factory=dict)
    _ingest: deque[float] = field(default_factory=deque)
    _unit: dict[str, float] = field(default_factory=dict)  # job → its last measured service time per record

    def update(self, obs: Observation) -> Features:
        w = obs.window
        # Instances that spent no time (free sources and sinks) would dilute the size of the real units.
        busy = sum(i.busy for i in w.instances if i.busy > 0)
        spent: dict[str, list[float]] = {}
        for i in w.instances:
            if i.busy > 0:
                acc = spent.setdefault(self.job_of.get(i.pe, ""), [0.0, 0.0])
                acc[0] += i.busy
                acc[1] += i.records
        for job, (b, r) in spent.items():
            if r > 0:
                self._unit[job] = b / r
        offered: dict[str, float] = {}
        for pe, rate in w.ingest.items():
            job = self.job_of.get(pe, "")
            if job in self._unit:
                offered[job] = offered.get(job, 0.0) + rate
        total = sum(offered.values())
        unit = sum(rate * self._unit[job] for job, rate in offered.items()) / total if total > 0 else 0.0
        self._ingest.append(sum(w.ingest.values()))
        while len(self._ingest) > self.history:
            self._ingest.popleft()
        n = len(self._ingest)
        mean = sum(self._ingest) / n if n else 0.0
        burst = math.sqrt(sum((x - mean) ** 2 for x in self._ingest) / n) / mean if n > 1 and mean > 0 else 0.0
        per_group: dict[str, list[float]] = {}
        for kg in w.key_groups:
            per_group.setdefault(kg.pe, []).append(kg.busy)
        skew = 1.0
        # Whether keyed work matters is judged on the work offered, as the unit size is: the share of it a
        # window *processed* depends on the dispatch in force (shortest-first leaves a keyed backlog of long
        # units waiting), and the detector would read the meta level's own switches as changes of skew.
        # Without ``job_of`` (every PE one job) only the processed mix is known.
        if self.job_of:
            work = {job: rate * self._unit[job] for job, rate in offered.items()}
            keyed = sum(v for job, v in work.items() if job in {self.job_of.get(pe) for pe in per_group})
            matters = keyed > 0 and keyed >= self.keyed_share * sum(work.values())
        else:
            matters = sum(map(sum, per_group.values())) >= self.keyed_share * busy
        if matters:
            for loads in per_group.values():
                total_load = sum(loads)
                if total_load > 0:
                    skew = max(skew, max(loads) * len(loads) / total_load)
        return Features(unit, burst, skew)


def vector(f: Features) -> np.ndarray:
    """What the change detector compares: log10 unit size and log10 skew (a factor of 10 is 1.0)."""
    return np.array([np.log10(max(f.unit_s, 1e-6)), np.log10(max(f.skew, 1.0))])


@dataclass
class ChangeDetector:
    """A new workload segment: ``confirm`` windows in a row farther than ``threshold`` from the segment's centroid.

    The distance is Chebyshev over :func:`vector` (0.5 = a factor of 3 in unit
    size or skew: a mix of unit sizes shifting within a bursty phase moves it
    by up to 0.4). Burstiness is left out: a coefficient of variation over
    past windows spikes at every change of level and lags it, so it would
    report each change twice. Windows that processed nothing carry no unit
    size and are skipped. The centroid is the running mean of the segment's
    windows; after a change it restarts from the confirming windows.
    """

    threshold: float = 0.5
    confirm: int = 2
    centroid: np.ndarray | None = None
    previous: np.ndarray | None = None  # the centroid of the segment the last change left
    _n: int = 0
    _away: list[np.ndarray] = field(default_factory=list)

    @property
    def suspect(self) -> bool:
        """The last window lay away from the segment, and the change is not yet confirmed (or refuted)."""
        return bool(self._away)

    def update(self, f: Features) -> bool:
        """Feed one window; True when it completes a confirmed change (:attr:`previous` is the old centroid)."""
        if f.unit_s <= 0:
            return False
        x = vector(f)
        if self.centroid is None:
            self.centroid, self._n = x, 1
            return False
        if float(np.max(np.abs(x - self.centroid))) <= self.threshold:
            self._away.clear()
            self._n += 1
            self.centroid = self.centroid + (x - self.centroid) / self._n
            return False
        self._away.append(x)
        if len(self._away) < self.confirm:
            return False
        self.previous = self.centroid
        self.centroid, self._n = np.mean(self._away, axis=0), len(self._away)
        self._away.clear()
        return True


def yields(scenario: Scenario, templates: Mapping[str, str] | None = None, batch: int = 1) -> dict[str, float]:
    """Job → sink outputs per source record with unlimited cpu (selectivities along the paths; window
    aggregates at what the engines emit, :func:`strata.model.traffic.as_emitted`, as the plan projects)."""
    graph = joined_graph(as_emitted(scenario, batch), templates)
    rates = propagate(graph)

    def outputs(pe: str, op: Operator) -> float:
        return sum(rates[u] for u in graph.predecessors(pe)) if op.kind is OperatorKind.SINK else 0.0

    return _per_source_record(graph, rates, outputs)


def unit_costs(scenario: Scenario, templates: Mapping[str, str] | None = None) -> dict[str, float]:
    """Job → declared core-seconds of work per source record (each operator's cost × the records it is offered per
    source record): the service time a job's records are taken to need before any of them has been measured."""
    graph = joined_graph(as_emitted(scenario), templates)
    offered = offered_rates(graph)
    return _per_source_record(graph, offered, lambda pe, op: offered[pe] * op.cost_per_record)


def declared_rates(scenario: Scenario) -> dict[str, float]:
    """Job → the records/s its sources declare (their nominal rates, first template): the rate a job is taken to
    arrive at when it starts, before any window has measured it."""
    return {
        job.id: sum(op.source.rate for op in job.templates[0].operators if op.kind is OperatorKind.SOURCE and op.source)
        for job in scenario.jobs
    }


def _per_source_record(
    graph: nx.DiGraph, rates: Mapping[str, float], amount: Callable[[str, Operator], float]
) -> dict[str, float]:
    """Job → Σ ``amount`` over its PEs other than sources, per record its sources emit (``rates``)."""
    src: dict[str, float] = {}
    total: dict[str, float] = {}
    for pe in graph:
        job, op = graph.nodes[pe]["job"], graph.nodes[pe]["op"]
        if op.kind is OperatorKind.SOURCE:
            src[job] = src.get(job, 0.0) + rates[pe]
        else:
            total[job] = total.get(job, 0.0) + amount(pe, op)
    return {job: total.get(job, 0.0) / r for job, r in src.items() if r > 0}


def outcomes(obs: Observation, job_yield: Mapping[str, float], sources: Mapping[str, str]) -> dict[str, tuple]:
    """Job → (on-time outputs, expected outputs) in the window, for every job with ingest in it."""
    w = obs.window
    span = max(w.now - w.start, 1e-9)
    ingest: dict[str, float] = {}
    for pe, rate in w.ingest.items():
        if pe in sources:
            ingest[sources[pe]] = ingest.get(sources[pe], 0.0) + rate * span
    out = {}
    for job, records in ingest.items():
        stats = w.latency.get(job)
        on_time = stats.records * (1.0 - stats.miss_rate) if stats is not None else 0.0
        out[job] = (on_time, records * job_yield.get(job, 1.0))
    return out


def score(per_job: Mapping[str, tuple], min_records: float = 5.0) -> float | None:
    """Mean over jobs expecting ≥ ``min_records`` outputs of min(1, on-time / expected); None if none did."""
    scores = [min(1.0, on / exp) for on, exp in per_job.values() if exp >= min_records]
    return float(np.mean(scores)) if scores else None


def window_score(
    obs: Observation, job_yield: Mapping[str, float], sources: Mapping[str, str], min_records: float = 5.0
) -> float | None:
    """Mean over jobs with ingest in the window of min(1, on-time outputs / expected outputs); None if none ran."""
    return score(outcomes(obs, job_yield, sources), min_records)


def backlog(obs: Observation) -> int:
    """Records waiting at the end of the window, over every instance (dispatch queues and buffers)."""
    return sum(i.queued for i in obs.window.instances)


def learning_reward(score: float, before: int, after: int) -> float:
    """The reward the learner credits: the window's score, plus (1 − score) × the share of the backlog drained.

    A window's lateness is mostly inherited when a backlog stands: every
    composition would score ~0 on it, and the learner would learn nothing
    (or blame the one in force). How much of the backlog it drained is the
    part of the outcome the window's own composition caused.
    """
    drained = (before - after) / before if before > 0 else 0.0
    return score + (1.0 - score) * min(1.0, max(0.0, drained))
