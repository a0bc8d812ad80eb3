"""What each dispatch order is predicted to keep on time, from a queueing model of each node (overload-aware prior).

The meta level (emergent scheduling, Dean & Porter) learns which dispatch block suits the workload, but it need
not learn blind what queueing theory already predicts. Each node is modelled
as one server of speed ``cores`` (a c-core node as an M/G/1 queue with
service times divided by c), each job on it as a class of Poisson arrivals
(``rate`` records/s, ``service`` core-seconds each, ``target`` latency,
``queued`` records already waiting). A record of a class waits for

- the **standing backlog** it is ordered behind, drained at the capacity the
  classes ahead of it leave free: ``B / (1 − σ_ahead)`` (fluid);
- plus the **queueing delay** of the arrivals themselves: Cobham's
  non-preemptive priority formula, mean ``R / ((1 − σ_ahead)(1 − σ_own))``
  with ``R = Σ λ S² / 2c²`` the mean residual work, and the tail of an
  exponential with an atom at 0, ``P(wait > t) ≈ σ e^{−σ t / W}`` (exact in
  mean and in P(wait > 0); for M/D/1 it is within a few per cent of
  Erlang's exact distribution);

and is on time when its wait plus its own service is within its target. Per
discipline (``DISCIPLINE``):

- **deadline** (llf, edf): Locke (1986) and Buttazzo et al. (1995): EDF is
  optimal while the load is feasible; under overload plain EDF collapses —
  a backlog's overdue records hold the earliest deadlines, so every record
  waits behind them (the domino effect). The dispatcher's deadline orders
  run overdue work only after work that can still meet its deadline
  (``Strategy.overdue``, ``select14``), so an arrival waits behind the part
  of the backlog of tighter (or equal) targets that is not overdue
  (``overdue``: the share that is), not behind any overdue record. Modelled
  as priority by target (deadline-monotonic) for the arrivals' own
  queueing; a class whose load with the tighter ones reaches 1 keeps on
  time the share of its arrivals the capacity they leave it can serve
  (fluid: those served while they can still meet their deadline), and only
  one left no capacity starves;
- **arrival** (fifo): one class, behind the whole backlog;
- **shortest** (sjf): priority by service time; a class sees only the load
  and backlog of classes as short or shorter (Cobham), and one whose
  cumulative load reaches 1 starves;
- **fair** (start-time fair queueing by weight): max-min fairness over
  each class's demand (its load plus its backlog spread over the target of
  the class in question); a class sees the load of lower-demand classes
  plus, of each higher one, as much as its own per weight, and drains its
  own backlog with the fair share left to it.

The prediction is a model, not a measurement: the selector trusts it only
as far as it has predicted the composition that ran (its measured error).
:func:`with_declared` is a what-if on the same model: the jobs idle now
arriving at their declared rates, for orders the running workload cannot
tell apart (Dean & Porter: workloads arrive sporadically).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache

from strata.protocol.engine import Observation

SAMPLES = 16  # arrival times a share over a horizon is averaged over
TIE = 0.1  # relative difference within which two classes' sizes or targets are one class
DISCIPLINE: dict[str, str] = {
    "llf": "deadline",
    "edf": "deadline",
    "sjf": "shortest",
    "fifo": "arrival",
    "fair": "fair",
}


@dataclass(frozen=True, slots=True)
class JobLoad:
    """One job's work on one node: arrivals (records/s), service (core-s per record), target (s), backlog (records)."""

    job: str
    rate: float
    service: float
    target: float
    queued: float = 0.0
    weight: float = 1.0
    overdue: float = 0.0  # share of the queued records already past their deadline


def on_time_within(slack: float, busy: float, mean_wait: float) -> float:
    """P(wait ≤ ``slack``) for a wait that is 0 with probability 1 − ``busy``, else exponential, of mean ``mean_wait``.

    ``busy`` is the load the record queues behind (P(wait > 0) in M/G/1);
    the exponential's own mean is ``mean_wait / busy``, so the tail is
    ``busy · exp(−busy · slack / mean_wait)``.
    """
    if slack < 0:
        return 0.0
    if busy <= 0 or mean_wait <= 0:
        return 1.0
    return 1.0 - busy * math.exp(-busy * slack / mean_wait)


