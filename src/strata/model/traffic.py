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
