"""The traffic model shared by the planner's metrics and the simulator's locality-first routing.

A PE split over several nodes runs one instance per node; its *sending share*
on node n is the share of its output that leaves from n, and its *receiving
share* the share of its input that must arrive there. Both are the PE's cpu
fraction f_un (``cpu_fractions``), except that a keyed PE receives — and so
sends — the share of its key groups owned on n (``key_group_shares``: the key
groups are apportioned to its instances by cpu, largest remainder, so g_vn ≈ f_vn
up to one key group).

- An **unkeyed** stream u→v is routed locality first (Flink's forward/rescale
  partitioning): from node n, min(s_un, f_vn) of the stream stays on n and the
  rest crosses to the nodes where v still lacks input, so that every instance of
  v receives its cpu share. ``transport`` solves that transportation problem
  exactly: keeping the diagonal at min(s_un, f_vn) is optimal (no flow can keep
  more than either end has on n), and once it is kept every node has either
  surplus or deficit, never both, so any split of the surpluses over the
  deficits is feasible; we split each surplus in proportion to the deficits.
  Local share = Σ_n min(s_un, f_vn).
- A **keyed** stream goes to the instance owning the record's key group, so
  from node n a share g_vn stays local whatever the sender does:
  local share = Σ_n s_un · g_vn (keys uniform over key groups).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache

import networkx as nx
import numpy as np

from strata.model.graph import joined_graph
from strata.model.job import Operator, OperatorKind, Template
from strata.model.scenario import Scenario, pe_id, resolve

ROUTE_SLOTS = 1000  # length of the simulator's weighted round-robin table per sender instance and stream


def apportion(total: int, weights: Sequence[float]) -> list[int]:
    """``total`` units split in proportion to ``weights`` (largest remainder; ties to the earlier entry)."""
    s = sum(weights)
    if total <= 0 or not weights:
        return [0] * len(weights)
    if s <= 0:
        weights, s = [1.0] * len(weights), float(len(weights))
    quota = [total * w / s for w in weights]
    counts = [int(q) for q in quota]
    left = total - sum(counts)
    order = sorted(range(len(weights)), key=lambda i: (-(quota[i] - counts[i]), i))
    for i in order[:left]:
        counts[i] += 1
    return counts


def key_group_owners(groups: int, weights: Sequence[float]) -> list[int]:
    """Key group → owner index: contiguous blocks sized by ``apportion(groups, weights)``."""
    owners: list[int] = []
    for i, c in enumerate(apportion(groups, weights)):
        owners.extend([i] * c)
    return owners


def cpu_fractions(parts: Mapping[str, float]) -> dict[str, float]:
    """A PE's share per node by cpu; a PE given no cpu runs once, on its first node (as the simulator places it)."""
    total = sum(c for c in parts.values() if c > 0)
    if total > 0:
        return {n: c / total for n, c in parts.items() if c > 0}
    return {next(iter(parts)): 1.0} if parts else {}


def runs(op: Operator, cpu: float) -> bool:
    """Whether the engines run a PE given ``cpu`` cores by a plan: a PE processes what its cpu buys (SODA §3), so
    one whose cpu buys nothing processes nothing, and the engines do not run it (nothing is sent to it). Sinks
    are given no cpu by the planner and run."""
    return op.kind is OperatorKind.SINK or op.resource.capacity(cpu, op.cost_per_record) > 0


def key_group_shares(groups: int, fractions: Mapping[str, float]) -> dict[str, float]:
    """Share of a keyed PE's ``groups`` key groups owned on each node, one instance per node in ``fractions`` order."""
    nodes = list(fractions)
    counts = apportion(groups, [fractions[n] for n in nodes])
    return {n: c / groups for n, c in zip(nodes, counts, strict=True) if c}


def transport(supply: Mapping[str, float], demand: Mapping[str, float]) -> dict[tuple[str, str], float]:
    """Locality-first flow of one stream: (from node, to node) → share, keeping min(supply, demand) on each node.

    ``supply`` and ``demand`` each sum to 1 (shares of the stream). Exact, in
    closed form (see the module docstring): the diagonal at its upper bound, each
    node's surplus split over the deficits in proportion to them.
    """
    flow: dict[tuple[str, str], float] = {}
    surplus: dict[str, float] = {}
    deficit: dict[str, float] = {}
    for n, a in supply.items():
        b = demand.get(n, 0.0)
        m = min(a, b)
        if m > 0:
            flow[(n, n)] = m
        if a > m:
            surplus[n] = a - m
    for n, b in demand.items():
        m = min(b, supply.get(n, 0.0))
        if b > m:
            deficit[n] = b - m
    need = sum(deficit.values())
    if need > 0:
        for n, s in surplus.items():
            for m, d in deficit.items():
                flow[(n, m)] = flow.get((n, m), 0.0) + s * d / need
    return flow


