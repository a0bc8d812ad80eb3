"""Strategies, the two-level queue and slot isolation against hand-computed orders (Cameo, NSDI'21)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strata.dispatch import (
    EarliestDeadline,
    FairShare,
    Fifo,
    LeastLaxity,
    Priors,
    ShortestJob,
    SlotDispatch,
    Strategy,
    TwoLevelQueue,
    WorkUnit,
    apportion,
    dispatcher,
    rank,
    slot_dispatcher,
    strategy,
)
from strata.protocol.units import Message, NodeView

# job, frontier, L, own cost, path cost, arrival, seq
M1 = WorkUnit("a", 10.0, 5.0, 0.5, 2.0, 0.0, 1)  # ddl 12.5, due 15
M2 = WorkUnit("b", 11.0, 2.0, 1.0, 0.0, 1.0, 2)  # ddl 12.0, due 13
M3 = WorkUnit("a", 8.0, 5.0, 0.2, 2.0, 2.0, 3)  # ddl 10.8, due 13


@pytest.mark.parametrize(
    ("by", "order"),
    [
        (LeastLaxity(), [M3, M2, M1]),
        (EarliestDeadline(), [M2, M3, M1]),  # tie at 13 broken by creation order
        (ShortestJob(), [M3, M1, M2]),
        (Fifo(), [M1, M2, M3]),
    ],
)
def test_each_strategy_orders_units_as_computed_by_hand(by, order):
    assert rank([M1, M2, M3], by) == order


def test_user_defined_strategy_is_one_method():
    class LongestPathFirst(Strategy):
        def key(self, unit: WorkUnit) -> float:
            return -unit.path_cost

    assert rank([M2, M1], LongestPathFirst()) == [M1, M2]


def test_unknown_strategy_name_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="choose from"):
        strategy("lottery")


def test_fair_share_serves_backlogged_dataflows_in_proportion_to_weight():
    by = FairShare()
    queue: TwoLevelQueue[WorkUnit] = TwoLevelQueue()
    seq = 0

    def add(job: str, weight: float) -> None:
        nonlocal seq
        seq += 1
        unit = WorkUnit(job, 0.0, 1.0, 1.0, 0.0, 0.0, seq, weight)
        queue.push(job, by.key(unit), seq, unit)

    for _ in range(40):
        add("light", 1.0)
        add("heavy", 3.0)
    served = {"light": 0, "heavy": 0}
    for _ in range(40):
        unit = queue.pop()
        by.started(unit, 0.0)
        served[unit.job] += 1
    assert served == {"light": 10, "heavy": 30}


def test_fair_share_gives_no_credit_for_time_away():
    by = FairShare()
    for i in range(100):  # "early" runs alone for a while
        unit = WorkUnit("early", 0.0, 1.0, 1.0, 0.0, 0.0, i)
        by.started(unit, by.key(unit))
    late = by.key(WorkUnit("late", 0.0, 1.0, 1.0, 0.0, 0.0, 100))
    early = by.key(WorkUnit("early", 0.0, 1.0, 1.0, 0.0, 0.0, 101))
    assert late == pytest.approx(99.0)  # starts at the current virtual time, not at 0
    assert early == pytest.approx(100.0)  # and alternates with "early" from there


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.tuples(st.integers(0, 5), st.integers(-20, 20)), st.none()), max_size=120))
def test_two_level_queue_pops_the_global_minimum(ops):
    """Operators by their head, messages within operators == one global (key, seq) order."""
    queue: TwoLevelQueue[int] = TwoLevelQueue()
    reference: list[tuple[float, int]] = []
    for seq, op in enumerate(ops):
        if op is None:
            expected = min(reference) if reference else None
            if expected is not None:
                reference.remove(expected)
            got = queue.pop()
            assert got == (expected[1] if expected else None)
        else:
            operator, key = op
            queue.push(operator, float(key), seq, seq)
            reference.append((float(key), seq))
        assert len(queue) == len(reference)


def message(seq: int, job: str, pe: str, frontier: float, instance: int = 0) -> Message:
    return Message(
        seq=seq, job=job, pe=pe, instance=instance, upstream=-1, created=0.0, event_time=frontier, frontier=frontier
    )


def test_node_dispatcher_prices_messages_with_profiled_path_costs():
    """Same due time, but one message still has 3 s of downstream work: least laxity runs it first, EDF not."""
    view = NodeView(
        name="n0",
        cores=1,
        pes=("q.a", "q.b"),
        target_latency={"q": 10.0},
        downstream={"q.a": ("q.c",), "q.b": ("q.out",), "q.c": ("q.out",)},
    )
    down = {"q.a": ("q.c",), "q.b": ("q.out",), "q.c": ("q.out",), "q.out": ()}
    cost = {"q.a": 0.1, "q.b": 0.1, "q.c": 3.0, "q.out": 0.0}
    orders = {}
    for name in ("cameo", "edf"):
        node = dispatcher(name, Priors(cost, down))(view)
        node.push(message(1, "q", "q.b", 5.0), 0.0)
        node.push(message(2, "q", "q.a", 5.0), 0.0)
        assert len(node) == 2
        orders[name] = [node.pop(0.0).pe, node.pop(0.0).pe]
        assert node.pop(0.0) is None and len(node) == 0
    assert orders == {"cameo": ["q.a", "q.b"], "edf": ["q.b", "q.a"]}


def test_node_dispatcher_learns_costs_from_completions():
    view = NodeView(name="n0", cores=1, pes=("q.a", "q.b"), target_latency={"q": 10.0})
    node = dispatcher("sjf", alpha=1.0)(view)
    node.completed(message(0, "q", "q.a", 0.0), 2.0, 0.0)
    node.completed(message(0, "q", "q.b", 0.0), 1.0, 0.0)
    node.push(message(1, "q", "q.a", 0.0), 0.0)
    node.push(message(2, "q", "q.b", 0.0), 0.0)
    first = node.pop(0.0)
    assert first.pe == "q.b" and first.priority == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("cores", "demand", "slots"),
    [
        (4, {"a": 1.0, "b": 1.0}, {"a": 2, "b": 2}),
        (8, {"a": 3.0, "b": 1.0}, {"a": 6, "b": 2}),  # 1 + 6 spare × (3/4, 1/4) = 1 + 4.5, 1 + 1.5: tie → a
        (5, {"a": 0.0, "b": 0.0, "c": 0.0}, {"a": 2, "b": 2, "c": 1}),
        (3, {"a": 1.0, "b": 100.0, "c": 1.0}, {"a": 1, "b": 1, "c": 1}),
    ],
)
def test_apportion_gives_each_dataflow_a_core_and_the_rest_by_demand(cores, demand, slots):
    assert apportion(cores, demand) == slots


def test_apportion_refuses_more_dataflows_than_cores():
    with pytest.raises(ValueError, match="core per dataflow"):
        apportion(1, {"a": 1.0, "b": 1.0})


def test_slots_never_run_more_of_a_dataflow_than_it_owns():
    view = NodeView(name="n0", cores=2, pes=("a.x", "b.y"), target_latency={"a": 1.0, "b": 1.0})
    node = slot_dispatcher()(view)
    assert isinstance(node, SlotDispatch) and node.slots == {"a": 1, "b": 1}
    for seq in range(3):
        node.push(message(seq, "a", "a.x", 0.0), 0.0)
    first = node.pop(0.0)
    assert first.seq == 0
    assert node.pop(0.0) is None  # a's only slot is busy; b's idle slot is not lent
    node.push(message(10, "b", "b.y", 0.0), 0.0)
    assert node.pop(0.0).seq == 10
    node.completed(first, 1.0, 1.0)
    assert node.pop(1.0).seq == 1 and len(node) == 1


def test_slots_per_operator_isolate_operators_of_one_dataflow():
    view = NodeView(name="n0", cores=3, pes=("a.x", "a.y"), target_latency={"a": 1.0})
    node = slot_dispatcher({"a.x": 2.0, "a.y": 1.0}, per="pe")(view)
    assert node.slots == {"a.x": 2, "a.y": 1}
    for seq in range(4):
        node.push(message(seq, "a", "a.y", 0.0), 0.0)
    assert node.pop(0.0).seq == 0
    assert node.pop(0.0) is None  # a.y owns one core; a.x's two stay idle


def test_records_for_a_later_window_yield_to_the_result_of_the_due_one():
    """Cameo's semantics awareness: parse work for window [10, 20) waits behind the [0, 10) result."""
    down = {"q.src": ("q.parse",), "q.parse": ("q.win",), "q.win": ("q.out",), "q.out": ()}
    priors = Priors({pe: 0.0 for pe in down}, down, {"q.win": (10.0, 10.0, 1.0)})
    view = NodeView(name="n0", cores=1, pes=("q.parse", "q.out"), target_latency={"q": 2.0}, downstream=down)
    orders = {}
    for name in ("cameo", "fifo"):
        node = dispatcher(name, priors)(view)
        node.push(message(1, "q", "q.parse", 11.5), 11.6)  # t_MF = 21 (window [10, 20) fires at 21)
        node.push(message(2, "q", "q.out", 9.9), 11.7)  # the [0, 10) result, t_MF = 9.9
        orders[name] = [node.pop(11.8).seq, node.pop(11.8).seq]
    assert orders == {"cameo": [2, 1], "fifo": [1, 2]}


