"""Signals up: what a lower level or the engine reports that its own budget cannot fix (Dangwal et al.).

In Meta's hierarchy a level that cannot meet its objective inside the
constraints handed down does not widen them itself; it raises a signal and
the level above re-decides only the component concerned (Turbine's
autoscaler reacts to lag, input imbalance and OOM the same way). Four
signals, each naming the component (job) it concerns:

- ``miss``: deadline-miss pressure — a job's share of outputs over its
  target latency stayed above ``miss_rate`` for ``raise_after`` windows;
- ``hotspot``: L1 found a key group that no routing of whole key groups can
  balance (AutoFlow's irreducible hotspot) — only more cpu or a new
  placement of that instance helps;
- ``shortfall``: a job's backlog exceeds what its sources bring in one
  target latency, for ``raise_after`` windows — its cpu cannot keep up;
- ``node-loss``: a node the plan uses went down.

Detection is hysteretic (:class:`Debounce`): a condition must hold
``raise_after`` consecutive windows to raise and be absent ``clear_after``
windows to clear, so a noisy window neither raises nor clears a signal.
Pure functions over plain data; the only memory is the debounce counters.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from strata.balance.hotspot import Hotspot
from strata.model import Scenario
from strata.protocol.engine import Observation

KINDS = ("node-loss", "shortfall", "miss", "hotspot")  # in the order the controller serves them


@dataclass(frozen=True, slots=True)
class Signal:
    """One signal up: its kind, the job it concerns, a magnitude and a human-readable reason."""

    kind: str
    job: str
    value: float
    detail: str

    def __str__(self) -> str:
        return f"{self.kind}:{self.job} ({self.detail})"


@dataclass(frozen=True, slots=True)
class SignalConfig:
    """Thresholds and hysteresis of signal detection, with their defaults."""

    miss_rate: float = 0.05  # share of a job's outputs over target that counts as pressure
    backlog_latencies: float = 1.0  # shortfall: backlog above this many target latencies of ingest
    raise_after: int = 2  # consecutive windows a condition must hold
    clear_after: int = 2  # consecutive windows it must be absent to clear


@dataclass
class Debounce:
    """Per (kind, job): raise after ``raise_after`` consecutive hits, clear after ``clear_after`` misses."""

    raise_after: int = 2
    clear_after: int = 2
    _hits: dict[tuple[str, str], int] = field(default_factory=dict)
    _misses: dict[tuple[str, str], int] = field(default_factory=dict)
    _up: set[tuple[str, str]] = field(default_factory=set)

    def update(self, present: Iterable[tuple[str, str]], known: Iterable[tuple[str, str]]) -> set[tuple[str, str]]:
        """Feed one window's conditions; ``known`` are all keys the detector evaluated. Returns keys raised now."""
        present = set(present)
        for key in set(known) | present | set(self._up):
            if key in present:
                self._hits[key] = self._hits.get(key, 0) + 1
                self._misses[key] = 0
                if self._hits[key] >= self.raise_after:
                    self._up.add(key)
            else:
                self._hits[key] = 0
                self._misses[key] = self._misses.get(key, 0) + 1
                if key in self._up and self._misses[key] >= self.clear_after:
                    self._up.discard(key)
        return set(self._up)

    def reset(self, key: tuple[str, str]) -> None:
        """The level above acted on ``key``: it must be observed afresh before it raises again."""
        self._up.discard(key)
        self._hits[key] = 0


def miss_pressure(obs: Observation, rate: float) -> dict[str, float]:
    """Job → deadline-miss rate in the window, for jobs whose miss rate exceeds ``rate``."""
    return {job: s.miss_rate for job, s in obs.window.latency.items() if s.records and s.miss_rate > rate}


def shortfall(
    obs: Observation,
    target_latency: Mapping[str, float],
    job_of: Mapping[str, str],
    sources: Mapping[str, str],
    latencies: float,
) -> dict[str, float]:
    """Job → backlog in target latencies of ingest, for jobs whose backlog exceeds ``latencies``.

    Backlog = records queued at the job's instances at the end of the window;
    one target latency of ingest = Σ source ingest × L. A job that keeps a
    backlog larger than what arrives in L cannot meet L whatever the order of
    dispatch: it lacks cpu (or pacing). ``sources`` maps source PE → job.
    """
    backlog: dict[str, int] = {}
    for inst in obs.window.instances:
        job = job_of.get(inst.pe)
        if job is not None:
            backlog[job] = backlog.get(job, 0) + inst.queued
    ingest: dict[str, float] = {}
    for pe, r in obs.window.ingest.items():
        if pe in sources:
            ingest[sources[pe]] = ingest.get(sources[pe], 0.0) + r
    out = {}
    for job, queued in backlog.items():
        per_latency = ingest.get(job, 0.0) * target_latency[job]
        if per_latency > 0 and queued / per_latency > latencies:
            out[job] = queued / per_latency
    return out


def lost_nodes(obs: Observation, known_down: Iterable[str]) -> set[str]:
    """Nodes reported down now that were not down at the previous step."""
    return set(obs.nodes_down) - set(known_down)


def observed_signals(
    obs: Observation,
    config: SignalConfig,
    scenario: Scenario,
    placement: Mapping[str, Sequence[tuple[str, float]]],
    job_of: Mapping[str, str],
    sources: Mapping[str, str],
    hotspots: Mapping[str, Sequence[Hotspot]],
) -> dict[tuple[str, str], Signal]:
    """Every signal present in this window, by (kind, job), before debouncing.

    Node loss: a lost node under any of the job's instances. Capacity
    shortfall: the job's source backlog in target latencies. Deadline-miss
    pressure: the job's miss rate. Irreducible hotspot: L1's latest
    hotspots (the top one per keyed PE).
    """
    target = {j.id: j.target_latency_s for j in scenario.jobs}
    present: dict[tuple[str, str], Signal] = {}
    for node in sorted(set(obs.nodes_down)):
        for pe, insts in placement.items():
            if any(n == node for n, _ in insts):
                job = job_of[pe]
                present[("node-loss", job)] = Signal("node-loss", job, 1.0, f"{node} down under {pe}")
    for job, v in shortfall(obs, target, job_of, sources, config.backlog_latencies).items():
        present[("shortfall", job)] = Signal("shortfall", job, v, f"backlog {v:.2f} target latencies")
    for job, v in miss_pressure(obs, config.miss_rate).items():
        present[("miss", job)] = Signal("miss", job, v, f"miss rate {v:.3f}")
    for pe, spots in hotspots.items():
        if spots and pe in job_of:
            top = spots[0]
            present[("hotspot", job_of[pe])] = Signal(
                "hotspot", job_of[pe], top.ratio, f"{pe} key group {top.key_group} at {top.ratio:.2f}× mean"
            )
    return present
