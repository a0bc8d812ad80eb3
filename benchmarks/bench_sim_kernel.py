"""Which event kernel for strata.sim: SimPy processes or a plain heap loop? (issue 4)

The same open Jackson network — Poisson arrivals through ``STATIONS`` tandem
M/M/c stations, FIFO — is simulated with SimPy (a process per customer,
``Resource`` per station) and with a heapq event loop (the kernel strata.sim
uses). Both must agree with Jackson's formula (sum of the stations' M/M/c
sojourn times); the figure of merit is station visits per second of wall time.

Run: .venv/bin/python benchmarks/bench_sim_kernel.py
"""

from __future__ import annotations

import heapq
import json
import math
import random
import time
from collections import deque
from pathlib import Path

from rich.console import Console
from rich.table import Table

STATIONS = 5
SERVERS = 2
MU = 1.0
LAM = 1.4  # ρ = 0.7 per station
CUSTOMERS = 60_000


def mmc_sojourn(c: int, lam: float, mu: float) -> float:
    a = lam / mu
    top = a**c / math.factorial(c) / (1 - a / c)
    erlang_c = top / (sum(a**k / math.factorial(k) for k in range(c)) + top)
    return erlang_c / (c * mu - lam) + 1 / mu


def run_simpy(seed: int) -> tuple[float, int]:
    import simpy

    rng = random.Random(seed)
    env = simpy.Environment()
    stations = [simpy.Resource(env, capacity=SERVERS) for _ in range(STATIONS)]
    sojourns: list[float] = []

    def customer():
        t0 = env.now
        for res in stations:
            with res.request() as req:
                yield req
                yield env.timeout(rng.expovariate(MU))
        sojourns.append(env.now - t0)

    def source():
        for _ in range(CUSTOMERS):
            yield env.timeout(rng.expovariate(LAM))
            env.process(customer())

    env.process(source())
    env.run()
    return sum(sojourns) / len(sojourns), len(sojourns) * STATIONS


def run_heap(seed: int) -> tuple[float, int]:
    rng = random.Random(seed)
    heap: list[tuple[float, int, int, int, float]] = []  # (t, seq, kind, station, customer start)
    busy = [0] * STATIONS
    queues: list[deque[float]] = [deque() for _ in range(STATIONS)]
    seq = 0
    t = 0.0
    for _ in range(CUSTOMERS):
        t += rng.expovariate(LAM)
        seq += 1
        heap.append((t, seq, 0, 0, t))
    heapq.heapify(heap)
    total = 0.0
    done = 0
    pop, push = heapq.heappop, heapq.heappush
    while heap:
        now, _, kind, s, start = pop(heap)
        if kind == 0:  # arrival at station s
            if busy[s] < SERVERS:
                busy[s] += 1
                seq += 1
                push(heap, (now + rng.expovariate(MU), seq, 1, s, start))
            else:
                queues[s].append(start)
        else:  # departure from station s
            if queues[s]:
                seq += 1
                push(heap, (now + rng.expovariate(MU), seq, 1, s, queues[s].popleft()))
            else:
                busy[s] -= 1
            if s + 1 < STATIONS:
                seq += 1
                push(heap, (now, seq, 0, s + 1, start))
            else:
                total += now - start
                done += 1
    return total / done, done * STATIONS


def main() -> None:
    expected = STATIONS * mmc_sojourn(SERVERS, LAM, MU)
    rows = []
    for name, fn in (("simpy", run_simpy), ("heap", run_heap)):
        best = math.inf
        for seed in (1, 2, 3):
            t0 = time.perf_counter()
            mean, visits = fn(seed)
            wall = time.perf_counter() - t0
            best = min(best, wall)
            rows.append(
                {
                    "kernel": name,
                    "seed": seed,
                    "mean_sojourn": mean,
                    "expected": expected,
                    "rel_error": mean / expected - 1,
                    "visits": visits,
                    "wall_s": wall,
                    "visits_per_s": visits / wall,
                }
            )
    table = Table(title=f"event kernels: {STATIONS} tandem M/M/{SERVERS} stations, ρ=0.7, {CUSTOMERS} customers")
    for col in ("kernel", "seed", "mean sojourn", "Jackson", "error", "visits/s", "wall s"):
        table.add_column(col)
    for r in rows:
        table.add_row(
            r["kernel"],
            str(r["seed"]),
            f"{r['mean_sojourn']:.3f}",
            f"{r['expected']:.3f}",
            f"{r['rel_error']:+.1%}",
            f"{r['visits_per_s']:,.0f}",
            f"{r['wall_s']:.2f}",
        )
    console = Console()
    console.print(table)
    speed = {k: sum(r["visits_per_s"] for r in rows if r["kernel"] == k) / 3 for k in ("simpy", "heap")}
    console.print(f"heap / simpy speed: {speed['heap'] / speed['simpy']:.1f}× (mean of 3 seeds; machine shared, noisy)")
    out = Path(__file__).parent / "results" / "sim_kernel.json"
    out.write_text(json.dumps({"rows": rows, "speedup_heap_over_simpy": speed["heap"] / speed["simpy"]}, indent=2))


if __name__ == "__main__":
    main()
