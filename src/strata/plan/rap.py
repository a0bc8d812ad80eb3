"""The separable resource allocation problem across components (SODA §4.1).

Maximise Σ_k f_k(b_k) subject to Σ_k b_k ≤ B and b_k ≥ min_k, where each f_k is a
component's importance curve. When every curve is concave, Fox's greedy
marginal allocation is optimal: start each component at its minimum and hand
out budget segment by segment in order of decreasing slope. Otherwise dynamic
programming over a budget grid (Ibaraki & Katoh, *Resource Allocation
Problems*, 1988).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from strata.plan.curves import Curve


def greedy(curves: Sequence[Curve], budget: float) -> list[float]:
    """Fox's marginal allocation for concave curves; the optimum of the continuous RAP."""
    alloc = [c.minimum for c in curves]
    left = budget - sum(alloc)
    if left < -1e-9:
        raise ValueError(f"minimum budgets {sum(alloc):g} exceed {budget:g}")
    segments = []
    for k, c in enumerate(curves):
        for i in range(len(c.budgets) - 1):
            width = float(c.budgets[i + 1] - c.budgets[i])
            if width > 0:
                slope = float(c.values[i + 1] - c.values[i]) / width
                if slope > 0:
                    segments.append((-slope, k, i, width))
    segments.sort()
    for _, k, _, width in segments:
        if left <= 0:
            break
        take = min(width, left)
        alloc[k] += take
        left -= take
    return alloc


def dynamic(curves: Sequence[Curve], budget: float, step: float) -> list[float]:
    """Exact DP on a grid of ``step`` cores above each component's minimum."""
    base = [c.minimum for c in curves]
    spare = budget - sum(base)
    if spare < -1e-9:
        raise ValueError(f"minimum budgets {sum(base):g} exceed {budget:g}")
    units = math.floor(max(0.0, spare) / step + 1e-9)
    grid = np.arange(units + 1) * step
    best = np.zeros(units + 1)
    choice: list[np.ndarray] = []
    for c, b0 in zip(curves, base, strict=True):
        gain = np.array([c.value_at(b0 + e) for e in grid])
        # total[j, i] = best[j - i] + gain[i] for i ≤ j
        j = np.arange(units + 1)[:, None]
        i = np.arange(units + 1)[None, :]
        total = np.where(i <= j, best[np.clip(j - i, 0, None)] + gain[i], -np.inf)
        pick = np.argmax(total, axis=1)
        best = total[np.arange(units + 1), pick]
        choice.append(pick)
    alloc = [0.0] * len(curves)
    j = int(np.argmax(best))
    for k in range(len(curves) - 1, -1, -1):
        i = int(choice[k][j])
        alloc[k] = base[k] + i * step
        j -= i
    return alloc


def total(curves: Sequence[Curve], alloc: Sequence[float]) -> float:
    return float(sum(c.value_at(b) for c, b in zip(curves, alloc, strict=True)))
