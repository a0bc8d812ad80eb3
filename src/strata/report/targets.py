"""The demo's targets: Strata against a reference mode of the same run, judged per seed and over seeds.

Pure functions over the rows of a run's summary table (:func:`strata.spark.measure.job_summary`: one row
per mode and job, with ``p99_s``, ``misses``, ``throughput``, ``importance`` and ``imbalance``).

- :data:`VERSUS_FAIR` — issue 29's targets in one application, against FAIR pools by hand: every
  latency-critical job's p99 ≤ FAIR's and misses ≤ FAIR's, each bulk job ≥ 0.9× FAIR's throughput, total
  on-time importance ≥ FAIR's;
- :data:`VERSUS_PLAIN` — issue 8's against plain Spark: p99 ≥ 3× lower, misses ≥ 10× fewer, each bulk job
  ≥ 0.9× plain's throughput, importance higher, the skewed job's imbalance ≤ 1.2;
- against the hand deployment (issue 28: the latency-critical jobs in an application of their own, the others
  under FAIR pools by hand; mode ``dedicated``): :data:`VERSUS_FAIR`'s targets, by :func:`versus_hand`.

:func:`judged` gives every comparison a run's modes allow, as the report shows them.

Each target reduces a run to one figure (its worst job), so a seed passes a target when its figure does,
and the project standard — report the worst seed, not the best — is :func:`worst_seeds`.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

Rows = Sequence[Mapping]


@dataclass(frozen=True)
class Target:
    """One target: the figure's name, its bound, and which side of the bound meets it."""

    name: str
    bound: float
    lower_is_better: bool
    strict: bool = False  # the figure must beat the bound, not only reach it

    def met(self, value: float | None) -> bool:
        """Whether ``value`` meets the target; an unmeasured figure (None) never does."""
        if value is None:
            return False
        if self.lower_is_better:
            return value < self.bound if self.strict else value <= self.bound
        return value > self.bound if self.strict else value >= self.bound

    def badness(self, value: float | None) -> float:
        """Orders figures from best to worst (unmeasured is the worst)."""
        if value is None:
            return math.inf
        return value if self.lower_is_better else -value


VERSUS_FAIR = (
    Target("p99_ratio", 1.0, lower_is_better=True),  # critical p99, Strata / FAIR (worst critical job)
    Target("extra_misses", 0.0, lower_is_better=True),  # critical misses, Strata − FAIR (worst critical job)
    Target("bulk_throughput_ratio", 0.9, lower_is_better=False),  # bulk throughput, Strata / FAIR (worst job)
    Target("importance_ratio", 1.0, lower_is_better=False),  # total on-time importance, Strata / FAIR
)
VERSUS_PLAIN = (
    Target("p99_gain", 3.0, lower_is_better=False),  # critical p99, plain / Strata (worst critical job)
    Target("miss_gain", 10.0, lower_is_better=False),  # critical misses, plain / Strata (worst critical job)
    Target("bulk_throughput_ratio", 0.9, lower_is_better=False),
    Target("importance_ratio", 1.0, lower_is_better=False, strict=True),
    Target("imbalance", 1.2, lower_is_better=True),  # Strata's, on the jobs plain Spark ran skewed
)


