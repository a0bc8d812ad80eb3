"""macroW: candidate nodes per PE minimising SODA's weighted six metrics (SODA §4.2).

Two prongs, as in the paper: a MILP solved by HiGHS under a time limit, and
miniW's local search (:mod:`strata.plan.mini_w`), which also post-processes from
the MILP's answer when there is one. The better answer by the weighted metrics
is kept. If the MILP is too large, fails or finds nothing by its time limit,
miniW's answer stands and the phase status says so (``fallback-to-miniW``).

MILP: y[g,n] ∈ {0,1} makes node n a candidate of group g, φ[g,n] ∈ [0, y] its
share of g's cpu goal (Σ_n φ = 1); node cpu_min, memory, candidate count,
exlocation, PEs per node and movement are linear in y; node cpu above cpu_min
is soft (Σ goal·φ / cores ≤ max_cpu, which the objective weighs) because the
goals were set without node boundaries and microQ fits them into the cores. A stream's share
kept on node n is s ≤ φ[u,n], s ≤ φ[v,n]; NIC and link traffic follow, and the
max terms are epigraph variables.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import networkx as nx
import numpy as np

from strata.model import Cluster
from strata.plan import mini_w
from strata.plan.lp import Program
from strata.plan.metrics import Weights, evaluate, flows
from strata.plan.placement import Problem, assignment_of, build_problem

MILP_MAX_BINARIES = 6000  # larger instances skip the MILP: miniW alone within the deadline


@dataclass
class MacroW:
    candidates: dict[str, list[str]]
    assignment: dict[str, dict[str, float]]  # nominal cpu split (goals over candidates)
    metrics: dict[str, float]
    status: str
    detail: str
    problem: Problem


def solve_milp(p: Problem, time_limit: float) -> tuple[str, list[dict[int, float]] | None, str]:
    """The MILP above; returns (status, node shares per group or None, detail)."""
    began = time.perf_counter()
    binaries = sum(len(g.eligible) for g in p.groups)
    if binaries > MILP_MAX_BINARIES:
        return "skipped", None, f"{binaries} binaries exceed the MILP size limit {MILP_MAX_BINARIES}"
    w = p.weights
    prog = Program(maximize=False)
    nn = len(p.names)
    y: list[dict[int, int]] = []
    phi: list[dict[int, int]] = []
    load: list[dict[int, float]] = [{} for _ in range(nn)]
    for g, grp in enumerate(p.groups):
        y.append({n: prog.binary() for n in grp.eligible})
        phi.append({n: prog.var(0.0, 1.0) for n in grp.eligible})
        prog.row(dict.fromkeys(phi[g].values(), 1.0), lower=1.0, upper=1.0)
        prog.row(dict.fromkeys(y[g].values(), 1.0), upper=grp.limit if grp.goal > 0 else 1)
        for n in grp.eligible:
            prog.row({phi[g][n]: 1.0, y[g][n]: -1.0}, upper=0.0)
            load[n][phi[g][n]] = grp.goal
    for n in range(nn):
        # Node cpu is soft here, as in miniW: the goals ignore labels and nodes, and microQ fits them
        # into the cores; an overloaded node shows in max_cpu. cpu_min is hard.
        prog.row({phi[g][n]: p.groups[g].cpu_min for g in range(len(p.groups)) if n in phi[g]}, upper=float(p.cores[n]))
        prog.row({y[g][n]: p.groups[g].memory for g in range(len(p.groups)) if n in y[g]}, upper=float(p.memory[n]))
        if p.max_pes_per_node is not None:
            prog.row(
                {y[g][n]: len(p.groups[g].pes) for g in range(len(p.groups)) if n in y[g]}, upper=p.max_pes_per_node
            )
    for g, others in enumerate(p.exclude):
        for h in others:
            if h > g:
                for n in set(y[g]) & set(y[h]):
                    prog.row({y[g][n]: 1.0, y[h][n]: 1.0}, upper=1.0)
    if p.move_limit is not None:
        moved = {}
        for g, grp in enumerate(p.groups):
            if grp.prev is not None:
                m = prog.binary()
                moved[m] = 1.0
                for n in grp.eligible:
                    if n not in grp.prev:
                        prog.row({y[g][n]: 1.0, m: -1.0}, upper=0.0)
        if moved:
            prog.row(moved, upper=p.move_limit)
    out = [dict[int, float]() for _ in range(nn)]
    inn = [dict[int, float]() for _ in range(nn)]
    cross: dict[int, float] = {}
    constant = 0.0
    for a, b, t in p.streams:
        constant += t
        for n in set(phi[a]) | set(phi[b]):
            if n in phi[a] and n in phi[b]:
                s = prog.var(0.0, 1.0)
                prog.row({s: 1.0, phi[a][n]: -1.0}, upper=0.0)
                prog.row({s: 1.0, phi[b][n]: -1.0}, upper=0.0)
                cross[s] = cross.get(s, 0.0) - t
                out[n][s] = out[n].get(s, 0.0) - t
                inn[n][s] = inn[n].get(s, 0.0) - t
            if n in phi[a]:
                out[n][phi[a][n]] = out[n].get(phi[a][n], 0.0) + t
            if n in phi[b]:
                inn[n][phi[b][n]] = inn[n].get(phi[b][n], 0.0) + t
    max_cpu, max_nic = prog.var(cost=w.max_cpu), prog.var(cost=w.max_nic)
    for n in range(nn):
        prog.row({**{k: c / p.cores[n] for k, c in load[n].items()}, max_cpu: -1.0}, upper=0.0)
        for side in (out[n], inn[n]):
            prog.row({**{k: c / p.nic[n] for k, c in side.items()}, max_nic: -1.0}, upper=0.0)
        for k, c in load[n].items():
            prog.add_cost(k, w.avg_cpu * c / p.cores[n] / nn)
        for side in (out[n], inn[n]):
            for k, c in side.items():
                prog.add_cost(k, w.avg_nic * c / p.nic[n] / (2 * nn))
    if len(p.uplink) == 0:
        for k, c in cross.items():
            prog.add_cost(k, (w.avg_link + w.max_link) * c / float(p.nic.sum()))
    else:
        _rack_terms(prog, p, phi, w)
    start = time.perf_counter()
    sol = prog.solve(time_limit=max(0.05, time_limit - (start - began)), mip_gap=1e-4)
    took = time.perf_counter() - start
    if not sol.usable:
        return "failed", None, f"MILP {sol.status} after {took:.2f}s"
    shares = [{n: float(sol.x[c]) for n, c in phi[g].items() if sol.x[c] > 1e-6} for g in range(len(p.groups))]
    detail = f"MILP {sol.status} in {took:.2f}s (gap {sol.mip_gap:.2%})"
    return sol.status, shares, detail


def _rack_terms(prog: Program, p: Problem, phi: list[dict[int, int]], w: Weights) -> None:
    """Uplink traffic: a stream's share leaving rack r is Φ_u,r − min(Φ_u,r, Φ_v,r)."""
    nr = len(p.uplink)
    up_out = [dict[int, float]() for _ in range(nr)]
    up_in = [dict[int, float]() for _ in range(nr)]
    for a, b, t in p.streams:
        for r in range(nr):
            fa = {c: 1.0 for n, c in phi[a].items() if p.rack[n] == r}
            fb = {c: 1.0 for n, c in phi[b].items() if p.rack[n] == r}
            if not fa and not fb:
                continue
            s = prog.var(0.0, 1.0)
            prog.row({s: 1.0, **{c: -1.0 for c in fa}}, upper=0.0)
            prog.row({s: 1.0, **{c: -1.0 for c in fb}}, upper=0.0)
            for c in fa:
                up_out[r][c] = up_out[r].get(c, 0.0) + t
            for c in fb:
                up_in[r][c] = up_in[r].get(c, 0.0) + t
            up_out[r][s] = up_out[r].get(s, 0.0) - t
            up_in[r][s] = up_in[r].get(s, 0.0) - t
    max_link = prog.var(cost=w.max_link)
    for r in range(nr):
        for side in (up_out[r], up_in[r]):
            prog.row({**{k: c / p.uplink[r] for k, c in side.items()}, max_link: -1.0}, upper=0.0)
            for k, c in side.items():
                prog.add_cost(k, w.avg_link * c / p.uplink[r] / (2 * nr))


