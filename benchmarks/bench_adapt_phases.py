"""Experiment 1 (issue 9): emergent policy selection on a phase-changing workload, in the simulator.

Three phases on two 4-core nodes, each run by jobs whose sources are
silent outside their phase (``rate_curve``); the jobs of phases 1 and 2 may
only run on node n0 (a label), so they contend for its cores:

1. **fine, latency-bound**: ``urgent`` (25 ms records, target 0.1 s) shares
   the cores with ``bulk`` (5 ms records, target 10 s) at 87% load — the
   urgent job needs deadline-aware dispatch (shortest-first serves bulk first);
2. **coarse, bursty bulk**: ``small`` (40 ms, target 3 s) next to ``large``
   (250 ms records, on/off bursts 6× for 8 s of every 20 s: 6.8 cores of
   demand on n0's 4 while a burst lasts, drained before the next) — in
   overload, deadline order makes every job late (EDF's domino effect), while
   shortest-first and fair share keep ``small`` on time;
3. **skewed**: ``sessions`` (keyed, 40 ms records, Zipf 1.2 keys drifting, 16
   key groups on 4 instances over both nodes, 6 cores of demand) — needs
   key-group balancing.

Every candidate composition runs the whole workload fixed; the adaptive run
lets :class:`strata.adapt.Selector` (factored discounted UCB per workload
segment, segments found by change detection on unit size and skew) choose
one per 2-second window. Score per window: mean over running jobs of on-time outputs /
expected outputs (``strata.adapt.features.window_score``). Reported:
cumulative score, per-phase means, regret against the per-phase best fixed
composition.

    .venv/bin/python benchmarks/bench_adapt_phases.py [--phase 120] [--seeds 1 2 3] [--quick]
        [--burst 6] [--warm-start]

``--burst`` sets the coarse phase's burst factor (4 was this benchmark's
setting until the coarse phase was found not to separate the compositions);
``--warm-start`` starts each new workload segment from the last segment's
learner (the learner's behaviour before it started from the stated prior).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from strata.adapt import Composition, Fixed, Selector
from strata.control import loop
from strata.control.controller import Controller, HierarchyConfig
from strata.model import Scenario
from strata.plan import Options
from strata.plan.pacing import PACING
from strata.runners.sim_loop import sim_dispatch
from strata.sim.adapter import SimEngine
from strata.sim.options import SimOptions

CANDIDATES = [
    Composition("llf", "threshold", "planner"),
    Composition("edf", "off", "planner"),
    Composition("sjf", "threshold", "planner"),
    Composition("fair", "threshold", "planner"),
    Composition("fifo", "off", "planner"),
    Composition("llf", "aggressive", "planner"),
    Composition("fair", "off", "round-robin"),
    Composition("edf", "threshold", "greedy"),
]
WINDOW_S = 2.0
IDLE = 0.02  # records/s of a source outside its phase
EPOCH_S = 20.0  # full L0 epochs often enough to follow the phases with observed rates


def phase_curve(
    k: int,
    phase: float,
    rate: float,
    burst: tuple[float, float, float] | None = None,
) -> list[tuple[float, float]]:
    """Rate ``rate`` during phase k (0-based), ``IDLE`` elsewhere, with 0.5 s ramps.

    ``burst`` = (period s, on s, factor): inside the phase, ``factor`` × rate for
    ``on`` seconds of every ``period`` (a square wave written into the curve; the
    simulator's on/off process is not used because its rate must stay positive). Outside
    its phase a source trickles at ``IDLE`` records/s rather than 0: the simulator's
    Poisson thinning never returns while λ stays 0 (reported), and a trickle below
    the score's 5-record floor does not count.
    """
    a, b = k * phase, (k + 1) * phase
    pts = [(0.0, IDLE), (a, IDLE)] if a > 0 else []
    t = a
    while t < b - 1e-9:
        period, on, factor = burst or (b - a, b - a, 1.0)
        for start, end, r in ((t, min(t + on, b), rate * factor), (t + on, min(t + period, b), rate)):
            if end > start:
                pts += [(start + 0.25, r), (end - 0.25, r)]
        t += period
    pts += [(b, IDLE), (b + 1e6, IDLE)]
    return pts


def scenario(phase: float, burst: float = 6.0) -> Scenario:
    def job(
        jid: str,
        k: int,
        rate: float,
        cost: float,
        target: float,
        op_kind: str = "map",
        zipf: float = 0.0,
        burst: tuple[float, float, float] | None = None,
        seed: int = 0,
        keys: int = 1000,
        weight: float = 1.0,
        rank: int = 2,
    ) -> dict:
        # The nominal (planning) rate is the job's mean over the run: the first plan sees the average demand.
        curve = phase_curve(k, phase, rate, burst)
        mean = np.trapezoid([r for _, r in curve if _ <= 3 * phase], [t for t, _ in curve if t <= 3 * phase])
        src = {
            "rate": mean / (3 * phase),
            "rate_curve": curve,
            "seed": seed,
            "keys": {"count": keys, "zipf_s": zipf, **({"drift_period_s": 30.0, "drift_step": 7} if zipf else {})},
            "arrivals": {"process": "poisson"},
        }
        op = {
            "name": "work",
            "kind": op_kind,
            "cost_per_record": cost,
            "instances": 4 if op_kind != "map" else 2,
            "cpu_max": 8.0,
        }
        # Phases 1 and 2 share one 4-core node (their contention is what dispatch decides); phase 3 spans both.
        shared = {"constraints": {"required_labels": ["shared"]}} if k < 2 else {}
        op.update(shared)
        if op_kind != "map":
            op["key_groups"] = 16
        return {
            "id": jid,
            "rank": rank,
            "target_latency_s": target,
            "templates": [
                {
                    "operators": [
                        {"name": "src", "kind": "source", "cost_per_record": 0.0, "source": src, **shared},
                        op,
                        {"name": "sink", "kind": "sink", "cost_per_record": 0.0, **shared},
                    ],
                    "streams": [{"from": "src", "to": "work"}, {"from": "work", "to": "sink", "weight": weight}],
                }
            ],
        }

    doc = {
        "name": "phases",
        "cluster": {"nodes": [{"name": "n0", "cores": 4, "labels": ["shared"]}, {"name": "n1", "cores": 4}]},
        "jobs": [
            job("urgent", 0, 96, 0.025, 0.1, seed=1, weight=20.0, rank=1),
            job("bulk", 0, 300, 0.005, 10.0, seed=2),
            job("small", 1, 20, 0.040, 3.0, seed=3, weight=5.0),
            job("large", 1, 4, 0.250, 3.0, seed=4, burst=(20.0, 8.0, burst)),
            job("sessions", 2, 150, 0.040, 1.0, op_kind="keyed_stateful", zipf=1.2, seed=5, keys=400),
        ],
    }
    return Scenario.model_validate(doc)


def run(
    sc: Scenario, chooser, first: Composition, duration: float, seed: int, pacing: str = "off"
) -> list[tuple[float, float | None]]:
    cfg = HierarchyConfig(
        pacing=pacing,
        window_s=WINDOW_S,
        epoch_s=EPOCH_S,
        dispatch=first.dispatch,
        balancing=first.balancing,
        placer=first.placement,
        plan=Options(budget_s=0.5),
    )
    ctl = Controller(sc, cfg, selector=chooser)
    engine = SimEngine(sc, SimOptions(seed=seed), dispatch=sim_dispatch(sc))
    loop.run(engine, ctl, window_s=WINDOW_S, until=duration)
    return [(c.time, c.reward) for c in chooser.choices]


def per_phase(scores: list[tuple[float, float | None]], phase: float, phases: int) -> list[float]:
    """Mean score of the windows that closed inside each phase (a window's score is reported a window later)."""
    out = []
    for k in range(phases):
        vals = [r for t, r in scores if r is not None and k * phase < t - WINDOW_S + 1e-9 <= (k + 1) * phase - 1e-9]
        out.append(float(np.mean(vals)) if vals else float("nan"))
    return out


def one_seed(
    sc: Scenario,
    cands: list[Composition],
    phase: float,
    seed: int,
    console: Console,
    warm_start: bool = False,
    pacing: str = "off",
) -> dict:
    """Every fixed candidate and the adaptive run on one seed: per-phase means, whole-run score, gap."""
    duration = 3 * phase
    results = {}
    for comp in cands:
        t0 = time.perf_counter()
        scores = run(sc, Fixed(sc, comp), comp, duration, seed, pacing)
        results[comp.name] = {"scores": scores, "wall_s": time.perf_counter() - t0}
    t0 = time.perf_counter()
    sel = Selector(sc, cands, seed=seed, warm_start=warm_start)
    scores = run(sc, sel, cands[0], duration, seed, pacing)
    results["adaptive"] = {
        "scores": scores,
        "wall_s": time.perf_counter() - t0,
        "picks": [(c.time, c.context, cands[c.arm].name) for c in sel.choices],
    }
    phase_means = {name: per_phase(r["scores"], phase, 3) for name, r in results.items()}
    best = [max(phase_means[c.name][k] for c in cands) for k in range(3)]
    table = Table(title=f"Experiment 1: phase-changing workload ({phase:.0f} s per phase, seed {seed})")
    for col in ("composition", "fine", "coarse bursty", "skewed", "whole run", "vs per-phase best"):
        table.add_column(col, justify="right" if col != "composition" else "left")
    summary = {}
    for name, means in phase_means.items():
        whole = float(np.mean(means))
        gap = 1.0 - whole / float(np.mean(best))
        summary[name] = {"phases": means, "whole": whole, "gap_to_per_phase_best": gap}
        table.add_row(name, *(f"{m:.3f}" for m in means), f"{whole:.3f}", f"{100 * gap:+.1f}%")
    table.add_row("per-phase best", *(f"{b:.3f}" for b in best), f"{np.mean(best):.3f}", "")
    console.print(table)
    return {"seed": seed, "summary": summary, "per_phase_best": best, "runs": results}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--phase", type=float, default=120.0)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1])
    ap.add_argument("--quick", action="store_true", help="first three candidates only")
    ap.add_argument("--burst", type=float, default=6.0, help="burst factor of the coarse phase's large job")
    ap.add_argument("--warm-start", action="store_true", help="new segments start from the last segment's learner")
    ap.add_argument("--pacing", choices=PACING, default="off", help="the Controller's L0 pacing mode")
    args = ap.parse_args()
    sc = scenario(args.phase, args.burst)
    cands = CANDIDATES[:3] if args.quick else CANDIDATES
    console = Console(width=200)
    per_seed = [one_seed(sc, cands, args.phase, seed, console, args.warm_start, args.pacing) for seed in args.seeds]
    names = [c.name for c in cands] + ["adaptive"]
    whole = {n: [r["summary"][n]["whole"] for r in per_seed] for n in names}
    best = [float(np.mean(r["per_phase_best"])) for r in per_seed]
    table = Table(title=f"Over seeds {args.seeds}: whole-run score ({args.phase:.0f} s per phase)")
    table.add_column("composition")
    for seed in args.seeds:
        table.add_column(f"seed {seed}", justify="right")
    table.add_column("mean", justify="right")
    for n in names:
        table.add_row(n, *(f"{v:.3f}" for v in whole[n]), f"{np.mean(whole[n]):.3f}")
    table.add_row("per-phase best", *(f"{b:.3f}" for b in best), f"{np.mean(best):.3f}")
    console.print(table)
    adaptive = float(np.mean(whole["adaptive"]))
    beaten = [n for n in names[:-1] if adaptive > np.mean(whole[n])]
    regret = 1.0 - adaptive / float(np.mean(best))
    console.print(
        f"adaptive mean {adaptive:.3f}; regret vs per-phase best {100 * regret:.1f}% (target ≤ 10%); "
        f"better than {len(beaten)} of {len(names) - 1} fixed compositions on the mean (target: all)"
    )
    variant = (
        ("" if args.burst == 6.0 else f"_burst{args.burst:g}")
        + ("_warm" if args.warm_start else "")
        + ("" if args.pacing == "off" else f"_pacing-{args.pacing}")
    )
    out = Path(__file__).parent / "results" / f"adapt_phases_{args.phase:.0f}s{variant}.json"
    out.write_text(
        json.dumps(
            {
                "phase_s": args.phase,
                "burst": args.burst,
                "warm_start": args.warm_start,
                "pacing": args.pacing,
                "seeds": args.seeds,
                "window_s": WINDOW_S,
                "candidates": [c.name for c in cands],
                "whole_by_seed": whole,
                "per_phase_best_by_seed": best,
                "adaptive_regret": regret,
                "beaten": beaten,
                "per_seed": per_seed,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
