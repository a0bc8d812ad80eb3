"""Experiment 1 on a real engine (issue 9): the emergent learner choosing compositions on embedded Spark.

``examples/demo.yaml`` (an alert filter with a 2 s target next to a skewed
keyed window aggregation and a heavy scoring job, bursts beyond two cores)
runs twice through the demo's Strata loop (:func:`strata.runners.demo.run_mode` in strata.runners.spark_loop:
planner, dispatch gate, balancer, resource learner, pacing) on the same
seeded input and the same Spark session:

- ``adaptive``: :class:`strata.adapt.Selector` chooses the L2 dispatch
  strategy and the L1 balancing block every 2-second window, enforced by
  :class:`strata.spark.engine.SparkEngine` at micro-batch boundaries
  (``Decisions.dispatch`` → the gate's strategy; key-group moves → routing);
- ``fixed``: the demo's own composition (llf/aggressive) throughout, scored
  the same way (:class:`strata.adapt.Fixed`).

Spark places nothing, so every candidate keeps the planner's placement.
Reported: the composition chosen in every window with its score (on-time
outputs / expected outputs summed over the last ``HORIZON`` windows —
a 2 s window may hold no commit of a job whose outputs are on their way,
:class:`strata.adapt.Scorer`), the mean score of each run over its windows
with evidence (a score whose horizon holds only windows with input — the
windows the learner learns from; start-up windows before the sources run
are neither scored nor learnt from, and the learner keeps its composition
through them), and the load average (Spark timings depend on it). Sinks
are not verified here (``strata demo`` verifies them); this measures choice
and score only.

    .venv/bin/python benchmarks/bench_adapt_spark.py [--duration 30] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from strata.adapt import Composition, Fixed, Selector
from strata.model import load_scenario
from strata.protocol.units import POOLS
from strata.runners.demo import DemoConfig, reseed
from strata.runners.spark_loop import run_mode
from strata.runners.warmup import lead_after, warm_up
from strata.spark.session import build_session

CANDIDATES = [
    Composition("llf", "aggressive", "planner"),  # the demo's composition
    Composition("edf", "threshold", "planner"),
    Composition("sjf", "aggressive", "planner"),
    Composition("fifo", "off", "planner"),
]
SPEC = Path(__file__).parent.parent / "examples" / "demo.yaml"
HORIZON = 5  # windows (10 s) the score sums over: the session counts arrive once per 10 s event-time window


def evidence(rewards: list[float | None], horizon: int) -> list[float]:
    """The scores whose horizon holds only scored windows (what :class:`strata.adapt.Selector` learns from)."""
    out, run = [], 0
    for r in rewards:
        run = run + 1 if r is not None else 0
        if run >= horizon:
            out.append(r)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--duration", type=float, default=30.0, help="seconds of input per run")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    console = Console(width=160)
    scenario = reseed(load_scenario(SPEC), args.seed)
    out = Path("runs") / "bench_adapt_spark"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    base = DemoConfig(duration_s=args.duration, seed=args.seed)
    load_before = os.getloadavg()
    spark = build_session("strata-adapt", cores=base.cores, shuffle_partitions=base.cores, pools=POOLS, work_dir=out)
    spark.sparkContext.setLogLevel("FATAL")
    runs: dict[str, dict] = {}
    try:
        lead = lead_after([warm_up(spark, scenario, out / "warmup")], base.lead_s)
        for label in ("adaptive", "fixed"):
            made: list = []

            def meta(sc, label=label, made=made):
                chooser = (
                    Selector(sc, CANDIDATES, horizon=HORIZON)
                    if label == "adaptive"
                    else Fixed(sc, CANDIDATES[0], horizon=HORIZON)
                )
                made.append(chooser)
                return chooser

            config = replace(base.run, control=replace(base.run.control, meta=meta))
            t0 = time.time()
            epoch = t0 + lead
            run_mode(spark, scenario, "strata", out / label, config, epoch, epoch + base.duration_s + base.drain_s)
            chooser = made[0]
            picks = [
                (
                    round(c.time - chooser.choices[0].time, 1),
                    CANDIDATES[c.arm].name if label == "adaptive" else CANDIDATES[0].name,
                    c.reward,
                )
                for c in chooser.choices
            ]
            scored = evidence([r for _, _, r in picks], HORIZON)
            runs[label] = {
                "picks": picks,
                "mean_score": float(np.mean(scored)) if scored else None,
                "windows": len(scored),
                "wall_s": time.time() - t0,
            }
    finally:
        spark.stop()
    load_after = os.getloadavg()

    table = Table(
        title=f"Learner on Spark: examples/demo.yaml, {args.duration:.0f} s of input per run, seed {args.seed}"
    )
    for col in ("window", "adaptive: t (s)", "composition", "score", "fixed llf/aggressive: t (s)", "score"):
        table.add_column(col, justify="right")
    ad, fx = runs["adaptive"]["picks"], runs["fixed"]["picks"]
    for k in range(max(len(ad), len(fx))):
        a = ad[k] if k < len(ad) else (None, "", None)
        f = fx[k] if k < len(fx) else (None, "", None)
        table.add_row(
            str(k),
            "" if a[0] is None else f"{a[0]:.0f}",
            a[1],
            "-" if a[2] is None else f"{a[2]:.3f}",
            "" if f[0] is None else f"{f[0]:.0f}",
            "-" if f[2] is None else f"{f[2]:.3f}",
        )
    console.print(table)
    for label, r in runs.items():
        console.print(
            f"{label}: mean score {r['mean_score']:.3f} over {r['windows']} windows with evidence "
            f"({r['wall_s']:.0f} s wall)"
        )
    console.print(f"load average (1/5/15 min) before {load_before}, after {load_after}")
    (Path(__file__).parent / "results" / "adapt_spark.json").write_text(
        json.dumps(
            {
                "duration_s": args.duration,
                "seed": args.seed,
                "candidates": [c.name for c in CANDIDATES],
                "horizon_windows": HORIZON,
                "load_before": load_before,
                "load_after": load_after,
                "runs": runs,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
