"""The Plan: what one SODA epoch decides, as plain JSON-round-trippable data (SODA §1.2).

Engines (the simulator, Spark) apply a Plan; the next epoch reads the previous
one back (``strata plan --previous plan.json``). Every field is documented in
docs/plan.md.
"""

from __future__ import annotations

import json
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
