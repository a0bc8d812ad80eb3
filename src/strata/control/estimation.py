"""A resource-function learner: cost per record and selectivity per operator, fitted from observations.

SODA plans with each PE's resource function ``rate_out = selectivity ×
min(rate_in, cpu / cost_per_record)``. The spec gives priors; engines measure.
Every observation is one unit of work at one PE (a micro-batch on Spark, a
window's messages in the simulator): records in, records out, core-seconds.

Fits, per PE, with exponentially weighted sums (weight ``decay`` per older
observation, so drift is tracked):

- ``cost_per_record`` = Σ busy / Σ records in: the average cost, per-unit
  overhead included at the observed unit size — what capacity planning at the
  current rate needs (``fixed_s`` and ``marginal_s`` of the least-squares line
  busy = fixed + marginal × records are reported too);
- ``selectivity`` = Σ out / Σ in (the ratio estimator: exact when out = s × in).

:meth:`ResourceLearner.refine` writes the estimates (and observed source rates)
into a scenario for the next planning epoch. Pure: no clock, no engine.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from strata.dispatch import LinearCost
from strata.model import Job, OperatorKind, Scenario, Template, pe_id
from strata.protocol.window import WindowStats


@dataclass(frozen=True)
class Estimate:
    """What the learner believes about one PE."""

    pe: str
    cost_per_record: float  # core-seconds per input record, per-unit overhead included
    fixed_s: float  # per-unit overhead of the least-squares line
    marginal_s: float  # per-record slope of the least-squares line
    selectivity: float
    samples: int


class _Fit:
    __slots__ = ("busy", "line", "n", "records_in", "records_out")

    def __init__(self, decay: float) -> None:
        self.line = LinearCost(decay)
        self.busy = self.records_in = self.records_out = 0.0
        self.n = 0


class ResourceLearner:
    """Per-PE estimates from (records in, records out, busy core-seconds) observations."""

    def __init__(self, decay: float = 0.9, min_samples: int = 3) -> None:
        if not 0.0 < decay <= 1.0:
            raise ValueError(f"decay must be in (0, 1]; got {decay}")
        self.decay = decay
        self.min_samples = min_samples
        self._fits: dict[str, _Fit] = {}

    def observe(self, pe: str, records_in: float, records_out: float, busy_s: float) -> None:
        """One unit of work at ``pe``; units with no input carry no information and are skipped."""
        if records_in < 0 or records_out < 0 or busy_s < 0:
            raise ValueError(f"{pe}: negative observation (in {records_in}, out {records_out}, busy {busy_s})")
        if records_in == 0:
            return
        fit = self._fits.setdefault(pe, _Fit(self.decay))
        d = self.decay
        fit.busy = d * fit.busy + busy_s
        fit.records_in = d * fit.records_in + records_in
        fit.records_out = d * fit.records_out + records_out
        fit.line.observe(records_in, busy_s)
        fit.n += 1

    def observe_window(self, window: WindowStats) -> None:
        """Every PE's work in one observed window: records in and busy time summed over its instances,
        records out from its output rate over the window."""
        span = max(window.now - window.start, 1e-9)
        records: dict[str, float] = {}
        busy: dict[str, float] = {}
        for inst in window.instances:
            records[inst.pe] = records.get(inst.pe, 0.0) + inst.records
            busy[inst.pe] = busy.get(inst.pe, 0.0) + inst.busy
        for pe, n in records.items():
            self.observe(pe, n, window.rates.get(pe, 0.0) * span, busy[pe])

    def estimate(self, pe: str) -> Estimate | None:
        """The PE's estimate, or None before ``min_samples`` observations."""
        fit = self._fits.get(pe)
        if fit is None or fit.n < self.min_samples:
            return None
        fixed, marginal = fit.line.coefficients()
        return Estimate(pe, fit.busy / fit.records_in, fixed, marginal, fit.records_out / fit.records_in, fit.n)

    def estimates(self) -> dict[str, Estimate]:
        return {pe: e for pe in self._fits if (e := self.estimate(pe)) is not None}

    def refine(self, scenario: Scenario, ingest: Mapping[str, float] | None = None) -> Scenario:
        """``scenario`` with fitted costs and selectivities, and source rates set to observed ingest.

        ``ingest``: source PE → offered records/s (what arrived, not what was
        admitted). Operators without an estimate keep their priors; an operator
        of the same name in several templates of a job shares one estimate.
        """
        est = self.estimates()
        offered = ingest or {}
        jobs = [_refine_job(job, est, offered) for job in scenario.jobs]
        # built anew, not model_copy'd: copies would keep the cached ``job`` / ``operator`` lookups
        return Scenario(name=scenario.name, description=scenario.description, cluster=scenario.cluster, jobs=jobs)


def _refine_job(job: Job, est: Mapping[str, Estimate], offered: Mapping[str, float]) -> Job:
    templates = []
    for tpl in job.templates:
        ops = []
        for op in tpl.operators:
            pe = pe_id(job.id, op.name)
            update: dict = {}
            e = est.get(pe)
            if e is not None:
                update["cost_per_record"] = e.cost_per_record
                if op.kind not in (OperatorKind.SOURCE, OperatorKind.SINK):
                    update["selectivity"] = e.selectivity
            if op.kind is OperatorKind.SOURCE and offered.get(pe, 0) > 0:
                update["source"] = op.source.model_copy(update={"rate": offered[pe]})
            ops.append(op.model_copy(update=update) if update else op)
        templates.append(Template(name=tpl.name, operators=ops, streams=tpl.streams))
    return job.model_copy(update={"templates": templates})


def mean_offered_rates(scenario: Scenario) -> dict[str, float]:
    """Source PE → its arrival process's long-run mean rate (records/s): the prior before any observation.

    On/off bursts raise the mean above the nominal rate: rate × (1 + (burst − 1) × on / period).
    """
    out = {}
    for job in scenario.jobs:
        for tpl in job.templates:
            for op in tpl.operators:
                if op.kind is OperatorKind.SOURCE:
                    a = op.source.arrivals
                    factor = 1.0
                    if a.process == "onoff":
                        factor += (a.burst_factor - 1.0) * min(a.on_s, a.period_s) / a.period_s
                    out[pe_id(job.id, op.name)] = op.source.rate * factor
    return out


def observed_jobs(
    scenario: Scenario,
    rates: Mapping[str, float],
    costs: Mapping[str, float],
    margin: Mapping[str, float],
) -> list[Job]:
    """The jobs as observed: source rates = observed ingest × the job's margin, costs = measured per-record costs.

    Templates are built anew rather than copied: a pydantic copy keeps the
    original's cached ``operator`` map, which would still answer with the
    spec's operators.
    """
    out = []
    for job in scenario.jobs:
        jid = job.id
        tpls = []
        for t in job.templates:
            ops = []
            for op in t.operators:
                pe = pe_id(jid, op.name)
                upd = {}
                if pe in costs:
                    upd["cost_per_record"] = costs[pe]
                if op.source is not None and pe in rates:
                    # A source observed silent is planned at a trickle (SODA needs a positive primal rate).
                    rate = max(rates[pe] * margin.get(jid, 1.0), 1e-3)
                    upd["source"] = op.source.model_copy(update={"rate": rate, "rate_curve": None})
                ops.append(op.model_copy(update=upd) if upd else op)
            tpls.append(Template(name=t.name, operators=ops, streams=t.streams))
        out.append(job.model_copy(update={"templates": tpls}))
    return out
