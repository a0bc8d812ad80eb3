"""Load windows, hotspot diminishing and LPT (AutoFlow's policy) on hand-computed cases."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strata.balance import (
    BalanceConfig,
    SmoothedLoads,
    best_imbalance_bounds,
    diminish_hotspots,
    imbalance,
    instance_loads,
    lower_bound,
    lpt,
    lpt_ratio,
    optimal_makespan,
    window_loads,
)
from strata.balance.autoflow import AutoFlow, fell_behind
from strata.balance.loads import demand_factors, scale_by_instance
from strata.protocol.units import KeyGroupLoad, Move
from strata.protocol.window import InstanceLoad, WindowStats

# ------------------------------------------------------------------ load windows


def test_window_loads_sums_a_key_group_seen_on_two_instances():
    records = [
        KeyGroupLoad("j.agg", 3, 0, records=10, busy=0.5, state_bytes=100),
        KeyGroupLoad("j.agg", 3, 1, records=4, busy=0.25, state_bytes=120),  # migrated mid-window
        KeyGroupLoad("j.agg", 7, 1, records=2, busy=0.125, state_bytes=10),
        KeyGroupLoad("j.other", 0, 0, records=1, busy=1.0, state_bytes=0),
    ]
    busy = window_loads(records)
    assert busy["j.agg"].load == {3: 0.75, 7: 0.125}
    assert busy["j.agg"].state_bytes == {3: 120, 7: 10}
    assert busy["j.other"].load == {0: 1.0}
    assert window_loads(records, metric="records")["j.agg"].load == {3: 14.0, 7: 2.0}


def test_instance_loads_and_imbalance_count_an_instance_without_key_groups():
    per = instance_loads({0: 2.0, 1: 1.0, 2: 3.0}, {0: 0, 1: 0, 2: 2}, instances=4)
    assert per == [3.0, 0.0, 3.0, 0.0]
    assert imbalance(per) == pytest.approx(2.0)  # max 3 / mean 1.5
    assert imbalance([0.0, 0.0]) == 1.0
    assert imbalance([2.0, 2.0, 2.0]) == 1.0


def test_smoothed_loads_weigh_the_newest_window_by_alpha():
    s = SmoothedLoads(alpha=0.5)
    assert s.update({0: 4.0}) == {0: 4.0}
    assert s.update({0: 2.0, 1: 2.0}) == {0: 3.0, 1: 2.0}
    assert s.update({}) == {0: 1.5, 1: 1.0}


def test_demand_factors_add_the_queue_growth_to_what_was_processed():
    # 100 processed, queue 10 → 60: 150 arrived; 50 processed while 20 of a backlog drained: 30 arrived;
    # nothing processed: no mix to scale.
    factors = demand_factors([100, 50, 0], [10, 20, 0], [60, 0, 5])
    assert factors == [1.5, 0.6, 1.0]
    assert scale_by_instance({0: 2.0, 1: 1.0, 2: 4.0, 9: 1.0}, {0: 0, 1: 1, 2: 2}, factors) == {
        0: 3.0,
        1: 0.6,
        2: 4.0,
        9: 1.0,
    }


def test_fell_behind_needs_a_saturated_node_and_a_growing_queue():
    assert fell_behind([0.99, 0.99, 0.5, 0.96], [5, 9, 0, 0], [8, 9, 50, 1], saturation=0.95) == [0, 3]


# ------------------------------------------------------------------ hotspot diminishing


def test_moves_the_key_group_closest_to_half_the_gap_and_reports_the_irreducible_one():
    # instance 0: g0=6, g1=3, g2=1 (10); instance 1: g3=2; instance 2: g4=3. Mean 5, imbalance 2.
    loads = {0: 6.0, 1: 3.0, 2: 1.0, 3: 2.0, 4: 3.0}
    table = {0: 0, 1: 0, 2: 0, 3: 1, 4: 2}
    plan = diminish_hotspots(loads, table, 3)
    # Round: h=0, c=1, gap 8: g1 (3) gives max(7, 5)=7, better than g0 (max(4, 8)) or g2 (max(9, 3)).
    # Then loads 7, 5, 3: h=0, c=2, gap 4: only g2 fits (g0=6 >= gap) → 6, 5, 4.
    # Then h=0, gap 2: nothing fits; instance 1 at 5 <= 1.1 × 5: stop.
    assert [(t.key_group, t.src, t.dst) for t in plan.transfers] == [(1, 0, 1), (2, 0, 2)]
    assert plan.imbalance_before == pytest.approx(2.0)
    assert plan.imbalance_after == pytest.approx(1.2)
    assert plan.table == {0: 0, 1: 1, 2: 2, 3: 1, 4: 2}
    assert [(h.key_group, h.instance) for h in plan.irreducible] == [(0, 0)]  # 6 > 1.1 × 5
    assert plan.irreducible[0].ratio == pytest.approx(1.2)
    assert plan.stop == "stuck"
    assert optimal_makespan(loads, 3).makespan == 6.0  # the plan reached the optimum


def test_an_instance_with_no_key_groups_is_the_coldest_target_and_least_state_breaks_ties():
    plan = diminish_hotspots({0: 4.0, 1: 4.0}, {0: 0, 1: 0}, 2, state_bytes={0: 100.0, 1: 10.0})
    assert [(t.key_group, t.src, t.dst, t.state_bytes) for t in plan.transfers] == [(1, 0, 1, 10.0)]
    assert plan.imbalance_after == 1.0
    assert plan.stop == "balanced"
    assert plan.moved_bytes == 10.0


def test_equal_moves_go_by_state_size_and_the_cost_tolerance_trades_balance_for_less_state():
    # Instance 0: g0=5.0 (1 MB), g1=4.5 (1 kB); instance 1: g2 with no load. Mean 4.75, gap 9.5:
    # g0 → max(4.5, 5.0) = 5.0 and g1 → max(5.0, 4.5) = 5.0: equal, the smaller state moves.
    plan = diminish_hotspots({0: 5.0, 1: 4.5, 2: 0.0}, {0: 0, 1: 0, 2: 1}, 2, state_bytes={0: 1e6, 1: 1e3})
    assert [t.key_group for t in plan.transfers] == [1]
    # Instance 0: g0=5.0 (1 B), g1=3.0 (1 GB); instance 1: g2=1.4. Mean 4.7, gap 6.6:
    # g0 → max(3.0, 6.4) = 6.4; g1 → max(5.0, 4.4) = 5.0, the better balance.
    loads, table, state = {0: 5.0, 1: 3.0, 2: 1.4}, {0: 0, 1: 0, 2: 1}, {0: 1.0, 1: 1e9}
    plan = diminish_hotspots(loads, table, 2, state_bytes=state, config=BalanceConfig(cost_tolerance=0.0))
    assert [t.key_group for t in plan.transfers] == [1]
    # A tolerance of 0.4 × 4.7 = 1.88 puts 6.4 within reach of 5.0, and g0's state is far smaller.
    plan = diminish_hotspots(loads, table, 2, state_bytes=state, config=BalanceConfig(cost_tolerance=0.4, max_moves=1))
    assert [t.key_group for t in plan.transfers] == [0]


def test_a_key_group_heavier_than_the_gap_is_not_moved_but_reported():
    plan = diminish_hotspots({0: 6.0, 1: 4.0}, {0: 0, 1: 1}, 2)
    assert plan.transfers == ()
    assert [h.key_group for h in plan.irreducible] == [0]
    assert plan.imbalance_after == pytest.approx(1.2)


def test_granularity_is_not_reported_as_a_hotspot():
    # 6+3 | 3+3 | 3+3: max 9 is optimal (no table of these sizes beats it); 6 < 1.1 × 7.
    loads = {0: 6.0, 1: 3.0, 2: 3.0, 3: 3.0, 4: 3.0, 5: 3.0}
    plan = diminish_hotspots(loads, {0: 0, 1: 0, 2: 1, 3: 1, 4: 2, 5: 2}, 3)
    assert plan.transfers == () and plan.irreducible == ()
    assert plan.stop == "stuck"
    assert optimal_makespan(loads, 3).makespan == 9.0


def test_an_irreducible_hotspot_does_not_freeze_the_other_instances():
    # g0=10 alone on instance 0 (irreducible); instance 1 holds 3+3+2, instances 2, 3 are empty.
    loads = {0: 10.0, 1: 3.0, 2: 3.0, 3: 2.0}
    plan = diminish_hotspots(loads, {0: 0, 1: 1, 2: 1, 3: 1}, 4)
    # Mean 4.5. Instance 0 cannot shed. Instance 1 (8 > 4.95) → empty instance 2, gap 8: g1 or g2 (3) give
    # max(5, 3) = 5, g3 gives 6; tie → g1. Then 5 > 4.95 → instance 3, gap 5: g2 and g3 both give 3; tie → g2.
    assert [(t.key_group, t.src, t.dst) for t in plan.transfers] == [(1, 1, 2), (2, 1, 3)]
    assert instance_loads(loads, plan.table, 4) == [10.0, 2.0, 3.0, 3.0]
    assert [h.key_group for h in plan.irreducible] == [0]


def test_only_the_given_sources_shed_load():
    table = {0: 0, 1: 0, 2: 1, 3: 1, 4: 2}
    loads = {0: 3.0, 1: 3.0, 2: 4.0, 3: 4.0, 4: 1.0}  # instances 6 | 8 | 1
    first = diminish_hotspots(loads, table, 3).transfers[0]  # any instance may shed: the hottest, 1, does
    assert (first.key_group, first.src, first.dst) == (2, 1, 2)
    plan = diminish_hotspots(loads, table, 3, sources={0})  # only instance 0 fell behind: 3 | 8 | 4
    assert [(t.key_group, t.src, t.dst) for t in plan.transfers] == [(0, 0, 2)]
    assert plan.stop == "stuck"


def test_moves_per_round_are_bounded():
    loads = dict.fromkeys(range(8), 1.0)
    plan = diminish_hotspots(loads, dict.fromkeys(range(8), 0), 4, config=BalanceConfig(max_moves=2))
    assert len(plan.transfers) == 2
    assert plan.stop == "max_moves"
    # Without the bound: 8 | 0 0 0 → 2 2 2 2 in 6 moves.
    plan = diminish_hotspots(loads, dict.fromkeys(range(8), 0), 4)
    assert len(plan.transfers) == 6
    assert plan.imbalance_after == 1.0


def test_state_bytes_per_round_are_bounded():
    loads = dict.fromkeys(range(4), 1.0)
    plan = diminish_hotspots(
        loads,
        dict.fromkeys(range(4), 0),
        2,
        state_bytes=dict.fromkeys(range(4), 10.0),
        config=BalanceConfig(max_bytes=15.0),
    )
    assert len(plan.transfers) == 1
    assert plan.stop == "max_bytes"


def test_cooldown_keeps_a_recently_moved_key_group_in_place():
    loads = {0: 4.0, 1: 4.0}
    table = {0: 0, 1: 0}
    cfg = BalanceConfig(cooldown_s=10.0)
    plan = diminish_hotspots(loads, table, 2, config=cfg, moved_at={0: 5.0, 1: 5.0}, now=14.9)
    assert plan.transfers == () and plan.stop == "stuck"
    plan = diminish_hotspots(loads, table, 2, config=cfg, moved_at={0: 5.0, 1: 5.0}, now=15.0)
    assert len(plan.transfers) == 1


def test_a_move_below_the_minimum_gain_is_not_made():
    # 5.5 | 4.5, mean 5, imbalance 1.1 is fine; at θ=1.05 the only move (g2=0.5) lowers the max by 0.5 = 0.1 × mean.
    loads = {0: 5.0, 1: 0.5, 2: 4.5}
    table = {0: 0, 1: 0, 2: 1}
    assert len(diminish_hotspots(loads, table, 2, config=BalanceConfig(threshold=1.05, min_gain=0.1)).transfers) == 1
    assert diminish_hotspots(loads, table, 2, config=BalanceConfig(threshold=1.05, min_gain=0.11)).transfers == ()


def test_a_balanced_plan_is_stable_so_nothing_moves_back():
    rng = random.Random(7)
    loads = {g: rng.paretovariate(1.1) for g in range(64)}
    table = {g: g % 8 for g in range(64)}
    cfg = BalanceConfig(max_moves=100, cooldown_s=0.0)
    first = diminish_hotspots(loads, table, 8, config=cfg)
    assert first.transfers
    again = diminish_hotspots(loads, first.table, 8, config=cfg)
    assert again.transfers == ()


def test_rejects_a_table_pointing_outside_the_instances():
    with pytest.raises(ValueError, match="outside"):
        diminish_hotspots({0: 1.0}, {0: 3}, 2)
    with pytest.raises(ValueError):
        BalanceConfig(threshold=0.9)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.floats(0.0, 100.0), min_size=1, max_size=40), st.integers(1, 6), st.integers(0, 10**6))
def test_every_move_lowers_the_pair_maximum_and_never_raises_the_global_one(loads_list, instances, seed):
    rng = random.Random(seed)
    loads = dict(enumerate(loads_list))
    table = {g: rng.randrange(instances) for g in loads}
    plan = diminish_hotspots(loads, table, instances, config=BalanceConfig(max_moves=50, min_gain=0.0))
    per = instance_loads(loads, table, instances)
    moved = [t.key_group for t in plan.transfers]
    assert len(moved) == len(set(moved))
    for t in plan.transfers:
        # src is the hottest instance that can still shed load (one holding an irreducible hotspot may be hotter)
        assert table[t.key_group] == t.src and plan.table[t.key_group] == t.dst and per[t.dst] == min(per)
        assert max(per[t.src] - t.load, per[t.dst] + t.load) < per[t.src]
        peak = max(per)
        per[t.src] -= t.load
        per[t.dst] += t.load
        assert max(per) <= peak
    assert instance_loads(loads, plan.table, instances) == pytest.approx(per)
    assert plan.imbalance_after <= plan.imbalance_before + 1e-9


# ------------------------------------------------------------------ LPT and the exact optimum


def test_lpt_on_grahams_worst_case_is_four_thirds_minus_one_over_3m_of_the_optimum():
    # m = 3: jobs 5, 5, 4, 4, 3, 3, 3. LPT: {5,3,3} {5,4} {4,3} → 11; optimum {5,4} {5,4} {3,3,3} → 9.
    loads = dict(enumerate([5, 5, 4, 4, 3, 3, 3]))
    assert lpt(loads, 3).makespan == 11
    best = optimal_makespan(loads, 3)
    assert best.optimal and best.makespan == 9
    assert lpt_ratio(3) == pytest.approx(11 / 9)
    assert lower_bound(loads, 3) == 9
    low, high = best_imbalance_bounds(loads, 3)
    assert low == pytest.approx(1.0) and high == pytest.approx(11 / 9)


def _brute_force(loads: list[float], instances: int) -> float:
    best = float("inf")
    for assign in itertools.product(range(instances), repeat=len(loads)):
        per = [0.0] * instances
        for w, i in zip(loads, assign, strict=True):
            per[i] += w
        best = min(best, max(per))
    return best


@pytest.mark.parametrize("seed", range(6))
def test_cp_sat_matches_brute_force_and_lpt_stays_within_grahams_ratio(seed):
    rng = random.Random(seed)
    weights = [rng.randint(1, 30) for _ in range(7)]
    loads = dict(enumerate(weights))
    best = optimal_makespan(loads, 3)
    assert best.optimal
    assert best.makespan == _brute_force(weights, 3)
    assert best.makespan <= lpt(loads, 3).makespan <= lpt_ratio(3) * best.makespan
    low, high = best_imbalance_bounds(loads, 3)
    mean = sum(weights) / 3
    assert low - 1e-9 <= best.makespan / mean <= high + 1e-9


def test_optimum_of_fractional_loads_is_scaled_yet_feasible():
    loads = {0: 0.31, 1: 0.29, 2: 0.2, 3: 0.2}
    best = optimal_makespan(loads, 2)
    assert best.makespan == pytest.approx(0.51)
    assert sorted(best.table) == [0, 1, 2, 3]


def test_optimum_under_a_tiny_time_limit_falls_back_to_a_feasible_table_no_worse_than_lpt():
    rng = random.Random(3)
    loads = {g: rng.randint(1, 1000) for g in range(60)}
    found = optimal_makespan(loads, 7, time_limit_s=1e-9)
    assert not found.optimal
    assert found.makespan <= lpt(loads, 7).makespan
    assert sorted(found.table) == sorted(loads)


# ------------------------------------------------------------------ the controller's rounds


def _records(pe: str, loads: dict[int, float], table: dict[int, int], state: dict[int, float]) -> list[KeyGroupLoad]:
    return [
        KeyGroupLoad(pe, g, table[g], records=int(10 * load), busy=load, state_bytes=state.get(g, 0.0))
        for g, load in loads.items()
    ]


def test_controller_moves_the_cheaper_group_in_its_mode_and_never_replans_a_migrating_one():
    pe = "j.agg"
    af = AutoFlow(BalanceConfig(cooldown_s=10.0), mode="stop")
    table = {0: 0, 1: 0}
    loads = {0: 4.0, 1: 4.0}
    moves = af.rebalance(2.0, _records(pe, loads, table, {0: 10.0, 1: 5.0}), {pe: table}, {pe: 2})
    assert moves == [Move(pe, 1, 1, "stop")]
    assert (af.rounds[-1].imbalance, af.rounds[-1].planned, af.rounds[-1].moved_bytes) == (2.0, 1.0, 5.0)
    # Long after the cooldown, the same picture again, but group 1 is still migrating: only group 0 may go.
    moves = af.rebalance(100.0, _records(pe, loads, table, {}), {pe: table}, {pe: 2}, migrating={pe: [1]})
    assert moves == [Move(pe, 0, 1, "stop")]
    # Within group 0's cooldown and with group 1 migrating, nothing may move.
    assert af.rebalance(105.0, _records(pe, loads, table, {}), {pe: table}, {pe: 2}, migrating={pe: [1]}) == []
    assert af.rounds[-1].stop == "stuck"


def test_controller_reports_irreducible_hotspots_per_operator_and_skips_other_operators():
    af = AutoFlow(pes={"j.agg"})
    table = {0: 0, 1: 1, 2: 1}
    records = _records("j.agg", {0: 9.0, 1: 1.0, 2: 1.0}, table, {})
    records += _records("j.other", {0: 5.0, 1: 0.0}, {0: 0, 1: 0}, {})
    moves = af.rebalance(2.0, records, {"j.agg": table, "j.other": {0: 0, 1: 0}}, {"j.agg": 2, "j.other": 2})
    assert moves == []
    assert [(h.key_group, h.instance) for h in af.hotspots["j.agg"]] == [(0, 0)]
    assert "j.other" not in af.hotspots


def test_controller_plans_on_demand_so_an_overloaded_instance_is_not_underestimated():
    # Instance 0 processed 100 records (busy 0.5 + 0.5, saturated) while its queue grew by 100: its demand is
    # twice its busy time. On busy time alone, 1.0 | 0.9 is within θ = 1.1 and nothing moves.
    pe = "j.agg"
    table = {0: 0, 1: 0, 2: 1}
    records = _records(pe, {0: 0.5, 1: 0.5, 2: 0.9}, table, {})
    assert AutoFlow().rebalance(2.0, records, {pe: table}, {pe: 2}) == []
    af = AutoFlow()
    moves = af.rebalance(2.0, records, {pe: table}, {pe: 2}, demand={pe: demand_factors([100, 90], [0, 5], [100, 5])})
    assert moves == [Move(pe, 0, 1, "live")]  # 2.0 | 0.9 → 1.0 | 1.9
    assert af.rounds[-1].planned == pytest.approx(1.9 / 1.45)


def _obs(
    now: float,
    start: float,
    busy: list[float],
    records: list[int],
    queued: list[int],
    loads: dict[int, float],
    route: tuple[int, ...],
    migrating: tuple[tuple[str, int], ...] = (),
) -> WindowStats:
    pe = "j.agg"
    nodes = tuple(f"n{i}" for i in range(len(busy)))
    span = now - start
    return WindowStats(
        now=now,
        start=start,
        key_groups=tuple(KeyGroupLoad(pe, g, route[g], 10, load, 0.0) for g, load in loads.items()),
        instances=tuple(
            InstanceLoad(pe, i, nodes[i], records[i], busy[i], queued[i], route.count(i)) for i in range(len(busy))
        ),
        node_utilisation={n: b / span for n, b in zip(nodes, busy, strict=True)},
        queue_lengths={},
        latency={},
        rates={},
        ingest={},
        routing={pe: route},
        placement={pe: nodes},
        migrating=migrating,
        dropped={},
    )


def test_controller_rounds_every_window_or_early_when_an_instance_falls_behind():
    af = AutoFlow(BalanceConfig(threshold=1.1, cooldown_s=0.0), window_s=2.0)
    route = (0, 0, 1, 2)
    even = {0: 0.1, 1: 0.1, 2: 0.2, 3: 0.2}
    # A quiet tick: no round before the window is full.
    assert af.decide(_obs(0.5, 0.0, [0.2, 0.2, 0.2], [50, 50, 50], [1, 1, 1], even, route)) == []
    assert af.rounds == []
    # Instance 0 saturated and its queue grew, but a migration of the PE is in flight: wait.
    hot = {0: 0.3, 1: 0.2, 2: 0.2, 3: 0.2}
    busy_hot = [0.5, 0.2, 0.2]
    assert af.decide(_obs(1.0, 0.5, busy_hot, [50, 50, 50], [30, 1, 1], hot, route, (("j.agg", 3),))) == []
    # The next tick, nothing in flight: an early round on this tick's loads, shedding from instance 0 only.
    # Demand: queue 30 → 60 over 50 processed → ×1.6: groups 0, 1 = 0.48, 0.32; instances 0.8 | 0.2 | 0.2.
    moves = af.decide(_obs(1.5, 1.0, busy_hot, [50, 50, 50], [60, 1, 1], hot, route))
    assert moves == [Move("j.agg", 1, 1, "live")]  # 0.8 | 0.2 → 0.48 | 0.52: the group nearest half the gap
    assert [(r.time, r.trigger) for r in af.rounds] == [(1.5, "overload")]
    # The window restarts after a round: the regular one comes 2 s later, over everything since.
    moved = {0: 0.2, 1: 0.1, 2: 0.1, 3: 0.2}  # 0.2 | 0.2 | 0.2 on the new table
    assert af.decide(_obs(3.0, 1.5, [0.75] * 3, [150] * 3, [60, 1, 1], moved, (0, 1, 1, 2))) == []
    assert af.decide(_obs(3.5, 3.0, [0.25] * 3, [50] * 3, [60, 1, 1], moved, (0, 1, 1, 2))) == []
    assert [(r.time, r.trigger) for r in af.rounds] == [(1.5, "overload"), (3.5, "window")]


def test_controller_starts_over_when_the_operator_gains_an_instance():
    af = AutoFlow(BalanceConfig(threshold=1.1, cooldown_s=0.0), window_s=2.0)
    even = {0: 0.1, 1: 0.1, 2: 0.2, 3: 0.2}
    assert af.decide(_obs(0.5, 0.0, [0.2, 0.2, 0.2], [50, 50, 50], [1, 1, 1], even, (0, 0, 1, 2))) == []
    # A fourth (empty) instance appears: the three-instance window is dropped, not zipped against four.
    assert af.decide(_obs(1.0, 0.5, [0.2, 0.2, 0.2, 0.0], [50, 50, 50, 0], [1, 1, 1, 0], even, (0, 0, 1, 2))) == []
    moves = af.decide(_obs(3.0, 1.0, [0.8, 0.8, 0.8, 0.0], [200, 200, 200, 0], [1, 1, 1, 0], even, (0, 0, 1, 2)))
    assert [m.dst for m in moves] == [3] * len(moves) and moves
    assert [(r.time, r.trigger) for r in af.rounds] == [(3.0, "window")]
