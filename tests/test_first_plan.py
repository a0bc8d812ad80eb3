"""No harm before evidence (issue 29): a job not observed yet runs as plain Spark runs it — its first template,
admitted, uncapped, at least its offered cpu — and a template switch or a rate cap comes only from learned costs
with a predicted gain over all jobs beyond noise. Known answers by hand; no timing."""

from __future__ import annotations

import itertools

import pytest

from strata.control.controller import Controller, HierarchyConfig
from strata.control.harm import HarmGuard, JobModel, Setting, predicted_gain
from strata.model import Scenario
from strata.protocol.engine import Decisions, InstanceLoad, Observation, WindowStats


def one_core() -> Scenario:
    """On one core: ``crit`` (rank 1, 100 rec/s × 0.006 core-s = 0.6 cores, every output worth 10) and ``bulk``
    (rank 2, 100 rec/s; ``exact`` 0.01 core-s a record = 1 core, worth 1 an output; ``sampled`` keeps 1 in 10
    for 0.1 cores, worth 9 an output: 90 at the full rate against exact's 100).

    Plain Spark (FAIR, equal shares, work conserving) on 1 core: 0.5 each, so crit runs 83.3 rec/s (833) and
    bulk 50 (50): 883. With bulk sampled: crit's whole 0.6 cores (1000) and bulk's 0.1 (90): 1090, a gain of 207
    against a noise margin of 10% of the 883 both jobs had."""

    def job(jid, rank, target, templates):
        return {"id": jid, "rank": rank, "target_latency_s": target, "templates": templates}

    def tpl(name, ops, weight):
        names = [o["name"] for o in ops]
        src = {"name": "src", "kind": "source", "cost_per_record": 0.0, "source": {"rate": 100, "seed": 1}}
        sink = {"name": "sink", "kind": "sink", "cost_per_record": 0.0}
        chain = ["src", *names, "sink"]
        streams = [{"from": a, "to": b} for a, b in itertools.pairwise(chain)]
        streams[-1]["weight"] = weight
        return {"name": name, "operators": [src, *ops, sink], "streams": streams}

    score = {"name": "score", "kind": "map", "cost_per_record": 0.01}
    sample = {"name": "sample", "kind": "filter", "predicate": "true", "selectivity": 0.1, "cost_per_record": 0.0}
    doc = {
        "name": "first",
        "cluster": {"nodes": [{"name": "n0", "cores": 1}]},
        "jobs": [
            job("crit", 1, 1.0, [tpl("t0", [{"name": "f", "kind": "map", "cost_per_record": 0.006}], 10.0)]),
            job("bulk", 2, 30.0, [tpl("exact", [score], 1.0), tpl("sampled", [sample, score], 9.0)]),
        ],
    }
    return Scenario.model_validate(doc)


def window(now: float, busy: dict[str, float], rate: float = 100.0) -> WindowStats:
    """A 5 s window: every source offered and read ``rate`` rec/s on time; ``busy``: PE → core-seconds per record
    it spent (the engine's accounting) on the records it processed."""
    span = 5.0
    loads = tuple(InstanceLoad(pe, 0, "n0", round(rate * span), cost * rate * span, 0, 0) for pe, cost in busy.items())
    return WindowStats(
        now=now,
        start=now - span,
        key_groups=(),
        instances=loads,
        node_utilisation={},
        queue_lengths={},
        latency={},
        rates={"crit.src": rate, "bulk.src": rate, "crit.f": rate, "bulk.score": rate},
        ingest={"crit.src": rate, "bulk.src": rate},
        routing={},
        placement={},
        migrating=(),
        dropped={},
    )


AS_PRIORS = {"crit.f": 0.006, "bulk.score": 0.01}


def test_the_plan_on_priors_alone_would_sample_bulk():
    # the reference point: without do no harm the first plan departs from plain on priors (what issue 29 measured)
    from strata.control.harm import HarmConfig

    bare = Controller(one_core(), HierarchyConfig(epoch_s=1000.0, harm=HarmConfig(enabled=False))).start(0.0)
    assert bare.admitted == {"crit": "t0", "bulk": "sampled"}


def test_an_unobserved_job_keeps_its_first_template_and_gets_no_cap():
    ctl = Controller(one_core(), HierarchyConfig(epoch_s=1000.0, pacing="plan"))
    d = ctl.start(0.0)
    assert d.admitted == {"crit": "t0", "bulk": "exact"}
    assert d.rate_limits == {"crit.src": None, "bulk.src": None}
    # at least what each job's offer needs at the priors: crit 100 × 0.006, bulk 100 × 0.01
    assert d.cpu_share["crit"] >= 0.6 - 1e-9 and d.cpu_share["bulk"] >= 1.0 - 1e-9
    why = dict(d.withheld)
    assert why["bulk"].startswith("no observation yet: runs as plain Spark runs it (template exact, admitted")
    assert why["crit"].startswith("no observation yet")
    # two windows with its batches: costs not learned yet (min_samples 3), so nothing departs from plain
    for t in (5.0, 10.0):
        d = ctl.step(Observation(window(t, AS_PRIORS)))
        assert d.admitted is None and all(c is None for c in d.rate_limits.values())
    assert ctl.plan.templates == {"crit": "t0", "bulk": "exact"}


