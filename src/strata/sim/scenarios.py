"""Small scenarios with known answers, and the synthetic scale scenario of the benchmarks.

Each builder returns a validated :class:`strata.model.Scenario`, so the
simulator is exercised through the same model as every other level.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from strata.model import Scenario


def _node(name: str, cores: float, nic: float = 1e15) -> dict[str, Any]:
    return {"name": name, "cores": cores, "nic": nic}


def single_queue(
    rate: float, cost: float, cores: int = 1, arrivals: str = "poisson", seed: int = 0, keys: int = 1000
) -> tuple[Scenario, dict[str, str]]:
    """A source whose own instance is an M/·/c queue: records arrive at it, wait, and take ``cost`` each.

    The source instance sits alone on a ``cores``-core node and the free sink on
    another, so with ``network_latency=0`` a record's end-to-end latency is its
    sojourn in the queue. Returns the scenario and that placement.
    """
    doc = {
        "name": "single-queue",
        "cluster": {"nodes": [_node("q", cores), _node("out", 1)]},
        "jobs": [
            {
                "id": "q",
                "rank": 1,
                "target_latency_s": 10 * cost,
                "templates": [
                    {
                        "operators": [
                            {
                                "name": "src",
                                "kind": "source",
                                "cost_per_record": cost,
                                "source": {
                                    "rate": rate,
                                    "arrivals": {"process": arrivals},
                                    "seed": seed,
                                    "keys": {"count": keys},
                                },
                            },
                            {"name": "sink", "kind": "sink", "cost_per_record": 0.0},
                        ],
                        "streams": [{"from": "src", "to": "sink"}],
                    }
                ],
            }
        ],
    }
    return Scenario.model_validate(doc), {"q.src": "q", "q.sink": "out"}


def chain(
    kinds: list[dict[str, Any]],
    rate: float = 1000.0,
    nodes: int = 2,
    cores: float = 4,
    keys: dict[str, Any] | None = None,
    arrivals: str = "poisson",
    target: float = 5.0,
) -> Scenario:
    """source → ``kinds`` (operator dicts, names op1, op2, ...) → sink, on ``nodes`` identical nodes."""
    ops: list[dict[str, Any]] = [
        {
            "name": "src",
            "kind": "source",
            "cost_per_record": 1e-6,
            "source": {"rate": rate, "arrivals": {"process": arrivals}, "keys": keys or {"count": 1000}},
        }
    ]
    for i, op in enumerate(kinds, 1):
        ops.append({"name": f"op{i}", "cost_per_record": 1e-5, **op})
    ops.append({"name": "sink", "kind": "sink", "cost_per_record": 1e-6})
    streams = [{"from": a["name"], "to": b["name"], "bytes_per_record": 100} for a, b in itertools.pairwise(ops)]
    doc = {
        "name": "chain",
        "cluster": {"node_groups": [{"prefix": "n", "count": nodes, "cores": cores}]},
        "jobs": [
            {"id": "c", "rank": 1, "target_latency_s": target, "templates": [{"operators": ops, "streams": streams}]}
        ],
    }
    return Scenario.model_validate(doc)


def synthetic(
    operators: int = 100,
    nodes: int = 20,
    cores: float = 4,
    jobs: int = 10,
    rate: float = 2000.0,
    load: float = 0.5,
    seed: int = 1,
) -> Scenario:
    """``jobs`` chains totalling ``operators`` PEs over ``nodes`` nodes, costs scaled to ``load`` utilisation.

    Mixed kinds (filter, map, keyed_stateful, window_aggregate) with Poisson
    sources and Zipf keys: the benchmark scenario of the performance target
    (100 operators, 20 nodes).
    """
    rng = np.random.default_rng(seed)
    per_job = [operators // jobs + (1 if j < operators % jobs else 0) for j in range(jobs)]
    kinds = ["filter", "map", "keyed_stateful", "map", "window_aggregate"]
    docs = []
    demand = 0.0
    for j, n in enumerate(per_job):
        ops: list[dict[str, Any]] = [
            {
                "name": "src",
                "kind": "source",
                "cost_per_record": 1e-6,
                "source": {"rate": rate, "seed": j, "keys": {"count": 1000, "zipf_s": 0.8}},
            }
        ]
        flow = rate
        demand += flow * 1e-6
        for i in range(1, n - 1):
            kind = kinds[int(rng.integers(len(kinds)))]
            op: dict[str, Any] = {
                "name": f"pe{i}",
                "kind": kind,
                "cost_per_record": float(rng.uniform(2e-5, 1e-4)),
                "selectivity": 1.0 if kind in ("map", "keyed_stateful") else 0.8,
                "instances": 2,
            }
            if kind == "window_aggregate":
                op.update(window={"size_s": 5}, selectivity=1.0)
            demand += flow * op["cost_per_record"]
            flow *= op["selectivity"] if kind != "window_aggregate" else 0.2
            ops.append(op)
        ops.append({"name": "sink", "kind": "sink", "cost_per_record": 1e-6})
        streams = [{"from": a["name"], "to": b["name"], "bytes_per_record": 200} for a, b in itertools.pairwise(ops)]
        docs.append(
            {
                "id": f"j{j}",
                "rank": j + 1,
                "target_latency_s": 2.0,
                "templates": [{"operators": ops, "streams": streams}],
            }
        )
    factor = load * nodes * cores / demand
    for job in docs:
        for op in job["templates"][0]["operators"]:
            if op["kind"] not in ("source", "sink"):
                op["cost_per_record"] *= factor
    return Scenario.model_validate(
        {
            "name": "synthetic",
            "cluster": {"node_groups": [{"prefix": "n", "count": nodes, "cores": cores}]},
            "jobs": docs,
        }
    )
