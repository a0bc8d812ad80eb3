"""Decisions the engines used to make, now in strata.control (issue 27): known answers for trigger intervals, the
gate's bound, pool quantisation, read-limit restart hysteresis, and what the Controller and Plain hand to Spark."""

from __future__ import annotations

from dataclasses import replace

import pytest

from strata.control.budgets import critical_pools, pool_names
from strata.control.controller import Controller, HierarchyConfig
from strata.control.loop import Plain
from strata.control.micro_batches import ReadLimitRestarts, directory_triggers, gate_config, trigger_intervals
from strata.model import Scenario
from strata.plan import Options
from strata.protocol.engine import Decisions
from strata.protocol.units import POOLS, URGENT_POOL


def scenario(targets: dict[str, float]) -> Scenario:
    job = {
        "operators": [
            {"name": "src", "kind": "source", "source": {"rate": 100}},
            {"name": "m", "kind": "map", "cost_per_record": 0.001},
            {"name": "out", "kind": "sink"},
        ],
        "streams": [{"from": "src", "to": "m"}, {"from": "m", "to": "out"}],
    }
    jobs = [{"id": j, "rank": k, "target_latency_s": t, "templates": [job]} for k, (j, t) in enumerate(targets.items())]
    return Scenario.model_validate({"name": "t", "cluster": {"nodes": [{"name": "n", "cores": 2}]}, "jobs": jobs})


def test_triggers_are_a_fifteenth_of_the_target_at_most_5_s_and_a_twentieth_for_critical_jobs():
    sc = scenario({"alerts": 2.0, "edge": 5.0, "sessions": 30.0, "daily": 600.0})
    expected = {"alerts": 0.1, "edge": 0.25, "sessions": 2.0, "daily": 5.0}
    assert trigger_intervals(sc, 5.0, 15.0, 5.0, 0.05) == expected
    assert HierarchyConfig().triggers(sc) == expected  # the defaults: 5 s, 15, 5 s, 0.05
    both = {"alerts": 0.2, "edge": 0.5, "sessions": 3.0, "daily": 60.0}
    assert trigger_intervals(sc, 1.0, 10.0, 60.0, 0.05) == both  # alerts (2 s) is not critical under 1 s


def test_on_spark_a_critical_job_polls_every_half_of_its_target():
    from strata.runners.spark_loop import RunConfig

    sc = scenario({"alerts": 2.0, "edge": 5.0, "sessions": 30.0, "daily": 600.0})
    # every mode of a Spark run (plain, FAIR by hand, the hand deployment, Strata) runs these triggers
    assert RunConfig().control.triggers(sc) == {"alerts": 1.0, "edge": 2.5, "sessions": 2.0, "daily": 5.0}


def test_a_critical_query_reading_directories_lists_them_every_twentieth_of_its_target():
    from strata.runners.spark_loop import RunConfig

    sc = scenario({"alerts": 2.0, "edge": 5.0, "sessions": 30.0})
    triggers = {"alerts": 0.5, "edge": 1.25, "sessions": 2.0}
    # only latency-critical jobs; the shorter of its trigger and target × file_poll
    assert directory_triggers(triggers, sc, 5.0, 0.05) == {"alerts": 0.1, "edge": 0.25}
    assert directory_triggers(triggers, sc, 5.0, 0.5) == {"alerts": 0.5, "edge": 1.25}
    assert directory_triggers(triggers, sc, 1.0, 0.05) == {}
    assert RunConfig().control.directory_triggers(sc) == {"alerts": 0.1, "edge": 0.25}  # every mode of a Spark run


def test_the_gate_bound_is_the_cores_less_the_reserved_at_least_one():
    assert [gate_config(c, 1).max_running for c in (1, 2, 3, 8)] == [1, 1, 2, 7]
    assert gate_config(8, 3).max_running == 5
    assert gate_config(4, 1).strategy == "edf"  # the other knobs at their defaults (the dispatch level's own order)
    assert gate_config(2, 1).critical_s == 0.0 and gate_config(2, 1, 5.0).critical_s == 5.0