def on_time_share(loads: Sequence[JobLoad], cores: float, discipline: str, horizon: float = 0.0) -> dict[str, float]:
    """Job → predicted share on time, of its records arriving over the next ``horizon`` s, under ``discipline``.

    ``horizon`` 0: a record arriving now. Over a horizon the standing backlog
    a record queues behind drains (fluid): one arriving at ``t`` waits for
    ``max(0, D − t)`` of it, ``D`` the backlog's drain time, so a discipline
    that drains its backlog recovers within the horizon and one that cannot
    (drain ≤ 0) never does. The share is averaged over ``SAMPLES`` arrival
    times spread evenly over the horizon.
    """
    if discipline not in ("deadline", "arrival", "shortest", "fair"):
        raise ValueError(f"discipline: expected deadline, arrival, shortest or fair; found {discipline!r}")
    return dict(zip([j.job for j in loads], _shares(tuple(loads), cores, discipline, horizon), strict=True))


@lru_cache(maxsize=256)
def _shares(loads: tuple[JobLoad, ...], cores: float, discipline: str, horizon: float) -> tuple[float, ...]:
    """:func:`on_time_share`'s shares, in the order of ``loads``.

    Memoised: the meta level predicts every dispatch block on the same loads
    each window (llf and edf are one discipline here), again over the
    segment's horizon (the same one when the segment has just begun), and
    again on a what-if that leaves most nodes' loads as they are.
    """
    if not loads:
        return ()
    rho = {j.job: j.rate * j.service / cores for j in loads}
    work = {j.job: j.queued * j.service / cores for j in loads}  # seconds of the whole node's time
    residual = sum(j.rate * j.service**2 for j in loads) / (2 * cores**2)
    total = sum(rho.values())
    rhos = [rho[j.job] for j in loads]
    works = [work[j.job] for j in loads]
    # Priority classes rank by target (deadline) or service time (shortest). Ranks within ``TIE`` of each other
    # are one class, served in arrival order: measured service times this close cannot be told apart, and the
    # dispatcher's own profiled estimates may order them either way.
    ranks = [j.target if discipline == "deadline" else j.service for j in loads]
    times = [horizon * (k + 0.5) / SAMPLES for k in range(SAMPLES)] if horizon > 0 else [0.0]
    out: list[float] = []
    for j, rank in zip(loads, ranks, strict=True):
        if discipline == "fair":
            ahead, own, backlog, drain = _fair(j, loads, rho, work)
        elif discipline == "arrival":
            ahead, own, backlog, drain = 0.0, total, sum(work.values()), 1.0 - total
        else:
            tied = [abs(r - rank) <= TIE * max(r, rank) for r in ranks]
            ahead = sum([x for x, r, t in zip(rhos, ranks, tied, strict=True) if r < rank and not t])
            own = sum([x for x, r, t in zip(rhos, ranks, tied, strict=True) if r < rank or t])
            if discipline == "shortest":
                backlog = sum([w for w, r, t in zip(works, ranks, tied, strict=True) if r < rank or t])
            else:
                # Overdue records run after every record that can still meet its deadline (the dispatcher's
                # ``Strategy.overdue``): an arrival waits only for the part of a tighter class's backlog not overdue.
                ahead_of = [0.0 if i.target > j.target else 1.0 - i.overdue for i in loads]
                backlog = sum([w * x for w, x in zip(works, ahead_of, strict=True)])
            drain = 1.0 - ahead
        if own >= 1.0 and discipline == "deadline" and drain > 0:
            # Overloaded under a deadline order that serves overdue work last: the class still gets the capacity
            # the tighter classes leave, and a record served while it can meet its deadline is on time — the
            # share of its class's arrivals served so is that capacity over their load (fluid), not 0 (plain
            # EDF's domino, where every record waits behind overdue ones).
            out.append((1.0 - ahead) / (own - ahead))
            continue
        if own >= 1.0 or drain <= 0:
            out.append(0.0)
            continue
        mean_wait = residual / ((1.0 - ahead) * (1.0 - own))
        left = backlog / drain  # seconds until the backlog ahead of an arrival now has drained
        slack = j.target - j.service
        # An arrival after the backlog has drained waits for none of it: one share for all of them.
        drained = on_time_within(slack, own, mean_wait)
        shares = [on_time_within(slack - (left - t), own, mean_wait) if t < left else drained for t in times]
        out.append(sum(shares) / len(shares))
    return tuple(out)


