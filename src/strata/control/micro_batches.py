"""Decisions about micro-batches, for an engine that runs queries as micro-batches (Spark; DESIGN.md rule 2).

Spark enforces three things a policy decides (docs/hierarchy.md, "Micro-batch
knobs", lists every default):

- **Trigger intervals** (:func:`trigger_intervals`): a job with a latency
  target above ``critical_latency_s`` runs a micro-batch every
  ``target / batches_per_target`` seconds, at most ``trigger_max_s``; a
  latency-critical job polls for new input every ``critical_poll`` × its
  target (a batch that overruns it is followed at once): back to back, Spark's
  driver re-lists a file source every ``pollingDelay`` (10 ms) while no input
  is new — measured, an alert query's otherwise idle driver JVM took more than
  one of two cores (bench_platform, strata-cells), which no FAIR pool and no
  cell share below a core can take back. Cameo's
  deadline dispatch (Xu et al., §4) needs several batches inside a target to
  order; a longer trigger only adds latency. A latency-critical query that
  reads directories lists them every ``critical_file_poll`` × its target
  instead (:func:`directory_triggers`): a file source plans a batch only when a
  new file is there, so its batches come no faster than its files land
  whatever its trigger, and the trigger only sets how long a landed file
  waits. Spark starts processing-time triggers on multiples of the interval
  of the wall clock, so files written every 0.5 s against a 0.5 s trigger each
  wait the same 0 to 0.5 s, the phase of the producer's clock against Spark's:
  measured on bench_platform (alerts alone and in its cell, 27 Nov), every
  trigger that planned no batch had no new file (its file landed 18–107 ms
  after the trigger's instant) and the file waited for the next one, the
  whole-run p99 moving with that phase by up to a trigger.
- **The gate's concurrency bound** (:func:`gate_config`): the session's cores
  less ``gate_reserved_cores`` (at least 1), so a batch of a latency-critical
  query that goes over the bound always finds a core no other batch was let in
  to take (measured on bench_platform: docs/spark.md). A latency-critical
  job's batch never waits for a slot (as FAIR pools by hand start it at once).
- **Bulk task sizes** (:func:`records_per_task`, from :func:`critical_slack`; :class:`BatchSizing`):
  Spark cannot preempt a task, so a batch of a latency-critical job that
  arrives while a bulk batch holds the cores waits for a task to end. Task
  granularity is Spark's only preemption: a bulk job's batches are split into
  tasks of at most as many records as fit the critical jobs' slack — records ×
  the seconds a record holds a core (the tasks' measured wall time,
  :class:`TaskTimes`, never less than the learned core-seconds; before either,
  the model's prior cost, so that a burst at the start is split too) — and read
  as much as before (more, shorter tasks; not smaller batches). A record can wait
  out two blocked batches of its job (the one in flight when it arrives and
  its own), so slack = min(target / 2, target − poll) − batch time alone.
  No finer than keeps each task's fixed cost within a share of its records'
  work (:func:`fewest_records`): past that the split costs the bulk job more
  throughput than the critical job can gain latency from it.
- **Read-limit restarts** (:class:`ReadLimitRestarts`): a source whose read
  limit Spark reads only at query start (``maxFilesPerTrigger``,
  ``maxOffsetsPerTrigger``) can follow L0's rate cap only by a restart, which
  costs a batch's planning: the limit is changed only when it moves by
  ``read_limit_ratio`` or more and not within ``restart_every_s`` of the last
  restart; with ``cap_reads`` off, never.

Pure: plain data in, plain data out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from strata.control.estimation import Estimate
from strata.dispatch.gate import GateConfig
from strata.model import OperatorKind, Scenario, critical_jobs, joined_graph
from strata.model.graph import topological_order
from strata.protocol.engine import TaskRun


def trigger_intervals(
    scenario: Scenario, critical_s: float, per_target: float, most_s: float, critical_poll: float
) -> dict[str, float]:
    """Job → processing-time trigger (s): ``min(most_s, target / per_target)`` for a job whose latency target is
    over ``critical_s``; ``target × critical_poll`` for a latency-critical one (how often its driver polls for
    new input; its batches still follow each other at once while input waits)."""
    return {
        j.id: min(most_s, j.target_latency_s / per_target)
        if j.target_latency_s > critical_s
        else j.target_latency_s * critical_poll
        for j in scenario.jobs
    }


def directory_triggers(
    triggers: Mapping[str, float], scenario: Scenario, critical_s: float, file_poll: float
) -> dict[str, float]:
    """Job → processing-time trigger (s) of a latency-critical job's query when it reads directories: ``target ×
    file_poll``, or its trigger in ``triggers`` when that is shorter. Its batches come only as its files land
    (a trigger that finds no new file plans no batch), so polling more often costs a directory listing, not a
    batch; a landed file waits at most this long for its batch to start, whatever the producer's phase."""
    return {
        job: min(triggers[job], scenario.job[job].target_latency_s * file_poll)
        for job in critical_jobs(scenario, critical_s)
        if job in triggers
    }


