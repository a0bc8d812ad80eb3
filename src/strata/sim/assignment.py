"""Which node runs each operator instance, with what cpu share: a placement resolved to an instance assignment.

(The planner's multi-resource placement, which decides it, is :mod:`strata.plan.placement`; this module only
reads what was decided.) Accepted forms (PE names are ``"job.operator"``), so a planner's Plan applies directly:

- ``{pe: [(node, share), ...]}`` or ``{pe: {node: share, ...}}`` — one instance
  per entry, on ``node`` with a cpu share in cores (SODA's fractional
  assignment; a planner ``Plan.assignment`` applies as it is, entries of share
  0 create no instance unless all are 0: then one instance, no share, on the first);
- ``{pe: [node, ...]}`` — one instance per entry, no share;
- ``{pe: node}`` — every instance of the PE (``Operator.instances``) on ``node``;
- ``{(pe, i): node}`` or ``{"pe#i": node}`` — instance ``i`` of the PE on ``node``.

PEs not mentioned get the default: their ``instances`` spread round-robin over
the nodes in cluster order, continuing the rotation across PEs in topological
order. Unknown PEs or nodes raise a ValueError naming the entry.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from strata.protocol.engine import Placement

Assignment = dict[str, list[tuple[str, float | None]]]


def resolve_placement(
    placement: Mapping | None, pes: Sequence[str], instances: Mapping[str, int], nodes: Sequence[str]
) -> Assignment:
    """PE → [(node, share or None)] per instance, in instance order."""
    known_pes = set(pes)
    node_of = _node_check(set(nodes))
    out: Assignment = {}
    singles: dict[str, dict[int, str]] = {}
    for raw_key, value in (placement or {}).items():
        if isinstance(raw_key, tuple) or (isinstance(raw_key, str) and "#" in raw_key):
            pe, i = _instance_key(raw_key, known_pes)
            singles.setdefault(pe, {})[i] = node_of(repr(raw_key), value)
        elif raw_key not in known_pes:
            raise ValueError(f"placement[{raw_key!r}]: expected a PE 'job.operator' of the scenario")
        elif isinstance(value, str):
            out[raw_key] = [(node_of(repr(raw_key), value), None)] * instances[raw_key]
        else:
            out[raw_key] = _entries(raw_key, value, node_of)
    for pe, by_index in singles.items():
        if pe in out:
            raise ValueError(f"placement: {pe!r} is placed both as a whole and per instance")
        n = max(instances[pe], max(by_index) + 1)
        missing = [i for i in range(n) if i not in by_index]
        if missing:
            raise ValueError(f"placement: {pe!r} places instances {sorted(by_index)} but not {missing}")
        out[pe] = [(by_index[i], None) for i in range(n)]
    turn = 0
    for pe in pes:
        if pe not in out:
            out[pe] = [(nodes[(turn + i) % len(nodes)], None) for i in range(instances[pe])]
            turn += instances[pe]
    return out


def _node_check(known: set[str]) -> Callable[[str, object], str]:
    """``node_of(where, node)``: ``node`` if the cluster has it, else a ValueError located at ``where``."""

    def node_of(where: str, node: object) -> str:
        if not isinstance(node, str) or node not in known:
            raise ValueError(f"placement[{where}]: expected a node of the cluster; found {node!r}")
        return node

    return node_of


def _instance_key(raw_key: tuple | str, known_pes: set[str]) -> tuple[str, int]:
    """``(pe, i)`` or ``"pe#i"`` → (pe, i)."""
    pe, index = raw_key if isinstance(raw_key, tuple) else raw_key.rsplit("#", 1)
    if pe not in known_pes:
        raise ValueError(f"placement[{raw_key!r}]: expected a PE 'job.operator' of the scenario; found {pe!r}")
    try:
        return pe, int(index)
    except ValueError:
        raise ValueError(f"placement[{raw_key!r}]: expected an instance number after '#'") from None


def _entries(pe: str, value: object, node_of: Callable[[str, object], str]) -> list[tuple[str, float | None]]:
    """One PE's instances from ``[(node, share), ...]``, ``{node: share}`` or ``[node, ...]``."""
    if isinstance(value, Mapping):
        # A PE planned with no cpu (e.g. a sink) still runs: one instance, no share, on its first node.
        value = [(node, share) for node, share in value.items() if share != 0] or list(value)[:1]
    entries: list[tuple[str, float | None]] = []
    for j, item in enumerate(value):
        where = f"{pe!r}][{j}"
        if isinstance(item, str):
            entries.append((node_of(where, item), None))
        else:
            node, share = item
            if not share > 0:
                raise ValueError(f"placement[{where}]: expected a positive cpu share; found {share!r}")
            entries.append((node_of(where, node), float(share)))
    if not entries:
        raise ValueError(f"placement[{pe!r}]: expected at least one instance")
    return entries


def decided(placement: Placement) -> dict[str, list]:
    """A controller's placement (:class:`~strata.protocol.engine.Decisions`: one ``(node, cpu)`` per instance) in
    the list form :func:`resolve_placement` takes: an instance given no cpu runs with no share."""
    return {pe: [(n, c) if c > 0 else n for n, c in insts] for pe, insts in placement.items()}


def plan_file(path: Path) -> tuple[dict[str, str], dict[str, dict[str, float]], dict[str, float]]:
    """(templates, assignment, source rates) of a plan written by ``strata plan --json``, for ``Simulation``.

    Only the admitted jobs' templates are returned, so only they run. Source rates: records/s the plan reads from
    each source PE (``source_rates``; empty in a plan file written before it was recorded).
    """
    try:
        data = json.loads(path.read_text())
        admitted = set(data["admitted"])
        templates = {job: name for job, name in data["templates"].items() if job in admitted}
        assignment = {pe: dict(parts) for pe, parts in data["assignment"].items()}
        sources = {pe: float(r) for pe, r in data.get("source_rates", {}).items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"{path}: expected a plan written by 'strata plan --json'; {e!r}") from None
    return templates, assignment, sources