def macro_w(
    cluster: Cluster,
    graph: nx.DiGraph,
    goals: Mapping[str, float],
    rates: Mapping[str, float],
    deadline_s: float,
    weights: Weights | None = None,
    previous: Mapping[str, list[str]] | None = None,
    max_candidates: int = 4,
    max_pes_per_node: int | None = None,
    move_limit: int | None = None,
    milp_share: float = 0.4,
    seed: int = 0,
    rounds: int = 30,
    clock: Callable[[], float] = time.perf_counter,
) -> MacroW:
    """Candidate nodes for the admitted PEs, by the better of the MILP and miniW."""
    start = clock()
    weights = weights or Weights()
    p = build_problem(cluster, graph, goals, rates, weights, max_candidates, max_pes_per_node, previous, move_limit)
    traffic = flows(graph, rates)
    try:
        status, shares, why = solve_milp(p, deadline_s * milp_share)
    except Exception as e:  # a solver crash must not cost the epoch its plan
        status, shares, why = "failed", None, f"MILP raised {type(e).__name__}: {e}"
    # Scoring the answers after the search takes a moment; leave it inside the phase deadline.
    deadline = start + 0.92 * deadline_s
    starts = {"MILP": [sorted(sh) for sh in shares]} if shares is not None else None
    found = mini_w.search(p, deadline, clock, seed=seed, rounds=rounds, starts=starts)
    mini = assignment_of(p, found.where, goals)
    mini_m = evaluate(cluster, mini, traffic, weights)
    how = f"miniW from {found.start}: {found.moves} improving moves, {found.rounds} perturbation rounds"
    if shares is None:
        label = "skipped" if status == "skipped" else "failed"
        return MacroW(_candidates(p, mini), mini, mini_m, "fallback-to-miniW", f"MILP {label} ({why}); {how}", p)
    exact = assignment_of(p, shares, goals)
    exact_m = evaluate(cluster, exact, traffic, weights)
    if exact_m["objective"] <= mini_m["objective"] + 1e-12:
        st = "optimal" if status == "optimal" else "time-limit"
        return MacroW(
            _candidates(p, exact),
            exact,
            exact_m,
            st,
            f"{why}, objective {exact_m['objective']:.4g}; miniW {mini_m['objective']:.4g}",
            p,
        )
    st = "feasible" if status == "optimal" else "fallback-to-miniW"
    return MacroW(
        _candidates(p, mini),
        mini,
        mini_m,
        st,
        f"{why}, objective {exact_m['objective']:.4g}; kept miniW {mini_m['objective']:.4g} ({how})",
        p,
    )


