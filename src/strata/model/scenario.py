"""A scenario: one cluster and the jobs offered to it, with whole-scenario checks.

Field-level checks live on the models; the checks here need the whole scenario
(stream ends, cycles across jobs, constraints against the cluster, whether a
required job can fit at all). They return located problems instead of raising
so that a spec with several mistakes reports all of them at once.

Every number must be finite and at most :data:`ABSURD` in magnitude; the sizes
the engines allocate arrays for (key counts, key groups, instances, node counts,
static rows) and source rates have tighter bounds (:data:`CAPS`), so a typo
such as ``rate: 1e308`` is a located error instead of a hung simulation.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property

import networkx as nx
from pydantic import BaseModel, ConfigDict, Field

from strata.model.cluster import Cluster
from strata.model.job import Job, OperatorKind, Template

Path = tuple[str | int, ...]

ABSURD = 1e15  # no field means anything beyond (1 PB, 30 million years, 10^15 records/s)
CAPS: dict[tuple[str | None, str], tuple[float, str]] = {  # (parent field or None for any, field) → most, unit
    (None, "rate"): (1e9, "records/s"),
    ("keys", "count"): (1e7, "keys"),
    ("source", "rate_curve"): (1e9, ""),
    (None, "key_groups"): (1e5, "key groups"),
    (None, "instances"): (1e4, "instances"),
    (None, "max_instances"): (1e4, "nodes"),
    (None, "rows"): (1e7, "rows"),
    ("nodes", "count"): (1e5, "nodes"),
}


@dataclass(frozen=True)
class Problem:
    """One located problem: where (path inside the document), expected, found."""

    path: Path
    expected: str
    found: str


class Scenario(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = "scenario"
    description: str = ""
    cluster: Cluster
    jobs: list[Job] = Field(default_factory=list)

    @cached_property
    def job(self) -> dict[str, Job]:
        return {j.id: j for j in self.jobs}

    def problems(self) -> list[Problem]:
        """Every whole-scenario problem, in document order."""
        return list(_problems(self))


def pe_id(job: str, op: str) -> str:
    """The global name of a PE: ``"job.operator"``."""
    return f"{job}.{op}"


def critical_jobs(scenario: Scenario, critical_s: float) -> list[str]:
    """The latency-critical jobs of ``scenario`` (target ≤ ``critical_s``), in its order: the latency class every
    level reads (the Controller's pools, L0's cells, the gate) and FAIR by hand puts in its weight-32 pool."""
    return [j.id for j in scenario.jobs if j.target_latency_s <= critical_s]


def resolve(job: str, ref: str) -> str:
    """A stream end or constraint as written in ``job`` → its global PE name."""
    return ref if "." in ref else pe_id(job, ref)


def _names(xs: Iterator[str] | list[str], limit: int = 8) -> str:
    xs = list(xs)
    more = f", … ({len(xs)} in all)" if len(xs) > limit else ""
    return ", ".join(xs[:limit]) + more


def _bounds(value: object, path: Path) -> Iterator[Problem]:
    """Non-finite and absurd numbers anywhere in the (dumped, as written) scenario."""
    stack: list[tuple[object, Path]] = [(value, path)]
    while stack:
        x, at = stack.pop()
        if isinstance(x, dict):
            stack.extend((v, (*at, k)) for k, v in reversed(x.items()))
        elif isinstance(x, list | tuple):
            stack.extend((v, (*at, i)) for i, v in reversed(list(enumerate(x))))
        elif isinstance(x, int | float) and not isinstance(x, bool):
            names = [p for p in at if isinstance(p, str)]
            field, parent = (names[-1] if names else ""), (names[-2] if len(names) > 1 else None)
            cap = CAPS.get((parent, field)) or CAPS.get((None, field))
            if not math.isfinite(x):
                yield Problem(at, "a finite number", repr(x))
            elif cap is not None and abs(x) > cap[0]:
                yield Problem(at, f"at most {cap[0]:,.0f} {cap[1]}".rstrip(), f"{x:g}")
            elif abs(x) > ABSURD:
                yield Problem(at, f"a number of magnitude at most {ABSURD:g}", f"{x:g}")


def _problems(s: Scenario) -> Iterator[Problem]:
    yield from _bounds(s.model_dump(by_alias=True, exclude_unset=True, mode="python"), ())
    cluster = s.cluster
    ids: dict[str, int] = {}
    for j, job in enumerate(s.jobs):
        if job.id in ids:
            yield Problem(("jobs", j, "id"), "a job id not used before", f"{job.id!r} (also jobs[{ids[job.id]}])")
        ids.setdefault(job.id, j)
    qualified = {pe_id(job.id, op.name) for job in s.jobs for t in job.templates for op in t.operators}
    for j, job in enumerate(s.jobs):
        seen_t: set[str] = set()
        for t, tpl in enumerate(job.templates):
            here: Path = ("jobs", j, "templates", t)
            if tpl.name in seen_t:
                yield Problem((*here, "name"), "a template name not used before in this job", repr(tpl.name))
            seen_t.add(tpl.name)
            yield from _template_problems(s, job, tpl, here, qualified)
        if job.required:
            yield from _fit_alone(job, cluster, ("jobs", j))
    yield from _joined_cycles(s)


def _template_problems(s: Scenario, job: Job, tpl: Template, here: Path, qualified: set[str]) -> Iterator[Problem]:
    cluster = s.cluster
    local = tpl.operator
    if len(local) != len(tpl.operators):
        dup = sorted({o.name for o in tpl.operators if sum(p.name == o.name for p in tpl.operators) > 1})
        yield Problem((*here, "operators"), "operator names unique within a template", f"repeated: {_names(dup)}")
    for k, st in enumerate(tpl.streams):
        at = (*here, "streams", k)
        if st.is_external:
            other, _, op = st.src.partition(".")
            if other not in s.job:
                yield Problem((*at, "from"), f"'job.operator' with a job among ({_names(s.job)})", repr(st.src))
            elif st.src not in qualified:
                yield Problem((*at, "from"), f"an operator of job {other!r}", repr(st.src))
        elif st.src not in local:
            yield Problem((*at, "from"), f"an operator of template {tpl.name!r} ({_names(local)})", repr(st.src))
        elif local[st.src].kind is OperatorKind.SINK:
            yield Problem((*at, "from"), "an operator that produces a stream (not a sink)", f"sink {st.src!r}")
        if st.dst not in local:
            yield Problem((*at, "to"), f"an operator of template {tpl.name!r} ({_names(local)})", repr(st.dst))
        elif local[st.dst].kind is OperatorKind.SOURCE:
            yield Problem((*at, "to"), "an operator that consumes a stream (not a source)", f"source {st.dst!r}")
    graph = nx.DiGraph()
    graph.add_nodes_from(local)
    graph.add_edges_from((st.src, st.dst) for st in tpl.streams if not st.is_external)
    try:
        cycle = nx.find_cycle(graph)
        names = [a for a, _ in cycle] + [cycle[0][0]]
        yield Problem((*here, "streams"), "an acyclic data-flow graph", "cycle " + " → ".join(names))
    except nx.NetworkXNoCycle:
        pass
    nodes = {n.name for n in cluster.all_nodes}
    for i, op in enumerate(tpl.operators):
        at = (*here, "operators", i, "constraints")
        c = op.constraints
        for field, refs in (("colocate_with", c.colocate_with), ("exlocate_from", c.exlocate_from)):
            for ref in sorted(refs):
                if (ref not in qualified) if "." in ref else (ref not in local):
                    yield Problem((*at, field), f"an operator of template {tpl.name!r} or 'job.operator'", repr(ref))
        both = c.colocate_with & c.exlocate_from
        for ref in sorted(both):
            yield Problem((*at, "exlocate_from"), "not also in colocate_with", f"{ref!r} in both")
        for ref in sorted(c.colocate_with):
            other = local.get(ref)
            if other is not None and op.name in other.constraints.exlocate_from:
                yield Problem(
                    (*at, "colocate_with"), f"no exlocation of {op.name!r} by {ref!r}", f"{ref!r} exlocates {op.name!r}"
                )
        missing = c.required_labels - cluster.labels
        if missing:
            yield Problem(
                (*at, "required_labels"),
                f"labels some node has ({_names(sorted(cluster.labels))})",
                _names(sorted(missing)),
            )
        elif c.required_labels and not cluster.nodes_with(c.required_labels):
            yield Problem(
                (*at, "required_labels"), "a set of labels one node has together", _names(sorted(c.required_labels))
            )
        if c.fixed_node is not None and c.fixed_node not in nodes:
            yield Problem((*at, "fixed_node"), "a node of the cluster", repr(c.fixed_node))


def _fit_alone(job: Job, cluster: Cluster, here: Path) -> Iterator[Problem]:
    """A required job must fit on the empty cluster in at least one template."""
    best_cpu = min(t.cpu_min for t in job.templates)
    best_mem = min(t.memory for t in job.templates)
    largest = max(n.cores for n in cluster.all_nodes)
    if best_cpu > cluster.total_cores + 1e-9:
        yield Problem(
            (*here, "required"),
            f"a required job whose cpu_min fits the cluster's {cluster.total_cores:g} cores",
            f"cpu_min {best_cpu:g} cores in its smallest template",
        )
    elif best_mem > cluster.total_memory:
        yield Problem(
            (*here, "required"),
            f"a required job whose memory fits the cluster's {cluster.total_memory:.3g} bytes",
            f"{best_mem:.3g} bytes in its smallest template",
        )
    else:
        for t, tpl in enumerate(job.templates):
            for i, op in enumerate(tpl.operators):
                span = op.constraints.max_instances or len(cluster.all_nodes)
                if op.cpu_min > largest * span + 1e-9 and len(job.templates) == 1:
                    yield Problem(
                        (*here, "templates", t, "operators", i, "cpu_min"),
                        f"at most {largest:g} cores × {span} nodes",
                        f"{op.cpu_min:g}",
                    )


def _joined_cycles(s: Scenario) -> Iterator[Problem]:
    """Cycles through shared streams: only visible in the joined job graph."""
    graph = nx.DiGraph()
    for job in s.jobs:
        for tpl in job.templates:
            for st in tpl.streams:
                graph.add_edge(resolve(job.id, st.src), resolve(job.id, st.dst))
    try:
        cycle = nx.find_cycle(graph)
    except nx.NetworkXNoCycle:
        return
    names = [a for a, _ in cycle] + [cycle[0][0]]
    if len({n.split(".")[0] for n in names}) > 1:
        yield Problem(("jobs",), "an acyclic joined job graph", "cycle " + " → ".join(names))
