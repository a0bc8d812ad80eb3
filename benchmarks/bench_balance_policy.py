"""Hotspot diminishing against the best achievable balance, engine-free (AutoFlow's algorithm, SEEDS.md).

Three experiments, each printing a table and writing
``benchmarks/results/balance_policy_<name>.json``:

- ``zipf``: the simulator's key-group loads of Zipf(s) keys (10 000 keys, 128
  key groups, expected shares, no sampling noise) on 8 instances, starting
  from hash routing (g mod 8): max/mean after rounds 1–5 of at most K moves,
  against LPT, the lower bound max(largest group, mean) and the CP-SAT
  optimum (10 s limit; "proven" says whether it finished).
- ``random``: small random cases (Pareto loads, 10–14 key groups on 3–4
  instances, random start tables): hotspot diminishing run until it stops,
  and LPT, each against the exact optimum — the quality of the local moves
  and Graham's 4/3 − 1/(3m) guarantee for LPT.
- ``speed``: wall time of one round for 128 groups / 8 instances and 4096 groups / 256 instances.

    .venv/bin/python benchmarks/bench_balance_policy.py all
"""

from __future__ import annotations

import json
import random
import statistics
import time
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from strata.balance import BalanceConfig, diminish_hotspots, imbalance, instance_loads, lower_bound, lpt, lpt_ratio
from strata.balance.lpt import optimal_makespan
from strata.runners.autoflow import expected_group_loads

RESULTS = Path(__file__).parent / "results"
app = typer.Typer(add_completion=False, help=__doc__)
console = Console(width=160)


def write(name: str, doc: dict[str, Any]) -> None:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"balance_policy_{name}.json"
    path.write_text(json.dumps(doc, indent=2, default=float))
    console.print(f"wrote {path}")


@app.command()
def zipf(instances: int = 8, groups: int = 128, moves: int = 8, threshold: float = 1.05, rounds: int = 5) -> None:
    """Rounds of hotspot diminishing from hash routing vs LPT and the optimum."""
    rows = []
    table = Table(
        title=f"Zipf keys, {groups} key groups on {instances} instances, ≤ {moves} moves/round, θ={threshold}"
    )
    for col in (
        "s",
        "hash",
        *(f"round {k}" for k in range(1, rounds + 1)),
        "LPT",
        "lower",
        "optimum",
        "proven",
        "r3 / LPT",
        "irreducible",
    ):
        table.add_column(col, justify="right")
    for s in (0.8, 1.0, 1.2, 1.5):
        loads = expected_group_loads(s, groups=groups)
        mean = sum(loads.values()) / instances
        route = {g: g % instances for g in range(groups)}
        series = [imbalance(instance_loads(loads, route, instances))]
        irreducible = 0
        for k in range(rounds):
            plan = diminish_hotspots(
                loads, route, instances, config=BalanceConfig(threshold, moves, cooldown_s=0.0), now=float(k)
            )
            route = plan.table
            series.append(plan.imbalance_after)
            irreducible = len(plan.irreducible)
        best = optimal_makespan(loads, instances, time_limit_s=10.0)
        row = {
            "zipf_s": s,
            "imbalance": series,
            "lpt": lpt(loads, instances).makespan / mean,
            "lower": lower_bound(loads, instances) / mean,
            "optimum": best.makespan / mean,
            "proven": best.optimal,
            "irreducible": irreducible,
        }
        row["round3_over_lpt"] = series[min(3, rounds)] / row["lpt"]
        rows.append(row)
        table.add_row(
            f"{s:g}",
            *(f"{x:.3f}" for x in series),
            f"{row['lpt']:.3f}",
            f"{row['lower']:.3f}",
            f"{row['optimum']:.3f}",
            "yes" if best.optimal else "no",
            f"{row['round3_over_lpt']:.3f}",
            str(irreducible),
        )
    console.print(table)
    write(
        "zipf",
        {"instances": instances, "groups": groups, "moves_per_round": moves, "threshold": threshold, "rows": rows},
    )


@app.command("random")
def random_cases(cases: int = 200, seed: int = 1) -> None:
    """Hotspot diminishing (to its stop) and LPT against the exact optimum on small random cases."""
    rng = random.Random(seed)
    ours, graham, worst_allowed = [], [], []
    proven = 0
    for _ in range(cases):
        m = rng.choice((3, 4))
        n = rng.randint(10, 14)
        loads = {g: rng.paretovariate(1.5) for g in range(n)}
        route = {g: rng.randrange(m) for g in range(n)}
        best = optimal_makespan(loads, m, time_limit_s=5.0)
        proven += best.optimal
        plan = diminish_hotspots(
            loads, route, m, config=BalanceConfig(threshold=1.0, max_moves=10**6, min_gain=0.0, cooldown_s=0.0)
        )
        ours.append(max(instance_loads(loads, plan.table, m)) / best.makespan)
        graham.append(lpt(loads, m).makespan / best.makespan)
        worst_allowed.append(lpt_ratio(m))

    def stats(xs: list[float]) -> dict[str, float]:
        return {
            "mean": statistics.fmean(xs),
            "p90": sorted(xs)[int(0.9 * len(xs))],
            "max": max(xs),
            "within_10pct": sum(x <= 1.1 + 1e-9 for x in xs) / len(xs),
            "optimal": sum(x <= 1 + 1e-9 for x in xs) / len(xs),
        }

    doc = {
        "cases": cases,
        "proven_optimal": proven,
        "diminish_over_opt": stats(ours),
        "lpt_over_opt": stats(graham),
        "lpt_guarantee_held": all(g <= w + 1e-9 for g, w in zip(graham, worst_allowed, strict=True)),
    }
    table = Table(title=f"{cases} random cases (10–14 key groups, 3–4 instances); makespan / optimum")
    for col in ("method", "mean", "p90", "max", "≤ 1.1×opt", "= opt"):
        table.add_column(col, justify="right")
    for name, key in (("hotspot diminishing", "diminish_over_opt"), ("LPT", "lpt_over_opt")):
        st = doc[key]
        table.add_row(
            name,
            f"{st['mean']:.3f}",
            f"{st['p90']:.3f}",
            f"{st['max']:.3f}",
            f"{st['within_10pct']:.0%}",
            f"{st['optimal']:.0%}",
        )
    console.print(table)
    console.print(
        f"optimum proven in {proven}/{cases}; LPT within Graham's bound in every case: {doc['lpt_guarantee_held']}"
    )
    write("random", doc)


@app.command()
def speed(repeats: int = 20) -> None:
    """Wall time of one hotspot-diminishing round (pure Python, this machine, shared cores)."""
    rows = []
    table = Table(title="one round, K = 8 moves (ms)")
    for col in ("key groups", "instances", "median ms", "max ms"):
        table.add_column(col, justify="right")
    for groups, m in ((128, 8), (4096, 256)):
        loads = expected_group_loads(1.0, keys=max(10000, 4 * groups), groups=groups)
        route = {g: g % m for g in range(groups)}
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            diminish_hotspots(loads, route, m, config=BalanceConfig(max_moves=8, cooldown_s=0.0))
            times.append(1e3 * (time.perf_counter() - t0))
        rows.append({"groups": groups, "instances": m, "median_ms": statistics.median(times), "max_ms": max(times)})
        table.add_row(str(groups), str(m), f"{statistics.median(times):.2f}", f"{max(times):.2f}")
    console.print(table)
    write("speed", {"rows": rows, "note": "wall time on a shared 2-core machine"})


@app.command("all")
def run_all() -> None:
    zipf()
    random_cases()
    speed()


if __name__ == "__main__":
    app()
