"""Pieces every generator shares: node lists, operators, cost scaling."""

from __future__ import annotations

from typing import Any

import numpy as np


def node_group(
    count: int,
    cores: float,
    memory: str = "16GiB",
    nic: str = "1Gbit/s",
    prefix: str = "n",
    labels: list[str] | None = None,
) -> dict[str, Any]:
    group: dict[str, Any] = {"prefix": prefix, "count": count, "cores": cores, "memory": memory, "nic": nic}
    if labels:
        group["labels"] = labels
    return group


def scale_costs(jobs: list[dict[str, Any]], target_cores: float) -> float:
    """Rescale every ``cost_per_record`` so nominal-rate cpu demand totals ``target_cores``.

    Demand is computed on each job's first template with unlimited cpu, the way
    the planner sees it; returns the factor applied.
    """
    from strata.model import Cluster, Job, Scenario, joined_graph, offered_rates

    scenario = Scenario(cluster=Cluster(node_groups=[node_group(1, 1)]), jobs=[Job.model_validate(j) for j in jobs])
    graph = joined_graph(scenario)
    demand = sum(rate * graph.nodes[pe]["op"].cost_per_record for pe, rate in offered_rates(graph).items())
    factor = target_cores / demand if demand > 0 else 1.0
    for job in jobs:
        for tpl in job["templates"]:
            for op in tpl["operators"]:
                op["cost_per_record"] = float(f"{op['cost_per_record'] * factor:.4g}")
                if "cpu_max" in op:
                    op["cpu_max"] = float(f"{op['cpu_max'] * factor:.4g}")
    return factor


def log_uniform(rng: np.random.Generator, lo: float, hi: float) -> float:
    return float(np.exp(rng.uniform(np.log(lo), np.log(hi))))
