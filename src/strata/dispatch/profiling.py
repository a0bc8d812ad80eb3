"""Profiled costs for Cameo's priorities (Xu et al., NSDI'21, §"Requires Dynamic Information").

``C_OM`` and ``C_path`` are not given by the user: they are measured. Each
operator keeps a moving average of the service time of its messages
(``CostProfile``) and, as Cameo's reply context does, reports its cost and its
critical-path cost back to the operators feeding it (``ReplyContexts``), so
that ``C_path`` of an operator is built from what its downstream operators
last reported, hop by hop, without any global coordinator.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping

from strata.dispatch.priority import critical_path


class CostProfile:
    """Exponential moving average of measured cost per key (operator, or job for micro-batches).

    ``alpha`` is the weight of the newest observation (default 0.2: about the
    last ten observations matter). Before any observation a key's estimate is
    its ``prior`` (e.g. the model's ``cost_per_record``), else 0.
    """

    __slots__ = ("_alpha", "_est", "_prior")

    def __init__(self, alpha: float = 0.2, prior: Mapping[Hashable, float] | None = None) -> None:
        if not 0.0 < alpha <= 1.0:
            raise ValueError(f"alpha must be in (0, 1], got {alpha}")
        self._alpha = alpha
        self._est: dict[Hashable, float] = {}
        self._prior = dict(prior or {})

    def observe(self, key: Hashable, cost: float) -> float:
        """Fold one measurement in; returns the new estimate."""
        old = self._est.get(key)
        new = cost if old is None else old + self._alpha * (cost - old)
        self._est[key] = new
        return new

    def __getitem__(self, key: Hashable) -> float:
        est = self._est.get(key)
        return est if est is not None else self._prior.get(key, 0.0)

    def observed(self, key: Hashable) -> bool:
        return key in self._est


class ReplyContexts:
    """What every operator last reported upstream: its own cost and its critical-path cost.

    In Cameo the reply context rides on the acknowledgement of each message; an
    operator's ``C_path`` is ``max over the operators it feeds of (their cost +
    their path)``, taken from their latest replies. One object holds the
    latest reply of every operator; each node's policy writes only the replies
    of its own operators and reads those of the operators they feed. Replies
    arrive without delay here (Cameo piggybacks them on acks, one hop later).

    Until an operator has replied, its entry comes from ``prior_cost`` over
    ``downstream`` (the planner's estimates), so early messages are not
    priced as if the rest of the dataflow were free.
    """

    __slots__ = ("_cost", "_path")

    def __init__(
        self, downstream: Mapping[str, Iterable[str]] | None = None, prior_cost: Mapping[str, float] | None = None
    ) -> None:
        self._cost: dict[str, float] = dict(prior_cost or {})
        self._path: dict[str, float] = critical_path(downstream or {}, self._cost)

    def report(self, op: str, cost: float, feeds: Iterable[str]) -> float:
        """Record ``op``'s new cost estimate; recompute and return its path cost from its consumers' replies."""
        cost_of, path_of = self._cost, self._path
        path = 0.0
        for d in feeds:
            via = cost_of.get(d, 0.0) + path_of.get(d, 0.0)
            if via > path:
                path = via
        self._cost[op] = cost
        self._path[op] = path
        return path

    def path(self, op: str) -> float:
        return self._path.get(op, 0.0)

    def cost(self, op: str) -> float:
        return self._cost.get(op, 0.0)


class LinearCost:
    """Learned cost of a unit of work of ``size`` records: ``fixed + per_record × size``.

    For micro-batches, whose cost is a per-batch overhead plus a per-record
    part. Fitted by exponentially weighted least squares (weight ``decay`` per
    older observation, default 0.9: recent batches dominate, so the model
    tracks drift). While every observation has the same size the two parts
    cannot be told apart and the cost is taken as proportional to size.
    """

    __slots__ = ("_decay", "_n", "_sx", "_sxx", "_sxy", "_sy")

    def __init__(self, decay: float = 0.9) -> None:
        if not 0.0 < decay <= 1.0:
            raise ValueError(f"decay must be in (0, 1], got {decay}")
        self._decay = decay
        self._n = self._sx = self._sy = self._sxx = self._sxy = 0.0

    def observe(self, size: float, cost: float) -> None:
        d = self._decay
        self._n = d * self._n + 1.0
        self._sx = d * self._sx + size
        self._sy = d * self._sy + cost
        self._sxx = d * self._sxx + size * size
        self._sxy = d * self._sxy + size * cost

    def coefficients(self) -> tuple[float, float]:
        """(fixed seconds, seconds per record); (0, 0) before any observation."""
        if self._n == 0.0:
            return 0.0, 0.0
        spread = self._n * self._sxx - self._sx * self._sx
        if spread <= 1e-12 * max(self._n * self._sxx, 1e-300):
            return (0.0, self._sy / self._sx) if self._sx > 0 else (self._sy / self._n, 0.0)
        per_record = (self._n * self._sxy - self._sx * self._sy) / spread
        return (self._sy - per_record * self._sx) / self._n, per_record

    def predict(self, size: float) -> float:
        fixed, per_record = self.coefficients()
        return fixed + per_record * size