def alone_batch_s(fixed_s: float, marginal_s: float, rate: float, cores: float) -> float | None:
    """A job's batch time with ``cores`` to itself when its batches run back to back at ``rate`` records/s.

    A batch holds what arrived during the one before: T = (fixed + marginal × rate × T) / cores, so
    T = fixed / (cores − marginal × rate) — its core-seconds per batch on the least-squares line busy = fixed +
    marginal × records (:class:`strata.control.estimation.Estimate`). None when its work at ``rate`` needs every
    core (alone, it cannot keep up)."""
    spare = cores - marginal_s * rate
    if spare <= 0:
        return None
    return max(0.0, fixed_s) / spare


def critical_slack(
    targets: Mapping[str, float], alone: Mapping[str, float | None], polls: Mapping[str, float]
) -> float | None:
    """The longest bulk task every latency-critical job can wait out within its target: the least over the jobs
    in ``targets`` (job → s) with a known batch time alone B (``alone``: job → s or None) of
    min(target / 2, target − poll) − B, ``polls``: job → its trigger P (0 when absent).

    A record that arrives just after its job's batch started waits for that batch, which a bulk task of L seconds
    can hold back: it ends by L + B; the record's own batch starts then or at the next poll, max(P, L + B), and can
    be held back as long again: its latency is at most max(P, L + B) + L + B. That is within the target T while
    L ≤ T/2 − B (P ≤ T/2) or L ≤ T − P − B (P > T/2). None when no batch time is known, or when some critical
    job's slack is not positive: it misses even so, and bulk batches made smaller would cost throughput and buy
    nothing."""
    known = [
        min(targets[j] / 2, targets[j] - polls.get(j, 0.0)) - t
        for j, t in alone.items()
        if j in targets and t is not None
    ]
    if not known or min(known) <= 0:
        return None
    return min(known)


@dataclass
class TaskTimes:
    """Each job's task wall seconds per input record, as Spark ran its batches (:class:`TaskRun`): sums weighted
    ``decay`` per older window, so the figure follows the machine's load. Wall time, not core-seconds: a task
    holds its core for its wall time, contention included, and that is what a critical batch waits out."""

    decay: float = 0.9
    run_s: dict[str, float] = field(default_factory=dict)
    records: dict[str, float] = field(default_factory=dict)

    def observe(self, runs: Mapping[str, TaskRun]) -> None:
        """One window's task runs (job → :class:`TaskRun`); a job without one keeps its sums as they were."""
        for job, r in runs.items():
            self.run_s[job] = self.decay * self.run_s.get(job, 0.0) + r.run_s
            self.records[job] = self.decay * self.records.get(job, 0.0) + r.records

    def per_record(self) -> dict[str, float]:
        """Job → task wall seconds per input record (jobs with records seen)."""
        return {job: self.run_s[job] / n for job, n in self.records.items() if n > 0}


