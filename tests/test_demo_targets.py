"""The demo's targets (strata.report.targets) on hand-computed summaries: Strata against FAIR by hand (issue 29),
the hand deployment (issue 28) and plain Spark (issue 8), per seed and the worst seed over several."""

from __future__ import annotations

import math

import pytest

from strata.report.targets import (
    VERSUS_FAIR,
    VERSUS_PLAIN,
    Target,
    judge,
    judged,
    ratio,
    versus_fair,
    versus_hand,
    versus_plain,
    worst_seeds,
)

NAN = float("nan")  # what pandas makes of an unmeasured imbalance


def rows(table: dict[str, dict[str, tuple]]) -> list[dict]:
    """mode → job → (p99_s, misses, throughput, importance, imbalance) as summary rows."""
    return [
        dict(zip(("p99_s", "misses", "throughput", "importance", "imbalance"), v, strict=True), mode=m, job=j)
        for m, jobs in table.items()
        for j, v in jobs.items()
    ]


PLAIN = {
    "alerts": (4.0, 50, 100.0, 10.0, NAN),
    "sessions": (9.0, 0, 2000.0, 5.0, 1.5),
    "scoring": (5.0, 0, 2500.0, 5.0, NAN),
}
FAIR = {
    "alerts": (1.6, 4, 100.0, 30.0, NAN),
    "sessions": (9.0, 0, 1800.0, 5.0, 1.5),
    "scoring": (5.0, 0, 2000.0, 5.0, NAN),
}


def beside(strata: dict[str, tuple]) -> list[dict]:
    """A run: plain Spark and FAIR by hand as above, Strata as given."""
    return rows({"baseline": PLAIN, "fair": FAIR, "strata": strata})


GOOD = beside(
    {
        "alerts": (1.2, 2, 100.0, 34.0, NAN),
        "sessions": (9.9, 0, 1710.0, 5.0, 1.1),
        "scoring": (4.0, 0, 2000.0, 5.0, NAN),
    }
)
BAD = beside(
    {
        "alerts": (1.8, 5, 100.0, 29.0, NAN),
        "sessions": (9.0, 0, 1700.0, 5.0, 1.3),
        "scoring": (5.0, 0, 1790.0, 5.0, NAN),
    }
)


def test_a_seed_that_meets_every_target_against_fair():
    figures = versus_fair(GOOD, ["alerts"])
    assert figures == pytest.approx(
        {
            "p99_ratio": 1.2 / 1.6,  # 0.75
            "extra_misses": 2 - 4,
            "bulk_throughput_ratio": 1710 / 1800,  # sessions 0.95 is worse than scoring's 1.0
            "importance_ratio": 44 / 40,
        }
    )
    assert judge(figures, VERSUS_FAIR) == dict.fromkeys(figures, True)


def test_a_seed_that_misses_every_target_against_fair():
    figures = versus_fair(BAD, ["alerts"])
    assert figures == pytest.approx(
        {
            "p99_ratio": 1.8 / 1.6,  # 1.125
            "extra_misses": 1,
            "bulk_throughput_ratio": 1790 / 2000,  # scoring 0.895 under sessions' 0.944
            "importance_ratio": 39 / 40,
        }
    )
    assert judge(figures, VERSUS_FAIR) == dict.fromkeys(figures, False)


def test_every_critical_job_is_judged_by_the_worst_of_them():
    figures = versus_fair(GOOD, ["alerts", "sessions"])
    assert figures["p99_ratio"] == pytest.approx(9.9 / 9.0)  # sessions' 1.1, not alerts' 0.75
    assert figures["bulk_throughput_ratio"] == pytest.approx(1.0)  # scoring alone is bulk now
    assert not judge(figures, VERSUS_FAIR)["p99_ratio"]


def test_the_plain_comparison_is_kept_beside_it():
    figures = versus_plain(GOOD, ["alerts"])
    assert figures == pytest.approx(
        {
            "p99_gain": 4.0 / 1.2,
            "miss_gain": 50 / 2,
            "bulk_throughput_ratio": 2000 / 2500,  # scoring 0.8: FAIR's throughput is below plain's too
            "importance_ratio": 44 / 20,
            "imbalance": 1.1,  # sessions, the only job whose imbalance plain Spark measured
        }
    )
    assert judge(figures, VERSUS_PLAIN) == {
        "p99_gain": True,
        "miss_gain": True,
        "bulk_throughput_ratio": False,
        "importance_ratio": True,
        "imbalance": True,
    }
    unkeyed = [{**r, "imbalance": NAN} for r in GOOD]
    assert "imbalance" not in versus_plain(unkeyed, ["alerts"])


