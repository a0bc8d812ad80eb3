"""``skewed``: keyed aggregations with Zipf(s) keys (AutoFlow's setting).

Knobs and defaults:

- ``zipf_s`` (1.0): key skew (0 = uniform); ``keys`` (10000); ``drift_period_s`` (None):
  rotate the hot keys every so many seconds
- ``jobs`` (1); ``instances`` (8) of the keyed operator; ``key_groups`` (128)
- ``rate`` (20000 records/s per job); ``nodes`` (4) × ``cores`` (4); ``load`` (0.7)
- ``state_bytes_per_key`` (1024): keyed state, so migrations have a cost
"""

from __future__ import annotations

from typing import Any

from strata.generators.common import node_group, scale_costs


def skewed(
    seed: int = 1,
    zipf_s: float = 1.0,
    keys: int = 10000,
    drift_period_s: float | None = None,
    jobs: int = 1,
    instances: int = 8,
    key_groups: int = 128,
    rate: float = 20000.0,
    nodes: int = 4,
    cores: float = 4,
    load: float = 0.7,
    state_bytes_per_key: int = 1024,
) -> dict[str, Any]:
    key_spec: dict[str, Any] = {"count": keys, "zipf_s": zipf_s}
    if drift_period_s:
        key_spec["drift_period_s"] = drift_period_s
    out: list[dict[str, Any]] = []
    for i in range(jobs):
        out.append(
            {
                "id": f"skewed{i}",
                "rank": 1 + i,
                "target_latency_s": 5.0,
                "templates": [
                    {
                        "name": "default",
                        "operators": [
                            {
                                "name": "src",
                                "kind": "source",
                                "cost_per_record": 1e-6,
                                "source": {"rate": rate, "seed": seed * 1000 + i, "keys": key_spec},
                            },
                            {
                                "name": "agg",
                                "kind": "keyed_stateful",
                                "aggregate": {"fn": "sum", "column": "value"},
                                "cost_per_record": 1e-4,
                                "instances": instances,
                                "key_groups": key_groups,
                                "state_bytes": keys * state_bytes_per_key,
                            },
                            {"name": "out", "kind": "sink", "cost_per_record": 1e-6},
                        ],
                        "streams": [
                            {"from": "src", "to": "agg", "bytes_per_record": 64},
                            {"from": "agg", "to": "out", "weight": 1.0, "bytes_per_record": 64},
                        ],
                    }
                ],
            }
        )
    scale_costs(out, load * nodes * cores)
    return {
        "name": f"skewed-s{zipf_s:g}-seed{seed}",
        "description": f"{jobs} keyed aggregation(s), Zipf s={zipf_s:g} over {keys} keys",
        "cluster": {"node_groups": [node_group(nodes, cores)]},
        "jobs": out,
    }
