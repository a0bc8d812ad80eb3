"""L0's cells: which jobs share a Spark application, and each application's CPU share (SODA §4.2, §4.4).

A *cell* is one Spark application (its driver JVM and its Python workers) whose CPU share the operating
system enforces (cgroups, else nice; on a standalone cluster ``spark.cores.max``). Inside one application a
latency-critical query suffers from its neighbours' non-preemptible tasks and from the driver's per-query work
(measured: a critical query in an application of its own, the rest packed together, p99 0.97 s against
2.18 s in one application; issue 28). A cell costs one more driver. :func:`place_cells` places jobs onto
cells as SODA's macroW places PEs onto candidate nodes (§4.2): a MILP under a time limit with a feasible
heuristic behind it (miniW's idea: a greedy start, then 1-opt moves and 2-opt swaps), incremental-movement limits as in
microW (§4.4: a cap on what changes from the last epoch), fixed placements (pins) as hard constraints.

The model. Jobs j (``CellJob``); cells k: one per pin (``--dedicate JOB`` pins JOB to a cell named by the
pin, holding only the jobs pinned to it), plus free cells (``current``'s cell names, then fresh ``c0``,
``c1``, ... up to what ``max_cells`` and the job count allow). Variables:

- x[j,k] ∈ {0,1}: job j runs in cell k (fixed to 1 for a pinned job's pin cell, 0 for every other pin cell);
- o[k] ∈ {0,1}: free cell k runs (pin cells always run);
- per pair of jobs with a cost when together, z[i,j] ∈ [0,1] "i and j share a cell", linearised (below).

Objective (minimised; unit: cores of work, the currency of ``cell_overhead_cores``):

- interference: a critical job i sharing a cell with job j costs p_i × cores_j — the non-preemptible work j
  brings in front of i — with p_i = weight_i / (the largest critical weight) + ``RANK_TIE`` / rank_i
  (relative importance, the better rank winning between equal weights); non-critical jobs suffer nothing
  they are not already scheduled for by L2 inside the cell;
- overhead: ``cell_overhead_cores`` per running cell (one JVM driver each);
- hop: ``hop_cost`` per read (``CellJob.reads``) whose reader and producer run in different cells (shared
  stream affinity: a reader stays with its producer unless the plan pays for the hop);
- movement: ``move_cost`` per job of ``current`` that runs in another cell than it does now.

Each pair's together-cost c_ij = q_ij − h_ij (interference when together less the hop it saves, with the
hop h_ij paid as a constant): for c_ij > 0, z ≥ x[i,k] + x[j,k] − 1 for every cell k both may use (z
minimised to the product); for c_ij < 0, z = Σ_k y[i,j,k] with y ≤ x[i,k], y ≤ x[j,k] (maximised to it).

Constraints: Σ_k x[j,k] = 1; x[j,k] ≤ o[k] ≤ Σ_j x[j,k] (a cell runs iff it holds a job); pins + Σ_k o[k] ≤
``max_cells``; with ``current``, Σ over jobs that may stay of (1 − x[j, current cell]) ≤ ``max_moves`` (a job
whose cell became another job's pin moves without counting: pins are hard); fresh cells are opened in name
order (symmetry breaking). When the cells ``current`` uses no longer fit ``max_cells``, the movement limit
cannot always hold; it is then dropped and the plan's notes say so.

Shares (:func:`cell_shares`) follow the placement: each cell needs its overhead plus its jobs' cores (mean
demand), a critical job's cell its ``peak_cores`` (so the OS gives it cores whenever it has work); the
shares sum to ``limits.cores``: spare cores go to the cells of non-critical work, a shortfall first trims
the critical cells' bursts, then scales every cell; the plan's notes say which. The shares are what each cell is
entitled to (its gate's bound follows them); the kernel weighs a cell holding a critical job above every other cell
whatever its share (:mod:`strata.runners.shares`: a burst of it then runs as it would alone, the others keep idle
cores).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from strata.plan.lp import Program, Solution

RANK_TIE = 1e-3  # between critical jobs of equal weight, the better rank gets its own cell first
# One cell's memory: the driver JVM (Spark's default 1 GiB heap plus ~0.5 GiB off-heap and metaspace) and
# its Python workers (~0.25 GiB each, two per cell on a small machine); half the machine is left to the jobs.
CELL_MEMORY_GIB = 2.0
CELL_MEMORY_FRACTION = 0.5
CELLS_PER_CORE = 2  # without a memory figure: at most this many applications per core
# One more application's own work, whatever its queries: an idle local Spark application (driver JVM with its
# listener bus, heartbeats and cleaner; no query) took 0.0073–0.0094 cores over 30 s on this machine
# (benchmarks/bench_cell_overhead.py; docs/hierarchy.md, "L0: cells"). A query's driver work (planning, offset and
# commit logs) goes with the query, not with the cell.
CELL_OVERHEAD_CORES = 0.01
HOP_COST = 0.5  # a reader split from its producer reads the producer's sink, not its in-process table
MOVE_COST = 0.5  # a move stops the job at a batch boundary and restarts it from its checkpoint (seconds of work)
MAX_MOVES = 1  # SODA's movement limit per re-plan: one job restarting at a time


@dataclass(frozen=True)
class CellJob:
    id: str
    critical: bool  # latency class: target_latency_s <= HierarchyConfig.critical_latency_s
    rank: int  # 1 = most important
    weight: float  # importance weight per on-time output (the job's declared weight)
    cores: float  # mean cores it needs (L0's cpu_share, or learned cost x offered rate); > 0
    peak_cores: float  # cores it needs to finish a unit of work within its slack (critical jobs), else = cores
    reads: tuple[str, ...] = ()  # jobs whose output it reads (shared-stream affinity)
    pin: str | None = None  # a cell name the user pinned it to (--dedicate JOB pins JOB to a cell of its own)


@dataclass(frozen=True)
class CellLimits:
    cores: float  # cores of the machine (or the standalone cluster)
    max_cells: int  # how many applications fit (memory: ~1 JVM + Python workers each)
    cell_overhead_cores: float  # what one more application's driver costs
    hop_cost: float  # a reader in another cell than its producer
    move_cost: float  # moving a running job (stop at a batch boundary, restart from its checkpoint)
    max_moves: int  # SODA's movement limit per re-plan


@dataclass(frozen=True)
class CellPlan:
    cells: dict[str, tuple[str, ...]]  # cell name -> its jobs (every job in exactly one cell)
    shares: dict[str, float]  # cell name -> cores it is entitled to (sum == limits.cores)
    moves: tuple[tuple[str, str, str], ...]  # (job, from cell, to cell) against `current`
    solver: str  # e.g. "highs optimal", "heuristic (highs: time limit)"
    cost: float = 0.0  # the objective of this placement (cell_cost)
    notes: tuple[str, ...] = ()  # shares scaled, movement limit dropped: what the plan could not give


def default_limits(cores: float, memory_gib: float | None = None) -> CellLimits:
    """The knobs' defaults for a machine (or standalone cluster) of ``cores`` and ``memory_gib``.

    ``max_cells``: half the memory over ``CELL_MEMORY_GIB`` per application, at most ``CELLS_PER_CORE``
    per core, at least 1 (the core cap alone without a memory figure).
    """
    by_cores = max(1, math.floor(CELLS_PER_CORE * cores))
    by_memory = by_cores if memory_gib is None else math.floor(memory_gib * CELL_MEMORY_FRACTION / CELL_MEMORY_GIB)
    return CellLimits(
        cores=cores,
        max_cells=max(1, min(by_cores, by_memory)),
        cell_overhead_cores=CELL_OVERHEAD_CORES,
        hop_cost=HOP_COST,
        move_cost=MOVE_COST,
        max_moves=MAX_MOVES,
    )


def _check(jobs: Sequence[CellJob], limits: CellLimits) -> None:
    seen: set[str] = set()
    for job in jobs:
        if job.id in seen:
            raise ValueError(f"jobs: expected unique ids; found {job.id!r} twice")
        seen.add(job.id)
        if not job.cores > 0:
            raise ValueError(f"job {job.id!r}: cores expected > 0; found {job.cores}")
        if job.peak_cores < job.cores:
            raise ValueError(f"job {job.id!r}: peak_cores expected >= cores ({job.cores}); found {job.peak_cores}")
        if job.weight < 0 or job.rank < 1:
            raise ValueError(f"job {job.id!r}: expected weight >= 0 and rank >= 1; found {job.weight}, {job.rank}")
    if not limits.cores > 0 or limits.max_cells < 1 or limits.max_moves < 0:
        raise ValueError(f"limits: expected cores > 0, max_cells >= 1, max_moves >= 0; found {limits}")
    if min(limits.cell_overhead_cores, limits.hop_cost, limits.move_cost) < 0:
        raise ValueError(f"limits: expected overhead, hop and move costs >= 0; found {limits}")


def _importance(jobs: Sequence[CellJob]) -> dict[str, float]:
    """p_i of every critical job: its weight relative to the largest critical weight, rank breaking ties."""
    top = max((j.weight for j in jobs if j.critical), default=0.0) or 1.0
    return {j.id: j.weight / top + RANK_TIE / j.rank for j in jobs if j.critical}


def _pair_costs(jobs: Sequence[CellJob], limits: CellLimits) -> dict[tuple[str, str], tuple[float, float]]:
    """(i, j) with i < j -> (interference when together q_ij, hop when apart h_ij), for the pairs with either.

    A read of a job not among ``jobs`` (not admitted, or outside the fleet) costs nothing here.
    """
    p = _importance(jobs)
    out: dict[tuple[str, str], tuple[float, float]] = {}
    for a in jobs:
        for b in jobs:
            if a.id < b.id:
                q = p.get(a.id, 0.0) * b.cores + p.get(b.id, 0.0) * a.cores
                reads = (b.id in a.reads) + (a.id in b.reads)
                if q > 0 or reads:
                    out[(a.id, b.id)] = (q, limits.hop_cost * reads)
    return out


def cell_cost(
    jobs: Sequence[CellJob],
    limits: CellLimits,
    cells: Mapping[str, Sequence[str]],
    current: Mapping[str, str] | None = None,
) -> float:
    """The objective of a placement (module docstring): interference + overhead + hops + moves."""
    where = {j: name for name, members in cells.items() for j in members}
    total = limits.cell_overhead_cores * sum(1 for members in cells.values() if members)
    for (a, b), (q, h) in _pair_costs(jobs, limits).items():
        total += q if where[a] == where[b] else h
    if current:
        total += limits.move_cost * sum(1 for j in where if j in current and current[j] != where[j])
    return total


def cell_shares(
    jobs: Sequence[CellJob], limits: CellLimits, cells: Mapping[str, Sequence[str]]
) -> tuple[dict[str, float], tuple[str, ...]]:
    """Cores each cell is entitled to (summing to ``limits.cores``), and notes on what could not be given.

    A cell needs ``cell_overhead_cores`` plus its jobs' ``cores`` (mean) and, with critical jobs, their
    ``peak_cores`` instead (peak). Spare cores beyond every peak go to the cells holding non-critical work
    (in proportion to their mean need; to every cell by peak when there is none); short of the peaks, the
    critical cells' bursts above their mean are scaled down alike; short of the means, every cell is scaled.
    """
    by_id = {j.id: j for j in jobs}
    names = [name for name in sorted(cells) if cells[name]]
    mean = {k: limits.cell_overhead_cores + sum(by_id[j].cores for j in cells[k]) for k in names}
    burst = {j.id: j.peak_cores if j.critical else j.cores for j in jobs}
    peak = {k: limits.cell_overhead_cores + sum(burst[j] for j in cells[k]) for k in names}
    total_mean, total_peak = sum(mean.values()), sum(peak.values())
    notes: list[str] = []
    if total_mean > limits.cores:
        shares = {k: limits.cores * mean[k] / total_mean for k in names}
        notes.append(
            f"demand {total_mean:.3g} cores (jobs and drivers) exceeds {limits.cores:g}: "
            f"every cell gets {limits.cores / total_mean:.0%} of its mean need"
        )
    elif total_peak > limits.cores:
        given = (limits.cores - total_mean) / (total_peak - total_mean)
        shares = {k: mean[k] + given * (peak[k] - mean[k]) for k in names}
        notes.append(
            f"critical peaks need {total_peak:.3g} cores of {limits.cores:g}: "
            f"critical cells get {given:.0%} of their burst above mean"
        )
    else:
        spare = limits.cores - total_peak
        bulk = {k: mean[k] for k in names if any(not by_id[j].critical for j in cells[k])}
        weights = bulk or peak
        shares = {k: peak[k] + spare * weights.get(k, 0.0) / sum(weights.values()) for k in names}
    if names:  # the shares sum to the cores exactly, whatever the rounding
        last = max(names, key=lambda k: shares[k])
        shares[last] = limits.cores - sum(v for k, v in shares.items() if k != last)
    return shares, tuple(notes)


@dataclass
class _Instance:
    """The labelled problem: the cells each job may use (a pinned job: its pin), which free cells are fresh."""

    jobs: list[CellJob]
    free: list[str]  # free cells: current's names, then fresh ones
    fresh: list[str]  # free cells no job runs in now (interchangeable)
    slots: int  # how many free cells may run
    allowed: dict[str, list[str]]
    stay: dict[str, str]  # job -> the cell it runs in now, where it may stay (moves counted)
    forced: dict[str, str]  # job -> the cell it runs in now, which it may no longer use (pin)
    pairs: dict[tuple[str, str], tuple[float, float]]
    fits: bool  # current's free cells fit ``slots`` (so the movement limit can hold)


def _instance(jobs: Sequence[CellJob], limits: CellLimits, current: Mapping[str, str] | None) -> _Instance:
    current = dict(current or {})
    pins = list(dict.fromkeys(j.pin for j in jobs if j.pin is not None))
    unpinned = [j for j in jobs if j.pin is None]
    slots = limits.max_cells - len(pins)
    if slots < (1 if unpinned else 0):
        need = len(pins) + (1 if unpinned else 0)
        raise ValueError(f"limits.max_cells: pins and the unpinned jobs need {need} cells; found {limits.max_cells}")
    ids = {j.id for j in jobs}
    now = sorted({cell for job, cell in current.items() if job in ids and cell not in pins})
    taken = set(pins) | set(now)
    fresh: list[str] = []
    i = 0
    while len(now) + len(fresh) < min(len(unpinned), slots):
        if f"c{i}" not in taken:
            fresh.append(f"c{i}")
        i += 1
    free = now + fresh
    allowed = {j.id: ([j.pin] if j.pin is not None else list(free)) for j in jobs}
    stay = {j: c for j, c in current.items() if j in ids and c in allowed[j]}
    forced = {j: c for j, c in current.items() if j in ids and c not in allowed[j]}
    fits = len({stay[j] for j in stay if stay[j] in free}) <= slots
    return _Instance(list(jobs), free, fresh, slots, allowed, stay, forced, _pair_costs(jobs, limits), fits)


def _milp(
    inst: _Instance, limits: CellLimits, time_limit_s: float, start: Mapping[str, str], with_moves: bool
) -> tuple[Solution, dict[tuple[str, str], int]]:
    prog = Program(maximize=False)
    x = {}
    for job in inst.jobs:
        for k in inst.allowed[job.id]:  # a pinned job's one cell: fixed to 1
            x[job.id, k] = prog.var(0.0 if job.pin is None else 1.0, 1.0, integer=True)
        prog.row({x[job.id, k]: 1.0 for k in inst.allowed[job.id]}, 1.0, 1.0)
    opened = {k: prog.binary(limits.cell_overhead_cores) for k in inst.free}
    for k in inst.free:
        members = [x[j.id, k] for j in inst.jobs if (j.id, k) in x]
        for col in members:
            prog.row({col: 1.0, opened[k]: -1.0}, upper=0.0)
        prog.row({opened[k]: 1.0, **{col: -1.0 for col in members}}, upper=0.0)
    prog.row({opened[k]: 1.0 for k in inst.free}, upper=float(inst.slots))
    for a, b in zip(inst.fresh, inst.fresh[1:], strict=False):
        prog.row({opened[a]: 1.0, opened[b]: -1.0}, lower=0.0)
    for (a, b), (q, h) in inst.pairs.items():
        common = [k for k in inst.allowed[a] if k in inst.allowed[b]]
        c = q - h
        if not common or c == 0:
            continue
        if c > 0:
            z = prog.var(0.0, 1.0, c)
            for k in common:
                prog.row({z: 1.0, x[a, k]: -1.0, x[b, k]: -1.0}, lower=-1.0)
        else:
            for k in common:
                y = prog.var(0.0, 1.0, c)
                prog.row({y: 1.0, x[a, k]: -1.0}, upper=0.0)
                prog.row({y: 1.0, x[b, k]: -1.0}, upper=0.0)
    for j, k in inst.stay.items():
        prog.add_cost(x[j, k], -limits.move_cost)
    if with_moves and inst.stay:
        prog.row({x[j, k]: 1.0 for j, k in inst.stay.items()}, lower=float(len(inst.stay) - limits.max_moves))
    hint = {col: float(start.get(j) == k) for (j, k), col in x.items()}
    hint.update({col: float(any(start.get(j.id) == k for j in inst.jobs)) for k, col in opened.items()})
    return prog.solve(time_limit=time_limit_s, start=hint), x


def _moves(where: Mapping[str, str], stay: Mapping[str, str]) -> int:
    return sum(1 for j, k in stay.items() if where[j] != k)


def _heuristic(inst: _Instance, limits: CellLimits, move_limit: float) -> dict[str, str]:
    """A feasible placement: a greedy start (or ``current`` kept), then 1-opt moves (miniW).

    Greedy start: pinned jobs in their pins; the critical jobs, most important first, each in a cell of its
    own while a free cell remains beside one for the rest, which share the last. Its cells are named after
    the current cells they overlap most. With ``current`` (when its cells fit), current kept — new jobs and
    jobs whose cell became a pin go into the cheapest running cell — is the other start. Then miniW's 1-opt
    moves (one job to another cell: a running one, or an empty one while cells remain) and 2-opt swaps (two
    jobs exchange cells), the best first, within the cell and movement limits, until none lowers the cost.
    """
    p = _importance(inst.jobs)
    unpinned = [j for j in inst.jobs if j.pin is None]
    critical = sorted((j for j in unpinned if j.critical), key=lambda j: (-p[j.id], j.rank, j.id))
    rest = [j.id for j in unpinned if not j.critical]
    alone = min(len(critical), inst.slots - (1 if rest or len(critical) > inst.slots else 0))
    blocks = [[j.id] for j in critical[:alone]]
    packed = [j.id for j in critical[alone:]] + rest
    if packed:
        blocks.append(packed)
    greedy = {j.id: j.pin for j in inst.jobs if j.pin is not None}
    unused = list(inst.free)
    for block in sorted(blocks, key=lambda b: -max(sum(inst.stay.get(j) == k for j in b) for k in inst.free)):
        label = max(unused, key=lambda k: (sum(inst.stay.get(j) == k for j in block), -unused.index(k)))
        unused.remove(label)
        greedy.update(dict.fromkeys(block, label))
    starts = [greedy]
    if inst.stay and inst.fits:
        kept = dict(inst.stay)
        for job in inst.jobs:
            if job.id not in kept:
                running = sorted(set(kept.values()) & set(inst.allowed[job.id])) or inst.allowed[job.id][:1]
                kept[job.id] = min(running, key=lambda k: _delta(inst, limits, kept, job.id, k))
        starts.append(kept)
    feasible = [s for s in starts if _moves(s, inst.stay) <= move_limit] or starts[:1]
    best = min((_improve(inst, limits, s, move_limit) for s in feasible), key=lambda s: _cost(inst, limits, s))
    return best


def _cost(inst: _Instance, limits: CellLimits, where: Mapping[str, str]) -> float:
    cells: dict[str, list[str]] = {}
    for j, k in where.items():
        cells.setdefault(k, []).append(j)
    return cell_cost(inst.jobs, limits, cells, {**inst.stay, **inst.forced})


def _delta(inst: _Instance, limits: CellLimits, where: Mapping[str, str], job: str, to: str) -> float:
    """Cost change of putting ``job`` into cell ``to`` (``job`` absent from ``where``: its first cell)."""
    src = where.get(job)
    if src == to:
        return 0.0
    members = {k: [j for j, c in where.items() if c == k and j != job] for k in {src, to} if k is not None}
    d = limits.cell_overhead_cores * ((not members[to]) - (src is not None and not members[src]))
    for other in members[to]:
        q, h = inst.pairs.get((min(job, other), max(job, other)), (0.0, 0.0))
        d += q - h
    for other in members.get(src, []) if src is not None else []:
        q, h = inst.pairs.get((min(job, other), max(job, other)), (0.0, 0.0))
        d -= q - h
    if job in inst.stay:
        d += limits.move_cost * ((inst.stay[job] != to) - (src is not None and inst.stay[job] != src))
    return d


def _improve(inst: _Instance, limits: CellLimits, where: Mapping[str, str], move_limit: float) -> dict[str, str]:
    """miniW's local improvement: the best 1-opt move or 2-opt swap while one lowers the cost."""
    where = dict(where)
    unpinned = [j.id for j in inst.jobs if j.pin is None]
    while True:
        running = set(where.values())
        full = len(running & set(inst.free)) >= inst.slots
        limit = max(move_limit, _moves(where, inst.stay))
        best: tuple[float, dict[str, str]] = (-1e-12, {})
        for job in unpinned:
            for k in inst.free:
                if k != where[job] and not (full and k not in running):
                    changed = dict(where, **{job: k})
                    d = _delta(inst, limits, where, job, k)
                    if d < best[0] and _moves(changed, inst.stay) <= limit:
                        best = (d, changed)
        for i, a in enumerate(unpinned):
            for b in unpinned[i + 1 :]:
                if where[a] != where[b]:
                    half = dict(where, **{a: where[b]})
                    changed = dict(half, **{b: where[a]})
                    d = _delta(inst, limits, where, a, where[b]) + _delta(inst, limits, half, b, where[a])
                    if d < best[0] and _moves(changed, inst.stay) <= limit:
                        best = (d, changed)
        if not best[1]:
            return where
        where = best[1]


