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
into a scenario for the next planning epoch. :func:`attribute` splits one
observation of a whole chain (a Spark micro-batch) across its PEs by their
prior costs; an engine that runs a chain as one unit is given it (a
:data:`strata.protocol.units.Attribution`) rather than splitting by a rule of
its own. Busy time is core-seconds from the engine's own accounting (on Spark,
the executor CPU time of a batch's tasks and its Python workers' CPU), never
wall time under contention (DESIGN.md rule 8), so a learned cost does not grow
with the load beside the job.

Priors only seed the estimator: :func:`offered_demand` is the cores a job's
template needs for what its sources offer, the least cpu share the Controller
gives a job it has not observed yet. :func:`batch_floor` is a latency-critical
job's floor, its batch time with the machine to itself, from the same
accounting. Pure: no clock, no engine.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from strata.dispatch import LinearCost
from strata.model import Job, OperatorKind, Scenario, Template, joined_graph, pe_id
from strata.model.graph import topological_order
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

    def __init__(self, decay: float = 0.9, min_samples: int = 3, ingest_weight: float = 0.5) -> None:
        if not 0.0 < decay <= 1.0:
            raise ValueError(f"decay must be in (0, 1]; got {decay}")
        if not 0.0 < ingest_weight <= 1.0:
            raise ValueError(f"ingest_weight must be in (0, 1]; got {ingest_weight}")
        self.decay = decay
        self.min_samples = min_samples
        self.ingest_weight = ingest_weight
        self._fits: dict[str, _Fit] = {}
        self._ingest: dict[str, float] = {}  # source PE → smoothed observed offer (records/s)

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
        records out from its output rate over the window; and each source's offered rate (its ingest,
        smoothed with weight ``ingest_weight`` on the newest window)."""
        span = max(window.now - window.start, 1e-9)
        records: dict[str, float] = {}
        busy: dict[str, float] = {}
        for inst in window.instances:
            records[inst.pe] = records.get(inst.pe, 0.0) + inst.records
            busy[inst.pe] = busy.get(inst.pe, 0.0) + inst.busy
        for pe, n in records.items():
            self.observe(pe, n, window.rates.get(pe, 0.0) * span, busy[pe])
        w = self.ingest_weight
        for pe, r in window.ingest.items():
            old = self._ingest.get(pe)
            self._ingest[pe] = r if old is None else w * r + (1.0 - w) * old

    @property
    def ingest(self) -> dict[str, float]:
        """Source PE → smoothed observed offer (records/s); absent until the source is observed."""
        return dict(self._ingest)

    def estimate(self, pe: str) -> Estimate | None:
        """The PE's estimate, or None before ``min_samples`` observations."""
        fit = self._fits.get(pe)
        if fit is None or fit.n < self.min_samples:
            return None
        fixed, marginal = fit.line.coefficients()
        return Estimate(pe, fit.busy / fit.records_in, fixed, marginal, fit.records_out / fit.records_in, fit.n)

    def estimates(self) -> dict[str, Estimate]:
        return {pe: e for pe in self._fits if (e := self.estimate(pe)) is not None}

    def refine(
        self,
        scenario: Scenario,
        prior: Mapping[str, float] | None = None,
        margin: Mapping[str, float] | None = None,
    ) -> Scenario:
        """``scenario`` as observed: fitted costs and selectivities, source rates from the observed offer.

        A source's rate is its smoothed observed ingest × its job's ``margin``
        (job → multiplier, default 1; a source observed silent is planned at a
        trickle, since SODA needs a positive primal rate); before any
        observation it is ``prior`` (source PE → records/s, e.g.
        :func:`mean_offered_rates`), else the spec's. Operators without an
        estimate keep their priors; an operator of the same name in several
        templates of a job shares one estimate.
        """
        est = self.estimates()
        rates = {pe: r for pe, r in (prior or {}).items() if r > 0}
        observed = {pe: max(r, 1e-3) for pe, r in self._ingest.items()}
        jobs = [_refine_job(job, est, {**rates, **observed}, (margin or {}).get(job.id, 1.0)) for job in scenario.jobs]
        # built anew, not model_copy'd: copies would keep the cached ``job`` / ``operator`` lookups
        return Scenario(name=scenario.name, description=scenario.description, cluster=scenario.cluster, jobs=jobs)


