"""The best achievable balance for given key-group loads: LPT and the exact optimum.

Placing indivisible key groups on m instances to minimise the most loaded one
is makespan scheduling on identical machines (P||C_max). Graham's
longest-processing-time rule (sort by load, give each to the least loaded
instance) is within (4/3 − 1/(3m)) of the optimum (Graham 1969). Together with
the trivial lower bound max(largest key group, mean) this brackets the best
imbalance any routing table can reach — the yardstick AutoFlow's
hotspot diminishing is measured against. ``optimal_makespan`` solves small
cases exactly with OR-Tools CP-SAT to check both LPT's guarantee and the
hotspot-diminishing result; on time-out it returns its best feasible answer
(never worse than LPT) and says it is not proven optimal.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from heapq import heapify, heapreplace


@dataclass(frozen=True, slots=True)
class Assignment:
    """A table key group → instance, the makespan (largest instance load) it reaches, and whether it is optimal."""

    table: dict[int, int]
    makespan: float
    optimal: bool


def lpt(loads: Mapping[int, float], instances: int) -> Assignment:
    """Graham's LPT: heaviest key group first, each to the currently least loaded instance (ties: lowest index)."""
    if instances <= 0:
        raise ValueError("need at least one instance")
    heap = [(0.0, i) for i in range(instances)]
    heapify(heap)
    table: dict[int, int] = {}
    for group in sorted(loads, key=lambda g: (-loads[g], g)):
        load, inst = heap[0]
        table[group] = inst
        heapreplace(heap, (load + loads[group], inst))
    return Assignment(table, max(load for load, _ in heap), optimal=False)


def lower_bound(loads: Mapping[int, float], instances: int) -> float:
    """No table does better than max(largest key group, total / instances)."""
    total = sum(loads.values())
    return max(max(loads.values(), default=0.0), total / instances)


def lpt_ratio(instances: int) -> float:
    """Graham's worst-case ratio of LPT to the optimum on ``instances`` identical machines."""
    return 4.0 / 3.0 - 1.0 / (3.0 * instances)


def best_imbalance_bounds(loads: Mapping[int, float], instances: int) -> tuple[float, float]:
    """(lower, upper) bounds on the best achievable max/mean.

    Upper: LPT's makespan. Lower: the trivial bound, or LPT / Graham's ratio if higher.
    """
    total = sum(loads.values())
    if total <= 0:
        return 1.0, 1.0
    mean = total / instances
    upper = lpt(loads, instances).makespan
    lower = max(lower_bound(loads, instances), upper / lpt_ratio(instances))
    return lower / mean, upper / mean


def _integer_weights(loads: list[float]) -> list[int]:
    """CP-SAT needs integers: keep integral loads exact, otherwise scale the largest to 10^6."""
    if all(float(x).is_integer() for x in loads):
        return [int(x) for x in loads]
    scale = 1e6 / max(max(loads), 1e-300)
    return [round(x * scale) for x in loads]


def optimal_makespan(
    loads: Mapping[int, float], instances: int, time_limit_s: float = 10.0, seed: int = 0
) -> Assignment:
    """Exact P||C_max by CP-SAT (meant for small cases: tests and quality checks).

    Non-integral loads are scaled to integers (largest = 10^6), so "optimal"
    is up to that rounding. LPT's table is the solution hint, so the answer is
    never worse than LPT even when the time limit stops the search; ``optimal``
    then is False.
    """
    from ortools.sat.python import cp_model

    groups = sorted(loads)
    if not groups:
        return Assignment({}, 0.0, optimal=True)
    weights = _integer_weights([loads[g] for g in groups])
    heuristic = lpt(loads, instances)
    model = cp_model.CpModel()
    x = [[model.new_bool_var(f"x{g}_{i}") for i in range(instances)] for g in range(len(groups))]
    for row in x:
        model.add_exactly_one(row)
    makespan = model.new_int_var(max(weights), sum(weights), "makespan")
    for i in range(instances):
        model.add(sum(w * x[g][i] for g, w in enumerate(weights)) <= makespan)
    # Instances are interchangeable: pin the heaviest key group to instance 0.
    heaviest = max(range(len(groups)), key=lambda g: weights[g])
    model.add(x[heaviest][0] == 1)
    model.minimize(makespan)
    for g, group in enumerate(groups):
        for i in range(instances):
            model.add_hint(x[g][i], heuristic.table[group] == i)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit_s
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = seed
    status = solver.solve(model)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return heuristic
    table = {group: next(i for i in range(instances) if solver.value(x[g][i])) for g, group in enumerate(groups)}
    per_instance = [0.0] * instances
    for group, inst in table.items():
        per_instance[inst] += loads[group]
    found = max(per_instance)
    if found > heuristic.makespan and not math.isclose(found, heuristic.makespan):
        return heuristic
    return Assignment(table, found, optimal=status == cp_model.OPTIMAL)