def _names(inst: _Instance, where: Mapping[str, str]) -> dict[str, str]:
    """Fresh cells renamed in a canonical order (by their best-ranked job), so equal plans read alike."""
    by_id = {j.id: j for j in inst.jobs}
    used = sorted({k for k in where.values() if k in inst.fresh}, key=lambda k: inst.fresh.index(k))
    order = sorted(used, key=lambda k: min((by_id[j].rank, j) for j, c in where.items() if c == k))
    rename = dict(zip(order, used, strict=True))
    return {j: rename.get(k, k) for j, k in where.items()}


def place_cells(
    jobs: Sequence[CellJob],
    limits: CellLimits,
    current: Mapping[str, str] | None = None,
    time_limit_s: float = 1.0,
) -> CellPlan:
    """Place ``jobs`` onto cells and give each cell its share (module docstring: the model).

    ``current`` (job -> cell now; None: the first plan) makes the plan incremental: a job stays unless moving
    pays more than ``move_cost``, and at most ``max_moves`` move. The MILP runs under ``time_limit_s``; when
    it fails, or stops at the limit with an answer worse than the heuristic's (or none), the heuristic's
    answer is the plan and ``solver`` says why. Raises ValueError on malformed jobs or limits, and when the
    pins leave no cell for the other jobs.
    """
    _check(jobs, limits)
    inst = _instance(jobs, limits, current)
    notes: list[str] = []
    move_limit: float = limits.max_moves if inst.fits else math.inf
    heuristic = _heuristic(inst, limits, move_limit)
    solution, x = _milp(inst, limits, time_limit_s, heuristic, with_moves=inst.fits)
    if not inst.fits:
        notes.append(f"max_moves ({limits.max_moves}) dropped: current's cells no longer fit max_cells")
    where = heuristic
    if solution.usable:
        found = {j: k for (j, k), col in x.items() if solution.x[col] > 0.5}
        if solution.status == "optimal":
            where, solver = found, "highs optimal"
        elif _cost(inst, limits, found) < _cost(inst, limits, heuristic) - 1e-9:
            gap = f"gap {solution.mip_gap:.1%}" if math.isfinite(solution.mip_gap) else "no bound"
            where, solver = found, f"highs time limit ({gap})"
        else:
            solver = "heuristic (highs: time limit, no better answer)"
    else:
        solver = f"heuristic (highs: {solution.status.replace('-', ' ')})"
    where = _names(inst, where)
    cells: dict[str, tuple[str, ...]] = {}
    for job in jobs:
        cells[where[job.id]] = (*cells.get(where[job.id], ()), job.id)
    cells = {k: cells[k] for k in sorted(cells)}
    shares, share_notes = cell_shares(jobs, limits, cells)
    before = {**inst.stay, **inst.forced}
    moves = tuple((j, before[j], where[j]) for j in sorted(before) if before[j] != where[j])
    return CellPlan(
        cells=cells,
        shares=shares,
        moves=moves,
        solver=solver,
        cost=cell_cost(jobs, limits, cells, before),
        notes=tuple(notes) + share_notes,
    )
