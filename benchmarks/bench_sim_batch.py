"""What batching source records into messages costs in fidelity, and buys in speed (strata.sim).

The synthetic 100-operator, 20-node scenario for ``--duration`` simulated
seconds at ``batch`` ∈ {1, 4, 16, 64} records per source message. Same offered
load in every run; a message of b records takes b × cost_per_record. Reported:
cpu time, events, node utilisation, sink throughput, and latency percentiles
(records-weighted, over all jobs) relative to batch 1.

Run: .venv/bin/python benchmarks/bench_sim_batch.py [--duration 30]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from strata.sim import SimOptions, Simulation
from strata.sim.scenarios import synthetic


def weighted_quantile(lat: np.ndarray, n: np.ndarray, q: float) -> float:
    order = np.argsort(lat, kind="stable")
    cum = np.cumsum(n[order])
    return float(lat[order][np.searchsorted(cum, q * cum[-1], side="left")])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--duration", type=float, default=30.0)
    args = ap.parse_args()
    scenario = synthetic()
    rows = []
    for batch in (1, 4, 16, 64):
        sim = Simulation(scenario, SimOptions(seed=1, batch=batch))
        c0 = time.process_time()
        sim.run(args.duration)
        cpu = time.process_time() - c0
        m = sim.metrics
        lat = np.concatenate([np.frombuffer(a, dtype=float) for a in m.lat.values()])
        n = np.concatenate([np.frombuffer(a, dtype=np.int64) for a in m.lat_n.values()])
        s = m.summary()
        rows.append(
            {
                "batch": batch,
                "cpu_s": cpu,
                "events": sim.events,
                "utilisation": s["node_utilisation_mean"],
                "throughput": s["delivered"] / args.duration,
                "p50": weighted_quantile(lat, n, 0.5),
                "p99": weighted_quantile(lat, n, 0.99),
            }
        )
    base = rows[0]
    table = Table(
        title=f"batching: synthetic 100 ops / 20 nodes, {args.duration:g} simulated s (cpu time; shared machine)"
    )
    for col in ("batch", "cpu s", "events", "util", "out rec/s", "p50 ms", "p99 ms", "p50 / batch 1", "p99 / batch 1"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(
            str(r["batch"]),
            f"{r['cpu_s']:.1f}",
            f"{r['events']:,}",
            f"{r['utilisation']:.1%}",
            f"{r['throughput']:,.0f}",
            f"{r['p50'] * 1e3:.1f}",
            f"{r['p99'] * 1e3:.1f}",
            f"{r['p50'] / base['p50']:.2f}",
            f"{r['p99'] / base['p99']:.2f}",
        )
    Console().print(table)
    out = Path(__file__).parent / "results" / "sim_batch.json"
    out.write_text(json.dumps({"duration": args.duration, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
