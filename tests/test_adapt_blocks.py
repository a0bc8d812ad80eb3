"""The meta level's blocks are the levels' registries: same names, same order; unknown names name the choices."""

from __future__ import annotations

import pytest

from strata import adapt, balance, dispatch, plan
from strata.adapt.blocks import PRIOR, Composition
from strata.model import Scenario


def test_adapt_offers_exactly_the_levels_registered_blocks():
    assert adapt.DISPATCH == tuple(dispatch.STRATEGIES) == ("llf", "edf", "sjf", "fifo", "fair")
    assert list(adapt.BALANCING) == list(balance.PRESETS) == ["off", "threshold", "aggressive"]
    assert adapt.PLACEMENT == tuple(plan.PLACERS) == ("planner", "greedy", "round-robin")
    assert adapt.BALANCING["aggressive"] is balance.preset("aggressive")
    assert len(adapt.compositions()) == len(dispatch.STRATEGIES) * len(balance.PRESETS) * len(plan.PLACERS)


def test_priors_only_name_registered_blocks():
    for prior, names in zip(PRIOR, (adapt.DISPATCH, adapt.BALANCING, adapt.PLACEMENT), strict=True):
        assert set(prior) <= set(names)


def test_an_alias_runs_the_same_strategy_but_is_not_a_block_of_its_own():
    assert type(dispatch.strategy("cameo")) is type(dispatch.strategy("llf"))
    assert "cameo" not in adapt.DISPATCH


@pytest.mark.parametrize(
    ("lookup", "choices"),
    [
        (dispatch.strategy, [*dispatch.STRATEGIES, *dispatch.ALIASES]),
        (balance.preset, list(balance.PRESETS)),
        (plan.placer, list(plan.PLACERS)),
    ],
)
def test_an_unknown_name_fails_listing_the_choices(lookup, choices):
    with pytest.raises(ValueError, match=r"unknown .*'nope'") as err:
        lookup("nope")
    assert all(repr(name) in str(err.value) for name in choices)


def test_an_unknown_block_in_a_composition_names_the_choices():
    with pytest.raises(ValueError, match=r"placement: expected one of .*'round-robin'.*found 'nope'"):
        Composition(placement="nope")
    with pytest.raises(ValueError, match=r"balancing: expected one of .*'aggressive'.*found 'x'"):
        Composition.parse("llf/x")


def _scenario() -> Scenario:
    return Scenario.model_validate(
        {
            "cluster": {"nodes": [{"name": "n0", "cores": 4}, {"name": "n1", "cores": 4}]},
            "jobs": [
                {
                    "id": "j",
                    "rank": 1,
                    "templates": [
                        {
                            "operators": [
                                {"name": "s", "kind": "source", "source": {"rate": 100}},
                                {"name": "m", "kind": "map", "cost_per_record": 0.001},
                                {"name": "o", "kind": "sink"},
                            ],
                            "streams": [{"from": "s", "to": "m"}, {"from": "m", "to": "o"}],
                        }
                    ],
                }
            ],
        }
    )


@pytest.mark.parametrize("name", list(plan.PLACERS))
def test_every_placer_has_one_signature_and_admits_a_small_job(name):
    result = plan.placer(name)(_scenario(), None, plan.Options(budget_s=5.0))
    assert "j" in result.admitted