def test_bounds_ties_and_unmeasured_figures():
    bulk = next(t for t in VERSUS_FAIR if t.name == "bulk_throughput_ratio")
    assert bulk.met(0.9) and not bulk.met(0.8999)
    equal = 1.0  # the same importance: enough against FAIR, not against plain (higher)
    assert next(t for t in VERSUS_FAIR if t.name == "importance_ratio").met(equal)
    assert not next(t for t in VERSUS_PLAIN if t.name == "importance_ratio").met(equal)
    assert not Target("x", 1.0, lower_is_better=True).met(None)
    assert ratio(0.0, 0.0) == 1.0 and ratio(5.0, 0.0) == math.inf and ratio(None, 2.0) is None
    # no misses under Strata nor plain Spark: no gain, so issue 8's ≥ 10× fewer is not met; no bulk job to judge
    alone = versus_plain(rows({m: {"a": (1.0, 0, 1.0, 1.0, NAN)} for m in ("baseline", "strata")}), ["a"])
    assert alone == {"p99_gain": 1.0, "miss_gain": 1.0, "importance_ratio": 1.0}
    assert judge(alone, VERSUS_PLAIN) == {"p99_gain": False, "miss_gain": False, "importance_ratio": False}


def test_the_worst_seed_is_reported_for_every_target():
    seeds = {0: versus_fair(GOOD, ["alerts"]), 1: versus_fair(BAD, ["alerts"]), 2: versus_fair(GOOD, ["alerts"])}
    seeds[2] = {**seeds[2], "p99_ratio": None}  # seed 2's critical job delivered nothing
    worst = worst_seeds(seeds, VERSUS_FAIR)
    assert worst == {
        "p99_ratio": {"seed": 2, "value": None, "met": False},
        "extra_misses": {"seed": 1, "value": 1, "met": False},
        "bulk_throughput_ratio": {"seed": 1, "value": pytest.approx(0.895), "met": False},
        "importance_ratio": {"seed": 1, "value": pytest.approx(0.975), "met": False},
    }
    good = worst_seeds({3: versus_fair(GOOD, ["alerts"]), 4: versus_fair(GOOD, ["alerts"])}, VERSUS_FAIR)
    assert {name: (w["seed"], w["met"]) for name, w in good.items()} == dict.fromkeys(good, (3, True))  # ties: first


# the hand deployment: the critical job alone in its application is fast, its bulk jobs slower than FAIR's
HAND = {
    "alerts": (1.0, 1, 100.0, 36.0, NAN),
    "sessions": (12.0, 0, 1500.0, 5.0, NAN),
    "scoring": (5.0, 0, 2100.0, 5.0, NAN),
}


def test_strata_against_the_hand_deployment_is_judged_by_fairs_targets():
    run = [*GOOD, *rows({"dedicated": HAND})]
    figures = versus_hand(run, ["alerts"])
    assert figures == pytest.approx(
        {
            "p99_ratio": 1.2 / 1.0,  # its own application is faster: missed
            "extra_misses": 2 - 1,
            "bulk_throughput_ratio": 2000 / 2100,  # scoring's 0.952; sessions' 1710 / 1500 = 1.14
            "importance_ratio": 44 / 46,
        }
    )
    assert judge(figures, VERSUS_FAIR) == {
        "p99_ratio": False,
        "extra_misses": False,
        "bulk_throughput_ratio": True,
        "importance_ratio": False,
    }
    comparisons = judged(run, ["alerts"])
    assert [label for label, _, _ in comparisons] == ["FAIR by hand", "own application", "plain Spark"]
    assert comparisons[0][1] == versus_fair(run, ["alerts"]) and comparisons[1][1] == figures
    assert comparisons[2][2] == judge(versus_plain(run, ["alerts"]), VERSUS_PLAIN)
    assert [label for label, _, _ in judged(GOOD, ["alerts"])] == ["FAIR by hand", "plain Spark"]  # none by hand
    assert judged(rows({"baseline": PLAIN, "fair": FAIR}), ["alerts"]) == []  # Strata did not run
