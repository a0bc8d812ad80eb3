"""The Plan: what one SODA epoch decides, as plain JSON-round-trippable data (SODA §1.2).

Engines (the simulator, Spark) apply a Plan; the next epoch reads the previous
one back (``strata plan --previous plan.json``). Every field is documented in
docs/plan.md.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

STATUSES = ("optimal", "feasible", "time-limit", "fallback-to-miniW")


class PlanError(ValueError):
    """The scenario cannot be planned; ``problems`` name the PE or job and the binding constraint."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("; ".join(problems))


@dataclass
class Phase:
    """How one phase went: seconds spent, its deadline, status (one of STATUSES) and why."""

    name: str
    seconds: float
    deadline: float
    status: str
    detail: str = ""


@dataclass
class Plan:
    """One epoch's decisions. Cpu in cores, rates in records/s, traffic in bytes/s."""

    scenario: str
    admitted: list[str]
    rejected: dict[str, str]
    templates: dict[str, str]
    cpu_goal: dict[str, float]
    candidates: dict[str, list[str]]
    assignment: dict[str, dict[str, float]]
    importance: float
    ingest: float
    metrics: dict[str, float]
    affinity: float
    phases: list[Phase] = field(default_factory=list)
    planner: str = "soda"
    notes: list[str] = field(default_factory=list)
    # records/s the plan reads from each source PE (``ingest`` by source): an engine that runs the plan caps a
    # source there when it offers more (SODA admits at the sources what the plan's cpu processes)
    source_rates: dict[str, float] = field(default_factory=dict)

    def cpu(self) -> dict[str, float]:
        """Cpu each PE actually receives: the sum of its fractional assignment."""
        return {pe: sum(parts.values()) for pe, parts in self.assignment.items()}

    def node_load(self) -> dict[str, float]:
        load: dict[str, float] = {}
        for parts in self.assignment.values():
            for node, c in parts.items():
                load[node] = load.get(node, 0.0) + c
        return load

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Plan:
        data = dict(data)
        data["phases"] = [Phase(**p) for p in data.get("phases", [])]
        return cls(**data)

    def to_json(self, path: Path | None = None) -> str:
        text = json.dumps(self.to_dict(), indent=1, sort_keys=True)
        if path is not None:
            path.write_text(text)
        return text

    @classmethod
    def from_json(cls, text: str) -> Plan:
        return cls.from_dict(json.loads(text))

    @classmethod
    def load(cls, path: Path) -> Plan:
        """Read a plan file; a malformed one raises PlanError naming the file and the problem."""
        try:
            return cls.from_json(path.read_text())
        except (OSError, json.JSONDecodeError, TypeError, KeyError) as e:
            raise PlanError([f"{path}: expected a plan written by 'strata plan --json'; {e}"]) from None


def restricted(
    previous: Plan | None,
    placement: Mapping[str, Sequence[tuple[str, float]]],
    job_of: Mapping[str, str],
    jobs: Collection[str],
    nodes: Collection[str],
) -> Plan | None:
    """``previous`` cut down to ``jobs`` and live ``nodes``: the incremental-movement reference of a re-plan.

    ``placement`` (PE → [(node, cpu)] per instance) stands in for the PEs a
    baseline planner left out of its candidates and assignment (cpu-free
    PEs): where their instances actually run. A PE that lost every candidate
    node is left out: it has no incremental reference.
    """
    if previous is None:
        return None
    assignment = {pe: dict(parts) for pe, parts in previous.assignment.items()}
    cand = {pe: list(c) for pe, c in previous.candidates.items()}
    for pe, insts in placement.items():
        if not cand.get(pe) or pe not in assignment:
            cand[pe] = sorted({n for n, _ in insts})
            assignment[pe] = {}
            for n, c in insts:
                assignment[pe][n] = assignment[pe].get(n, 0.0) + c
    cand = {pe: [n for n in c if n in nodes] for pe, c in cand.items() if job_of[pe] in jobs}
    pes = {pe for pe, c in cand.items() if c and pe in assignment}
    data = previous.to_dict()
    data.update(
        admitted=[j for j in previous.admitted if j in jobs],
        rejected={j: r for j, r in previous.rejected.items() if j in jobs},
        templates={j: t for j, t in previous.templates.items() if j in jobs},
        cpu_goal={pe: previous.cpu_goal.get(pe, sum(assignment[pe].values())) for pe in pes},
        candidates={pe: cand[pe] for pe in pes},
        assignment={pe: {n: c for n, c in assignment[pe].items() if n in nodes} for pe in pes},
    )
    return Plan.from_dict(data)