def _fair(
    j: JobLoad, loads: Sequence[JobLoad], rho: Mapping[str, float], work: Mapping[str, float]
) -> tuple[float, float, float, float]:
    """Fair queueing seen by ``j``: load ahead, load with its own, its own backlog and the share that drains it.

    A class's demand over ``j``'s deadline horizon is its load plus its
    backlog spread over ``j``'s target (a backlogged class takes its full
    share however few records arrive). Classes of lower demand per weight
    than ``j`` are served in full ahead of it; each higher one competes up to
    ``j``'s level per weight. What the lower ones leave is split by weight
    among ``j`` and the higher ones; ``j``'s backlog drains with its part of
    that minus its own arrivals.
    """
    demand = [(rho[i.job] + work[i.job] / j.target) / i.weight for i in loads]
    level = (rho[j.job] + work[j.job] / j.target) / j.weight
    lighter = [i for i, d in zip(loads, demand, strict=True) if i.job != j.job and d < level]
    heavier = [i for i, d in zip(loads, demand, strict=True) if i.job != j.job and d >= level]
    ahead = sum(rho[i.job] for i in lighter)
    # The arrivals' own queueing: each heavier class competes at j's arrival rate per weight.
    own = ahead + rho[j.job] + sum(i.weight * rho[j.job] / j.weight for i in heavier)
    share = (1.0 - ahead) * j.weight / (j.weight + sum(i.weight for i in heavier))
    return ahead, own, work[j.job], share - rho[j.job]


@dataclass
class NodeLoads:
    """Each window's :class:`JobLoad` per node, measured from the observation (no generator or schedule known).

    Per job and node: arrivals = records processed + change of the queues of
    its instances there (conservation of records: a job falling behind is
    counted at what it is offered, not at what it got, and one draining a
    backlog at what arrives, not at what it drains); service = Σ busy / Σ records of those
    instances (the last measured when they processed nothing; before any,
    ``costs``: job → its declared service time); backlog =
    records queued, at its instances there and at its sources' instances
    there (``sources``: source PE → job; records a source has yet to pass on
    wait for a core as the job's do); overdue: the job's miss rate in the window (its outputs
    were its oldest records; with a queue and no output, all of it).
    ``job_of``: PE → job; ``targets``/``weights``: per job;
    ``cores``: per node (a node the engine reports down has none).
    """

    job_of: Mapping[str, str]
    targets: Mapping[str, float]
    cores: Mapping[str, float]
    weights: Mapping[str, float] = field(default_factory=dict)
    sources: Mapping[str, str] = field(default_factory=dict)
    costs: Mapping[str, float] = field(default_factory=dict)
    _queued: dict[tuple[str, int], int] = field(default_factory=dict)
    _service: dict[tuple[str, str], float] = field(default_factory=dict)

    def update(self, obs: Observation) -> dict[str, list[JobLoad]]:
        w = obs.window
        span = max(w.now - w.start, 1e-9)
        acc: dict[tuple[str, str], list[float]] = {}  # (node, job) → [records in, busy, records done, queued]
        waiting: dict[tuple[str, str], list[float]] = {}  # (node, job) → [growth, records] of its sources' queues
        for i in w.instances:
            job = self.job_of.get(i.pe)
            grew = i.queued - self._queued.get((i.pe, i.instance), 0)  # signed: a draining backlog was no arrival
            self._queued[(i.pe, i.instance)] = i.queued
            if i.pe in self.sources:
                q = waiting.setdefault((i.node, self.sources[i.pe]), [0.0, 0.0])
                q[0] += grew
                q[1] += i.queued
                continue
            if job is None or (i.busy <= 0 and (i.records > 0 or i.queued == 0)):
                continue  # free operators (sources, sinks) process records in no time; idle ones carry no work
            a = acc.setdefault((i.node, job), [0.0, 0.0, 0.0, 0.0])
            a[0] += i.records + grew
            a[1] += i.busy
            a[2] += i.records
            a[3] += i.queued
        out: dict[str, list[JobLoad]] = {}
        # Records a source has yet to pass on wait for a turn on the node's cores as the job's work does: they are
        # the job's backlog there (the dispatch queue), each to cost the job's service time — a job whose records
        # all wait there (it has had no turn yet) is a class of the node all the same.
        for key in waiting.keys() - acc.keys():
            acc[key] = [0.0, 0.0, 0.0, 0.0]
        for (node, job), (in_, busy, done, queued) in acc.items():
            src_grew, src_queued = waiting.get((node, job), (0.0, 0.0))
            arrived = max(0.0, in_ + src_grew)
            queued += src_queued
            if done > 0 and busy > 0:
                self._service[(node, job)] = busy / done
            service = self._service.get((node, job), self.costs.get(job))
            if service is None or node in obs.nodes_down or job not in self.targets:
                continue
            # The job's outputs late in the window: the share of its queue taken to be past its deadline too.
            stats = w.latency.get(job)
            overdue = stats.miss_rate if stats is not None and stats.records else float(queued > 0)
            load = JobLoad(job, arrived / span, service, self.targets[job], queued, self.weights.get(job, 1.0), overdue)
            out.setdefault(node, []).append(load)
        return out