def test_after_its_costs_are_learned_an_overload_switches_the_template():
    ctl = Controller(one_core(), HierarchyConfig(epoch_s=1000.0, pacing="plan"))
    ctl.start(0.0)
    steps = [ctl.step(Observation(window(t, AS_PRIORS))) for t in (5.0, 10.0, 15.0)]
    # the third window gives both jobs learned costs: their component is re-planned on them, and the overload the
    # accounting shows (1.6 cores wanted of 1) makes sampling bulk worth 1090 − 883 = +207/s > 88.3 of noise
    last = steps[-1]
    assert last.replan == ("bulk", "crit")
    assert "learned:bulk (costs over 3 windows; ran as plain Spark until now)" in last.reasons
    assert last.admitted == {"crit": "t0", "bulk": "sampled"}
    assert ctl._harm.pending[("bulk", "template")].predicted_gain == pytest.approx(90.0 - 50.0)


def test_learned_costs_without_overload_keep_the_first_template():
    # the accounting says bulk costs a tenth of its prior: 0.6 + 0.1 cores of 1, no overload — nothing to gain
    ctl = Controller(one_core(), HierarchyConfig(epoch_s=1000.0, pacing="plan"))
    ctl.start(0.0)
    for t in (5.0, 10.0, 15.0, 20.0):
        d = ctl.step(Observation(window(t, {"crit.f": 0.006, "bulk.score": 0.001})))
        assert d.admitted is None and all(c is None for c in d.rate_limits.values())
    assert ctl.plan.templates == {"crit": "t0", "bulk": "exact"}


def linear(offered: float, cost: float, templates=("t0",), worth: float = 1.0) -> JobModel:
    """A job worth ``worth`` per on-time source record/s, every template costing ``cost`` core-s a record."""
    return JobModel(offered, templates[0], dict.fromkeys(templates, cost), lambda t, r: worth * r)


def test_a_cap_is_worth_it_only_when_the_cores_it_frees_buy_another_job_more():
    # two jobs on one core, each offered 1 rec/s at 1 core-s a record and worth its on-time rate: plain gives each
    # 0.5; a cap of 0.25 on b gives a 0.75 — a's gain is b's loss: 0, with both moved (stake 0.5 + 0.5)
    even = {"a": linear(1.0, 1.0), "b": linear(1.0, 1.0)}
    assert predicted_gain(even, {"b": Setting("t0", cap=0.25)}, 1.0) == pytest.approx((0.0, 1.0))
    # a at its fair share already (0.4 of 0.5 needed): the cap moves b only, and costs it 0.6 − 0.25
    light = {"a": linear(0.4, 1.0), "b": linear(1.0, 1.0)}
    assert predicted_gain(light, {"b": Setting("t0", cap=0.25)}, 1.0) == pytest.approx((-0.35, 0.6))
    # a worth 10 a record: the cap moves 0.25 of a core from b (−0.25) to a (+2.5)
    dear = {"a": linear(1.0, 1.0, worth=10.0), "b": linear(1.0, 1.0)}
    assert predicted_gain(dear, {"b": Setting("t0", cap=0.25)}, 1.0) == pytest.approx((2.25, 5.5))
    guard = HarmGuard(one_core(), {}, 5.0)
    base = {"a": Setting("t0"), "b": Setting("t0")}
    assert guard.worth(even, {"b": Setting("t0", cap=0.25)}, 1.0, base) == (False, pytest.approx(0.0), 0.1)
    assert guard.worth(dear, {"b": Setting("t0", cap=0.25)}, 1.0, base)[0]  # 2.25 > 10% of 5.5


def test_a_pacing_cap_with_no_gain_for_anyone_is_withheld():
    # both offered 300 rec/s: crit alone wants 1.8 cores of 1. Once their costs are learned (t = 15 s) the plan
    # stops bulk and admits crit at what 1 core buys, 166.7 rec/s, which its pacing rounds down to a 150 cap; on
    # its own core crit would run 166.7: the cap costs it 16.7 × 10 = 166.7/s and buys no other job anything
    ctl = Controller(one_core(), HierarchyConfig(epoch_s=1000.0, pacing="plan"))
    ctl.start(0.0)
    d = [ctl.step(Observation(window(t, AS_PRIORS, rate=300.0))) for t in (5.0, 10.0, 15.0, 20.0, 25.0)]
    assert d[2].admitted == {"crit": "t0"}
    assert all(c is None for s in d for c in s.rate_limits.values())
    assert [w for s in d for w in s.withheld] == [
        ("crit", "rate cap 150 rec/s not made: predicted -166.7/s over all jobs, not above the noise margin 166.7/s")
    ]
    assert ctl._harm.withheld[("crit", "rate cap")].startswith("rate cap 150 rec/s")  # still withheld, told once


def test_a_switch_within_noise_is_withheld_and_said_once():
    from tests.test_harm import MODELS, guard

    # bulk's two templates cost and are worth the same (tests/test_harm.py's MODELS): a switch gains nothing
    g = guard()
    jobs = g.scenario.jobs
    first = g.planning(jobs, MODELS, 1.5, unseen={"bulk"})
    assert [len(j.templates) for j in first] == [1, 1] and [j.required for j in first] == [False, True]
    d = g.review(Decisions(1, admitted={"crit": "t0", "bulk": "full"}), 0.0, None, MODELS, 1.5)
    assert [job for job, _ in d.withheld] == ["bulk"] and d.withheld[0][1].startswith("no observation yet")
    seen = g.planning(jobs, MODELS, 1.5)
    assert [len(j.templates) for j in seen] == [1, 1] and not any(j.required for j in seen)
    d = g.review(Decisions(2), 5.0, None, MODELS, 1.5)
    assert d.withheld == (
        ("bulk", "template full kept: lite is predicted +0/s over all jobs, not above the noise margin 0.001/s"),
    )
    g.planning(jobs, MODELS, 1.5)
    assert g.review(Decisions(3), 10.0, None, MODELS, 1.5).withheld == ()  # told once
