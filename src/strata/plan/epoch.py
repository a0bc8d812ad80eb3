"""The epoch driver: SODA's four phases under one time budget (SODA §1.2, §4).

``plan(scenario, previous, budget)`` splits the budget into phase deadlines
(unused time rolls over to the next phase), runs macroQ → macroW → microQ →
microW and returns a :class:`~strata.plan.plan.Plan`. It is a pure function of
its arguments: the clock is read only to honour the deadlines, and with a
budget that does not bind the result depends on nothing else (seeded search).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import networkx as nx

from strata.model import Cluster, Operator, PiecewiseLinearCapacity, Scenario, importance, joined_graph, propagate
from strata.model.job import OperatorKind, Template
from strata.model.traffic import as_emitted
from strata.plan.macro_q import macro_q
from strata.plan.macro_w import macro_w
from strata.plan.micro_q import MicroQ, micro_q
from strata.plan.micro_w import Limits, micro_w
from strata.plan.plan import Phase, Plan
from strata.plan.quality import Weights, evaluate, flows, keyed_groups, stream_affinity

# Each phase aims to finish by this share of its deadline: the rest absorbs the steps no phase
# can interrupt (a last solve, the final scoring) when the machine is busy. Unused time rolls over.
AIM = 0.9


@dataclass(frozen=True)
class Options:
    """Knobs of one epoch; every default is documented in docs/plan.md."""

    budget_s: float = 30.0
    shares: tuple[float, float, float, float] = (0.3, 0.4, 0.15, 0.15)  # macroQ, macroW, microQ, microW
    weights: Weights = field(default_factory=Weights)
    max_candidates: int = 4
    max_pes_per_node: int | None = None
    move_fraction: float = 0.1  # with a previous plan: share of PEs whose candidate nodes may change
    limits: Limits = field(default_factory=Limits)
    milp_share: float = 0.4  # of macroW's deadline
    rounds: int = 30  # miniW perturbation rounds before it stops on its own
    seed: int = 0
    utilisation: float = 1.0  # share of each node's cores the plan may fill (headroom = 1 − this)
    # cpu a PE holds above what its planned rate needs, as a share of that need (with_headroom); 0: SODA's
    # fluid plan, every PE at utilisation 1 (docs/plan.md, "Headroom").
    headroom: float = 0.0
    # Records per source message of the engine that runs the plan (the simulator's ``batch``; 1 for Spark):
    # a message carries one key, so it sets how many distinct keys a window sees (strata.model.traffic).
    batch: int = 1


def with_headroom(scenario: Scenario, headroom: float) -> Scenario:
    """``scenario`` with every operator's cost per record × (1 + ``headroom``): the model of a plan that holds,
    for each PE, (1 + headroom) × the cpu its planned rate needs.

    SODA's rate model is fluid (§3): a PE given exactly the cpu its rate needs is at utilisation ρ = 1, which a
    queue with random arrivals only reaches with unbounded waiting (Pollaczek–Khinchine: the mean wait of an
    M/G/1 queue is ρ·E[S]·(1 + C_S²) / (2(1 − ρ))), so an engine that holds each instance to its planned share
    realises less than the plan. Planning every PE on this model gives it ρ = 1/(1 + headroom) at its planned
    rate, a mean wait of E[S]·(1 + C_S²) / (2·headroom) per PE; the projection and the pacing use the same model
    (:func:`strata.plan.pacing.pace`), so the planned rates and caps are unchanged in meaning.
    """
    if not 0 <= headroom < math.inf:
        raise ValueError(f"headroom: expected a finite share ≥ 0; found {headroom}")
    if headroom == 0:
        return scenario
    factor = 1.0 + headroom

    def slower(op: Operator) -> Operator:
        update: dict = {"cost_per_record": op.cost_per_record * factor}
        if isinstance(op.resource, PiecewiseLinearCapacity):  # the table is the cost model: capacity / factor
            points = [(c, r / factor) for c, r in op.resource.points]
            update["resource"] = op.resource.model_copy(update={"points": points})
        return op.model_copy(update=update)

    jobs = []
    for job in scenario.jobs:
        templates = [
            Template(name=tpl.name, operators=[slower(op) for op in tpl.operators], streams=tpl.streams)
            for tpl in job.templates
        ]
        jobs.append(job.model_copy(update={"templates": templates}))
    return Scenario(name=scenario.name, description=scenario.description, cluster=scenario.cluster, jobs=jobs)


def usable(cluster: Cluster, share: float) -> Cluster:
    """The cluster as the phases see it: every node's cores × ``share``."""
    if share == 1.0:
        return cluster
    nodes = [n.model_copy(update={"cores": n.cores * share}) for n in cluster.all_nodes]
    return Cluster(nodes=nodes, racks=list(cluster.racks))


