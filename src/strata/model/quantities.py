"""Quantities written with units in spec files: ``16GiB``, ``1Gbit/s``, ``125MB/s``.

Inside Strata everything is in bytes and bytes per second (DESIGN.md rule 6);
these parsers only serve the spec boundary. A bare number is taken as it is.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import BeforeValidator

_BYTES = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
_BITS = {"bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9, "tbit": 10**12}
_QUANTITY = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([A-Za-z]*)\s*(/s)?\s*$")


def parse_bytes(value: object) -> float:
    """``"16GiB"`` → 17179869184.0; numbers pass through."""
    if isinstance(value, bool):
        raise ValueError("expected a size such as 16GiB or a number of bytes")
    if isinstance(value, int | float):
        return float(value)
    m = _QUANTITY.match(str(value))
    if not m or m.group(3) or m.group(2).lower() not in _BYTES:
        raise ValueError(f"expected a size such as 512MiB, 16GiB or a number of bytes, got {value!r}")
    return float(m.group(1)) * _BYTES[m.group(2).lower()]


def parse_bandwidth(value: object) -> float:
    """``"1Gbit/s"`` → 1.25e8 bytes/s, ``"125MB/s"`` → 1.25e8; numbers are bytes/s."""
    if isinstance(value, bool):
        raise ValueError("expected a bandwidth such as 1Gbit/s or a number of bytes/s")
    if isinstance(value, int | float):
        return float(value)
    m = _QUANTITY.match(str(value))
    unit = m.group(2).lower() if m else ""
    if m and m.group(3) and unit in _BITS:
        return float(m.group(1)) * _BITS[unit] / 8
    if m and m.group(3) and unit in _BYTES:
        return float(m.group(1)) * _BYTES[unit]
    raise ValueError(f"expected a bandwidth such as 1Gbit/s, 125MB/s or bytes/s, got {value!r}")


Bytes = Annotated[float, BeforeValidator(parse_bytes)]
Bandwidth = Annotated[float, BeforeValidator(parse_bandwidth)]
