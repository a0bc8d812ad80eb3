"""The meta level on a micro-batch engine (strata.control.meta): its candidates, its score's horizon, the choice of
``--meta``, and the safe default on short runs, with known answers."""

from __future__ import annotations

import pytest

from strata.adapt import Composition, Selector
from strata.control.controller import Controller, HierarchyConfig
from strata.control.meta import candidates, default_composition, score_horizon, selector, with_meta
from strata.model import Scenario
from strata.protocol.engine import InstanceLoad, LatencyStats, Observation, WindowStats

SPARK = HierarchyConfig(window_s=2.0, dispatch="edf", balancing="aggressive", critical_poll=0.25)


def scenario(window_s: float | None = None, target_s: float = 30.0) -> Scenario:
    op = {"name": "f", "kind": "filter", "selectivity": 1.0}
    if window_s is not None:
        op = {"name": "f", "kind": "window_aggregate", "window": {"size_s": window_s}, "aggregate": {"fn": "count"}}
    template = {
        "operators": [{"name": "src", "kind": "source", "source": {"rate": 100}}, op, {"name": "sink", "kind": "sink"}],
        "streams": [{"from": "src", "to": "f"}, {"from": "f", "to": "sink"}],
    }
    jobs = [{"id": "a", "rank": 1, "target_latency_s": target_s, "templates": [template]}]
    return Scenario.model_validate({"name": "s", "cluster": {"nodes": [{"name": "n0", "cores": 2}]}, "jobs": jobs})


def test_candidates_are_the_configs_composition_then_each_one_level_change():
    names = [c.name for c in candidates(SPARK)]
    assert names == ["edf/aggressive/planner", "llf/aggressive/planner", "fifo/aggressive/planner", "edf/off/planner"]
    # the simulator's defaults (edf/threshold): balancing has two alternatives
    assert [c.name for c in candidates(HierarchyConfig())] == [
        "edf/threshold/planner",
        "llf/threshold/planner",
        "fifo/threshold/planner",
        "edf/aggressive/planner",
        "edf/off/planner",
    ]
    assert default_composition(SPARK) == Composition("edf", "aggressive", "planner")


def test_the_score_spans_the_longest_trigger_or_event_time_window():
    # target 30 s → trigger 2 s = one 2 s window; a 10 s window → 5 windows; 5 s control windows → ceil(10/5) = 2
    assert score_horizon(scenario(), SPARK) == 1
    assert score_horizon(scenario(window_s=10.0), SPARK) == 5
    assert score_horizon(scenario(window_s=10.0), HierarchyConfig(window_s=5.0)) == 2
    # target 60 s → trigger min(5, 60/15) = 4 s → 2 windows
    assert score_horizon(scenario(target_s=60.0), SPARK) == 2
    built = selector(SPARK)(scenario(window_s=10.0))
    assert (built.horizon, built.settle, built.trial) == (5, 4, (6, 6, 6))
    assert built.default == default_composition(SPARK)


def test_with_meta_off_adaptive_or_a_fixed_composition():
    assert with_meta(SPARK, "off").meta is None
    fixed = with_meta(SPARK, "llf/off")
    assert (fixed.dispatch, fixed.balancing, fixed.placer, fixed.meta) == ("llf", "off", "planner", None)
    adaptive = with_meta(SPARK, "adaptive")
    assert isinstance(adaptive.meta(scenario()), Selector)
    with pytest.raises(ValueError, match=r"meta: expected 'off', 'adaptive'.*found 'lifo/off'"):
        with_meta(SPARK, "lifo/off")


def window(step: int, miss: float) -> Observation:
    """One 2-second window of job a: 200 records in, 200 out, ``miss`` of them late."""
    w = WindowStats(
        now=2.0 * (step + 1),
        start=2.0 * step,
        key_groups=(),
        instances=(InstanceLoad("a.f", 0, "n0", 100, 0.1, 0, 0),),
        node_utilisation={},
        queue_lengths={},
        latency={"a": LatencyStats(200, 0.1, 0.2, 0.3, 0.4, miss)},
        rates={},
        ingest={"a.src": 100.0},
        routing={},
        placement={},
        migrating=(),
        dropped={},
    )
    return Observation(w)


