"""The balancing blocks L1 offers the meta level: named settings of a hotspot-diminishing round (AutoFlow).

- ``off``: no rebalancing;
- ``threshold``: act above a max/mean of 1.15, few moves per round, a long cooldown;
- ``aggressive``: act above 1.02, many moves, no cooldown.

:mod:`strata.adapt` composes schedulers from these names; the controller runs
the chosen one's :class:`~strata.balance.hotspot.BalanceConfig` (None: off).
"""

from __future__ import annotations

from strata.balance.hotspot import BalanceConfig

PRESETS: dict[str, BalanceConfig | None] = {
    "off": None,
    "threshold": BalanceConfig(threshold=1.15, max_moves=4, cooldown_s=20.0, min_gain=0.05),
    "aggressive": BalanceConfig(threshold=1.02, max_moves=32, cooldown_s=0.0, min_gain=0.0),
}


def preset(name: str) -> BalanceConfig | None:
    """The balancing block ``name`` (None: balancing off); an unknown name fails naming the choices."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown balancing preset {name!r}; choose from {list(PRESETS)}") from None