def measured(value) -> float | None:
    """A summary cell as a number; None or NaN (what pandas makes of None) is unmeasured."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return float(value)


def ratio(num: float | None, den: float | None) -> float | None:
    """``num / den``; nothing over nothing is 1 (the same), something over nothing is infinite."""
    if num is None or den is None:
        return None
    if den == 0:
        return math.inf if num > 0 else 1.0
    return num / den


def _worst(values: list[float | None], target: Target) -> float | None:
    return max(values, key=target.badness)


def _table(rows: Rows) -> tuple[dict[tuple[str, str], Mapping], list[str]]:
    """(mode, job) → row, and the jobs in the order they appear."""
    return {(r["mode"], r["job"]): r for r in rows}, list(dict.fromkeys(r["job"] for r in rows))


def _ratios(by: Mapping, jobs: Sequence[str], column: str, num: str, den: str) -> list[float | None]:
    """Per job, mode ``num``'s figure over mode ``den``'s."""
    return [ratio(measured(by[(num, j)][column]), measured(by[(den, j)][column])) for j in jobs]


def _importance(by: Mapping, jobs: Sequence[str], num: str, den: str) -> float | None:
    """Total on-time importance, mode ``num``'s over mode ``den``'s."""
    return ratio(*(sum(by[(m, j)]["importance"] for j in jobs) for m in (num, den)))


def versus_fair(rows: Rows, critical: Collection[str], ours: str = "strata", fair: str = "fair") -> dict:
    """:data:`VERSUS_FAIR`'s figures for one run: ``critical`` names the latency-critical jobs, every other
    job is bulk; a target with no job to judge (no critical job, no bulk job) is left out."""
    by, jobs = _table(rows)
    bulk = [j for j in jobs if j not in critical]
    t = {target.name: target for target in VERSUS_FAIR}
    figures = {}
    if critical:
        extra = [
            None if a is None or b is None else a - b
            for a, b in ((measured(by[(ours, j)]["misses"]), measured(by[(fair, j)]["misses"])) for j in critical)
        ]
        figures["p99_ratio"] = _worst(_ratios(by, critical, "p99_s", ours, fair), t["p99_ratio"])
        figures["extra_misses"] = _worst(extra, t["extra_misses"])
    if bulk:
        figures["bulk_throughput_ratio"] = _worst(
            _ratios(by, bulk, "throughput", ours, fair), t["bulk_throughput_ratio"]
        )
    figures["importance_ratio"] = _importance(by, jobs, ours, fair)
    return figures


def versus_plain(rows: Rows, critical: Collection[str], ours: str = "strata", plain: str = "baseline") -> dict:
    """:data:`VERSUS_PLAIN`'s figures for one run; as :func:`versus_fair` leaves out a target with no job to
    judge, ``imbalance`` is left out when plain Spark measured no job's partition imbalance (nothing keyed)."""
    by, jobs = _table(rows)
    bulk = [j for j in jobs if j not in critical]
    skewed = [j for j in jobs if measured(by[(plain, j)]["imbalance"]) is not None]
    t = {target.name: target for target in VERSUS_PLAIN}
    figures = {}
    if critical:
        figures["p99_gain"] = _worst(_ratios(by, critical, "p99_s", plain, ours), t["p99_gain"])
        figures["miss_gain"] = _worst(_ratios(by, critical, "misses", plain, ours), t["miss_gain"])
    if bulk:
        figures["bulk_throughput_ratio"] = _worst(
            _ratios(by, bulk, "throughput", ours, plain), t["bulk_throughput_ratio"]
        )
    figures["importance_ratio"] = _importance(by, jobs, ours, plain)
    if skewed:
        figures["imbalance"] = _worst([measured(by[(ours, j)]["imbalance"]) for j in skewed], t["imbalance"])
    return figures


def versus_hand(rows: Rows, critical: Collection[str], ours: str = "strata", hand: str = "dedicated") -> dict:
    """:data:`VERSUS_FAIR`'s figures against the hand deployment (mode ``hand``): what a team builds for a
    latency-critical stream, judged by the same targets as FAIR pools by hand."""
    return versus_fair(rows, critical, ours, hand)


COMPARISONS = (
    ("FAIR by hand", "fair", versus_fair, VERSUS_FAIR),
    ("own application", "dedicated", versus_hand, VERSUS_FAIR),
    ("plain Spark", "baseline", versus_plain, VERSUS_PLAIN),
)
"""Each comparison of Strata: its label, the reference mode, its figures' function and its targets."""


def judged(rows: Rows, critical: Collection[str], ours: str = "strata") -> list[tuple[str, dict, dict[str, bool]]]:
    """Per comparison of :data:`COMPARISONS` whose reference mode ran beside ``ours``: its label, its figures and
    which targets they meet."""
    modes = {r["mode"] for r in rows}
    if ours not in modes:
        return []
    out = []
    for label, mode, figures_of, targets in COMPARISONS:
        if mode in modes:
            figures = figures_of(rows, critical, ours, mode)
            out.append((label, figures, judge(figures, targets)))
    return out


def judge(figures: Mapping[str, float | None], targets: Sequence[Target]) -> dict[str, bool]:
    """Target name → met, for every target ``figures`` has a figure for."""
    return {t.name: t.met(figures[t.name]) for t in targets if t.name in figures}


def worst_seeds(seeds: Mapping[int, Mapping[str, float | None]], targets: Sequence[Target]) -> dict[str, dict]:
    """Target name → the worst seed's ``{"seed", "value", "met"}`` over ``seeds`` (seed → its figures); a
    target none of the seeds has a figure for is left out. Ties go to the first seed."""
    out = {}
    for t in targets:
        have = [(seed, figures[t.name]) for seed, figures in seeds.items() if t.name in figures]
        if have:
            seed, value = max(have, key=lambda sv: t.badness(sv[1]))
            out[t.name] = {"seed": seed, "value": value, "met": t.met(value)}
    return out
