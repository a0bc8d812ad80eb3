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