def _candidates(p: Problem, assignment: Mapping[str, Mapping[str, float]]) -> dict[str, list[str]]:
    """Each PE's nodes, plus spare candidates that give microQ room where macroW overloaded a node.

    The goals were set without node boundaries, so the chosen placement may put more cpu on a node
    than it has. For every overloaded node, its largest groups get one more candidate each (while
    they are under their candidate limit): the eligible node with the most room that memory,
    exlocation and PEs-per-node allow, until the excess is covered.
    """
    idx = {name: i for i, name in enumerate(p.names)}
    n_nodes = len(p.names)
    load = np.zeros(n_nodes)
    on = [dict[int, float]() for _ in p.groups]
    for g, grp in enumerate(p.groups):
        for pe in grp.pes:
            for node, c in assignment[pe].items():
                i = idx[node]
                load[i] += c
                on[g][i] = on[g].get(i, 0.0) + c
    mem = np.zeros(n_nodes)
    count = np.zeros(n_nodes, dtype=int)
    occ: list[set[int]] = [set() for _ in range(n_nodes)]
    for g, grp in enumerate(p.groups):
        for i in on[g]:
            mem[i] += grp.memory
            count[i] += len(grp.pes)
            occ[i].add(g)
    room = p.cores - load
    for n in [int(i) for i in np.argsort(room, kind="stable") if room[i] < -1e-9]:
        for g in sorted(occ[n], key=lambda g: (-on[g].get(n, 0.0), g)):
            grp = p.groups[g]
            if room[n] >= -1e-9:
                break
            if len(on[g]) >= grp.limit:
                continue
            elig = p.eligible_arrays[g]
            top = elig[np.argsort(-room[elig], kind="stable")[:16]]
            for t in (int(t) for t in top):
                if t in on[g] or room[t] <= 1e-9 or p.exclude[g] & occ[t]:
                    continue
                if mem[t] + grp.memory > p.memory[t] or (
                    p.max_pes_per_node is not None and count[t] + len(grp.pes) > p.max_pes_per_node
                ):
                    continue
                if grp.prev is not None and p.move_limit is not None and t not in grp.prev:
                    continue
                shift = min(-room[n], on[g].get(n, 0.0), room[t])
                on[g][t] = 0.0
                mem[t] += grp.memory
                count[t] += len(grp.pes)
                occ[t].add(g)
                room[t] -= shift
                room[n] += shift
                break
    return {pe: sorted(p.names[i] for i in on[g]) for g, grp in enumerate(p.groups) for pe in grp.pes}
