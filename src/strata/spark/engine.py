"""The Spark engine adapter: Spark as a :class:`strata.protocol.engine.Engine` (DESIGN.md, rules 1–2).

:class:`SparkEngine` only observes and enforces; nothing here decides.

Enforcement of :class:`~strata.protocol.engine.Decisions`:

- ``admitted`` (L0 admission, template): a job that is not running starts its
  chosen template's query; a running job absent from it is stopped; a job whose
  template changes is **switched at a batch boundary**: its source is paused
  through the rate-cap channel (no new batch is planned), the batch in flight
  finishes and commits, the query stops, and the new variant starts from the
  next record (``PipelineOptions.start_row``) with its own checkpoint and sink
  (``<run>/jobs/<job>/<segment>-<template>``). Nothing is read twice or skipped.
- ``pools`` (L0 cpu, with ``cpu_share``): job → the FAIR pool the Controller
  chose for its cpu share (:func:`strata.control.budgets.pool_names`); the gate
  puts each batch in that pool unless the batch is urgent (:mod:`strata.spark.gate`).
- ``triggers``: job → processing-time trigger, taken by a query when it (re)starts; a query that reads
  directories takes its job's ``EngineConfig.directory_triggers`` entry instead, when it has one (how often it
  lists them: :func:`strata.control.micro_batches.directory_triggers`).
- ``rate_limits`` (L0 microQ pacing): source PE → records/s, written to the
  source's control file as rows per micro-batch (rate × the query's batch
  interval: its trigger, or the measured interval between its recent batches
  when they come slower, to the half second); None lifts the cap.
- ``task_records`` (bulk batch sizes): source PE → most rows one task of a
  batch reads, written to the same control file (the generator splits each
  batch into that many more input partitions); a source whose partitions are
  its own (files, a user's data source) cannot take it: said once.
- ``moves`` (L1): key-group moves on a managed keyed operator's routing table;
  they take effect at the next micro-batch and state moves with the key group.
- ``dispatch`` (meta): the gate's strategy for the next batches.

Observation (``observe()``): per window, the micro-batches each query finished
(rows in from the query's progress, rows out, duration) split over the chain's
PEs (by the injected attribution, :func:`strata.control.estimation.attribute`) as ``instances`` and ``rates``; per key
group and partition rows of managed keyed operators; per-job latency estimated
from the batches' sink-side percentiles; ``ingest`` = records/s the source
*offered*, from the query's own progress (the source's latest available offset
between its last two progress events: a capped source still reports its demand;
a source that reports no latest offset, or has offered nothing yet, reports no
ingest: unobserved, not a rate of 0), and its backlog (latest offset − the
query's committed offset) as the source instance's queue. Busy time is a batch's core-seconds from
Spark's own accounting (:mod:`strata.spark.accounting`: its tasks' executor CPU time, plus its share of the
Python workers' CPU), so a learned cost does not grow with contention; a batch is held to the next window while
its jobs' metrics are not settled (at most ``SETTLE_S``), and one Spark gave no metrics for falls back to its wall
time from release to commit, scaled down when the window's batches together took more wall time than the cores
could give.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from strata.model import OperatorKind, Scenario, pe_id
from strata.protocol.engine import (
    Decisions,
    InstanceLoad,
    KeyGroupLoad,
    LatencyStats,
    Observation,
    TaskRun,
    WindowStats,
)
from strata.protocol.units import POOLS, Attribution, ReadLimitPolicy
from strata.spark import checkpoint
from strata.spark.accounting import (
    PYSPARK_DAEMON,
    PYSPARK_WORKER,
    BatchAccounting,
    BatchCost,
    python_cpu_seconds,
    spread,
)
from strata.spark.checkpoint import CheckpointChanged, Existing
from strata.spark.gate import Gate
from strata.spark.listener import ProgressListener, progress_row
from strata.spark.pipelines import Pipeline, PipelineOptions
from strata.spark.session import DAEMON_MODULE
from strata.spark.sources import offered_rows
from strata.spark.user import pipeline_for

STOP_WAIT_S = 10.0  # longest a stop waits for its queries' last progress events (the listener bus is asynchronous)
SETTLE_S = 3.0  # longest a committed batch waits for its jobs' task metrics before it is observed without them


@dataclass(frozen=True)
class EngineConfig:
    """How the engine runs each query: clock epoch, triggers, partitions, sink."""

    epoch: float
    tick_s: float = 0.1
    input_partitions: int = 2
    state_partitions: int = 2
    managed: frozenset[str] | None = None  # keyed operators in Strata's movable store (None: keyed_stateful ones)
    sink: str = "parquet"
    pause_timeout_s: float = 30.0  # longest wait for the batch in flight when switching a template
    pools: dict[str, str] = field(default_factory=dict)  # job → a FAIR pool set by hand (plain Spark's tuning)
    read_limits: dict[str, int] = field(default_factory=dict)  # job → static maxFilesPerTrigger (user jobs)
    directory_triggers: dict[str, float] = field(default_factory=dict)  # job → trigger s when its query reads dirs


@dataclass
class Segment:
    """One query that ran for a job: a template from a start row, with its own run directory."""

    job: str
    template: str
    index: int
    start_row: int
    run_dir: Path
    pipeline: Pipeline
    started_at: float
    stopped_at: float | None = None
    end_row: int | None = None


class SparkEngine:
    """Spark under the hierarchy's control (observe / apply), one query per admitted job.

    The policies it is given, as the gate is given its L2 policy: ``attribute`` splits a micro-batch's
    observation of a whole chain across its PEs (:func:`strata.control.estimation.attribute`);
    ``read_restarts`` says when a rate cap is worth restarting a query for its source's read limit
    (:class:`strata.control.micro_batches.ReadLimitRestarts`; None: never).
    """

    def __init__(
        self,
        spark,
        scenario: Scenario,
        run_dir: Path,
        config: EngineConfig,
        gate: Gate | None = None,
        clock: Callable[[], float] = time.time,
        *,
        attribute: Attribution,
        read_restarts: ReadLimitPolicy | None = None,
    ) -> None:
        self.spark = spark
        self.attribute = attribute
        self.read_restarts = read_restarts
        self.triggers: dict[str, float] = {}  # job → processing-time trigger s a query takes at its (re)start
        self.scenario = scenario
        self.run_dir = Path(run_dir)
        self.config = config
        self.gate = gate
        self.clock = clock
        self.segments: list[Segment] = []
        self.running: dict[str, Segment] = {}
        self.decisions: list[dict] = []  # one row per enforced change, for the report's timeline
        self.caps: dict[str, float | None] = {}  # source PE → the rate cap in force (records/s; None: none)
        self.task_rows: dict[str, int | None] = {}  # source PE → rows per task in force (None: the source's split)
        self._seen: dict[tuple[str, int], int] = {}  # (job, segment) → batch records already observed
        self._window_start = clock()
        self._earlier: dict[str, list[Existing]] = {}  # job → segment directories an earlier run left
        self._lock = threading.Lock()
        self.progress = ProgressListener()
        spark.streams.addListener(self.progress)
        self.accounting = BatchAccounting(spark)
        self.costs: dict[tuple[str, int, int], dict] = {}  # (job, segment, batch) → its accounted core-seconds
        self._runs: dict[tuple[str, int], set[str]] = {}  # (job, segment) → run ids its query has had
        # the Python workers live under the driver's JVM only when the executor is that JVM (local mode)
        local = spark.sparkContext.master.startswith("local")
        self._jvm_pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()) if local else None
        # the tasks' daemon is Strata's own on a local master (strata.spark.worker_daemon), PySpark's elsewhere
        conf = spark.sparkContext.getConf()
        self._daemon = conf.get(DAEMON_MODULE, PYSPARK_DAEMON), conf.get("spark.python.worker.module", PYSPARK_WORKER)
        self._python_s = python_cpu_seconds(self._jvm_pid, *self._daemon) if self._jvm_pid is not None else 0.0
        self._python_unspent = 0.0  # Python CPU of windows that finished no accounted batch

    # ------------------------------------------------------------------ time

    def now(self) -> float:
        return self.clock()

    def advance(self, until: float) -> bool:
        """Let the queries run until wall time ``until``; False once no query is running any more."""
        while (left := until - self.clock()) > 0:
            time.sleep(min(left, 0.25))
            if self.running and not any(s.pipeline.query.isActive for s in self.running.values()):
                return False
        return True

    # ------------------------------------------------------------------ apply

    def apply(self, decisions: Decisions) -> None:
        """Enforce ``decisions``; fields left None are unchanged. Raises ValueError naming a bad entry."""
        for job, why in decisions.reverts:  # the plain values below enforce them
            self._log(decisions, "revert", job, why)
        for job, why in decisions.withheld:
            self._log(decisions, "withheld", job, why)
        if decisions.dispatch is not None and self.gate is not None:
            self.gate.use(decisions.dispatch)
            self._log(decisions, "dispatch", "*", decisions.dispatch)
        if decisions.triggers is not None:  # before admission: a query takes its trigger when it starts
            self.triggers = dict(decisions.triggers)
        if decisions.pools is not None:  # before admission: a query's first batch already runs in its pool
            shares = decisions.cpu_share or {}
            for job, pool in decisions.pools.items():
                if pool not in POOLS:
                    raise ValueError(f"pools: {job!r} → {pool!r} is not a declared pool ({', '.join(POOLS)})")
                if self.gate is not None and self.gate.base_pools.get(job) != pool:
                    self.gate.base_pools[job] = pool
                    cores = f" ({shares[job]:.2f} cores)" if job in shares else ""
                    self._log(decisions, "pool", job, f"{pool}{cores}")
        if decisions.admitted is not None:
            self._admit(decisions)
        if decisions.rate_limits is not None:
            for pe, rate in decisions.rate_limits.items():
                self._rate_limit(decisions, pe, rate)
        if decisions.task_records is not None:
            for pe, rows in decisions.task_records.items():
                self._split_tasks(decisions, pe, rows)
        if decisions.moves:
            self._move(decisions)

    def _log(self, decisions: Decisions, kind: str, job: str, detail: str) -> None:
        self.decisions.append(decision_row(self.clock(), decisions, kind, job, detail))

    def _admit(self, decisions: Decisions) -> None:
        wanted = decisions.admitted
        for job, template in wanted.items():
            if job not in self.scenario.job:
                raise ValueError(f"admitted: no job {job!r} in scenario {self.scenario.name!r}")
            self.scenario.job[job].template(template)  # KeyError names the job and template
        for job in [j for j in self.running if j not in wanted]:
            self._stop(job)
            self._log(decisions, "hold back", job, "query stopped")
        for job in self.scenario.job:
            if job not in wanted:
                continue
            template = wanted[job]
            current = self.running.get(job)
            if current is None:
                start = self.segments_of(job)[-1].end_row if self.segments_of(job) else 0
                started = self._start(job, template, start or 0)
                listing = self._listing(job, started.pipeline)
                listed = f"; lists its directories every {listing:g} s" if listing is not None else ""
                self._log(decisions, "admit", job, f"template {template}{listed}")
            elif current.template != template:
                if current.pipeline.stateful:
                    raise ValueError(
                        f"admitted: {job!r} runs a stateful template ({current.template!r}); "
                        "switching it would drop its open windows, so only stateless jobs switch"
                    )
                end = self._stop(job)
                self._start(job, template, end)
                self._log(decisions, "template", job, f"{current.template} → {template} at row {end}")

    def _options(self, job: str, start_row: int) -> PipelineOptions:
        c = self.config
        return PipelineOptions(
            sink=c.sink,
            epoch=c.epoch,
            tick_s=c.tick_s,
            input_partitions=c.input_partitions,
            trigger_s=self.triggers.get(job),
            state_partitions=c.state_partitions,
            managed=c.managed,
            start_row=start_row,
        )

    # ------------------------------------------------------------------ restart from a run directory

    def _fingerprint(self, job: str, template: str) -> dict:
        spec = self.scenario.job[job]
        tpl = spec.template(template)
        managed = sorted(op.name for op in tpl.operators if self._options(job, 0).is_managed(op))
        state = {"state_partitions": self.config.state_partitions, "managed": managed}
        if spec.declared is not None:  # the query is the user's code: a changed function is a changed query
            state = {**state, **checkpoint.code_fingerprint(spec.declared, template)}
        return checkpoint.fingerprint(spec, tpl, self.config.sink, state)

    def resume(self, fresh: Collection[str] = ()) -> list[str]:
        """Before any query starts: what an earlier run in this directory left, checked against the spec.

        A job's latest segment is resumed from its checkpoint when the Controller
        runs the same template and that template's fingerprint is unchanged; a
        job whose fingerprint changed is refused (:class:`CheckpointChanged`,
        naming the job and what changed) unless it is in ``fresh`` (``"all"``:
        every job), whose directory is set aside and which starts from row 0.
        Returns one line per job saying what happens to it.
        """
        said: list[str] = []
        changed: dict[str, list[str]] = {}
        now = self.clock()
        for job in self.scenario.jobs:
            job_dir = self.run_dir / "jobs" / job.id
            earlier = checkpoint.segments(job_dir)
            if not earlier:
                continue
            if job.id in fresh or "all" in fresh:
                kept = checkpoint.set_aside(job_dir)
                said.append(f"{job.id}: started afresh; the earlier run's directory kept at {kept}")
                continue
            last = earlier[-1]
            if last.template in {tpl.name for tpl in job.templates}:
                if last.fingerprint is None:
                    changed[job.id] = [f"{last.path.name} has no fingerprint (written before the checkpoint guard)"]
                    continue
                diff = checkpoint.differences(last.fingerprint, self._fingerprint(job.id, last.template))
                if diff:
                    changed[job.id] = [f"template {last.template!r}: " + "; ".join(diff)]
                    continue
            self._earlier[job.id] = earlier
            read = last.end_row if last.end_row is not None else last.start_row
            behind = self._offered(job.id, last.template, now) - read
            where = (
                f"after batch {last.committed_batch}" if last.committed_batch is not None else "before its first batch"
            )
            said.append(
                f"{job.id}: resuming ({last.template}) {where}: {read} rows read, {max(behind, 0)} rows behind"
                if behind is not None and behind >= 0
                else f"{job.id}: resuming ({last.template}) {where}: {read} rows read"
            )
        if changed:
            raise CheckpointChanged(changed)
        return said

    def adopt(self, job: str) -> None:
        """``job`` ran in another application of this run until now (a move between cells: that application
        stopped it at a batch boundary): its next start here continues its latest segment on disk from its
        checkpoint, as :meth:`resume` does after an earlier run, so nothing is lost or read twice."""
        self._earlier[job] = checkpoint.segments(self.run_dir / "jobs" / job)
        with self._lock:  # a segment this engine ran before is continued by a new query: its batches count anew
            self._seen = {key: n for key, n in self._seen.items() if key[0] != job}

    def _offered(self, job: str, template: str, now: float) -> int:
        """Rows the job's source offers by ``now`` as the source reports it (-1: a source that reports it only
        while its query runs: files, a user's query)."""
        spec = self.scenario.job[job]
        if spec.declared is not None:  # a user's query may read other jobs' output: no source operator of its own
            return -1
        source = next(op for op in spec.template(template).operators if op.source is not None)
        if source.source.path is not None:
            return -1
        return offered_rows(source.source, self.config.epoch, self.config.tick_s, now)

    def _listing(self, job: str, pipeline: Pipeline) -> float | None:
        """How often ``job``'s query lists its directories (``EngineConfig.directory_triggers``), if it reads
        directories (a file probe) and has an entry; None otherwise."""
        return self.config.directory_triggers.get(job) if pipeline.probe is not None else None

    def _start(self, job: str, template: str, start_row: int) -> Segment:
        spec = self.scenario.job[job]
        earlier = self._earlier.pop(job, [])
        index = len(self.segments_of(job)) + (earlier[-1].index + 1 if earlier else 0)
        if earlier and earlier[-1].template == template:  # resume the latest segment from its checkpoint
            last = earlier[-1]
            index, start_row = last.index, last.start_row
        elif earlier:  # another template: a new segment from where the latest one's query stopped
            last = earlier[-1]
            start_row = last.end_row if last.end_row is not None else last.start_row
        run_dir = self.run_dir / "jobs" / job / f"{index}-{template}"
        checkpoint.record(run_dir, self._fingerprint(job, template), start_row)
        t = next(i for i, tpl in enumerate(spec.templates) if tpl.name == template)
        here = ("jobs", self.scenario.jobs.index(spec), "templates", t)
        # a static read limit, as a careful Spark user sets it (None: Spark's default, or Strata's caps)
        pipeline = pipeline_for(
            self.spark,
            spec,
            spec.template(template),
            run_dir,
            self._options(job, start_row),
            here=here,
            files_per_trigger=self.config.read_limits.get(job),
        )
        switched = any(e.template != template for e in self.segments_of(job) + earlier[-1:])
        if switched and pipeline.continues_checkpoint and pipeline.stateful:
            raise ValueError(
                f"admitted: {job!r} would switch to the stateful template {template!r} on the checkpoint of "
                "another template; only stateless templates switch"
            )
        listing = self._listing(job, pipeline)
        if listing is not None:
            pipeline.options = replace(pipeline.options, trigger_s=listing)
        if pipeline.rate_cap is not None:
            pipeline.rate_cap.set(None)  # a cap an earlier run left in the control file is not this run's decision
            pipeline.rate_cap.split(None)  # nor a task size
        if self.gate is not None:
            pipeline.hooks.append(self.gate)
        else:
            pipeline.pool = self.config.pools.get(job)
        segment = Segment(job, template, index, start_row, run_dir, pipeline, self.clock())
        pipeline.start()
        with self._lock:
            self.segments.append(segment)
            self.running[job] = segment
        return segment

    def _stop(self, job: str) -> int:
        """Stop ``job`` at a batch boundary; the first record it did not read."""
        segment = self.running.pop(job)
        p = segment.pipeline
        if p.rate_cap is not None and p.query.isActive:
            p.rate_cap.set(0)  # no new batch is planned from here on
            deadline = self.clock() + self.config.pause_timeout_s
            while p.query.isActive and self.clock() < deadline:
                status = p.query.status
                if not status["isTriggerActive"] and not status["isDataAvailable"]:
                    break
                time.sleep(0.05)
        else:  # a source Strata cannot pause: stop between two batches
            p.stop_between_batches(self.config.pause_timeout_s)
        if p.query.isActive:
            p.query.stop()
        if self.gate is not None:
            self.gate.forget(job)
        segment.stopped_at = self.clock()
        segment.end_row = self.end_row(segment)
        return segment.end_row

    def end_row(self, segment: Segment) -> int:
        """The first record the segment's query had not committed (its last progress is its last commit)."""
        p = segment.pipeline.query.lastProgress if segment.pipeline.query is not None else None
        end = progress_row(json.loads(p.json)).get("end_row") if p is not None else None
        return segment.start_row if end is None else end

    def _rate_limit(self, decisions: Decisions, pe: str, rate: float | None) -> None:
        job, _, op = pe.partition(".")
        segment = self.running.get(job)
        if segment is None:
            return
        source = segment.pipeline.chain[0]
        if source.name != op:
            raise ValueError(f"rate_limits: {pe!r} is not the source of job {job!r} (its source is {source.name!r})")
        if segment.pipeline.read_limit is not None:
            if self.read_restarts is not None and self.read_restarts.enabled:
                self._limit_reads(decisions, segment, pe, rate, self.read_restarts)
            elif rate is not None and pe not in self.caps:  # said once
                self.caps[pe] = None
                detail = f"not enforced: {rate:.0f} rec/s would restart the query (cap_reads off)"
                self._log(decisions, "rate cap", job, detail)
            return
        cap = segment.pipeline.rate_cap
        if cap is None:
            if pe not in self.caps:  # said once
                self.caps[pe] = None
                self._log(decisions, "rate cap", job, f"not enforced: {pe} has no read limit Strata can set")
            return
        self.caps[pe] = rate
        if rate is None:
            if cap.get() is not None:
                cap.set(None)
                self._log(decisions, "rate cap", job, "lifted")
            return
        # rows per batch × batches per second = the rate: on a loaded machine batches come slower than the trigger
        interval = self._cap_interval(segment)
        rows = max(1, int(rate * interval))
        if cap.get() != rows:
            cap.set(rows)
            self._log(decisions, "rate cap", job, f"{rate:.0f} rec/s ({rows} rows/batch)")

    def _split_tasks(self, decisions: Decisions, pe: str, rows: int | None) -> None:
        """At most ``rows`` records in one task of the source's batches (None: its own split), through its control
        file, for a source that splits its batches as told (:attr:`Pipeline.splits_tasks`)."""
        job = pe.partition(".")[0]
        segment = self.running.get(job)
        if segment is None:
            return
        p = segment.pipeline
        if not p.splits_tasks or p.rate_cap is None:
            if rows is not None and pe not in self.task_rows:  # said once
                self.task_rows[pe] = None
                self._log(decisions, "task size", job, f"not enforced: {pe} splits its batches itself")
            return
        if p.rate_cap.task_rows() != rows:
            p.rate_cap.split(rows)
            self.task_rows[pe] = rows
            self._log(decisions, "task size", job, "the source's own split" if rows is None else f"≤ {rows} rows/task")

    def _limit_reads(
        self, decisions: Decisions, segment: Segment, pe: str, rate: float | None, policy: ReadLimitPolicy
    ) -> None:
        """A rate cap on a user query as its source's own read limit: ``maxFilesPerTrigger`` = the cap's records
        per batch over the records per file observed, or Kafka's ``maxOffsetsPerTrigger`` = the records per batch
        (an offset is a record). Spark reads the option at start, so a new limit restarts the query from its
        checkpoint at a batch boundary, when ``policy`` says the change is worth a restart."""
        p = segment.pipeline
        self.caps[pe] = rate
        limit = None
        if rate is not None:
            per_unit = p.probe.records_per_file() if p.read_limit == "files" else 1.0
            if per_unit is None:
                return  # nothing read yet: the cap cannot be turned into files
            limit = max(1, int(rate * self._cap_interval(segment) / per_unit))
        if not policy.worth_restart(p.limit, limit, self.clock() - p.restarted_at):
            return
        p.stop_between_batches(self.config.pause_timeout_s)
        if self.gate is not None:  # after the stop: a batch the old run had at the gate is gone with it
            self.gate.forget(segment.job)
        p.restart(limit)
        detail = "lifted" if limit is None else f"{rate:.0f} rec/s ({limit} {p.read_limit}/batch)"
        self._log(decisions, "rate cap", segment.job, f"{detail}: query restarted from its checkpoint")

    def _cap_interval(self, segment: Segment) -> float:
        """Seconds of input one batch should read under a cap: the query's trigger, or its measured batch interval
        when batches come slower (to the half second)."""
        return max(self.triggers.get(segment.job) or 0.0, round(2 * self._batch_interval(segment)) / 2)

    def _batch_interval(self, segment: Segment) -> float:
        """Mean seconds between the query's recent batch starts since the epoch (1 s before it has two such
        batches; ≥ 0.1 s). Batches before the epoch read nothing and run the query's start-up (a stateful
        query's first batch takes seconds): counting them would inflate the interval, and with it the rows
        per batch of the first capped batches, just when every query is still slow."""
        records = [r for r in segment.pipeline.batch_records() if r["started"] >= self.config.epoch][-10:]
        if len(records) < 2:
            return 1.0
        return max(0.1, (records[-1]["started"] - records[0]["started"]) / (len(records) - 1))

    def _move(self, decisions: Decisions) -> None:
        by_pe: dict[str, dict[int, int]] = {}
        for m in decisions.moves:
            by_pe.setdefault(m.pe, {})[m.key_group] = m.dst
        for pe, moves in by_pe.items():
            store = self._store(pe)
            table = list(store.routing)
            for group, dst in moves.items():
                if not 0 <= group < len(table):
                    raise ValueError(f"moves: {pe!r} has key groups 0..{len(table) - 1}; got {group}")
                table[group] = dst
            store.route(table)
            self._log(
                decisions, "moves", pe.partition(".")[0], ", ".join(f"kg{g}→p{d}" for g, d in sorted(moves.items()))
            )

    def _store(self, pe: str):
        job, _, op = pe.partition(".")
        segment = self.running.get(job)
        if segment is None or segment.pipeline.store is None:
            raise ValueError(f"moves: {pe!r} is not a running managed keyed operator")
        keyed = next(o for o in segment.pipeline.chain if segment.pipeline.options.is_managed(o))
        if keyed.name != op:
            raise ValueError(f"moves: the managed keyed operator of {job!r} is {keyed.name!r}, not {op!r}")
        return segment.pipeline.store

    # ------------------------------------------------------------------ observe

    def segments_of(self, job: str) -> list[Segment]:
        with self._lock:
            return [s for s in self.segments if s.job == job]

    def observe(self) -> Observation:
        """The window since the previous call: finished batches, loads, latency, rates, routing."""
        now = self.clock()
        start, self._window_start = self._window_start, now
        span = max(now - start, 1e-6)
        key_groups: list[KeyGroupLoad] = []
        instances: list[InstanceLoad] = []
        latency: dict[str, LatencyStats] = {}
        rates: dict[str, float] = {}
        ingest: dict[str, float] = {}
        routing: dict[str, tuple[int, ...]] = {}
        task_run: dict[str, TaskRun] = {}
        units, unit_rows = 0, 0
        with self._lock:
            running = dict(self.running)
        fresh_of: dict[str, list[dict]] = {}
        accounted: dict[tuple[str, int], BatchCost] = {}  # (job, batch) → Spark's task metrics
        for job, segment in running.items():
            records = list(segment.pipeline.batch_records())
            seen = self._seen.get((job, segment.index), 0)
            # A batch's record is written before its commit, and its progress event (its input rows) comes
            # after, asynchronously: a batch is observed once its rows are known, in the next window if need be;
            # so too once its jobs' task metrics are settled (the status store is fed on another listener queue).
            committed = self._committed_rows(segment.pipeline)
            settled = self._settled(job, segment)
            fresh = []
            for r in records[seen:]:
                b = r["batch_id"]
                if b not in committed or (b not in settled and committed[b] > 0 and now - r["finished"] < SETTLE_S):
                    break
                fresh.append(r)
                if b in settled:
                    accounted[(job, b)] = settled[b]
            fresh_of[job] = fresh
            self._seen[(job, segment.index)] = seen + len(fresh)
            for run in self._runs[(job, segment.index)]:
                self.accounting.forget(run, {r["batch_id"] for r in fresh})
        python = self._python_share(accounted)
        # Batches Spark gave no metrics for: overlapping batches share the cores, so their wall times are scaled
        # down to the capacity of the window (an approximation of core-seconds).
        walls = sum(r["finished"] - r["released"] for fresh in fresh_of.values() for r in fresh)
        share = min(1.0, self.scenario.cluster.total_cores * span / walls) if walls > 0 else 1.0
        for job, segment in running.items():
            p = segment.pipeline
            fresh = fresh_of[job]
            rows_in = self._rows_in(p, {r["batch_id"] for r in fresh})
            rows_out = sum(r["rows_out"] for r in fresh)
            busy = task_s = 0.0
            timed: set[int] = set()  # batches with Spark's task metrics: their tasks' wall time is known
            for r in fresh:
                cost = accounted.get((job, r["batch_id"]))
                if cost is None:
                    busy += share * (r["finished"] - r["released"])
                    continue
                py = python.get((job, r["batch_id"]), 0.0)
                busy += cost.cpu_s + py
                task_s += cost.run_s
                timed.add(r["batch_id"])
                self.costs[(job, segment.index, r["batch_id"])] = {
                    "cpu_s": cost.cpu_s,
                    "python_s": py,
                    "run_s": cost.run_s,
                    "tasks": cost.tasks,
                    "width": cost.width,
                }
            units += len(fresh)
            unit_rows += rows_in
            timed_rows = self._rows_in(p, timed)
            if timed_rows:
                task_run[job] = TaskRun(task_s, timed_rows)
            source = p.chain[0]
            src_pe = pe_id(job, source.name)
            # what the source offered and what waits in it, from the query's own progress (the source's latest
            # offset against the query's committed one): nothing here knows where the records come from
            if p.probe is not None:  # directories: listed against the checkpoint
                offered, waiting = p.probe.observe(now, self._committed_rows(p))
                backlog = waiting or 0
            else:
                offered, latest = self.progress.offered(p.query, now) if p.query is not None else (None, None)
                backlog = max(0, latest - self.end_row(segment)) if latest is not None else 0
            if offered is not None and source.kind is OperatorKind.SOURCE:  # a shared stream's reader has none
                ingest[src_pe] = offered
            parts = self.attribute(job, segment.pipeline.template, rows_in, rows_out, busy) if rows_in else []
            keyed = next((o for o in p.chain if p.options.is_managed(o)), None) if p.store is not None else None
            for pe, r_in, r_out, b in parts or [(src_pe, 0, 0, 0.0)]:
                rates[pe] = r_out / span
                if keyed is None or pe != pe_id(job, keyed.name):
                    # the source's queue is what it offered and the query has not read yet
                    instances.append(InstanceLoad(pe, 0, "local", round(r_in), b, backlog if pe == src_pe else 0, 0))
            stats = _latency(fresh, self.scenario.job[job].target_latency_s)
            if stats is not None:
                latency[job] = stats
            if keyed is not None:
                pe = pe_id(job, keyed.name)
                table = p.store.routing
                routing[pe] = table
                group_rows: dict[int, int] = {}
                part_rows = [0] * p.store.spec.partitions
                for r in fresh:
                    for g, n in (r.get("group_rows") or {}).items():
                        group_rows[g] = group_rows.get(g, 0) + n
                    for i, n in enumerate(r.get("partition_rows") or []):
                        part_rows[i] += n
                keyed_busy = next((b for q, _, _, b in parts if q == pe), 0.0)
                total = max(1, sum(group_rows.values()))
                key_groups += [
                    KeyGroupLoad(pe, g, table[g], n, keyed_busy * n / total, 0.0) for g, n in sorted(group_rows.items())
                ]
                instances += [
                    InstanceLoad(pe, i, "local", n, keyed_busy * n / total, 0, table.count(i))
                    for i, n in enumerate(part_rows)
                ]
        window = WindowStats(
            now=now,
            start=start,
            key_groups=tuple(key_groups),
            instances=tuple(instances),
            node_utilisation={},
            queue_lengths={},
            latency=latency,
            rates=rates,
            ingest=ingest,
            routing=routing,
            placement={},
            migrating=(),
            dropped={},
        )
        strategy = self.gate.strategy if self.gate is not None else None
        return Observation(
            window,
            templates={j: s.template for j, s in running.items()},
            dispatch=strategy,
            units=units,
            unit_records=unit_rows / units if units else 0.0,
            task_run=task_run,
        )

    def _settled(self, job: str, segment: Segment) -> dict[int, BatchCost]:
        """Batch id → task metrics of the segment's batches whose jobs have all ended, over every run its query
        has had (a read-limit restart gives the query a new run id)."""
        runs = self._runs.setdefault((job, segment.index), set())
        if segment.pipeline.query is not None:
            runs.add(str(segment.pipeline.query.runId))
        out: dict[int, BatchCost] = {}
        for run in runs:
            out.update(self.accounting.costs(run))
        return out

    def _python_share(self, accounted: dict[tuple[str, int], BatchCost]) -> dict[tuple[str, int], float]:
        """The Python workers' CPU since the last window, split over the window's accounted batches by their task
        time outside the JVM's CPU (a window with none carries it to the next)."""
        if self._jvm_pid is None:
            return {}
        total = python_cpu_seconds(self._jvm_pid, *self._daemon)
        self._python_unspent += max(0.0, total - self._python_s)
        self._python_s = total
        weights = {k: c.run_s - c.cpu_s for k, c in accounted.items() if c.run_s > c.cpu_s}
        if not weights:
            return {}
        out = spread(self._python_unspent, weights)
        self._python_unspent = 0.0
        return out

    def _committed_rows(self, pipeline: Pipeline) -> dict[int, int]:
        """Batch id → input rows of the query's committed batches (from its progress events)."""
        return self.progress.of(pipeline.query) if pipeline.query is not None else {}

    def _rows_in(self, pipeline: Pipeline, batch_ids: set[int]) -> int:
        """Input rows of the given batches, from the query's progress events."""
        if not batch_ids:
            return 0
        rows = self._committed_rows(pipeline)
        return sum(rows[b] for b in batch_ids if b in rows)

    def batch_observations(self) -> list[dict]:
        """Every finished batch of every segment with its input rows (for the learner and the report);
        ``rows_in`` is None for a batch that never committed (no progress event)."""
        out = []
        for s in list(self.segments):
            rows = self.progress.of(s.pipeline.query) if s.pipeline.query is not None else {}
            durations = self.progress.durations(s.pipeline.query) if s.pipeline.query is not None else {}
            for r in s.pipeline.batch_records():
                out.append(
                    {
                        **{k: v for k, v in r.items() if k not in ("group_rows",)},
                        "job": s.job,
                        "template": s.template,
                        "segment": s.index,
                        "rows_in": rows.get(r["batch_id"]),
                        "batch_ms": durations.get(r["batch_id"]),
                        **self.costs.get((s.job, s.index, r["batch_id"]), {}),
                    }
                )
        return out

    def close(self) -> None:
        """Stop listening to the session's progress events."""
        self.spark.streams.removeListener(self.progress)

    # ------------------------------------------------------------------ lifecycle

    def failures(self) -> dict[str, str]:
        """Job → cause, for queries that died."""
        out = {}
        for s in list(self.segments):
            q = s.pipeline.query
            if q is not None and not q.isActive and q.exception() is not None:
                out[s.job] = cause(q.exception())
        return out

    def stop_all(self, wait_s: float = STOP_WAIT_S) -> None:
        """Stop every query where it is (the runs are compared on what each committed), then wait up to ``wait_s``
        for the listener bus to deliver their terminations, so every committed batch's progress is in: a batch
        without it is neither measured nor learnt from."""
        stopped = []
        for job in list(self.running):
            segment = self.running.pop(job)
            if segment.pipeline.query.isActive:
                segment.pipeline.query.stop()
            stopped.append(str(segment.pipeline.query.runId))
            if self.gate is not None:
                self.gate.forget(job)
            segment.stopped_at = self.clock()
            segment.end_row = self.end_row(segment)
        deadline = time.monotonic() + wait_s
        for run_id in stopped:
            self.progress.wait_terminated(run_id, max(0.0, deadline - time.monotonic()))


