"""microQ: revise the cpu goals for the candidate nodes macroW chose (SODA §4.3).

macroQ saw only the cluster's total cpu; macroW's candidates bind each PE to a
few nodes. microQ maximises importance again under every node's cores, with
each component's PEs held to *pacing constraints*: the component's allocation
is a convex combination of its curve's allocations at the two ends of one
linear segment, so cpu is split among its PEs as the curve prescribes. That is
an LP (a transportation flow from PEs to their candidate nodes, with the pacing
rows on top). When a component's answer sits at an end of its segment, the
adjacent segment's pacing is imposed and the LP re-solved, until no component
moves or the deadline passes (SODA's iteration over linear segments).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from strata.model import Cluster
from strata.plan.curves import Curve
from strata.plan.lp import Program


@dataclass
class MicroQ:
    goals: dict[str, float]
    split: dict[str, dict[str, float]]  # PE → node → cpu, within node cores
    budgets: list[float]
    value: float  # Σ curve value at the paced allocations
    iterations: int
    status: str
    detail: str


def _solve(
    curves: Sequence[Curve],
    windows: list[tuple[int, int]],
    candidates: Mapping[str, list[str]],
    cores: Mapping[str, float],
    time_limit: float,
):
    prog = Program(maximize=True)
    lam: list[dict[int, int]] = []
    node_rows: dict[str, dict[int, float]] = {n: {} for n in cores}
    x: dict[str, dict[str, int]] = {}
    for k, curve in enumerate(curves):
        lo, hi = windows[k]
        lam.append({i: prog.var(0.0, 1.0, cost=float(curve.values[i])) for i in range(lo, hi + 1)})
        prog.row(dict.fromkeys(lam[k].values(), 1.0), lower=1.0, upper=1.0)
        for pe in curve.pes:
            x[pe] = {n: prog.var() for n in candidates[pe]}
            for n, col in x[pe].items():
                node_rows[n][col] = 1.0
            pace = {lam[k][i]: -curve.allocs[i][pe] for i in lam[k]}
            prog.row({**dict.fromkeys(x[pe].values(), 1.0), **pace}, lower=0.0, upper=0.0)
    for n, row in node_rows.items():
        if row:
            prog.row(row, upper=cores[n])
    sol = prog.solve(time_limit=time_limit)
    return sol, lam, x


def micro_q(
    cluster: Cluster,
    curves: Sequence[Curve],
    budgets: Sequence[float],
    candidates: Mapping[str, list[str]],
    deadline_s: float,
    clock: Callable[[], float] = time.perf_counter,
) -> MicroQ:
    """Paced LP over the candidate nodes, iterated over linear segments until stable or out of time."""
    start = clock()
    cores = {n.name: n.cores for n in cluster.all_nodes}
    windows = []
    for c, b in zip(curves, budgets, strict=True):
        i = c.segment(b)
        windows.append((i, min(i + 1, len(c.budgets) - 1)))
    best = None
    iterations = 0
    status, note = "optimal", ""
    seen = set()
    took = 0.0
    while True:
        iterations += 1
        began = clock()
        left = deadline_s - (began - start)
        sol, lam, x = _solve(curves, windows, candidates, cores, max(left - took, 1e-3))
        took = max(took, clock() - began)
        if not sol.usable:
            if best is None and any(w[0] > 0 for w in windows):
                # The segments around macroQ's budgets do not fit the candidates: allow every point below.
                windows = [(0, w[1]) for w in windows]
                note = "macroQ's segments do not fit the candidates; paced from each curve's minimum"
                continue
            if best is None:
                raise RuntimeError(f"microQ LP {sol.status}")
            status = "time-limit" if sol.status == "time-limit" else status
            break
        if best is None or sol.objective > best[0].objective + 1e-9:
            best = (sol, lam, x, list(windows))
        seen.add(tuple(windows))
        moved = []
        for k, c in enumerate(curves):
            lo, hi = windows[k]
            weights = {i: sol.x[col] for i, col in lam[k].items()}
            if weights.get(lo, 0.0) > 1 - 1e-7 and lo > 0:
                moved.append((k, (lo - 1, lo)))
            elif weights.get(hi, 0.0) > 1 - 1e-7 and hi < len(c.budgets) - 1:
                moved.append((k, (hi, hi + 1)))
        nxt = list(windows)
        for k, w in moved:
            nxt[k] = w
        if not moved or tuple(nxt) in seen:
            break
        if clock() - start + 1.2 * took >= deadline_s:  # another solve would not finish in time
            status = "time-limit"
            break
        windows = nxt
    sol, lam, x, windows = best
    goals, split, out_budgets = {}, {}, []
    for k, c in enumerate(curves):
        b = sum(sol.x[col] * c.budgets[i] for i, col in lam[k].items())
        out_budgets.append(float(b))
        for pe in c.pes:
            parts = {n: max(0.0, float(sol.x[col])) for n, col in x[pe].items()}
            split[pe] = parts
            goals[pe] = sum(parts.values())
    detail = f"{iterations} LP solve(s), objective {sol.objective:.6g}" + (f"; {note}" if note else "")
    return MicroQ(goals, split, out_budgets, float(sol.objective), iterations, status, detail)
