"""Small scenarios with known answers, shared by the planner's tests (SODA §3–§4)."""

from __future__ import annotations

import itertools
from typing import Any

from strata.model import Scenario


def chain(
    job: str,
    rate: float,
    costs: list[float],
    rank: int = 1,
    required: bool = False,
    cpu_min: float = 0.0,
    weight: float = 1.0,
    value: dict | None = None,
    sel: float = 1.0,
    templates: list[tuple[str, list[float]]] | None = None,
) -> dict[str, Any]:
    """src → p1 → … → sink; ``costs`` are core-seconds per record of src, p1, …"""

    def tpl(name: str, cs: list[float]) -> dict[str, Any]:
        ops = [
            {"name": "src", "kind": "source", "source": {"rate": rate}, "cost_per_record": cs[0], "cpu_min": cpu_min}
        ]
        ops += [
            {"name": f"p{i}", "kind": "map", "cost_per_record": c, "selectivity": sel, "cpu_min": cpu_min}
            for i, c in enumerate(cs[1:], 1)
        ]
        ops.append({"name": "sink", "kind": "sink", "cost_per_record": 0.0})
        names = [o["name"] for o in ops]
        streams = [{"from": a, "to": b} for a, b in itertools.pairwise(names[:-1])]
        streams.append({"from": names[-2], "to": "sink", "weight": weight, "value": value or {"kind": "identity"}})
        return {"name": name, "operators": ops, "streams": streams}

    tpls = [tpl(n, c) for n, c in (templates or [("default", costs)])]
    return {"id": job, "rank": rank, "required": required, "templates": tpls}


def scenario(jobs: list[dict[str, Any]], nodes: int = 2, cores: float = 1.0, **node: Any) -> Scenario:
    return Scenario.model_validate(
        {
            "name": "case",
            "cluster": {"node_groups": [{"prefix": "n", "count": nodes, "cores": cores, **node}]},
            "jobs": jobs,
        }
    )


def test_chain_builds_a_valid_scenario():
    s = scenario([chain("a", 100, [0.001, 0.01])])
    assert [op.name for op in s.jobs[0].templates[0].operators] == ["src", "p1", "sink"]
    assert s.problems() == []


def multiple_choice(seed: int) -> Scenario:
    """A random multiple-choice macroQ instance (the ``mc`` benchmark's generator).

    8–12 jobs, each a chain src → p1 … → sink offering 2–4 templates that differ in per-record
    costs, selectivity and the value function of the sink stream (steps with 1–2 thresholds,
    linear with or without a negative intercept, identity); ranks 1–4 with ties; 1–2 required
    jobs (their cheapest templates fit); some cpu_min; cluster cores = 45% of the demand (Σ over
    jobs of their most expensive template's saturation cpu), on 2 nodes.
    """
    import numpy as np

    rng = np.random.default_rng([20261122, seed])
    n_jobs = int(rng.integers(8, 13))
    jobs, demand = [], 0.0
    for j in range(n_jobs):
        rate = float(rng.uniform(50, 200))
        n_ops = int(rng.integers(1, 4))
        base = [float(rng.uniform(0, 0.001))] + [float(rng.uniform(0.002, 0.01)) for _ in range(n_ops)]
        sel = float(rng.uniform(0.5, 1.0))
        cpu_min = float(rng.choice([0.0, 0.0, 0.02, 0.05]))
        tpls, worst = [], 0.0
        for t in range(int(rng.integers(2, 5))):
            scale = 1.0 if t == 0 else float(rng.uniform(0.3, 0.9))
            costs = [c * scale for c in base]
            out = rate * sel ** (len(costs) - 1)  # records/s reaching the sink when nothing is dropped
            kind = rng.choice(["step", "step2", "linear", "linear_neg", "identity"])
            quality = 1.0 if t == 0 else float(rng.uniform(0.3, 0.95))  # lighter templates are worth less
            if kind == "step":
                value = {"kind": "step", "steps": [[float(rng.uniform(0.2, 0.9)) * out, quality * out]]}
            elif kind == "step2":
                t1, t2 = sorted(float(x) for x in rng.uniform(0.1, 0.95, 2) * out)
                t2 = max(t2, t1 + 1.0)
                value = {"kind": "step", "steps": [[t1, 0.4 * quality * out], [t2, quality * out]]}
            elif kind == "linear":
                value = {"kind": "linear", "slope": quality, "intercept": 0.0}
            elif kind == "linear_neg":
                value = {"kind": "linear", "slope": 2 * quality, "intercept": -float(rng.uniform(0.1, 0.6)) * out}
            else:
                value = {"kind": "identity"}
            name = f"t{t}"
            tpl = chain(f"j{j}", rate, costs, cpu_min=cpu_min, sel=sel, value=value, templates=[(name, costs)])
            tpl = tpl["templates"][0]
            tpl["streams"][-1]["weight"] = float(rng.uniform(0.5, 2.0)) * (1.0 if kind != "identity" else quality)
            tpls.append(tpl)
            worst = max(worst, sum(c * rate * sel**i for i, c in enumerate(costs)))
        demand += worst
        jobs.append({"id": f"j{j}", "rank": int(rng.integers(1, 5)), "required": False, "templates": tpls})
    for j in range(int(rng.integers(1, 3))):
        jobs[j]["required"] = True
    return scenario(jobs, nodes=2, cores=0.45 * demand / 2)


def constrained(costs: list[float]) -> Scenario:
    """A chain on three one-core nodes with every kind of SODA constraint: its source fixed to n2, its first
    operator needing label ssd and exlocated from p2, its second colocated with the sink."""
    job = chain("a", 100, costs)
    ops = job["templates"][0]["operators"]
    ops[1]["constraints"] = {"exlocate_from": ["p2"], "required_labels": ["ssd"]}
    ops[2]["constraints"] = {"colocate_with": ["sink"]}
    ops[0]["constraints"] = {"fixed_node": "n2"}
    s = Scenario.model_validate(
        {
            "cluster": {
                "nodes": [
                    {"name": "n0", "cores": 1, "labels": ["ssd"]},
                    {"name": "n1", "cores": 1, "labels": ["ssd"]},
                    {"name": "n2", "cores": 1},
                ]
            },
            "jobs": [job],
        }
    )
    return s