def test_costs_are_profiled_per_record_and_weights_can_be_overridden():
    view = NodeView(
        name="n0", cores=1, pes=("q.a",), target_latency={"q": 10.0}, weight={"q": 1.0}, cost_per_record={"q.a": 0.25}
    )
    node = dispatcher("sjf", alpha=1.0)(view)
    first = message(1, "q", "q.a", 0.0)
    first.records = 4
    node.push(first, 0.0)
    assert node.pop(0.0).priority == pytest.approx(1.0)  # prior from the view: 4 × 0.25
    node.completed(first, 2.0, 2.0)  # measured: 0.5 s per record
    second = message(2, "q", "q.a", 0.0)
    second.records = 3
    node.push(second, 2.0)
    assert node.pop(2.0).priority == pytest.approx(1.5)

    fair = dispatcher("fair", weights={"q": 4.0})(view)
    for seq in (3, 4):
        fair.push(message(seq, "q", "q.a", 0.0), 0.0)
    fair.pop(0.0)
    assert fair.pop(0.0).priority == pytest.approx(0.25 / 4.0)  # finish tag advanced by cost / weight


@pytest.mark.parametrize(
    ("by", "late"),
    [(LeastLaxity(), True), (EarliestDeadline(), True), (ShortestJob(), False), (Fifo(), False), (FairShare(), False)],
)
def test_only_deadline_orders_count_a_unit_past_its_latest_start_as_overdue(by, late):
    # M1's latest start: 10 + 5 − 0.5 − 2 = 12.5 (EDF orders by its due time 15 but counts the same start)
    assert not by.overdue(M1, 12.5)
    assert by.overdue(M1, 12.6) is late


