"""Multi-resource balancer: exact optima on small instances (brute force), budgets and constraints respected."""

import itertools

import pytest

from strata.plan.instances import Host, Item, MultiBalanceConfig, _Loads, balance

GiB = 2**30


def brute_force(items, hosts, weights, max_moves=None):
    best = None
    names = [h.name for h in hosts]
    for combo in itertools.product(*[[h for h in it.candidates if h in names] for it in items]):
        moves = sum(1 for it, h in zip(items, combo, strict=True) if it.current is not None and h != it.current)
        if max_moves is not None and moves > max_moves:
            continue
        loads = _Loads(items, hosts, weights)
        for it, h in zip(items, combo, strict=True):
            loads.add(it, h)
        s = loads.score()[0]
        if best is None or s < best - 1e-12:
            best = s
    return best


def case():
    hosts = [Host("a", 4, 8 * GiB), Host("b", 4, 8 * GiB), Host("c", 2, 4 * GiB)]
    items = [
        Item("p#0", 2.0, 1 * GiB, ("a", "b", "c"), "a"),
        Item("p#1", 2.0, 1 * GiB, ("a", "b", "c"), "a"),
        Item("q#0", 1.5, 3 * GiB, ("a", "b"), "a"),
        Item("q#1", 0.5, 2 * GiB, ("b", "c"), "b"),
        Item("r#0", 1.0, 0.5 * GiB, ("a", "b", "c"), "a"),
        Item("s#0", 0.7, 1.5 * GiB, ("c",), "c"),
    ]
    return items, hosts


def test_matches_the_exact_optimum_on_a_small_instance():
    items, hosts = case()
    cfg = MultiBalanceConfig(weights=(1.0, 0.5, 0.25), neighbourhood=3)
    got = balance(items, hosts, cfg)
    assert got.objective == pytest.approx(brute_force(items, hosts, cfg.weights), abs=1e-3)
    for it in items:
        assert got.assignment[it.name] in it.candidates


def test_move_budget_is_respected_and_optimal_within_it():
    items, hosts = case()
    for k in (0, 1, 2):
        cfg = MultiBalanceConfig(max_moves=k, neighbourhood=3)
        got = balance(items, hosts, cfg)
        assert got.moves <= k
        assert got.objective == pytest.approx(brute_force(items, hosts, cfg.weights, k), abs=1e-3)
    assert balance(items, hosts, MultiBalanceConfig(max_moves=0)).assignment == {it.name: it.current for it in items}


def test_hand_computed_cpu_only_split():
    # Four 1-core instances on two 2-core hosts, all on "a": the balance is 2 + 2, max cpu utilisation 1.0.
    hosts = [Host("a", 2, GiB), Host("b", 2, GiB)]
    items = [Item(f"p#{i}", 1.0, 0.0, ("a", "b"), "a") for i in range(4)]
    got = balance(items, hosts, MultiBalanceConfig(weights=(1.0, 0.0, 0.0)))
    assert sorted(got.assignment.values()).count("b") == 2
    assert got.objective == pytest.approx(1.0)
    assert got.moves == 2
    assert not got.overloaded


def test_lost_host_forces_moves_outside_the_budget_and_unplaceable_items_are_named():
    hosts = [Host("b", 4, GiB)]
    items = [Item("p#0", 1.0, 0.0, ("a", "b"), "a")]
    got = balance(items, hosts, MultiBalanceConfig(max_moves=0))
    assert got.assignment == {"p#0": "b"}
    with pytest.raises(ValueError, match="q#0"):
        balance([Item("q#0", 1.0, 0.0, ("a",), "a")], hosts)


def test_min_gain_is_hysteresis_for_placed_instances():
    # a holds 1.1 cores of 2 (0.55), b 0.9 (0.45): moving y to b gives 0.50 / 0.50, a gain of 0.05.
    hosts = [Host("a", 2, GiB), Host("b", 2, GiB)]
    items = [Item("x", 1.0, 0.0, ("a",), "a"), Item("y", 0.1, 0.0, ("a", "b"), "a"), Item("z", 0.9, 0.0, ("b",), "b")]
    cpu_only = (1.0, 0.0, 0.0)
    moved = balance(items, hosts, MultiBalanceConfig(weights=cpu_only, min_gain=0.02))
    assert moved.assignment["y"] == "b" and moved.objective == pytest.approx(0.5)
    kept = balance(items, hosts, MultiBalanceConfig(weights=cpu_only, min_gain=0.1))
    assert kept.assignment["y"] == "a" and kept.moves == 0 and kept.objective == pytest.approx(0.55)
    # A new instance (no current host) is placed freely whatever the hysteresis.
    fresh = balance(
        [*items[:1], Item("y", 0.1, 0.0, ("a", "b")), items[2]],
        hosts,
        MultiBalanceConfig(weights=cpu_only, min_gain=0.1),
    )
    assert fresh.assignment["y"] == "b"
