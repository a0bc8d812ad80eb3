"""macroW: candidate nodes per PE minimising SODA's weighted six metrics (SODA §4.2).

Two prongs, as in the paper: a MILP solved by HiGHS under a time limit, and
miniW's local search (:mod:`strata.plan.mini_w`), which also post-processes from
the MILP's answer when there is one. The better answer by the weighted metrics
is kept. An instance too large for the whole MILP (more than
``MILP_MAX_BINARIES`` candidate binaries) gets miniW first and then the MILP over
neighbourhoods of miniW's answer — a few nodes' groups re-placed exactly with the
rest fixed, warm-started from miniW, kept when better (large-neighbourhood
search). If the MILP fails or finds nothing better, miniW's answer stands and
the phase status says so (``fallback-to-miniW``).

MILP: y[g,n] ∈ {0,1} makes node n a candidate of group g, φ[g,n] ∈ [0, y] its
share of g's cpu goal (Σ_n φ = 1); node cpu_min, memory, candidate count,
exlocation, PEs per node and movement are linear in y; node cpu above cpu_min
is soft (Σ goal·φ / cores ≤ max_cpu, which the objective weighs) because the
goals were set without node boundaries and microQ fits them into the cores. A stream's share
kept on node n is s ≤ φ[u,n], s ≤ φ[v,n]; NIC and link traffic follow, and the
max terms are epigraph variables. Every group takes at least its ``shards`` nodes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

import networkx as nx
import numpy as np

from strata.model import Cluster
from strata.plan import mini_w
from strata.plan.lp import Program
from strata.plan.occupancy import Occupancy
from strata.plan.placement import PlacementProblem, assignment_of, build_problem
from strata.plan.quality import Weights, evaluate, flows, keyed_groups

MILP_MAX_BINARIES = 6000  # larger instances: miniW first, then the MILP over neighbourhoods of its answer


@dataclass
class MacroW:
    candidates: dict[str, list[str]]
    assignment: dict[str, dict[str, float]]  # nominal cpu split (goals over candidates)
    metrics: dict[str, float]
    status: str
    detail: str
    problem: PlacementProblem


@dataclass
class Context:
    """What the rest of the cluster fixes around a neighbourhood: the constants of a restricted MILP.

    Per neighbourhood node: the cpu goal, cpu_min, memory, PE count and NIC bytes out/in of the
    groups kept where they are; per stream between a free group and a kept one, the kept end's
    shares on the neighbourhood nodes; the metrics' maxima over the nodes outside (floors for the
    epigraph variables) and the cluster's node count and NIC total (the averages' denominators).
    With these the MILP's objective is the whole placement's, less a constant (without racks).
    """

    load: np.ndarray
    min_load: np.ndarray
    memory: np.ndarray
    count: np.ndarray
    out: np.ndarray
    inn: np.ndarray
    pinned: list[tuple[int, dict[int, float], float, bool]]  # (free group, kept end's shares, bytes/s, free end sends)
    cpu_floor: float
    nic_floor: float
    nodes: int
    total_nic: float
    equal: bool = False  # each group keeps exactly ``shards`` nodes with equal shares (miniW's model)

    @classmethod
    def alone(cls, p: PlacementProblem) -> Context:
        zero = np.zeros(len(p.names))
        return cls(zero, zero, zero, zero, zero, zero, [], 0.0, 0.0, len(p.names), float(p.nic.sum()))


def solve_milp(
    p: PlacementProblem, time_limit: float, context: Context | None = None, start: list[list[int]] | None = None
) -> tuple[str, list[dict[int, float]] | None, str]:
    """The MILP above, warm-started from ``start`` (each group's nodes) if given.

    Returns (status, node shares per group or None, detail).
    """
    began = time.perf_counter()
    ctx = context or Context.alone(p)
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
        if ctx.equal:
            prog.row(dict.fromkeys(y[g].values(), 1.0), lower=grp.shards, upper=grp.shards)
        else:
            prog.row(dict.fromkeys(y[g].values(), 1.0), lower=grp.shards, upper=grp.limit if grp.goal > 0 else 1)
        for n in grp.eligible:
            if ctx.equal:
                prog.row({phi[g][n]: 1.0, y[g][n]: -1.0 / grp.shards}, lower=0.0, upper=0.0)
            else:
                prog.row({phi[g][n]: 1.0, y[g][n]: -1.0}, upper=0.0)
            load[n][phi[g][n]] = grp.goal
    for n in range(nn):
        # Node cpu is soft here, as in miniW: the goals ignore labels and nodes, and microQ fits them
        # into the cores; an overloaded node shows in max_cpu. cpu_min is hard.
        prog.row(
            {phi[g][n]: p.groups[g].cpu_min for g in range(len(p.groups)) if n in phi[g]},
            upper=float(p.cores[n] - ctx.min_load[n]),
        )
        prog.row(
            {y[g][n]: p.groups[g].memory for g in range(len(p.groups)) if n in y[g]},
            upper=float(p.memory[n] - ctx.memory[n]),
        )
        if p.max_pes_per_node is not None:
            prog.row(
                {y[g][n]: len(p.groups[g].pes) for g in range(len(p.groups)) if n in y[g]},
                upper=float(p.max_pes_per_node - ctx.count[n]),
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
    # Streams to kept groups: local where the free end shares a node with the kept end's share there.
    base_out, base_in = ctx.out.copy(), ctx.inn.copy()
    for g, kept, t, sends in ctx.pinned:
        mine, theirs = (out, inn) if sends else (inn, out)
        for n, col in phi[g].items():
            mine[n][col] = mine[n].get(col, 0.0) + t
        for n, f in kept.items():
            (base_in if sends else base_out)[n] += t * f
            if n in phi[g]:
                s = prog.var(0.0, min(1.0, f))
                prog.row({s: 1.0, phi[g][n]: -1.0}, upper=0.0)
                cross[s] = cross.get(s, 0.0) - t
                mine[n][s] = mine[n].get(s, 0.0) - t
                theirs[n][s] = theirs[n].get(s, 0.0) - t
    max_cpu = prog.var(lower=ctx.cpu_floor, cost=w.max_cpu)
    max_nic = prog.var(lower=ctx.nic_floor, cost=w.max_nic)
    for n in range(nn):
        prog.row(
            {**{k: c / p.cores[n] for k, c in load[n].items()}, max_cpu: -1.0}, upper=-float(ctx.load[n] / p.cores[n])
        )
        for side, base in ((out[n], base_out[n]), (inn[n], base_in[n])):
            prog.row({**{k: c / p.nic[n] for k, c in side.items()}, max_nic: -1.0}, upper=-float(base / p.nic[n]))
        for k, c in load[n].items():
            prog.add_cost(k, w.avg_cpu * c / p.cores[n] / ctx.nodes)
        for side in (out[n], inn[n]):
            for k, c in side.items():
                prog.add_cost(k, w.avg_nic * c / p.nic[n] / (2 * ctx.nodes))
    if len(p.uplink) == 0:
        for k, c in cross.items():
            prog.add_cost(k, (w.avg_link + w.max_link) * c / ctx.total_nic)
    else:
        _rack_terms(prog, p, phi, w)
    hint = None
    if start is not None:
        hint = {c: float(n in start[g]) for g in range(len(p.groups)) for n, c in y[g].items()}
        hint.update({c: float(n in start[g]) / len(start[g]) for g in range(len(p.groups)) for n, c in phi[g].items()})
    solving = time.perf_counter()
    sol = prog.solve(time_limit=max(0.05, time_limit - (solving - began)), mip_gap=1e-4, start=hint)
    took = time.perf_counter() - solving
    if not sol.usable:
        return "failed", None, f"MILP {sol.status} after {took:.2f}s"
    shares = [{n: float(sol.x[c]) for n, c in phi[g].items() if sol.x[c] > 1e-6} for g in range(len(p.groups))]
    detail = f"MILP {sol.status} in {took:.2f}s (gap {sol.mip_gap:.2%})"
    return sol.status, shares, detail


def _rack_terms(prog: Program, p: PlacementProblem, phi: list[dict[int, int]], w: Weights) -> None:
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
    """Candidate nodes for the admitted PEs, by the better of the MILP and miniW.

    Up to ``MILP_MAX_BINARIES`` the MILP covers the whole instance first and miniW post-processes
    from its answer. Larger instances give miniW the first part of the deadline and spend the
    MILP's share re-solving neighbourhoods of miniW's answer exactly (:func:`improve_by_milp`).
    The phase detail starts with the winner: ``MILP``, ``miniW`` or ``miniW+MILP neighbourhoods``.
    """
    start = clock()
    weights = weights or Weights()
    p = build_problem(cluster, graph, goals, rates, weights, max_candidates, max_pes_per_node, previous, move_limit)
    traffic = flows(graph, rates, goals)
    keyed = keyed_groups(graph)
    # Scoring the answers after the search takes a moment; leave it inside the phase deadline.
    deadline = start + 0.92 * deadline_s
    binaries = sum(len(g.eligible) for g in p.groups)
    if binaries > MILP_MAX_BINARIES:
        found = mini_w.search(p, start + 0.92 * deadline_s * (1 - milp_share), clock, seed=seed, rounds=rounds)
        how = (
            f"miniW from {found.start}: {found.moves} improving moves, {found.rounds} perturbation rounds; "
            f"{found.partitioner}"
        )
        try:
            where, tried, gained, why = improve_by_milp(p, found.where, deadline, clock, seed)
        except Exception as e:  # a solver crash must not cost the epoch its plan
            where, tried, gained, why = found.where, 0, 0, f"MILP raised {type(e).__name__}: {e}"
        mini = assignment_of(p, where, goals)
        mini_m = evaluate(cluster, mini, traffic, weights, keyed)
        won = "miniW+MILP neighbourhoods" if gained else "miniW"
        detail = (
            f"won: {won}; {how}; whole MILP skipped ({binaries} binaries > {MILP_MAX_BINARIES}); "
            f"MILP on {tried} neighbourhoods, {gained} improved ({why})"
        )
        return MacroW(_candidates(p, mini), mini, mini_m, "feasible" if gained else "fallback-to-miniW", detail, p)
    try:
        status, shares, why = solve_milp(p, deadline_s * milp_share)
    except Exception as e:  # a solver crash must not cost the epoch its plan
        status, shares, why = "failed", None, f"MILP raised {type(e).__name__}: {e}"
    starts = {"MILP": [sorted(sh) for sh in shares]} if shares is not None else None
    found = mini_w.search(p, deadline, clock, seed=seed, rounds=rounds, starts=starts)
    mini = assignment_of(p, found.where, goals)
    mini_m = evaluate(cluster, mini, traffic, weights, keyed)
    how = (
        f"miniW from {found.start}: {found.moves} improving moves, {found.rounds} perturbation rounds; "
        f"{found.partitioner}"
    )
    if shares is None:
        return MacroW(
            _candidates(p, mini), mini, mini_m, "fallback-to-miniW", f"won: miniW; MILP failed ({why}); {how}", p
        )
    exact = assignment_of(p, shares, goals)
    exact_m = evaluate(cluster, exact, traffic, weights, keyed)
    if exact_m["objective"] <= mini_m["objective"] + 1e-12:
        st = "optimal" if status == "optimal" else "time-limit"
        return MacroW(
            _candidates(p, exact),
            exact,
            exact_m,
            st,
            f"won: MILP; {why}, objective {exact_m['objective']:.4g}; miniW {mini_m['objective']:.4g} ({how})",
            p,
        )
    st = "feasible" if status == "optimal" else "fallback-to-miniW"
    return MacroW(
        _candidates(p, mini),
        mini,
        mini_m,
        st,
        f"won: miniW; {why}, objective {exact_m['objective']:.4g}; kept miniW {mini_m['objective']:.4g} ({how})",
        p,
    )


NEIGHBOURHOOD = 6  # nodes whose groups one neighbourhood MILP re-places


def improve_by_milp(
    p: PlacementProblem, where: list[list[int]], deadline: float, clock: Callable[[], float], seed: int = 0
) -> tuple[list[list[int]], int, int, str]:
    """Large-neighbourhood search: re-place the groups of a few nodes by the MILP, keep what improves.

    Each round takes a neighbourhood — the busiest node not yet tried, the nodes it trades most
    traffic with, and lightly loaded nodes — frees the groups lying wholly on it, and solves the
    MILP for them with everything else fixed (:class:`Context`), under a time limit. The answer
    (each group on its nodes with a positive share, in equal shards) replaces the old one if
    miniW's exact objective improves. Returns (placement, neighbourhoods tried, improved, note).
    """
    st = Occupancy(p, where)
    rng = np.random.default_rng(seed)
    order = [int(n) for n in np.argsort(-st.load / p.cores, kind="stable")]
    tried = gained = 0
    note = "none left" if not order else "deadline"
    first = st.objective()
    overhead = 0.0  # the longest round's time outside the solver: what a round needs beyond its MILP
    while order and deadline - clock() > 2 * overhead + 0.05:
        began = clock()
        left = deadline - began
        nodes = _neighbourhood(st, order.pop(0), rng)
        inside = set(nodes)
        free = [
            g for g, w in enumerate(st.where) if w and set(w) <= inside and (p.groups[g].goal > 0 or p.neighbours[g])
        ]
        if not free:
            continue
        sub, ctx, now = _restrict(st, nodes, free)
        solving = clock()
        limit = max(0.05, 0.25 * left - 2 * overhead)
        _, shares, _ = solve_milp(sub, time_limit=limit, context=ctx, start=now)
        solved = clock()
        tried += 1
        if shares is None:
            continue
        before, old = st.objective(), {g: list(st.where[g]) for g in free}
        for g in free:
            st.spread(g, [])
        placed = True
        for i, g in enumerate(free):
            target = sorted(nodes[n] for n, f in shares[i].items() if f > 1e-6)
            if not st.can_spread(g, target):
                placed = False
                break
            st.spread(g, target)
        if placed and st.objective() < before - 1e-12:
            gained += 1
        else:
            for g in free:
                st.spread(g, [])
            for g in free:
                st.spread(g, old[g])
        overhead = max(overhead, (solving - began) + (clock() - solved))
    if not order:
        note = "every node tried"
    return st.where, tried, gained, f"{note}; objective {first:.6g} -> {st.objective():.6g}"


def _neighbourhood(st: Occupancy, hot: int, rng: np.random.Generator) -> list[int]:
    """``hot``, the nodes it trades most traffic with, and two of the ten least loaded nodes."""
    p = st.p
    trade: dict[int, float] = {}
    for g in st.occ[hot]:
        for h, t in p.neighbours[g]:
            for n in st.where[h]:
                if n != hot:
                    trade[n] = trade.get(n, 0.0) + t / len(st.where[h])
    nodes = [hot, *sorted(trade, key=lambda n: (-trade[n], n))[: NEIGHBOURHOOD - 3]]
    light = [int(n) for n in np.argsort(st.load / p.cores, kind="stable")[:10] if int(n) not in nodes]
    nodes += [int(n) for n in rng.permutation(light)[: NEIGHBOURHOOD - len(nodes)]] if light else []
    return nodes


def _restrict(st: Occupancy, nodes: list[int], free: list[int]) -> tuple[PlacementProblem, Context, list[list[int]]]:
    """The MILP over ``free`` groups on ``nodes`` with the rest of ``st`` as its context, and the
    free groups' nodes now (the MILP's start)."""
    p = st.p
    idx = {n: i for i, n in enumerate(nodes)}
    outside = np.ones(len(p.names), dtype=bool)
    outside[nodes] = False
    util = st.load / p.cores
    nic = np.maximum(st.out, st.inn) / p.nic
    cpu_floor = float(util[outside].max()) if outside.any() else 0.0
    nic_floor = float(nic[outside].max()) if outside.any() else 0.0
    old = {g: list(st.where[g]) for g in free}
    for g in free:
        st.spread(g, [])
    base = [arr[nodes].copy() for arr in (st.load, st.minload, st.mem, st.count, st.out, st.inn)]
    kept_occ = [set(st.occ[n]) for n in nodes]
    for g in free:
        st.spread(g, old[g])
    local = {g: i for i, g in enumerate(free)}
    groups, exclude = [], []
    for g in free:
        grp = p.groups[g]
        allowed = [
            idx[n]
            for n in nodes
            if n in st.eligible[g]
            and not (p.exclude[g] & kept_occ[idx[n]])
            and (grp.prev is None or p.move_limit is None or n in grp.prev or n in old[g])
        ]
        groups.append(replace(grp, eligible=allowed, prev=None, shards=len(old[g]), limit=len(old[g])))
        exclude.append({local[h] for h in p.exclude[g] if h in local})
    streams, pinned = [], []
    for a, b, t in p.streams:
        if a in local and b in local:
            streams.append((local[a], local[b], t))
        elif a in local or b in local:
            mine, kept = (a, b) if a in local else (b, a)
            shares = {idx[n]: 1.0 / len(st.where[kept]) for n in st.where[kept] if n in idx}
            pinned.append((local[mine], shares, t, mine == a))
    sub = PlacementProblem(
        cluster=p.cluster,
        names=[p.names[n] for n in nodes],
        cores=p.cores[nodes],
        memory=p.memory[nodes],
        nic=p.nic[nodes],
        rack=p.rack[nodes],
        uplink=p.uplink,
        groups=groups,
        group_of={},
        streams=streams,
        exclude=exclude,
        weights=p.weights,
        max_pes_per_node=p.max_pes_per_node,
    )
    ctx = Context(*base, pinned, cpu_floor, nic_floor, len(p.names), float(p.nic.sum()), equal=True)
    return sub, ctx, [[idx[n] for n in old[g]] for g in free]


def _candidates(p: PlacementProblem, assignment: Mapping[str, Mapping[str, float]]) -> dict[str, list[str]]:
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