def decision_row(t: float, decisions: Decisions, kind: str, job: str, detail: str) -> dict:
    """One enforced change, as the report's timeline (``decisions.csv``) shows it."""
    return {
        "t": t,
        "epoch": decisions.epoch,
        "kind": kind,
        "job": job,
        "detail": detail,
        "reasons": ", ".join(decisions.reasons),
    }


def cause(error) -> str:
    """The first informative line of a StreamingQueryException."""
    text = str(getattr(error, "desc", None) or error).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    python = [ln for ln in lines if "Error:" in ln or "Exception:" in ln]
    return (python[-1] if python else lines[0] if lines else "unknown error")[:300]


def _latency(records: list[dict], target: float) -> LatencyStats | None:
    """A window's latency from its batches' sink-side percentiles (rows-weighted; misses estimated by batch)."""
    rows = [r for r in records if r.get("latency_p50") is not None and r["rows_out"] > r["rows_untimed"]]
    if not rows:
        return None
    weights = np.array([r["rows_out"] - r["rows_untimed"] for r in rows], dtype=float)  # the rows timed

    def mean(key: str) -> float:
        return float(np.average([r[key] for r in rows], weights=weights))

    # a batch's records share its commit time, so "over target" is decided per batch from its percentiles
    over = sum(w * _share_over(r, target) for r, w in zip(rows, weights, strict=True))
    return LatencyStats(
        int(weights.sum()),
        mean("latency_p50"),
        mean("latency_p95"),
        mean("latency_p99"),
        max(r["latency_max"] for r in rows),
        float(over / weights.sum()),
    )


def _share_over(record: dict, target: float) -> float:
    """Share of a batch's records over ``target``, interpolated on its latency percentiles."""
    qs = [
        (0.5, record["latency_p50"]),
        (0.95, record["latency_p95"]),
        (0.99, record["latency_p99"]),
        (1.0, record["latency_max"]),
    ]
    if target >= record["latency_max"]:
        return 0.0
    below = 0.0
    for q, v in qs:
        if v <= target:
            below = q
    return 1.0 - below
