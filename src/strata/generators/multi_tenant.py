"""``multi-tenant``: latency-sensitive filters next to bulk window aggregations (Cameo §evaluation).

Knobs and defaults:

- ``latency_jobs`` (4): filter queries, rank 1, target latency ``latency_target_s`` (1 s)
- ``bulk_jobs`` (2): keyed tumbling-window aggregations, rank 2, target ``bulk_target_s`` (30 s)
- ``nodes`` (4) × ``cores`` (4); ``load`` (0.8): nominal cpu demand / cluster cores
- ``bursty`` (True): bulk sources arrive in on/off bursts
"""

from __future__ import annotations

from typing import Any

from strata.generators.common import node_group, scale_costs


def multi_tenant(
    seed: int = 1,
    latency_jobs: int = 4,
    bulk_jobs: int = 2,
    nodes: int = 4,
    cores: float = 4,
    load: float = 0.8,
    latency_target_s: float = 1.0,
    bulk_target_s: float = 30.0,
    bursty: bool = True,
) -> dict[str, Any]:
    jobs: list[dict[str, Any]] = []
    for i in range(latency_jobs):
        jobs.append(
            {
                "id": f"alert{i}",
                "rank": 1,
                "target_latency_s": latency_target_s,
                "templates": [
                    {
                        "name": "default",
                        "operators": [
                            {
                                "name": "events",
                                "kind": "source",
                                "cost_per_record": 1e-6,
                                "source": {"rate": 500.0, "seed": seed * 1000 + i, "keys": {"count": 1000}},
                            },
                            {
                                "name": "match",
                                "kind": "filter",
                                "predicate": "value > 0.9",
                                "selectivity": 0.1,
                                "cost_per_record": 1e-4,
                            },
                            {"name": "out", "kind": "sink", "cost_per_record": 1e-6},
                        ],
                        "streams": [
                            {"from": "events", "to": "match", "bytes_per_record": 100},
                            {"from": "match", "to": "out", "weight": 5.0, "bytes_per_record": 100},
                        ],
                    }
                ],
            }
        )
    for i in range(bulk_jobs):
        arrivals = (
            {"process": "onoff", "period_s": 30, "on_s": 3, "burst_factor": 3} if bursty else {"process": "poisson"}
        )
        jobs.append(
            {
                "id": f"bulk{i}",
                "rank": 2,
                "target_latency_s": bulk_target_s,
                "templates": [
                    {
                        "name": "default",
                        "operators": [
                            {
                                "name": "log",
                                "kind": "source",
                                "cost_per_record": 1e-6,
                                "source": {
                                    "rate": 4000.0,
                                    "seed": seed * 1000 + 100 + i,
                                    "arrivals": arrivals,
                                    "keys": {"count": 10000, "zipf_s": 0.8},
                                },
                            },
                            {"name": "parse", "kind": "map", "cost_per_record": 2e-4},
                            {
                                "name": "per_key",
                                "kind": "window_aggregate",
                                "window": {"size_s": 10, "watermark_s": 1},
                                "aggregate": {"fn": "sum", "column": "value"},
                                "selectivity": 0.05,
                                "cost_per_record": 3e-4,
                                "instances": 2,
                            },
                            {"name": "out", "kind": "sink", "cost_per_record": 1e-6},
                        ],
                        "streams": [
                            {"from": "log", "to": "parse"},
                            {"from": "parse", "to": "per_key"},
                            {"from": "per_key", "to": "out", "weight": 1.0},
                        ],
                    }
                ],
            }
        )
    scale_costs(jobs, load * nodes * cores)
    return {
        "name": f"multi-tenant-seed{seed}",
        "description": f"{latency_jobs} latency-sensitive filters + {bulk_jobs} bulk aggregations at load {load}",
        "cluster": {"node_groups": [node_group(nodes, cores)]},
        "jobs": jobs,
    }