def records_per_task(
    slack_s: float | None, held_s: Mapping[str, float], least: Mapping[str, int] | None = None
) -> dict[str, int]:
    """Job → the most records one task of its batches reads, so that the task ends within ``slack_s``: slack / s
    rounded down to a step of 2^(1/4) (at least 1), ``held_s``: job → the seconds one record holds a core in its
    tasks (jobs with s ≤ 0 are not sized); never fewer than ``least`` (job → records: :func:`fewest_records`). No
    slack (no critical job with a known batch time, or one that misses even so): none. The steps (≈ 19% apart)
    keep a size steady while its measurements drift by a few percent from window to window, so the source's split
    changes only when the tasks would.

    Tasks, not batches: a batch read smaller at the same trigger reads less (measured, bench_one_app seed 1:
    read limits sized so cost `scoring` 12% of its throughput, and its batches, always behind, held the cores
    back to back); split into more tasks it reads as much, and a critical batch waits at most one task."""
    if slack_s is None:
        return {}
    least = least or {}
    # a quotient that is whole on paper (0.4 / 0.004) must not lose a step to binary rounding
    return {
        job: max(_quarter_octave(slack_s / s * (1 + 1e-9)), least.get(job, 1)) for job, s in held_s.items() if s > 0
    }


def fewest_records(cpu_per_record_s: float, task_overhead_s: float, overhead_share: float) -> int:
    """The fewest records a bulk task may hold: each task costs ``task_overhead_s`` core-seconds whatever it holds
    (Spark's launch of it, its input split, its sink file), so a split is no finer than keeps that cost within
    ``overhead_share`` of the task's records (``cpu_per_record_s`` core-seconds each) — overhead / (share × cost),
    rounded up to a step of 2^(1/4). On a loaded machine a task's wall time per record grows and the slack would
    shrink the tasks further, each one's fixed cost taken from the bulk job's throughput (measured with no floor,
    bench_one_app on a slow shared machine: `scoring` split 8–16 ways, 14–30% more CPU a row, 0.36× FAIR's rows/s).
    1 when either cost is unknown (0)."""
    if cpu_per_record_s <= 0 or task_overhead_s <= 0 or overhead_share <= 0:
        return 1
    # a quotient that is on a step on paper must not go up one to binary rounding
    return _quarter_octave(task_overhead_s / (overhead_share * cpu_per_record_s) * (1 - 1e-9), up=True)


def _quarter_octave(n: float, up: bool = False) -> int:
    """The largest 2^(k/4) ≤ ``n`` (whole k, truncated to an integer), at least 1; ``up``: the smallest 2^(k/4) ≥
    ``n``, rounded up to an integer."""
    if n <= 1:
        return 1
    if up:
        return math.ceil(2 ** (math.ceil(4 * math.log2(n)) / 4))
    return int(2 ** (math.floor(4 * math.log2(n)) / 4))


