"""``dac``: shaped like SODA's DAC application (SODA §5).

6 jobs, 51 PEs whose cpu needs differ by orders of magnitude (cost per record
log-uniform over ``spread`` decades), so a few PEs need several nodes and most
need a sliver of one. Costs are scaled so nominal demand is ``demand_cores``
(default 170: overloaded on 9 eight-core nodes, fits on 30). Knobs and defaults:

- ``nodes`` (30), ``cores`` per node (8), ``demand_cores`` (170), ``spread`` (4 decades)
- ``gpu_nodes`` (2): nodes labelled ``gpu``; one PE per job requires that label
"""

from __future__ import annotations

from typing import Any

import numpy as np

from strata.generators.common import log_uniform, node_group, scale_costs

_PES_PER_JOB = (12, 10, 9, 8, 7, 5)


def dac(
    seed: int = 1, nodes: int = 30, cores: float = 8, demand_cores: float = 170, spread: float = 4.0, gpu_nodes: int = 2
) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    jobs: list[dict[str, Any]] = []
    for j, n_pe in enumerate(_PES_PER_JOB):
        ops: list[dict[str, Any]] = [
            {
                "name": "ingest",
                "kind": "source",
                "cost_per_record": 1e-6,
                "source": {"rate": float(rng.integers(2000, 20000)), "seed": j},
                "cpu_max": 64.0,
            }
        ]
        streams: list[dict[str, Any]] = []
        for i in range(1, n_pe - 1):
            cost = log_uniform(rng, 1e-7, 1e-7 * 10**spread)
            ops.append(
                {
                    "name": f"pe{i}",
                    "kind": "map" if i % 3 else "filter",
                    "cost_per_record": cost,
                    "selectivity": 1.0 if i % 3 else 0.7,
                    "cpu_max": 64.0,
                    "memory": "512MiB",
                }
            )
            src = ops[int(rng.integers(max(0, i - 2), i))]["name"]
            streams.append({"from": src, "to": f"pe{i}", "bytes_per_record": int(rng.integers(200, 4000))})
        if gpu_nodes:
            ops[int(rng.integers(1, n_pe - 1))]["constraints"] = {"required_labels": ["gpu"]}
        ops.append({"name": "store", "kind": "sink", "cost_per_record": 1e-7})
        consumed = {s["from"] for s in streams}
        leaves = [op["name"] for op in ops[1:] if op["name"] not in consumed and op["kind"] != "sink"]
        for leaf in leaves or [ops[-2]["name"]]:
            streams.append(
                {"from": leaf, "to": "store", "weight": round(float(rng.uniform(0.5, 3)), 3), "bytes_per_record": 500}
            )
        jobs.append(
            {
                "id": f"dac{j}",
                "rank": j + 1,
                "required": j == 0,
                "target_latency_s": 60.0,
                "templates": [{"name": "default", "operators": ops, "streams": streams}],
            }
        )
    scale_costs(jobs, demand_cores)
    groups = [node_group(nodes - gpu_nodes, cores)]
    if gpu_nodes:
        groups.append(node_group(gpu_nodes, cores, prefix="gpu", labels=["gpu"]))
    return {
        "name": f"dac-{nodes}n-seed{seed}",
        "description": f"DAC-shaped: 6 jobs, 51 PEs, cpu needs over {spread:g} decades, {nodes} nodes",
        "cluster": {"node_groups": groups},
        "jobs": jobs,
    }
