"""Budgets down: what each level may decide, derived from the decision of the level above (Dangwal et al.).

An upper level's decision is a hard constraint below (DESIGN.md, rule 3).
The L0 plan fixes, per PE, a cpu goal and the candidate nodes (SODA's macroQ
and macroW); the placement balancer under it may only choose among those
candidates, the per-job pools (cpu shares, and the FAIR pools that enforce them
on Spark) follow from the goals, and L1 gets
a ceiling on instances per keyed PE (the instances L0 placed) and a move
budget per load window. PEs whose placement L0 changes in a step are frozen
for L1 in that step, so the two never move the same thing at once.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import numpy as np

from strata.balance.level import L1Budget
from strata.plan import Plan
from strata.protocol.units import SHARE_POOLS, URGENT_POOL


def pools(plan: Plan, job_of: Mapping[str, str]) -> dict[str, float]:
    """Job → cores its PEs receive in ``plan``: its cpu share (Spark FAIR pool weight ∝ this)."""
    out: dict[str, float] = dict.fromkeys(plan.admitted, 0.0)
    for pe, cores in plan.cpu().items():
        job = job_of[pe]
        out[job] = out.get(job, 0.0) + cores
    return out


def pool_names(cpu_share: Mapping[str, float]) -> dict[str, str]:
    """Job → the FAIR pool that enforces its cpu share: weight ∝ the share relative to the smallest positive one,
    rounded to a power of two and capped at 8 (pools ``w1``, ``w2``, ``w4``, ``w8``:
    :data:`strata.protocol.units.SHARE_POOLS`; a session declares its pools once, at its start). A job without
    a share, or every job when none has one, gets ``w1``."""
    positive = [c for c in cpu_share.values() if c > 0]
    if not positive:
        return {job: "w1" for job in cpu_share}
    least = min(positive)
    out = {}
    for job, cores in cpu_share.items():
        ratio = max(cores, least) / least
        weight = min(max(SHARE_POOLS.values()), 2 ** round(float(np.log2(ratio))))
        out[job] = f"w{weight}"
    return out


def critical_pools(names: Mapping[str, str], critical: Iterable[str]) -> dict[str, str]:
    """``names`` (job → FAIR pool) with each latency-critical job in ``critical`` in the weight-32 pool
    (:data:`~strata.protocol.units.URGENT_POOL`), the configuration Spark's documentation shows and a careful team
    sets by hand (``strata.runners.spark_loop.hand_pools``). Under weighted FAIR a job takes from the others only
    the cores it uses, so a light critical job weighted 32 costs the bulk jobs what its batches run on and no
    more, and its tasks take the next free cores. E.g. {a: w1, b: w8}, a critical → {a: urgent, b: w8}."""
    chosen = set(critical)
    return {job: URGENT_POOL if job in chosen else name for job, name in names.items()}


def l1_budget(
    placement: Mapping[str, list[tuple[str, float]]],
    keyed: Iterable[str],
    moves: int,
    bytes_: float = math.inf,
    frozen: Iterable[str] = (),
) -> L1Budget:
    """L1's budget for one window, from the placement in force and the PEs L0 is changing."""
    mine = [pe for pe in keyed if pe in placement]
    return L1Budget(
        {pe: len(placement[pe]) for pe in mine},
        moves,
        bytes_,
        frozenset(frozen),
        {pe: placement[pe][0][1] for pe in mine if placement[pe]},
    )