def play(sel: Selector, windows: int, reward) -> list[Composition]:
    chosen, picks = sel.default, []
    for step in range(windows):
        chosen = sel.select(window(step, 1.0 - reward(chosen)), chosen)
        picks.append(chosen)
    return picks


def test_a_short_run_keeps_the_default_and_a_long_one_finds_a_composition_clearly_better():
    sc = scenario(target_s=60.0)  # horizon 2 windows, settle 1, trials of 3 windows
    off_better = {"off": 0.9}

    # The budget (a fifth of the windows) allows the first trial at window 4 × 3 = 12: before it, the default.
    short = play(selector(SPARK)(sc), 12, lambda c: off_better.get(c.balancing, 0.5))
    assert set(short[:11]) == {default_composition(SPARK)}
    # The dispatch level's alternatives are held (the model is not confident of any gain: its error here is 0.5),
    # so the first trial is balancing's.
    assert short[11] == Composition("edf", "off", "planner")

    # Over a long run off's trials find a gain far above the noise (none here): tried at window 11 and, under the
    # budget (6 trial windows ≤ a fifth of 27 + 3), again at 26; its second sample (``n_min``) is credited on the
    # incumbent's first settled window after it (29 settles, 30 is it), and off is the incumbent from 31.
    sel = selector(SPARK)(sc)
    picks = play(sel, 70, lambda c: off_better.get(c.balancing, 0.5))
    assert sel.segment.incumbent == Composition("edf", "off", "planner")
    assert picks[26] == picks[31] == picks[-1] == Composition("edf", "off", "planner")
    assert picks[29] == picks[30] == default_composition(SPARK)

    # A dispatch block the model cannot foresee is not sought from the default's (``away``): llf better by 0.4 is
    # never tried, and the one balancing trial (off, no gain) leaves the default in force.
    blind = selector(SPARK)(sc)
    picks = play(blind, 70, lambda c: 0.9 if c.dispatch == "llf" else 0.5)
    assert {p.dispatch for p in picks} == {"edf"} and blind.segment.incumbent == default_composition(SPARK)

    # Where no composition differs, trials find nothing and the default is kept.
    same = selector(SPARK)(sc)
    play(same, 60, lambda c: 0.5)
    assert same.segment.incumbent == default_composition(SPARK)


def test_the_controller_logs_the_composition_and_the_meta_levels_time_per_step():
    sc = scenario(target_s=60.0)
    ctl = Controller(sc, with_meta(SPARK, "adaptive"))
    ctl.start(0.0)
    ctl.step(window(0, 0.0))
    first, step = ctl.log
    assert (first.dispatch, first.balancing, first.meta_seconds) == ("edf", "aggressive", 0.0)
    assert (step.dispatch, step.balancing) == ("edf", "aggressive")
    assert step.meta_seconds > 0.0
    plain = Controller(sc, with_meta(SPARK, "fifo/off"))
    plain.start(0.0)
    plain.step(window(0, 0.0))
    assert (plain.log[-1].dispatch, plain.log[-1].balancing, plain.log[-1].meta_seconds) == ("fifo", "off", 0.0)


def test_strata_run_refuses_an_unknown_meta_level_before_spark_starts():
    from typer.testing import CliRunner

    from strata.cli import app

    from .conftest import EXAMPLES

    result = CliRunner().invoke(app, ["run", str(EXAMPLES / "demo.yaml"), "--meta", "lifo/off"])
    assert result.exit_code == 2
    assert "--meta: expected 'off', 'adaptive' or a composition" in " ".join(result.output.split())
    result = CliRunner().invoke(app, ["run", str(EXAMPLES / "demo.yaml"), "--meta", "adaptive", "--no-control"])
    assert result.exit_code == 2
    assert "--meta: expected Strata in control" in " ".join(result.output.split())
