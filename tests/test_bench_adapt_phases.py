"""bench_adapt_phases' pure parts: where a group's regret comes from, and fixed runs taken from an earlier file."""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_adapt_phases.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_adapt_phases", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_adapt_phases"] = module
    spec.loader.exec_module(module)
    return module


def test_the_regret_splits_into_phase_change_trial_and_dispatch_windows(bench):
    # Two 14 s phases of 7 two-second windows. The best fixed composition scores 1 in every window: llf/threshold in
    # the first phase, sjf/off in the second. The adaptive run scores 0.5 in each phase's first 5 windows (the phase
    # change), 0 in a one-window trial of fair (t = 10), 1 back under llf (t = 12), and 0.5 under llf where sjf is
    # best (t = 24, 26).
    fixed = [c.name for c in bench.CANDIDATES]
    times = [2.0 * k for k in range(14)]
    best = {"llf/threshold/planner": (0, [1.0] * 7 + [0.0] * 7), "sjf/off/planner": (1, [0.0] * 7 + [1.0] * 7)}
    runs = {n: {"scores": [[t, best.get(n, (0, [0.0] * 14))[1][k]] for k, t in enumerate(times)]} for n in fixed}
    summary = {n: {"phases": [1.0 if best.get(n, (-1,))[0] == k else 0.0 for k in range(2)]} for n in fixed}
    picks = ["llf/threshold/planner"] * 14
    picks[5] = "fair/threshold/planner"
    mine = [0.5] * 5 + [0.0, 1.0] + [0.5] * 7
    runs["adaptive"] = {
        "scores": [[t, r] for t, r in zip(times, mine, strict=True)],
        "picks": [[t, 0, p] for t, p in zip(times, picks, strict=True)],
    }
    group = {
        "shapes": [{"name": "s", "phases": [14.0, 14.0]}],
        "runs": [{"shape": "s", "summary": summary, "runs": runs}],
    }
    out = bench.regret_sources(group)
    assert out["windows"] == {"phase change": 10, "trial": 1, "best dispatch": 1, "other dispatch": 2}
    shares = out["share_of_per_phase_best"]
    assert shares == {
        "phase change": pytest.approx(5.0 / 14),
        "trial": pytest.approx(1.0 / 14),
        "best dispatch": pytest.approx(0.0),
        "other dispatch": pytest.approx(1.0 / 14),
    }
    # llf is the first phase's best dispatch from its first window; sjf never runs in the second.
    assert out["lag_s"] == {"median": 0.0, "never": 1, "phases": 2}


def test_fixed_runs_come_only_from_a_file_with_the_same_shapes_seeds_and_candidates(bench):
    shapes, seeds = bench.GROUPS["round5"]
    every = {c.name: {"scores": []} for c in bench.CANDIDATES}
    doc = {
        "round5": {
            "shapes": json.loads(json.dumps([asdict(s) for s in shapes])),  # as a results file holds them
            "runs": [{"shape": s.name, "seed": seed, "runs": dict(every)} for s in shapes for seed in seeds],
        }
    }
    got = bench.fixed_runs(doc, "round5", "f")
    assert set(got) == {(s.name, seed) for s in shapes for seed in seeds}
    with pytest.raises(ValueError, match=r"f\.json: no group 'round4'"):
        bench.fixed_runs(doc, "round4", "f")
    doc["round5"]["shapes"][0]["burst"] = 1.0
    with pytest.raises(ValueError, match=r"round5\.shapes: 'skew-coarse-fine\+start-loss\+fine-arrival' missing or"):
        bench.fixed_runs(doc, "round5", "f")
    doc["round5"]["shapes"][0]["burst"] = shapes[0].burst
    del doc["round5"]["runs"][-1]["runs"]["fair/off/planner"]
    with pytest.raises(ValueError, match=r"seed 403 lacks \['fair/off/planner'\]"):
        bench.fixed_runs(doc, "round5", "f")


def test_the_meta_level_is_charged_the_cpu_time_it_ran_not_the_wall_time_it_waited(bench):
    class Waits:
        def select(self, obs, ran=None):
            time.sleep(0.05)  # off the CPU, as when another process holds the core
            return "waited"

    timed = bench.Timed(Waits())
    assert timed.select(None) == "waited"
    assert timed.spent >= 0.05 and timed.cpu < 0.01


def test_rerun_dispatch_reruns_only_the_fixed_compositions_of_those_blocks(bench, monkeypatch):
    shape, seed = bench.GROUPS["round5"][0][0], bench.GROUPS["round5"][1][0]
    ran, starts = [], (0.0, float(shape.phases[0]), float(shape.phases[0] + shape.phases[1]))  # a window a phase

    def fake_run(sc, shape, seed, comp, lookahead_share=0.0):
        ran.append(comp.name if comp is not None else "adaptive")
        return {"scores": [(t, 0.5) for t in starts], "wall_s": 1.0, "meta_s": 0.0, "cpu_s": 1.0, "meta_cpu_s": 0.0}

    monkeypatch.setattr(bench, "run", fake_run)
    stored = {c.name: {"scores": [(t, 1.0) for t in starts]} for c in bench.CANDIDATES}
    out = bench.one(shape, seed, (), bench.Console(quiet=True), stored, ("llf", "edf"))
    rerun = [c.name for c in bench.CANDIDATES if c.dispatch in ("llf", "edf")]
    assert ran == [*rerun, "adaptive"] and len(rerun) == 6
    assert out["summary"]["llf/off/planner"]["whole"] == 0.5 and out["summary"]["sjf/off/planner"]["whole"] == 1.0