def test_pool_quantisation_rounds_the_share_ratio_to_a_power_of_two_capped_at_8():
    assert pool_names({"a": 0.1, "b": 0.2, "c": 0.8, "d": 5.0}) == {"a": "w1", "b": "w2", "c": "w8", "d": "w8"}
    assert pool_names({"a": 1.0, "b": 1.4, "c": 1.5, "d": 3.0}) == {"a": "w1", "b": "w1", "c": "w2", "d": "w4"}
    assert pool_names({"a": 0.0, "b": 0.3}) == {"a": "w1", "b": "w1"}  # no share: the smallest pool
    assert pool_names({"a": 0.0, "b": 0.0}) == {"a": "w1", "b": "w1"}
    assert set(pool_names({"a": 1e-3, "b": 100.0}).values()) <= set(POOLS)


def test_critical_jobs_run_in_the_weight_32_pool_whatever_their_share():
    names = pool_names({"alerts": 0.1, "sessions": 0.8, "scoring": 1.5})  # ∝ shares: alerts the lightest
    assert names == {"alerts": "w1", "sessions": "w8", "scoring": "w8"}
    assert critical_pools(names, {"alerts"}) == {"alerts": "urgent", "sessions": "w8", "scoring": "w8"}
    assert POOLS["urgent"] == 32 and critical_pools(names, ()) == names


def test_read_limit_restarts_need_a_half_again_change_and_20_s_between_restarts():
    policy = ReadLimitRestarts(enabled=True)
    # (current limit, proposed limit, seconds since the query's last restart) → restart?
    sequence = [
        ((None, 10, 0.0), False),  # too soon after the (re)start
        ((None, 10, 20.0), True),  # a first cap, 20 s in
        ((10, 10, 100.0), False),  # unchanged
        ((10, 14, 100.0), False),  # +40%: not worth a restart
        ((10, 6, 100.0), True),  # 10 / 6 ≥ 1.5
        ((10, 15, 100.0), True),  # exactly 1.5×
        ((10, 15, 19.9), False),
        ((15, None, 20.0), True),  # lifting a cap
    ]
    assert [policy.worth_restart(*args) for args, _ in sequence] == [want for _, want in sequence]
    assert not ReadLimitRestarts().worth_restart(None, 10, 1e9)  # cap_reads off (the default): never
    tight = HierarchyConfig(cap_reads=True, read_limit_ratio=1.2, restart_every_s=5.0).read_restarts()
    assert tight.worth_restart(10, 12, 5.0) and not tight.worth_restart(10, 11, 5.0)


def test_the_controller_hands_spark_its_triggers_and_the_pools_of_its_cpu_shares():
    sc = scenario({"alerts": 2.0, "sessions": 30.0})
    config = replace(HierarchyConfig(), plan=Options(budget_s=0.5))
    d = Controller(sc, config).start(0.0)
    assert d.triggers == {"alerts": 0.1, "sessions": 2.0}  # alerts polls every 0.05 × its 2 s target
    # the critical job in the weight-32 pool from the first plan, as FAIR by hand puts it; the other by its share
    assert d.cpu_share is not None
    assert d.pools == {"alerts": URGENT_POOL, "sessions": pool_names(d.cpu_share)["sessions"]}
    plain = Plain(sc, {"sessions": 2.0}).start(0.0)
    assert plain.triggers == {"sessions": 2.0} and plain.pools is None and plain.cpu_share is None
    assert Plain(sc).start(0.0).triggers is None


@pytest.mark.parametrize("field", ["triggers", "pools", "task_records"])
def test_decisions_carrying_only_triggers_pools_or_task_sizes_are_not_empty(field):
    assert Decisions(0).empty() and not Decisions(0, **{field: {}}).empty()
