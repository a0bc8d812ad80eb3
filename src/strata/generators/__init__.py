"""Seeded scenario generators: pure functions that write scenario specs.

Each generator is a pure function ``(seed, **knobs) -> dict`` returning a spec
document (the same shape as a YAML scenario file), so its output can be
written, read back and validated like any hand-written spec.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from strata.generators.dac import dac
from strata.generators.lsd import lsd
from strata.generators.multi_tenant import multi_tenant
from strata.generators.skewed import skewed

GENERATORS: dict[str, Callable[..., dict[str, Any]]] = {
    "lsd": lsd,
    "dac": dac,
    "multi-tenant": multi_tenant,
    "skewed": skewed,
}

__all__ = ["GENERATORS", "dac", "lsd", "multi_tenant", "skewed"]