@pytest.mark.parametrize("name", ["cameo", "edf"])
def test_a_deadline_order_serves_overdue_messages_after_those_that_can_still_meet_theirs(name):
    """L = 1 s, 0.1 s a record, no downstream work: latest starts m1 0.9, m2 1.4, m3 1.7 (due 1.0, 1.5, 1.8)."""
    view = NodeView(name="n0", cores=1, pes=("q.a", "q.b"), target_latency={"q": 1.0})
    node = dispatcher(name, Priors({"q.a": 0.1, "q.b": 0.1}, {"q.a": (), "q.b": ()}))(view)
    for seq, pe, frontier in ((1, "q.a", 0.0), (2, "q.b", 0.5), (3, "q.a", 0.8)):
        node.push(message(seq, "q", pe, frontier), 0.0)
    # At 1.0 m1 is overdue (0.9 < 1.0): m2 goes first, not m1. At 1.8 m3 is overdue too (1.7 < 1.8): the two
    # overdue ones go in their own order, m1 then m3, and none is lost.
    assert [node.pop(1.0).seq, node.pop(1.8).seq, node.pop(1.8).seq] == [2, 1, 3]
    assert node.pop(1.8) is None and len(node) == 0


def test_an_overdue_message_waits_behind_feasible_ones_until_none_is_runnable():
    """The same queue at 1.0 under least laxity, actor turns: m2 (q.b) runs, then m3 (q.a, still feasible) before
    the overdue m1; while m3 holds q.a, m1 (also q.a's) cannot run, and it is the next once q.a is freed."""
    view = NodeView(name="n0", cores=1, pes=("q.a", "q.b"), target_latency={"q": 1.0})
    node = dispatcher("cameo", Priors({"q.a": 0.1, "q.b": 0.1}, {"q.a": (), "q.b": ()}))(view)
    for seq, pe, frontier in ((1, "q.a", 0.0), (2, "q.b", 0.5), (3, "q.a", 0.8)):
        node.push(message(seq, "q", pe, frontier), 0.0)
    assert node.pop(1.0).seq == 2
    node.hold("q.b", 0)
    assert node.pop(1.0).seq == 3
    node.hold("q.a", 0)
    assert node.pop(1.0) is None and len(node) == 1
    node.free("q.a", 0, 1.1)
    assert node.pop(1.1).seq == 1


def test_orders_that_are_not_deadline_orders_keep_their_order_when_work_is_overdue():
    view = NodeView(name="n0", cores=1, pes=("q.a", "q.b"), target_latency={"q": 1.0})
    node = dispatcher("fifo", Priors({"q.a": 0.1, "q.b": 0.1}, {"q.a": (), "q.b": ()}))(view)
    for seq, pe, frontier in ((1, "q.a", 0.0), (2, "q.b", 0.5), (3, "q.a", 0.8)):
        node.push(message(seq, "q", pe, frontier), float(seq))
    assert [node.pop(5.0).seq for _ in range(3)] == [1, 2, 3]