def predicted_score(
    loads: Mapping[str, Sequence[JobLoad]],
    cores: Mapping[str, float],
    block: str,
    min_rate: float = 0.0,
    horizon: float = 0.0,
) -> float | None:
    """Mean over jobs arriving at ≥ ``min_rate`` records/s of the predicted on-time share under dispatch ``block``.

    A job on several nodes counts each node's share weighted by its arrivals
    there; ``horizon``: of the records arriving over the next that many
    seconds (:func:`on_time_share`); jobs below ``min_rate`` still load the nodes but are not scored
    (as the window score skips a trickle). None when no job is scored.
    """
    on: dict[str, float] = {}
    arrived: dict[str, float] = {}
    for node, jobs in loads.items():
        if cores.get(node, 0) <= 0:
            continue
        share = on_time_share(jobs, cores[node], DISCIPLINE[block], horizon)
        for j in jobs:
            on[j.job] = on.get(j.job, 0.0) + j.rate * share[j.job]
            arrived[j.job] = arrived.get(j.job, 0.0) + j.rate
    per_job = [on[job] / arrived[job] for job in arrived if arrived[job] > 0 and arrived[job] >= min_rate]
    return sum(per_job) / len(per_job) if per_job else None


class PredictedScores(Mapping[str, "float | None"]):
    """Dispatch block → :func:`predicted_score` on one window's loads, each computed when first asked for.

    The meta level scores the coming window under every block, but outside
    a suspected change of workload it reads one of them back: the block that
    ran, to measure the model's error. The loads, cores and floor are the
    window's; ``horizon`` as for :func:`predicted_score`.
    """

    def __init__(
        self,
        blocks: Sequence[str],
        loads: Mapping[str, Sequence[JobLoad]],
        cores: Mapping[str, float],
        min_rate: float = 0.0,
        horizon: float = 0.0,
    ) -> None:
        self._blocks = tuple(blocks)
        self._window = (loads, cores, min_rate, horizon)
        self._known: dict[str, float | None] = {}

    def __getitem__(self, block: str) -> float | None:
        if block not in self._blocks:
            raise KeyError(block)
        if block not in self._known:
            loads, cores, min_rate, horizon = self._window
            self._known[block] = predicted_score(loads, cores, block, min_rate, horizon)
        return self._known[block]

    def __iter__(self) -> Iterator[str]:
        return iter(self._blocks)

    def __len__(self) -> int:
        return len(self._blocks)


def with_declared(
    loads: Mapping[str, Sequence[JobLoad]], declared: Mapping[str, float], min_rate: float
) -> dict[str, list[JobLoad]]:
    """What-if: the loads with every job that arrives below ``min_rate`` (over all its nodes) arriving at its
    ``declared`` rate instead, spread evenly over the nodes it has a class on; the rest, and every backlog, as
    measured.

    A job whose sources trickle is not scored now, but the nodes it is bound
    to hold what it would queue behind when it starts: the standing backlog a
    dispatch order serves first. Predicting each order's score on this
    what-if tells the orders apart where the workload now cannot.
    """
    arriving: dict[str, float] = {}
    nodes: dict[str, int] = {}
    for jobs in loads.values():
        for j in jobs:
            arriving[j.job] = arriving.get(j.job, 0.0) + j.rate
            nodes[j.job] = nodes.get(j.job, 0) + 1
    idle = {job for job, rate in arriving.items() if rate < min_rate and declared.get(job, 0.0) > 0}
    return {
        node: [replace(j, rate=declared[j.job] / nodes[j.job]) if j.job in idle else j for j in jobs]
        for node, jobs in loads.items()
    }