def local_share(sending: Mapping[str, float], receiving: Mapping[str, float], keyed: bool) -> float:
    """Share of a stream kept on one node: Σ min(s_n, f_n) (unkeyed, locality first) or Σ s_n · g_n (keyed)."""
    if keyed:
        return min(1.0, sum(a * receiving.get(n, 0.0) for n, a in sending.items()))
    return min(1.0, sum(min(a, receiving.get(n, 0.0)) for n, a in sending.items()))


def shares(assignment: Mapping[str, Mapping[str, float]], key_groups: Mapping[str, int]) -> dict[str, dict[str, float]]:
    """Each PE's sending/receiving share per node: key-group shares for keyed PEs (``key_groups``: PE → groups),
    cpu fractions for the others."""
    out = {}
    for pe, parts in assignment.items():
        f = cpu_fractions(parts)
        g = key_groups.get(pe)
        out[pe] = key_group_shares(g, f) if g else f
    return out


# ------------------------------------------------------------------ record rates: what a window aggregate emits
#
# SODA's rate model (§3, "selectivity") has every PE emit selectivity × its processed input. The engines
# execute a window aggregate differently: a window ``[s, s + size)`` fires once per slide and emits one
# record per key present in it, whatever the operator's selectivity says (strata.sim.semantics; Spark's
# groupBy(window, key) alike). So its output rate is E[distinct keys in one window] / slide, which depends on
# the keys and the window, and grows concavely with the input. The functions below compute that rate from
# the sources' key distributions, so that the plan projects what the engines emit.


@dataclass(frozen=True)
class Origin:
    """Where a PE's messages come from: a source (a Poisson stream of ``rate`` messages/s, key law ``keys``) or
    a window aggregate (every ``period`` s a set of distinct keys, key k present with probability ``keys[k]``)."""

    rate: float
    keys: np.ndarray
    period: float | None = None  # None: a source

    def absence(self, reach: float) -> np.ndarray:
        """Per key, −ln P(absent from one second of this origin's messages that arrive with probability ``reach``)."""
        if self.period is None:  # Poisson messages thinned by ``reach``: absence rate m·reach·p_k
            return self.rate * reach * self.keys
        return -np.log1p(-np.minimum(reach * self.keys, 1.0 - 1e-15)) / self.period


@dataclass(frozen=True)
class KeyedFlow:
    """What a PE emits: records/s and, per origin, the probability that one of its messages reaches the PE
    (at least once) and the records such a message carries."""

    records: float
    reach: Mapping[str, tuple[float, float]]  # origin → (probability, records per message)


@cache
def zipf_probabilities(count: int, s: float) -> np.ndarray:
    """P(key k) for keys 0..count-1 under Zipf(s) (the sources' key law, strata.model.inputs.zipf_cdf)."""
    w = 1.0 / np.arange(1, count + 1, dtype=np.float64) ** s
    p = w / w.sum()
    p.flags.writeable = False
    return p


def presence(origins: Mapping[str, Origin], reach: Mapping[str, tuple[float, float]], seconds: float) -> np.ndarray:
    """Per key, the probability that a message of it arrives within ``seconds`` (arrivals of distinct origins
    independent): 1 − exp(−seconds · Σ_o absence_o)."""
    rates = [origins[o].absence(r) for o, (r, _) in reach.items() if r > 0]
    if not rates:
        return np.zeros(0)
    total = np.zeros(max(len(a) for a in rates))
    for a in rates:
        total[: len(a)] += a
    return -np.expm1(-seconds * total)


def emitted(
    name: str, op: Operator, inputs: Sequence[KeyedFlow], origins: dict[str, Origin], batch: int = 1
) -> KeyedFlow:
    """What PE ``name`` (operator ``op``) emits at unlimited cpu, given what reaches it; registers new origins.

    - a source emits its rate in messages of ``batch`` records of one key (the simulator's batch; 1 for a
      record-at-a-time engine), keys Zipf-distributed (hot-key drift ignored: it rotates which keys are hot,
      not how many there are, except in a window spanning a rotation);
    - a filter/map/join/keyed-state PE emits selectivity × its records; a message of n records becomes one of
      ⌊n·selectivity + u⌋ records, u a hash of (record id, PE) (strata.sim.semantics.outputs), so it goes on
      with probability min(1, n·selectivity) carrying max(1, n·selectivity) records; keys pass through;
    - a fan-in receives a message if any path delivers it (paths' decisions taken as independent: exact when
      they are certain, as with batches of several records);
    - a window aggregate emits, per slide, one record per distinct key in one window: E[distinct] =
      Σ_k P(key k arrives within ``size``) (:func:`presence`); it is the origin of those keys downstream.
    """
    if op.kind is OperatorKind.SOURCE:
        k = op.source.keys
        b = max(1, batch)
        origins[name] = Origin(op.source.rate / b, zipf_probabilities(k.count, k.zipf_s))
        return KeyedFlow(op.source.rate, {name: (1.0, float(b))})
    records = sum(f.records for f in inputs)
    miss: dict[str, float] = {}
    sizes: dict[str, list[float]] = {}  # records per message of each origin, by path
    for f in inputs:
        for o, (r, n) in f.reach.items():
            miss[o] = miss.get(o, 1.0) * (1.0 - r)
            sizes.setdefault(o, []).append(n)
    reach = {o: (1.0 - m, sum(sizes[o]) / len(sizes[o])) for o, m in miss.items()}
    if op.kind is OperatorKind.SINK or records <= 0:
        return KeyedFlow(0.0, reach)
    if op.kind is OperatorKind.WINDOW_AGGREGATE and op.window is not None:
        size, slide = op.window.size_s, op.window.slide_s or op.window.size_s
        q = presence(origins, reach, size)
        out = float(q.sum()) / slide
        origins[name] = Origin(out, q, slide)
        return KeyedFlow(out, {name: (1.0, 1.0)})
    sel = op.selectivity
    return KeyedFlow(records * sel, {o: (r * min(1.0, n * sel), max(1.0, n * sel)) for o, (r, n) in reach.items()})


