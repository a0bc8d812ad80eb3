"""What each operator kind does to a record, as pure functions shared by the
engine and the offline reference (:mod:`strata.sim.reference`).

Every decision depends only on the record (its id, key, event time), never on
timing, so the simulated outputs can be recomputed offline from the generated
input and compared exactly (exactly-once checks).

- key → key group: a multiplicative hash of the key, mod G (AutoFlow's key groups).
- filter / map / join / keyed_stateful: ``floor(records × selectivity + u)``
  output records, ``u`` a uniform hash of (record id, PE); selectivity 1 passes
  everything. Keys and values pass through.
- window_aggregate: event-time windows ``[s, s + size)`` with ``s`` a multiple
  of the slide (tumbling: slide = size). A window fires once the operator's
  watermark reaches ``s + size + watermark_s`` (the allowed lateness), emitting
  one record per key: the aggregate as value, and as event time the newest
  contributing input's event time. Cameo's frontier t_MF of a message entering
  a window is that due time of the earliest window the record falls in.
"""

from __future__ import annotations

import math

_M64 = (1 << 64) - 1


def key_group(key: int, groups: int) -> int:
    """Key group of ``key`` among ``groups`` (Fibonacci hashing, then mod)."""
    return ((key * 0x9E3779B97F4A7C15) & _M64) % groups


def outputs(records: int, selectivity: float, uid: int, salt: int) -> int:
    """How many records a selective operator emits for ``records`` inputs of one record id:
    ``floor(records × selectivity + u)``, ``u`` uniform in [0, 1) from a hash of (record id, PE salt)."""
    if selectivity == 1.0:
        return records
    x = ((uid ^ salt) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 31)) * 0x94D049BB133111EB) & _M64
    return math.floor(records * selectivity + (x >> 11) / 9007199254740992.0)


def record_id(parent: int, salt: int) -> int:
    """Id of an operator's output record made from the input record ``parent`` (recovery="replay").

    SplitMix64's finaliser of ``parent ^ salt``: a bijection on 64 bits, so one PE
    never gives two different inputs the same output id, and an output computed
    again from the same input gets the same id (the receiver's de-duplication key).
    """
    x = (parent ^ salt) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def window_starts(event_time: float, size: float, slide: float) -> range:
    """Indices ``k`` of the windows ``[k·slide, k·slide + size)`` containing ``event_time``."""
    last = math.floor(event_time / slide)
    first = math.floor((event_time - size) / slide) + 1
    return range(first, last + 1)


def window_due(event_time: float, size: float, slide: float, lateness: float) -> float:
    """When the earliest window containing ``event_time`` fires (Cameo's t_MF for windows)."""
    first = math.floor((event_time - size) / slide) + 1  # window_starts(…)[0], without building the range
    return first * slide + size + lateness


def window_uid(window: int, key: int, pe_index: int) -> int:
    """Record id of the result of ``window`` for ``key`` at PE number ``pe_index``."""
    return (window * 1_000_003 + key) * 4096 + pe_index


def aggregate(fn: str, acc: list[float]) -> float:
    """The window result of ``acc`` = [count, sum, min, max, newest event time]."""
    if fn == "count":
        return acc[0]
    if fn == "sum":
        return acc[1]
    if fn == "avg":
        return acc[1] / acc[0]
    return acc[2] if fn == "min" else acc[3]


def accumulate(acc: list[float] | None, records: int, value: float, event_time: float) -> list[float]:
    """Fold ``records`` records of ``value`` into a window accumulator."""
    if acc is None:
        return [records, records * value, value, value, event_time]
    acc[0] += records
    acc[1] += records * value
    if value < acc[2]:
        acc[2] = value
    if value > acc[3]:
        acc[3] = value
    if event_time > acc[4]:
        acc[4] = event_time
    return acc
