"""Building blocks per level and the schedulers composed from them (emergent scheduling, Dean & Porter).

An emergent scheduler does not pick one policy; it composes one from
building blocks at runtime. Strata's blocks, one choice per level, are the
names each level registers:

- dispatch (L2, ``strata.dispatch.STRATEGIES``): least laxity (``llf``, Cameo),
  ``edf``, ``sjf``, ``fifo``, proportional ``fair`` share;
- balancing (L1, ``strata.balance.PRESETS``): ``off``; ``threshold`` (act above
  a max/mean of 1.15, few moves, long cooldown); ``aggressive`` (act above
  1.02, many moves, no cooldown);
- placement (L0, ``strata.plan.PLACERS``): ``planner`` (SODA + the
  multi-resource balancer), ``greedy``, ``round-robin`` (SODA's baselines).

A :class:`Composition` picks one block per level; a list of them is the
meta level's candidates. The controller enforces a composition safely: dispatch
changes between units of work, balancing at the next window, placement at
the next (re)plan.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from strata.balance import PRESETS, BalanceConfig
from strata.dispatch import STRATEGIES
from strata.plan import PLACERS

DISPATCH: tuple[str, ...] = tuple(STRATEGIES)
BALANCING: dict[str, BalanceConfig | None] = PRESETS
PLACEMENT: tuple[str, ...] = tuple(PLACERS)

# What is known before any play, as a prior mean per block value: the order in which
# strata.adapt.Selector tries untried blocks of a level (higher first). Cameo (Xu et al., NSDI'21)
# reports deadline-aware (least-laxity) dispatch ahead of FIFO for latency-bound streams, and SODA
# (Wolf et al.) its planner ahead of its greedy and round-robin baselines: deadline-aware / planner 1,
# the others 0.5. sjf and fair are deadline-blind like FIFO and are given FIFO's 0.5, an extrapolation
# no cited paper measured. Balancing has no such published ordering and gets no prior.
PRIOR: tuple[dict[str, float], ...] = (
    {"llf": 1.0, "edf": 1.0, "sjf": 0.5, "fifo": 0.5, "fair": 0.5},
    {},
    {"planner": 1.0, "greedy": 0.5, "round-robin": 0.5},
)


@dataclass(frozen=True, slots=True)
class Composition:
    """One scheduler: a block per level; the defaults are the composition the levels run alone.

    The dispatch level's own block is ``edf``: with deadline orders that serve
    overdue work after work that can still meet its deadline (Buttazzo, on
    EDF under overload; :meth:`strata.dispatch.strategies.Strategy.overdue`),
    edf was the best fixed composition of every group of
    ``bench_adapt_phases`` measured, within 0.7% of the per-phase best, and
    0.02–0.07 above llf (select14: tuning edf 0.923–0.927 against llf
    0.905–0.911, round8 0.908–0.909 against 0.839–0.844, round9 0.872–0.880
    against 0.821–0.828; docs/hierarchy.md). Before that change llf and edf
    were within 0.01 of each other and llf, Cameo's order, was the default.
    """

    dispatch: str = "edf"
    balancing: str = "threshold"
    placement: str = "planner"

    def __post_init__(self) -> None:
        if self.dispatch not in DISPATCH:
            raise ValueError(f"dispatch: expected one of {DISPATCH}; found {self.dispatch!r}")
        if self.balancing not in BALANCING:
            raise ValueError(f"balancing: expected one of {tuple(BALANCING)}; found {self.balancing!r}")
        if self.placement not in PLACEMENT:
            raise ValueError(f"placement: expected one of {PLACEMENT}; found {self.placement!r}")

    @property
    def name(self) -> str:
        return f"{self.dispatch}/{self.balancing}/{self.placement}"

    @classmethod
    def parse(cls, name: str) -> Composition:
        """``"llf/threshold/planner"`` → Composition; missing parts take the defaults."""
        return cls(*name.split("/"))


def compositions(
    dispatch: tuple[str, ...] = DISPATCH,
    balancing: tuple[str, ...] = tuple(BALANCING),
    placement: tuple[str, ...] = PLACEMENT,
) -> list[Composition]:
    """Every composition of the given blocks (the full space is 5 × 3 × 3 = 45)."""
    return [Composition(d, b, p) for d, b, p in itertools.product(dispatch, balancing, placement)]