def flows(
    graph: nx.DiGraph,
    batch: int = 1,
    fixed: Mapping[str, KeyedFlow] | None = None,
    origins: dict[str, Origin] | None = None,
) -> dict[str, KeyedFlow]:
    """Every PE's :func:`emitted` flow at unlimited cpu, in topological order; ``fixed`` PEs are given (their
    origins in ``origins``, which collects the new ones)."""
    fixed = fixed or {}
    origins = {} if origins is None else origins
    out: dict[str, KeyedFlow] = {}
    for pe in nx.topological_sort(graph):
        if pe in fixed:
            out[pe] = fixed[pe]
            continue
        op = graph.nodes[pe].get("op")
        if op is None:  # a producer outside the graph's jobs: nothing arrives from it
            out[pe] = KeyedFlow(0.0, {})
            continue
        out[pe] = emitted(pe, op, [out[u] for u in graph.predecessors(pe)], origins, batch)
    return out


def window_selectivity(
    pe: str, op: Operator, inputs: Sequence[KeyedFlow], origins: dict[str, Origin], batch: int = 1
) -> float:
    """The records window aggregate ``pe`` emits per record offered to it (its selectivity as the engines run it)."""
    offered = sum(f.records for f in inputs)
    if offered <= 0:
        return op.selectivity
    return emitted(pe, op, inputs, dict(origins), batch).records / offered


def as_emitted(scenario: Scenario, batch: int = 1) -> Scenario:
    """``scenario`` with each window aggregate's selectivity set to what the engines emit at the offered rates.

    SODA's planner (macroQ's curves, the exact and template-choice MILPs, the projected importance) is linear in
    selectivity (SODA §3's rate model); this linearises the window's concave output (:func:`emitted`) at the
    rate offered to it with unlimited cpu, so the projection is what the engine emits wherever the window
    receives its offered input and an underestimate where a PE upstream of it is short of cpu. Inputs from
    other jobs' streams are taken at those jobs' first templates. ``batch`` is the engine's records per source
    message (the simulator's ``batch``; 1 for Spark). Without window aggregates the scenario is returned as is.
    """
    windows = [
        (job, tpl)
        for job in scenario.jobs
        for tpl in job.templates
        if any(op.kind is OperatorKind.WINDOW_AGGREGATE for op in tpl.operators)
    ]
    if not windows:
        return scenario
    joined = joined_graph(scenario)
    # Only what reaches a window matters: the flows of its ancestors.
    marks = [pe for pe in joined if joined.nodes[pe]["op"].kind is OperatorKind.WINDOW_AGGREGATE]
    need = set(marks).union(*(nx.ancestors(joined, w) for w in marks))
    base_origins: dict[str, Origin] = {}
    base = flows(joined.subgraph(need), batch, origins=base_origins)
    replaced: dict[tuple[str, str], Template] = {}
    for job, tpl in windows:
        graph = nx.DiGraph()
        for op in tpl.operators:
            graph.add_node(pe_id(job.id, op.name), op=op)
        external: dict[str, KeyedFlow] = {}
        for st in tpl.streams:
            src = resolve(job.id, st.src)
            if src not in graph:
                external[src] = base.get(src, KeyedFlow(0.0, {}))
            graph.add_edge(src, pe_id(job.id, st.dst))
        origins = dict(base_origins)
        got = flows(graph, batch, external, origins)
        ops = []
        for op in tpl.operators:
            if op.kind is OperatorKind.WINDOW_AGGREGATE:
                pe = pe_id(job.id, op.name)
                sel = window_selectivity(pe, op, [got[u] for u in graph.predecessors(pe)], origins, batch)
                op = op.model_copy(update={"selectivity": sel})
            ops.append(op)
        replaced[(job.id, tpl.name)] = Template(name=tpl.name, operators=ops, streams=tpl.streams)
    jobs = [
        job.model_copy(update={"templates": [replaced.get((job.id, t.name), t) for t in job.templates]})
        for job in scenario.jobs
    ]
    return Scenario(name=scenario.name, description=scenario.description, cluster=scenario.cluster, jobs=jobs)