def _refine_job(job: Job, est: Mapping[str, Estimate], rates: Mapping[str, float], margin: float) -> Job:
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
            if op.kind is OperatorKind.SOURCE and pe in rates:
                update["source"] = op.source.model_copy(update={"rate": rates[pe] * margin, "rate_curve": None})
            ops.append(op.model_copy(update=update) if update else op)
        # Templates are built anew: a pydantic copy keeps the original's cached ``operator`` map.
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


def attribute(
    job: str,
    template: Template,
    records_in: float,
    records_out: float,
    busy_s: float,
) -> list[tuple[str, float, float, float]]:
    """Split one observation of a whole chain (a Spark micro-batch) into per-PE observations.

    An engine that runs a template as one unit (Spark runs the chain in one
    query) sees records in at the source, records out at the sink and the
    unit's busy time. Records flow through the chain with the priors'
    selectivities, except that the last operator before the sink is scaled so
    the chain's output matches ``records_out``; busy time is split in
    proportion to each PE's prior cost × records in. Returns (PE, in, out, busy).
    """
    order = _chain(template)
    flows: list[tuple[str, float, float]] = []
    rate = records_in
    for k, op in enumerate(order):
        out = rate if op.kind in (OperatorKind.SOURCE, OperatorKind.SINK) else rate * op.selectivity
        if k == len(order) - 2 and op.kind is not OperatorKind.SOURCE:
            out = records_out
        flows.append((op.name, rate, out))
        rate = out
    weights = [template.operator[name].cost_per_record * r_in for name, r_in, _ in flows]
    total = sum(weights) or 1.0
    return [
        (pe_id(job, name), r_in, r_out, busy_s * w / total)
        for (name, r_in, r_out), w in zip(flows, weights, strict=True)
    ]


def _chain(template: Template) -> list:
    """The template's operators in order: from its source, or from the one operator another job's stream feeds."""
    internal = [st for st in template.streams if not st.is_external]
    nxt = {st.src: st.dst for st in internal}
    fed = {st.dst for st in internal}
    heads = [op for op in template.operators if op.name not in fed]
    if len(heads) != 1 or len(nxt) != len(template.operators) - 1:
        raise ValueError(f"template {template.name!r} is not a chain source → … → sink")
    order = [heads[0]]
    while order[-1].name in nxt:
        order.append(template.operator[nxt[order[-1].name]])
    return order


def offered_demand(scenario: Scenario, templates: Mapping[str, str]) -> dict[str, float]:
    """Job → cores its template (``templates``: job → template) needs to process, at the scenario's costs, all
    its sources offer at the scenario's rates: Σ over its PEs but the sink of records in × cost per record,
    records flowing through each PE's selectivity (SODA's resource functions with cpu unbounded)."""
    graph = joined_graph(scenario, templates)
    rate: dict[str, float] = {}
    out = dict.fromkeys(templates, 0.0)
    for pe in topological_order(graph):
        op = graph.nodes[pe]["op"]
        inflow = op.source.rate if op.kind is OperatorKind.SOURCE else sum(rate[u] for u in graph.predecessors(pe))
        rate[pe] = inflow if op.kind in (OperatorKind.SOURCE, OperatorKind.SINK) else op.selectivity * inflow
        if op.kind is not OperatorKind.SINK:
            out[graph.nodes[pe]["job"]] += inflow * op.cost_per_record
    return out


@dataclass(frozen=True)
class BatchAccount:
    """One micro-batch as the engine accounted it: core-seconds of its tasks, the most tasks any of its stages
    ran (the cores it can use at once), its tasks' run time summed, and the engine's whole time for it."""

    core_s: float
    width: int
    run_s: float
    batch_s: float


def batch_floor(batches: Iterable[BatchAccount], cores: int, quantile: float = 0.1) -> float | None:
    """A latency-critical job's floor: its batch time with the machine to itself (issue 28 item 5).

    Each batch's work takes ``core_s / min(cores, width)`` seconds on idle cores (its tasks spread over the
    cores its widest stage can use); the driver's own part of a batch (planning, offsets, commit) is its whole
    time less its tasks' run time over that width — inflated by contention like every wall time, so the floor
    takes a low ``quantile`` of it over the batches (the least contended) and the median of the work. None
    without a batch that did work.
    """
    rows = [b for b in batches if b.core_s > 0 and b.width > 0]
    if not rows:
        return None
    work = statistics.median(b.core_s / min(cores, b.width) for b in rows)
    driver = sorted(max(0.0, b.batch_s - b.run_s / min(cores, b.width)) for b in rows)
    return work + driver[min(len(driver) - 1, int(quantile * len(driver)))]