def plan(
    scenario: Scenario,
    previous: Plan | None = None,
    options: Options | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> Plan:
    """One SODA epoch; raises PlanError when required jobs or a PE cannot be placed at all."""
    opt = options or Options()
    start = clock()
    # Window aggregates at the selectivity the engines realise (one result per key per window), so that every
    # phase and the projection follow the traffic model the engine runs.
    scenario = with_headroom(as_emitted(scenario, opt.batch), opt.headroom)
    cluster = usable(scenario.cluster, opt.utilisation)
    phases: list[Phase] = []
    budget = opt.budget_s

    def deadline(i: int) -> float:
        spent = clock() - start
        later = sum(opt.shares[i + 1 :])
        return max(1e-3, (budget - spent) * opt.shares[i] / (opt.shares[i] + later))

    t0, d = clock(), deadline(0)
    q = macro_q(scenario, AIM * d, previous.templates if previous else None, capacity=cluster.total_cores, clock=clock)
    phases.append(Phase("macroQ", clock() - t0, d, q.status, q.detail))

    graph = joined_graph(scenario, q.templates)
    prev_cand = previous.candidates if previous else None
    move_limit = max(1, int(opt.move_fraction * graph.number_of_nodes())) if previous else None
    t0, d = clock(), deadline(1)
    w = macro_w(
        cluster,
        graph,
        q.goals,
        q.rates,
        AIM * d,
        opt.weights,
        prev_cand,
        opt.max_candidates,
        opt.max_pes_per_node,
        move_limit,
        opt.milp_share,
        opt.seed,
        opt.rounds,
        clock,
    )
    phases.append(Phase("macroW", clock() - t0, d, w.status, w.detail))

    t0, d = clock(), deadline(2)
    try:
        mq = micro_q(cluster, q.curves, q.budgets, w.candidates, AIM * d, clock)
    except RuntimeError as e:  # the LP failed: keep macroW's split, scaled into each node's cores
        mq = scaled_into_cores(cluster, w.assignment, f"{e}; macroW's split scaled into node cores")
    phases.append(Phase("microQ", clock() - t0, d, mq.status, mq.detail))

    t0, d = clock(), deadline(3)
    prev_assign = {pe: parts for pe, parts in previous.assignment.items()} if previous else None
    # Without a previous epoch, stay as close as the goals allow to macroW's placement (its shares of
    # each PE over its candidates), which is where the traffic was optimised.
    shares = {
        pe: {n: c / sum(parts.values()) for n, c in parts.items()}
        if sum(parts.values()) > 0
        else {n: 1.0 / len(parts) for n in parts}
        for pe, parts in w.assignment.items()
    }
    nominal = {pe: {n: mq.goals.get(pe, 0.0) * f for n, f in shares[pe].items()} for pe in shares}
    mw = micro_w(cluster, mq.goals, w.candidates, nominal, prev_assign, opt.limits, AIM * d)
    against = "the previous epoch" if previous else "macroW's nominal split"
    phases.append(
        Phase(
            "microW",
            clock() - t0,
            d,
            mw.status,
            mw.detail + f"; {mw.change:.3g} cores changed on {mw.nodes_touched} nodes vs {against}",
        )
    )

    assignment = {pe: (parts or dict.fromkeys(w.candidates[pe], 0.0)) for pe, parts in mw.assignment.items()}
    return finish(
        scenario,
        "soda",
        q.admitted,
        q.rejected,
        q.templates,
        mq.goals,
        w.candidates,
        assignment,
        phases,
        opt.weights,
        list(q.notes),
        opt.batch,
    )


def scaled_into_cores(cluster: Cluster, split: dict[str, dict[str, float]], why: str) -> MicroQ:
    """microQ's fallback: every overloaded node's PEs shrink in proportion until the node fits."""
    load: dict[str, float] = {}
    for parts in split.values():
        for n, c in parts.items():
            load[n] = load.get(n, 0.0) + c
    cores = {n.name: n.cores for n in cluster.all_nodes}
    factor = {n: min(1.0, cores[n] / used) if used > 0 else 1.0 for n, used in load.items()}
    out = {pe: {n: c * factor[n] for n, c in parts.items()} for pe, parts in split.items()}
    goals = {pe: sum(parts.values()) for pe, parts in out.items()}
    return MicroQ(goals, out, [], 0.0, 0, "feasible", why)


def finish(
    scenario: Scenario,
    planner: str,
    admitted: list[str],
    rejected: dict[str, str],
    templates: dict[str, str],
    goals: dict[str, float],
    candidates: dict[str, list[str]],
    assignment: dict[str, dict[str, float]],
    phases: list[Phase],
    weights: Weights,
    notes: list[str] | None = None,
    batch: int = 1,
) -> Plan:
    """Evaluate an assignment into a Plan (baselines use it too).

    Importance and ingest come from :func:`strata.model.propagate` with each PE's
    assigned cpu, window aggregates emitting what the engine does at ``batch``
    records per source message (:func:`strata.model.traffic.as_emitted`). The
    metrics count the cpu a PE *uses* — what its processed rate needs, at least
    cpu_min — so a planner that hands out idle cores (the baselines' equal
    split) is not charged for load it does not cause.
    """
    graph = joined_graph(as_emitted(scenario, batch), templates)
    cpu = {pe: sum(parts.values()) for pe, parts in assignment.items()}
    rates = propagate(graph, cpu)
    value = importance(graph, rates)
    ingest = 0.0
    source_rates = {}
    used = {}
    for pe in graph:
        op = graph.nodes[pe]["op"]
        if op.kind is OperatorKind.SOURCE:
            processed = source_rates[pe] = rates[pe]
            ingest += processed
        else:
            offered = sum(rates[u] for u in graph.predecessors(pe))
            processed = min(offered, op.resource.capacity(cpu.get(pe, 0.0), op.cost_per_record))
        need = max(op.cpu_min, op.resource.cpu_for(processed, op.cost_per_record))
        total = cpu.get(pe, 0.0)
        scale = min(1.0, need / total) if total > 0 else 0.0
        used[pe] = {n: c * scale for n, c in assignment.get(pe, {}).items()} if total > 0 else dict(assignment[pe])
    traffic = flows(graph, rates, cpu)
    keyed = keyed_groups(graph)
    metrics = evaluate(scenario.cluster, used, traffic, weights, keyed)
    # Affinity of the placement the engines run (every PE's planned split, even where it needs less cpu),
    # keyed streams counted as routed by key group: what `strata simulate --plan` realises.
    metrics["affinity"] = stream_affinity(assignment, traffic, keyed)
    return Plan(
        scenario=scenario.name,
        admitted=admitted,
        rejected=rejected,
        templates=templates,
        cpu_goal=goals,
        candidates=candidates,
        assignment=assignment,
        importance=value,
        ingest=ingest,
        metrics=metrics,
        affinity=metrics["affinity"],
        phases=phases,
        planner=planner,
        notes=notes or [],
        source_rates=source_rates,
    )


def replan(
    scenario: Scenario,
    previous: Plan,
    jobs: set[str],
    options: Options | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> Plan:
    """Re-plan only the weak components that hold ``jobs``; everything else keeps its previous plan.

    For the hierarchy's "signals up": a component that reports a hotspot or a
    shortfall is re-planned inside the cpu and memory the rest of the fleet
    leaves free, without moving anyone else. The affected components are taken
    whole (from the previous plan's joined graph, plus ``jobs`` themselves), so
    no stream crosses between the re-planned and the kept part. Admission is
    re-decided among the affected jobs only.
    """
    opt = options or Options()
    offered = {
        j: t
        for j, t in previous.templates.items()
        if j in scenario.job and any(tpl.name == t for tpl in scenario.job[j].templates)
    }
    old = joined_graph(scenario, offered)
    # a job whose template in force is no longer offered (the do-no-harm guard holds it to its first) is re-planned
    # as a new one: its old PEs are not in the scenario's graph
    withdrawn = {j for j in previous.templates if j in scenario.job and j not in offered}
    affected = (set(jobs) | withdrawn) & set(scenario.job)
    for comp in nx.weakly_connected_components(old):
        comp_jobs = {old.nodes[p]["job"] for p in comp}
        if comp_jobs & affected:
            affected |= comp_jobs
    kept = [j for j in previous.admitted if j not in affected and j in scenario.job]
    kept_pes = {pe for pe in previous.assignment if pe.split(".", 1)[0] in kept}
    used: dict[str, float] = {}
    mem: dict[str, float] = {}
    for pe in kept_pes:
        op = old.nodes[pe]["op"]
        for node, c in previous.assignment[pe].items():
            used[node] = used.get(node, 0.0) + c
            mem[node] = mem.get(node, 0.0) + op.memory + op.state_bytes / max(1, len(previous.assignment[pe]))
    residual = Cluster(
        nodes=[
            n.model_copy(
                update={
                    "cores": max(1e-9, n.cores - used.get(n.name, 0.0)),
                    "memory": max(1.0, n.memory - mem.get(n.name, 0.0)),
                }
            )
            for n in scenario.cluster.all_nodes
        ],
        racks=list(scenario.cluster.racks),
    )
    sub = Scenario(name=scenario.name, cluster=residual, jobs=[scenario.job[j] for j in sorted(affected)])
    part = plan(sub, _restrict(previous, affected - withdrawn), opt, clock)
    templates = {**{j: previous.templates[j] for j in kept}, **part.templates}
    admitted = sorted(templates, key=lambda j: (scenario.job[j].rank, j))
    rejected = {j: why for j, why in previous.rejected.items() if j not in affected and j in scenario.job}
    rejected.update(part.rejected)

    def pick(d: dict, new: dict) -> dict:
        return {**{pe: d[pe] for pe in kept_pes if pe in d}, **new}

    notes = [f"re-planned components of {', '.join(sorted(affected))}; {len(kept)} jobs kept as planned", *part.notes]
    return finish(
        scenario,
        "soda",
        admitted,
        rejected,
        templates,
        pick(previous.cpu_goal, part.cpu_goal),
        pick(previous.candidates, part.candidates),
        pick(previous.assignment, part.assignment),
        part.phases,
        opt.weights,
        notes,
        opt.batch,
    )


def _restrict(previous: Plan, jobs: set[str]) -> Plan:
    """The previous plan's entries for ``jobs`` only (the re-planned part's incremental baseline)."""
    mine = {pe for pe in previous.assignment if pe.split(".", 1)[0] in jobs}
    return Plan(
        scenario=previous.scenario,
        admitted=[j for j in previous.admitted if j in jobs],
        rejected={j: r for j, r in previous.rejected.items() if j in jobs},
        templates={j: t for j, t in previous.templates.items() if j in jobs},
        cpu_goal={pe: previous.cpu_goal[pe] for pe in mine if pe in previous.cpu_goal},
        candidates={pe: previous.candidates[pe] for pe in mine},
        assignment={pe: previous.assignment[pe] for pe in mine},
        importance=0.0,
        ingest=0.0,
        metrics={},
        affinity=0.0,
    )
