"""microW: fractional assignment of PEs to their candidate nodes (SODA §4.4).

The cpu goals from microQ are routed from PEs to candidate nodes as a
min-cost flow: supply = a PE's goal, arcs PE → candidate node, node capacity =
its cores. The cost is the change from the reference assignment (the previous
epoch's, else microQ's own split), as |z − r| split into d⁺ and d⁻, so flow
stays where it was unless the goals force it to move (and, at equal change,
grows on nodes the PE already uses). The change limits of the
paper sit on top as side rows, which is why the flow is solved as an LP by HiGHS
rather than by a pure network code: the total change, the change per PE, and —
by fixing every node but the K that need the most change, then re-solving — the
number of nodes touched. Goals the limits will not let it meet show up as
shortfall or excess, penalised far above any change.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from strata.model import Cluster
from strata.plan.lp import Program

PENALTY = 1e4  # per core of goal missed: dearer than any change


@dataclass(frozen=True)
class Limits:
    """Limits on change from the previous epoch (cores; nodes). None = unlimited."""

    total: float | None = None
    per_pe: float | None = None
    nodes: int | None = None


@dataclass
class MicroW:
    assignment: dict[str, dict[str, float]]
    change: float  # Σ |z − previous| in cores
    nodes_touched: int
    shortfall: float  # Σ |goal − assigned| in cores
    status: str
    detail: str


def _flow(
    goals: Mapping[str, float],
    candidates: Mapping[str, list[str]],
    cores: Mapping[str, float],
    ref: Mapping[str, Mapping[str, float]],
    limits: Limits,
    frozen: set[str],
    time_limit: float,
):
    prog = Program(maximize=False)
    z: dict[str, dict[str, int]] = {}
    change: dict[str, dict[int, float]] = {}
    node_rows: dict[str, dict[int, float]] = {n: {} for n in cores}
    total_change: dict[int, float] = {}
    for pe, goal in goals.items():
        r = ref.get(pe, {})
        nodes = sorted(set(candidates[pe]) | set(r))
        z[pe] = {}
        change[pe] = {}
        for n in nodes:
            allowed = n in candidates[pe]
            if n in frozen:
                lo = hi = r.get(n, 0.0) if allowed else 0.0
            else:
                lo, hi = 0.0, (cores[n] if allowed else 0.0)
            col = prog.var(lo, hi)
            z[pe][n] = col
            node_rows[n][col] = 1.0
            # Growing onto a node the PE was not on costs a little more: fewer nodes per PE, less traffic.
            up, down = prog.var(cost=1.0 if r.get(n, 0.0) > 0 else 1.01), prog.var(cost=1.0)
            prog.row({col: 1.0, up: -1.0, down: 1.0}, lower=r.get(n, 0.0), upper=r.get(n, 0.0))
            change[pe][up] = change[pe][down] = 1.0
            total_change[up] = total_change[down] = 1.0
        short, excess = prog.var(cost=PENALTY), prog.var(cost=PENALTY)
        prog.row({**dict.fromkeys(z[pe].values(), 1.0), short: 1.0, excess: -1.0}, lower=goal, upper=goal)
        if limits.per_pe is not None and r:
            prog.row(change[pe], upper=limits.per_pe)
    for n, row in node_rows.items():
        if row:
            prog.row(row, upper=cores[n])
    if limits.total is not None and ref:
        prog.row(total_change, upper=limits.total)
    sol = prog.solve(time_limit=time_limit)
    return sol, z


def micro_w(
    cluster: Cluster,
    goals: Mapping[str, float],
    candidates: Mapping[str, list[str]],
    reference: Mapping[str, Mapping[str, float]],
    previous: Mapping[str, Mapping[str, float]] | None,
    limits: Limits,
    time_limit: float,
) -> MicroW:
    """Assign goals to candidate nodes, changing as little as possible from ``previous`` (or ``reference``)."""
    cores = {n.name: n.cores for n in cluster.all_nodes}
    # Nodes that have left the cluster are dropped from the reference: their cpu must move.
    ref = {
        pe: {n: c for n, c in parts.items() if n in cores}
        for pe, parts in (previous or reference).items()
        if pe in goals
    }
    active = limits if previous is not None else Limits()
    sol, z = _flow(goals, candidates, cores, ref, active, set(), time_limit)
    detail = "min-cost flow LP"
    if not sol.usable:
        return MicroW(
            {pe: dict(reference[pe]) for pe in goals},
            0.0,
            0,
            0.0,
            "feasible",
            f"flow LP {sol.status}; kept microQ's split",
        )
    assign = _read(sol.x, z)
    touched = _touched(assign, ref)
    if active.nodes is not None and len(touched) > active.nodes:
        by_change = sorted(touched, key=lambda n: (-touched[n], n))
        frozen = set(cores) - set(by_change[: active.nodes])
        sol2, z2 = _flow(goals, candidates, cores, ref, active, frozen, time_limit)
        if sol2.usable:
            assign, sol = _read(sol2.x, z2), sol2
            touched = _touched(assign, ref)
            detail += f"; re-solved with {len(frozen)} nodes frozen (node-touch limit {active.nodes})"
    change = sum(
        d
        for pe in goals
        for n in set(assign.get(pe, {})) | set(ref.get(pe, {}))
        if (d := abs(assign.get(pe, {}).get(n, 0.0) - ref.get(pe, {}).get(n, 0.0))) > 1e-9
    )
    short = sum(abs(goals[pe] - sum(assign[pe].values())) for pe in goals)
    status = "optimal" if sol.status == "optimal" else "time-limit"
    if short > 1e-6:
        detail += f"; {short:.3g} cores of goals unmet under the change limits"
    return MicroW(assign, change, len(touched), short, status, detail)


def _read(x, z) -> dict[str, dict[str, float]]:
    return {pe: {n: float(x[c]) for n, c in cols.items() if x[c] > 1e-9} for pe, cols in z.items()}


def _touched(assign: Mapping[str, Mapping[str, float]], ref: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for pe in set(assign) | set(ref):
        a, r = assign.get(pe, {}), ref.get(pe, {})
        for n in set(a) | set(r):
            d = abs(a.get(n, 0.0) - r.get(n, 0.0))
            if d > 1e-6:
                out[n] = out.get(n, 0.0) + d
    return out
