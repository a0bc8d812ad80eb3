"""``lsd``: shaped like SODA's LSD application (SODA §5).

104 jobs with 737 light PEs in their first templates, highly interconnected:
about ``share`` of the jobs also consume a stream of an earlier job, so weak
components of the joined graph span several jobs. Costs are scaled so the
nominal-rate cpu demand is ``demand_cores`` (default 160 cores: overloaded at 30
four-core nodes, comfortable at 82). Knobs and defaults:

- ``nodes`` (82), ``cores`` per node (4), ``demand_cores`` (160)
- ``jobs`` (104), ``pes`` (737): total PEs in first templates
- ``share`` (0.6): fraction of jobs that also read another job's stream
- ``two_templates`` (0.15): fraction of jobs that also offer a lighter template
- ``required`` (4): the best-ranked jobs are required
"""

from __future__ import annotations

from typing import Any

import numpy as np

from strata.generators.common import node_group, scale_costs

_MIDDLE = ["filter", "map", "map", "filter", "keyed_stateful", "window_aggregate"]


def _template(
    rng: np.random.Generator, job: int, n_pe: int, name: str, shared_from: str | None, light: float
) -> dict[str, Any]:
    ops: list[dict[str, Any]] = [
        {
            "name": "src",
            "kind": "source",
            "cost_per_record": 1e-5,
            "source": {
                "rate": float(rng.integers(200, 2000)),
                "seed": job,
                "keys": {"count": 1000, "zipf_s": round(float(rng.uniform(0, 1.2)), 2)},
            },
            "cpu_max": 4.0,
        }
    ]
    streams: list[dict[str, Any]] = []
    previous = ["src"]
    for i in range(1, n_pe - 1):
        kind = _MIDDLE[int(rng.integers(len(_MIDDLE)))]
        op: dict[str, Any] = {
            "name": f"pe{i}",
            "kind": kind,
            "cost_per_record": float(rng.uniform(2e-5, 2e-4)) * light,
            "selectivity": round(float(rng.uniform(0.5, 1.0)), 3) if kind != "map" else 1.0,
            "cpu_max": 4.0,
            "memory": "128MiB",
        }
        if kind == "window_aggregate":
            op["window"] = {"size_s": 10}
            op["selectivity"] = 0.2
        ops.append(op)
        # Mostly chains, sometimes a fan-in from an earlier PE of the job.
        streams.append({"from": previous[-1], "to": op["name"], "bytes_per_record": int(rng.integers(100, 1000))})
        if len(previous) > 2 and rng.random() < 0.25:
            streams.append(
                {
                    "from": previous[int(rng.integers(len(previous) - 1))],
                    "to": op["name"],
                    "bytes_per_record": int(rng.integers(100, 1000)),
                }
            )
        previous.append(op["name"])
    if shared_from is not None:
        streams.append(
            {
                "from": shared_from,
                "to": previous[min(1, len(previous) - 1)],
                "bytes_per_record": int(rng.integers(100, 1000)),
            }
        )
    ops.append({"name": "sink", "kind": "sink", "cost_per_record": 1e-6})
    value: dict[str, Any] = {"kind": "identity"}
    if rng.random() < 0.3:
        knee = float(rng.uniform(50, 500))
        value = {"kind": "piecewise_linear", "points": [[0, 0], [knee, knee], [10 * knee, 1.5 * knee]]}
    streams.append(
        {
            "from": previous[-1],
            "to": "sink",
            "weight": round(float(rng.uniform(0.5, 2)), 3),
            "value": value,
            "bytes_per_record": 200,
        }
    )
    return {"name": name, "operators": ops, "streams": streams}


def lsd(
    seed: int = 1,
    nodes: int = 82,
    cores: float = 4,
    demand_cores: float = 160,
    jobs: int = 104,
    pes: int = 737,
    share: float = 0.6,
    two_templates: float = 0.15,
    required: int = 4,
) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    per_job = [pes // jobs + (1 if i < pes % jobs else 0) for i in range(jobs)]
    ranks = sorted(int(r) for r in rng.integers(1, 11, size=jobs))
    out: list[dict[str, Any]] = []
    for j in range(jobs):
        shared_from = None
        if j > 0 and rng.random() < share:
            # pe1 exists in every template of every job, so the shared stream always resolves.
            shared_from = f"job{int(rng.integers(max(0, j - 10), j))}.pe1"
        templates = [_template(rng, j, per_job[j], "full", shared_from, 1.0)]
        if rng.random() < two_templates:
            light = _template(np.random.default_rng([seed, j]), j, max(3, per_job[j] - 2), "light", None, 0.5)
            templates.append(light)
        out.append(
            {
                "id": f"job{j}",
                "rank": ranks[j],
                "required": j < required,
                "target_latency_s": 30.0,
                "templates": templates,
            }
        )
    scale_costs(out, demand_cores)
    return {
        "name": f"lsd-{nodes}n-seed{seed}",
        "description": f"LSD-shaped: {jobs} jobs, {pes} PEs, {nodes} nodes x {cores} cores",
        "cluster": {"node_groups": [node_group(nodes, cores)]},
        "jobs": out,
    }
