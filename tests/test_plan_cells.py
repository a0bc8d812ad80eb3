"""L0's cells: placement of jobs onto Spark applications and their shares, against answers worked by hand and
against brute-force enumeration (SODA §4.2 macroW with miniW's fallback, §4.4's movement limits)."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from strata.plan import cells as cells_module
from strata.plan.cells import CellJob, CellLimits, cell_cost, cell_shares, default_limits, place_cells
from strata.plan.lp import Solution


def job(id: str, cores: float, critical: bool = False, rank: int = 1, weight: float = 1.0, peak: float | None = None,
        reads: tuple[str, ...] = (), pin: str | None = None) -> CellJob:  # fmt: skip
    return CellJob(id, critical, rank, weight, cores, cores if peak is None else peak, reads, pin)


def limits(cores: float = 2.0, max_cells: int = 4, overhead: float = 0.1, hop: float = 0.5, move: float = 0.5,
           max_moves: int = 1) -> CellLimits:  # fmt: skip
    return CellLimits(cores, max_cells, overhead, hop, move, max_moves)


def one_critical_three_bulk(bulk_cores: float) -> list[CellJob]:
    return [
        job("a", 0.3, critical=True, peak=0.8),
        *(job(name, bulk_cores, rank=r) for r, name in enumerate("bcd", start=2)),
    ]


def test_one_critical_three_bulk_on_two_cores_critical_alone_its_burst_trimmed():
    # {a},{b,c,d}: two drivers, 0.2; all together: 0.1 + p_a·1.2 = 1.3012 (p_a = 1 + 0.001/rank 1).
    plan = place_cells(one_critical_three_bulk(0.4), limits())
    assert plan.cells == {"c0": ("a",), "c1": ("b", "c", "d")}
    assert plan.solver == "highs optimal"
    assert plan.cost == pytest.approx(0.2)
    # Means 0.1+0.3 and 0.1+1.2 (1.7), peaks 0.9 and 1.3 (2.2 > 2): a's burst 0.5 gets (2-1.7)/(2.2-1.7) = 60%.
    assert plan.shares == pytest.approx({"c0": 0.7, "c1": 1.3})
    assert sum(plan.shares.values()) == pytest.approx(2.0, abs=1e-12)
    assert plan.moves == ()
    assert any("critical peaks need 2.2 cores" in n for n in plan.notes)


def test_spare_cores_go_to_the_bulk_cell_and_critical_cells_get_their_peak():
    plan = place_cells(one_critical_three_bulk(0.2), limits())
    assert plan.cells == {"c0": ("a",), "c1": ("b", "c", "d")}
    # Peaks 0.9 and 0.7 (1.6): the 0.4 spare goes to the bulk cell.
    assert plan.shares == pytest.approx({"c0": 0.9, "c1": 1.1})
    assert plan.notes == ()


def test_demand_beyond_the_machine_scales_every_cell_and_says_so():
    jobs = [job("a", 0.9, critical=True, peak=1.5), job("b", 1.9)]
    plan = place_cells(jobs, limits())
    assert plan.cells == {"c0": ("a",), "c1": ("b",)}
    # Means 1.0 and 2.0 (3.0 > 2): each cell gets 2/3 of its mean.
    assert plan.shares == pytest.approx({"c0": 2 / 3, "c1": 4 / 3})
    assert any("exceeds 2" in n for n in plan.notes)


def test_two_critical_jobs_on_two_cells_the_heavier_alone_rank_breaking_a_tie():
    lim = limits(max_cells=2)
    a, b, c = job("a", 0.3, critical=True, weight=2.0), job("b", 0.3, critical=True, rank=2), job("c", 0.2, rank=3)
    # {a},{b,c}: 0.2 + 0.5005·0.2 = 0.3001; {b},{a,c}: 0.2 + 1.001·0.2 = 0.4002; {c},{a,b}: 0.65045.
    plan = place_cells([a, b, c], lim)
    assert plan.cells == {"c0": ("a",), "c1": ("b", "c")}
    assert plan.cost == pytest.approx(0.3001)
    # Equal weights: b's rank 1 gives p_b = 1.001 > p_a = 1.0005, so b runs alone (0.4001 against 0.4002).
    a, b = job("a", 0.3, critical=True, rank=2), job("b", 0.3, critical=True, rank=1)
    plan = place_cells([a, b, c], lim)
    assert plan.cells == {"c0": ("b",), "c1": ("a", "c")}
    assert plan.cost == pytest.approx(0.4001)
    # Heavy bulk work: the two critical jobs share a cell (0.65045) rather than one of them the bulk job's 1 core.
    plan = place_cells([a, b, job("c", 1.0, rank=3)], lim)
    assert plan.cells == {"c0": ("a", "b"), "c1": ("c",)}


def test_a_pinned_job_gets_its_cell_and_nothing_else_joins_it():
    jobs = [job("a", 0.3, rank=3, pin="mine"), job("b", 0.3, critical=True), job("c", 0.5, rank=2)]
    # Unpinned, a would join c ({b},{a,c}); pinned, the one cell left holds b and c: 0.2 + 1.001·0.5.
    assert place_cells(jobs, limits(max_cells=3)).cells == {"c0": ("b",), "c1": ("c",), "mine": ("a",)}
    plan = place_cells(jobs, limits(max_cells=2))
    assert plan.cells == {"c0": ("b", "c"), "mine": ("a",)}
    assert plan.cost == pytest.approx(0.2 + 1.001 * 0.5)
    with pytest.raises(ValueError, match="max_cells: pins and the unpinned jobs need 2 cells; found 1"):
        place_cells(jobs, limits(max_cells=1))


def test_a_reader_stays_with_its_producer_unless_the_plan_pays_for_the_hop():
    jobs = [job("a", 0.3, critical=True), job("r", 0.5, rank=2, reads=("a",)), job("b", 1.0, rank=3)]
    # hop 1.0: {a,r},{b} = 1.001·0.5 + 0.2 = 0.7005 beats {a},{r,b} = 1.0 + 0.2.
    plan = place_cells(jobs, limits(max_cells=3, hop=1.0))
    assert plan.cells == {"c0": ("a", "r"), "c1": ("b",)}
    assert plan.cost == pytest.approx(0.7005)
    # hop 0.2: {a},{r,b} = 0.2 + 0.2 = 0.4.
    plan = place_cells(jobs, limits(max_cells=3, hop=0.2))
    assert plan.cells == {"c0": ("a",), "c1": ("r", "b")}
    assert plan.cost == pytest.approx(0.4)


def test_one_cell_holds_everything_as_c0_with_the_whole_machine():
    plan = place_cells(one_critical_three_bulk(0.4), limits(max_cells=1))
    assert plan.cells == {"c0": ("a", "b", "c", "d")}
    assert plan.shares == {"c0": 2.0}
    assert plan.cost == pytest.approx(0.1 + 1.001 * 1.2)


def test_a_job_stays_put_while_moving_gains_less_than_a_move():
    jobs = [job("a", 0.3, critical=True), job("b", 0.15, rank=2), job("c", 1.0, rank=3)]
    current = {"a": "c0", "b": "c0", "c": "c1"}
    # Kept: 0.2 + 1.001·0.15 = 0.35015; b joining c: 0.2 + the move. Gain 0.15015.
    kept = place_cells(jobs, limits(move=0.5), current)
    assert kept.cells == {"c0": ("a", "b"), "c1": ("c",)}
    assert kept.moves == ()
    assert kept.cost == pytest.approx(0.35015)
    moved = place_cells(jobs, limits(move=0.1), current)
    assert moved.cells == {"c0": ("a",), "c1": ("b", "c")}
    assert moved.moves == (("b", "c0", "c1"),)
    assert moved.cost == pytest.approx(0.3)


def test_at_most_max_moves_jobs_move():
    jobs = [job("a", 0.3, critical=True), job("b", 0.3, critical=True, rank=2)]
    jobs += [job("c", 0.5, rank=3), job("d", 0.5, rank=4)]
    current = dict.fromkeys("abcd", "c0")
    # One move: a leaving (0.2 + p_b·1.0 = 1.2005) beats b leaving (1.201) and c leaving (1.8012).
    one = place_cells(jobs, limits(max_cells=3, move=0.0, max_moves=1), current)
    assert one.moves == (("a", "c0", "c1"),)
    assert one.cost == pytest.approx(1.2005)
    # Two: a and b alone, c and d stay (0.3).
    two = place_cells(jobs, limits(max_cells=3, move=0.0, max_moves=2), current)
    assert two.cells == {"c0": ("c", "d"), "c1": ("a",), "c2": ("b",)}
    assert two.moves == (("a", "c0", "c1"), ("b", "c0", "c2"))
    assert two.cost == pytest.approx(0.3)


def test_a_new_pin_moves_its_job_whatever_the_movement_limit():
    jobs = [job("a", 0.3, critical=True, pin="alerts"), job("b", 0.3, critical=True, rank=2), job("c", 0.5, rank=3)]
    plan = place_cells(jobs, limits(max_cells=3, max_moves=0), dict.fromkeys("abc", "c0"))
    assert plan.cells == {"alerts": ("a",), "c0": ("b", "c")}
    assert plan.moves == (("a", "c0", "alerts"),)


def set_partitions(items: list[str]):
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for part in set_partitions(rest):
        for i in range(len(part)):
            yield [*part[:i], [first, *part[i]], *part[i + 1 :]]
        yield [[first], *part]


def brute_force(jobs: list[CellJob], lim: CellLimits, current: dict[str, str] | None) -> float:
    """The least cost over every feasible placement: pins honoured and exclusive, at most max_cells cells,
    with ``current`` at most max_moves moves among the jobs whose current cell is still open to them (an unpinned
    job's if no pin took it, a pinned job's if it is its pin)."""
    pins = {j.pin for j in jobs if j.pin is not None}
    if current is None:
        best = np.inf
        for part in set_partitions([j.id for j in jobs]):
            placed = {}
            for i, block in enumerate(part):
                pinned = {j.pin for j in jobs if j.id in block}
                if len(pinned) == 1 and None not in pinned:
                    placed[pinned.pop()] = block
                elif pinned == {None}:
                    placed[f"f{i}"] = block
                else:
                    break
            else:
                if len(part) <= lim.max_cells and len(placed) == len(part):
                    best = min(best, cell_cost(jobs, lim, placed))
        return best
    labels = sorted(set(current.values()) - pins) + [f"f{i}" for i in range(len(jobs))]
    options = [[j.pin] if j.pin is not None else labels for j in jobs]
    best = np.inf
    for choice in itertools.product(*options):
        where = dict(zip([j.id for j in jobs], choice, strict=True))
        if len(set(choice)) > lim.max_cells:
            continue
        movable = [j for j in jobs if (j.pin is None and current[j.id] not in pins) or current[j.id] == j.pin]
        if sum(where[j.id] != current[j.id] for j in movable) > lim.max_moves:
            continue
        placed: dict[str, list[str]] = {}
        for j, k in where.items():
            placed.setdefault(k, []).append(j)
        best = min(best, cell_cost(jobs, lim, placed, current))
    return best


def random_instance(rng: random.Random, with_current: bool):
    n = rng.randint(3, 5)
    ids = [f"j{i}" for i in range(n)]
    jobs = []
    for i, name in enumerate(ids):
        critical = rng.random() < 0.4
        cores = round(rng.uniform(0.05, 1.0), 2)
        reads = tuple(o for o in ids[:i] if rng.random() < 0.25)
        pin = rng.choice(["p0", "p1"]) if rng.random() < 0.15 else None
        weight = rng.choice([1.0, 2.0, 5.0])
        jobs.append(job(name, cores, critical, rng.randint(1, 5), weight, cores * rng.uniform(1, 3), reads, pin))
    pins = len({j.pin for j in jobs if j.pin is not None})
    lim = limits(
        cores=2.0,
        max_cells=rng.randint(pins + 1, pins + 3),
        overhead=rng.choice([0.0, 0.05, 0.3]),
        hop=rng.choice([0.0, 0.2, 1.0]),
        move=rng.choice([0.0, 0.1, 0.6]),
        max_moves=rng.randint(0, 2),
    )
    current = None
    if with_current:  # current's free cells fit the limit, so the movement limit binds
        free = [f"c{i}" for i in range(lim.max_cells - pins)]
        current = {j.id: rng.choice(free) for j in jobs}
    return jobs, lim, current


@pytest.mark.parametrize("seed", range(12))
def test_the_milp_finds_the_brute_force_optimum(seed):
    rng = random.Random(seed)
    for with_current in (False, True):
        jobs, lim, current = random_instance(rng, with_current)
        plan = place_cells(jobs, lim, current, time_limit_s=10.0)
        assert plan.solver == "highs optimal"
        assert plan.cost == pytest.approx(brute_force(jobs, lim, current), abs=1e-9)
        assert plan.cost == pytest.approx(cell_cost(jobs, lim, plan.cells, current), abs=1e-12)
        assert_feasible(jobs, lim, current, plan)


def assert_feasible(jobs, lim, current, plan):
    placed = sorted(j for members in plan.cells.values() for j in members)
    assert placed == sorted(j.id for j in jobs)
    assert len(plan.cells) <= lim.max_cells
    for j in jobs:
        if j.pin is not None:
            assert plan.cells[j.pin] == tuple(o.id for o in jobs if o.pin == j.pin)
    assert set(plan.shares) == set(plan.cells)
    assert sum(plan.shares.values()) == pytest.approx(lim.cores, abs=1e-12)
    if current:
        pins = {j.pin for j in jobs if j.pin is not None}
        pin_of = {j.id: j.pin for j in jobs}
        free = [m for m in plan.moves if (pin_of[m[0]] is None and m[1] not in pins) or m[1] == pin_of[m[0]]]
        assert len(free) <= lim.max_moves


def test_the_heuristic_answers_when_the_solver_fails_and_says_so(monkeypatch):
    def failed(self, *args, **kwargs):
        return Solution("failed", 0.0, np.zeros(self.n_cols), np.zeros(self.n_rows))

    monkeypatch.setattr(cells_module.Program, "solve", failed)
    plan = place_cells(one_critical_three_bulk(0.4), limits())
    assert plan.solver == "heuristic (highs: failed)"
    assert plan.cells == {"c0": ("a",), "c1": ("b", "c", "d")}
    assert plan.shares == pytest.approx({"c0": 0.7, "c1": 1.3})
    # Two critical jobs, two cells: the more important alone, the other packed with the bulk job.
    jobs = [job("a", 0.3, critical=True, rank=2), job("b", 0.3, critical=True, weight=3.0), job("c", 0.2, rank=3)]
    assert place_cells(jobs, limits(max_cells=2)).cells == {"c0": ("b",), "c1": ("a", "c")}
    rng = random.Random(7)
    for with_current in (False, True) * 10:
        jobs, lim, current = random_instance(rng, with_current)
        plan = place_cells(jobs, lim, current)
        assert plan.solver == "heuristic (highs: failed)"
        assert_feasible(jobs, lim, current, plan)
        assert plan.cost >= brute_force(jobs, lim, current) - 1e-9


def test_at_the_time_limit_the_better_of_the_incumbent_and_the_heuristic_stands(monkeypatch):
    solve = cells_module.Program.solve

    def stopped(self, *args, **kwargs):
        s = solve(self, *args, **kwargs)
        return Solution("time-limit", s.objective, s.x, s.row_dual, s.mip_gap)

    monkeypatch.setattr(cells_module.Program, "solve", stopped)
    jobs = [job("a", 0.3, critical=True), job("r", 0.5, rank=2, reads=("a",)), job("b", 1.0, rank=3)]
    # 1-opt takes the greedy {a},{r,b} (1.2) to the optimum {a,r},{b} (0.7005): HiGHS has nothing better.
    plan = place_cells(jobs, limits(max_cells=3, hop=1.0))
    assert plan.solver == "heuristic (highs: time limit, no better answer)"
    assert plan.cells == {"c0": ("a", "r"), "c1": ("b",)}
    # Without local search the greedy answer is worse than the incumbent, which stands.
    monkeypatch.setattr(cells_module, "_improve", lambda inst, limits, where, move_limit: dict(where))
    plan = place_cells(jobs, limits(max_cells=3, hop=1.0))
    assert plan.solver == "highs time limit (gap 0.0%)"
    assert plan.cells == {"c0": ("a", "r"), "c1": ("b",)}


def test_cell_shares_of_a_given_placement():
    jobs = one_critical_three_bulk(0.2)
    shares, notes = cell_shares(jobs, limits(cores=4.0), {"x": ("a", "b"), "y": ("c", "d")})
    # Peaks: x 0.1 + 0.8 + 0.2 = 1.1, y 0.5 (1.6); spare 2.4 by means 0.6 and 0.5 to both (each holds bulk work).
    assert shares == pytest.approx({"x": 1.1 + 2.4 * 0.6 / 1.1, "y": 0.5 + 2.4 * 0.5 / 1.1})
    assert notes == ()


def test_default_limits_follow_memory_and_cores():
    assert default_limits(2.0, 23.0).max_cells == 4  # 4 per 2 cores; memory would allow 5
    assert default_limits(2.0, 4.0).max_cells == 1  # half of 4 GiB holds one 2 GiB application
    assert default_limits(1.5).max_cells == 3
    lim = default_limits(2.0)
    assert (lim.cores, lim.cell_overhead_cores, lim.max_moves) == (2.0, 0.01, 1)


@pytest.mark.parametrize(
    ("jobs", "lim", "message"),
    [
        ([job("a", 0.3), job("a", 0.2)], limits(), "expected unique ids; found 'a' twice"),
        ([job("a", 0.0)], limits(), "job 'a': cores expected > 0"),
        ([job("a", 0.3, peak=0.1)], limits(), "peak_cores expected >= cores"),
        ([job("a", 0.3)], limits(max_cells=0), "max_cells >= 1"),
        ([job("a", 0.3)], limits(hop=-1.0), "costs >= 0"),
    ],
)
def test_malformed_input_is_refused_with_the_field(jobs, lim, message):
    with pytest.raises(ValueError, match=message):
        place_cells(jobs, lim)