@dataclass(frozen=True)
class BatchSizing:
    """The knobs :meth:`tasks` sizes bulk batches' tasks with: the cores of the session (a critical job's batch
    time alone spreads over them), the latency a critical job has at most, the trigger each query runs with
    (job → s: a bulk job's batch interval, a critical job's poll), and a task's fixed cost with the share of its
    work that cost may take (:func:`fewest_records`; 0: no floor)."""

    cores: int
    critical_s: float
    triggers: Mapping[str, float]
    task_overhead_s: float = 0.0
    overhead_share: float = 0.1

    def tasks(
        self,
        model: Scenario,
        templates: Mapping[str, str],
        estimates: Mapping[str, Estimate],
        ingest: Mapping[str, float],
        task_s: Mapping[str, float] | None = None,
    ) -> dict[str, int]:
        """Source PE → the most records one task of its bulk job's batches reads (:func:`records_per_task`).

        Per admitted job (``templates``), on its observed offer (``ingest``, source PE → records/s): core-seconds
        per source record Σ cost × gain over its PEs with an estimate (gain: records reaching the PE per source
        record, through the model's selectivities), and its per-batch line (Σ fixed, Σ marginal × gain). A job
        with a target of ``critical_s`` or less gives a batch time alone (:func:`alone_batch_s`) and, with its
        trigger (its poll), the slack (:func:`critical_slack`) — before its costs are learned, from its measured
        task time (one poll's input at that pace over the cores), before that from the model's prior costs (no
        per-batch part); a job with a trigger is bulk and is sized, unless it is required (fitted whole, never held
        back), on the seconds a record holds a core: its measured task wall time per source record (``task_s``:
        job → s, :meth:`TaskTimes.per_record`) when known — from its first batch, before its costs are learned —
        never less than its learned core-seconds (a task takes at least its CPU time); a job with neither, on the
        model's prior cost per record (``model``: the spec's costs where nothing is learned), so that the first
        batches — a burst at the start, before anything is measured — are split too. A split reads as much as
        before (more tasks, not fewer records: no cap), so a prior that is off costs tasks for a window or two,
        not records; a job whose prior cost is 0 is not sized. No task holds fewer records than its fixed cost
        allows (:func:`fewest_records`, on the learned core-seconds per record, else the prior)."""
        targets, alone, held, least, sources = {}, {}, {}, {}, {}
        task_s = task_s or {}
        for job, tpl in templates.items():
            graph = joined_graph(model, {job: tpl})
            gain: dict[str, float] = {}
            cost = fixed = marginal = prior = 0.0
            for pe in topological_order(graph):
                op = graph.nodes[pe]["op"]
                if op.kind is OperatorKind.SOURCE:
                    gain[pe] = 1.0
                    sources.setdefault(job, []).append(pe)
                else:
                    gain[pe] = sum(gain[u] * _passes(graph.nodes[u]["op"]) for u in graph.predecessors(pe))
                prior += op.cost_per_record * gain[pe]
                e = estimates.get(pe)
                if e is not None:
                    cost += e.cost_per_record * gain[pe]
                    fixed += e.fixed_s
                    marginal += e.marginal_s * gain[pe]
            spec = model.job[job]
            if spec.target_latency_s <= self.critical_s:
                offered = sum(ingest.get(pe, 0.0) for pe in sources.get(job, ()))
                targets[job] = spec.target_latency_s
                if cost > 0:
                    alone[job] = alone_batch_s(fixed, marginal, offered, self.cores)
                elif job in task_s and job in self.triggers:
                    # not learned yet, its tasks measured: one poll's input at their measured pace (contention
                    # included: no shorter than alone) over the cores
                    alone[job] = task_s[job] * offered * self.triggers[job] / self.cores
                else:
                    # neither: the model's prior cost, with no per-batch part known (0 unless it cannot keep up)
                    alone[job] = alone_batch_s(0.0, prior, offered, self.cores)
            elif job in self.triggers and not spec.required:
                # neither learned nor measured: the model's prior cost per record (0: not sized)
                held[job] = max(cost, task_s.get(job, 0.0)) or prior
                least[job] = fewest_records(cost or prior, self.task_overhead_s, self.overhead_share)
        sized = records_per_task(critical_slack(targets, alone, self.triggers), held, least)
        return {pe: n for job, n in sized.items() for pe in sources.get(job, ())}


def _passes(op) -> float:
    """Records out per record in: 1 at a source or sink, else the operator's selectivity."""
    return 1.0 if op.kind in (OperatorKind.SOURCE, OperatorKind.SINK) else op.selectivity


def gate_config(parallelism: int, reserved: int, critical_s: float = 0.0) -> GateConfig:
    """The gate's knobs for a session of ``parallelism`` cores: at most ``parallelism − reserved`` batches
    running at once (at least 1), a batch of a job whose target is ``critical_s`` or shorter released at once,
    the other knobs at their defaults."""
    return GateConfig(max_running=max(1, parallelism - reserved), critical_s=critical_s)


@dataclass(frozen=True)
class ReadLimitRestarts:
    """When a read limit that only a query restart changes is worth a restart (a
    :class:`strata.protocol.units.ReadLimitPolicy`)."""

    enabled: bool = False
    ratio: float = 1.5  # the limit moves by this factor or more (either way)
    every_s: float = 20.0  # at most one restart per query this often

    def worth_restart(self, current: int | None, proposed: int | None, since_restart_s: float) -> bool:
        """True when ``current`` should become ``proposed`` now (None: no limit)."""
        if not self.enabled or current == proposed:
            return False
        both = current is not None and proposed is not None
        if both and max(current, proposed) < self.ratio * min(current, proposed):
            return False  # a small change is not worth a batch's planning
        return since_restart_s >= self.every_s
