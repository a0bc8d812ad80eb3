"""Workload features and the per-window score the learner maximises (emergent scheduling, Dean & Porter).

The emergent scheduler's insight is that task granularity decides which
scheduler wins. The features here are measured from an engine's window,
with no user-given goal or model:

- **unit size**: mean service time of a unit of work (core-seconds per
  record processed, Σ busy / Σ records over the instances that spent time);
- **burstiness**: coefficient of variation of total ingest over the last
  ``history`` (10) windows;
- **skew**: max / mean load over the key groups of keyed operators (1 =
  flat; independent of the routing, so balancing does not hide it).

:func:`context` discretises them into a small tuple the contextual bandit
keys on. :func:`window_score` is the reward: per running job, on-time
outputs over the outputs its ingest should produce (so starving a job
costs as much as making it late), averaged over jobs — in [0, 1].
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from strata.hierarchy.protocol import Observation
from strata.model import Scenario, joined_graph, propagate
from strata.model.job import OperatorKind


@dataclass(frozen=True, slots=True)
class Features:
    unit_s: float
    burstiness: float
    skew: float


@dataclass(frozen=True, slots=True)
class ContextConfig:
    """Where each feature is cut into two buckets, with the defaults."""

    unit_s: float = 0.005  # fine < 5 ms ≤ coarse
    burstiness: float = 0.25  # steady < 0.25 ≤ bursty
    skew: float = 3.0  # flat < 3 ≤ skewed (max / mean key-group load)


@dataclass
class FeatureTracker:
    """Features of each window; keeps the ingest history burstiness needs."""

    history: int = 10
    _ingest: deque[float] = field(default_factory=deque)

    def update(self, obs: Observation) -> Features:
        w = obs.window
        # Instances that spent no time (free sources and sinks) would dilute the size of the real units.
        busy = sum(i.busy for i in w.instances if i.busy > 0)
        records = sum(i.records for i in w.instances if i.busy > 0)
        self._ingest.append(sum(w.ingest.values()))
        while len(self._ingest) > self.history:
            self._ingest.popleft()
        ingest = np.asarray(self._ingest)
        burst = float(ingest.std() / ingest.mean()) if len(ingest) > 1 and ingest.mean() > 0 else 0.0
        per_group: dict[str, list[float]] = {}
        for kg in w.key_groups:
            per_group.setdefault(kg.pe, []).append(kg.busy)
        skew = 1.0
        for loads in per_group.values():
            total = sum(loads)
            if total > 0:
                skew = max(skew, max(loads) * len(loads) / total)
        return Features(busy / records if records else 0.0, burst, skew)


def context(f: Features, cfg: ContextConfig | None = None) -> tuple[str, str, str]:
    cfg = cfg or ContextConfig()
    return (
        "coarse" if f.unit_s >= cfg.unit_s else "fine",
        "bursty" if f.burstiness >= cfg.burstiness else "steady",
        "skewed" if f.skew >= cfg.skew else "flat",
    )


def yields(scenario: Scenario, templates: Mapping[str, str] | None = None) -> dict[str, float]:
    """Job → sink outputs per source record with unlimited cpu (selectivities along the paths)."""
    graph = joined_graph(scenario, templates)
    rates = propagate(graph)
    src: dict[str, float] = {}
    out: dict[str, float] = {}
    for pe in graph:
        job, op = graph.nodes[pe]["job"], graph.nodes[pe]["op"]
        if op.kind is OperatorKind.SOURCE:
            src[job] = src.get(job, 0.0) + rates[pe]
        elif op.kind is OperatorKind.SINK:
            out[job] = out.get(job, 0.0) + sum(rates[u] for u in graph.predecessors(pe))
    return {job: out.get(job, 0.0) / r for job, r in src.items() if r > 0}


def window_score(
    obs: Observation, job_yield: Mapping[str, float], sources: Mapping[str, str], min_records: float = 5.0
) -> float | None:
    """Mean over jobs with ingest in the window of min(1, on-time outputs / expected outputs); None if none ran."""
    w = obs.window
    span = max(w.now - w.start, 1e-9)
    ingest: dict[str, float] = {}
    for pe, rate in w.ingest.items():
        if pe in sources:
            ingest[sources[pe]] = ingest.get(sources[pe], 0.0) + rate * span
    scores = []
    for job, records in ingest.items():
        expected = records * job_yield.get(job, 1.0)
        if expected < min_records:
            continue
        stats = w.latency.get(job)
        on_time = stats.records * (1.0 - stats.miss_rate) if stats is not None else 0.0
        scores.append(min(1.0, on_time / expected))
    return float(np.mean(scores)) if scores else None
