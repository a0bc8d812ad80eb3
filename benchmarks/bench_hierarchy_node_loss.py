"""Experiment 3 (issue 9): a node lost in the middle of a run, in the simulator.

The co-operation workload (``bench_hierarchy_cooperation.scenario``) at 0.7×
its rates (so that three nodes can carry it) runs for ``--duration`` seconds;
half a window after half time the node holding the most instances goes down
for good. Three runs with the same seed:

- ``hierarchy``: the simulator's recovery (``recovery="replay"``: upstream
  backup, checkpoints every ``CHECKPOINT_S``, de-duplication; the lost
  instances restored at once from their checkpoints on the least-loaded live
  node) under the co-operative controller — the node-loss signal re-plans
  only the components with instances on the lost node (SODA on the capacity
  the others leave, then the multi-resource placement) and the simulator
  relocates those instances where the plan puts them (``Decisions(placement=…)``:
  paused, state shipped, resumed);
- ``static``: the same recovery, nobody re-planning (same failed node);
- ``no recovery``: the controller without the simulator's recovery, which
  loses what was queued on, running on or sent to the dead node.

Reported: time from the failure to the new plan (simulated: the detection
delay, at most one control window; wall: the planner's time) and to the new
placement being enforced (the relocations installed), records lost (must be 0
with recovery), rolled back / replayed / processed twice without effect,
whether every sink equals the offline reference after a drain (exactly once;
recovery runs), and each job's miss rate and p99 before the failure, in the
epoch after it, and at the end.

    .venv/bin/python benchmarks/bench_hierarchy_node_loss.py [--duration 120] [--seed 1]
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from dataclasses import replace
from pathlib import Path

from rich.console import Console
from rich.table import Table

from bench_hierarchy_cooperation import EPOCH_S, scenario
from strata.control import loop
from strata.control.controller import Controller, HierarchyConfig
from strata.protocol.engine import Decisions, Observation, WindowStats
from strata.runners.sim_loop import sim_dispatch
from strata.sim.adapter import SimEngine
from strata.sim.options import SimOptions

WINDOW_S = 1.0
CHECKPOINT_S = 5.0
DRAIN_S = 60.0
SCALE = 0.7  # rates × 0.7: about 53% of four nodes, 71% of the three left after the loss


def latency_between(windows: list[WindowStats], a: float, b: float) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for w in windows:
        if w.start < a - 1e-9 or w.now > b + 1e-9:
            continue
        for job, s in w.latency.items():
            j = out.setdefault(job, {"records": 0, "missed": 0.0, "p99": 0.0})
            j["records"] += s.records
            j["missed"] += s.records * s.miss_rate
            j["p99"] = max(j["p99"], s.p99)
    return {job: {"miss_rate": v["missed"] / v["records"], "p99_s": v["p99"]} for job, v in out.items() if v["records"]}


def run(mode: str, duration: float, seed: int, node: str | None = None) -> dict:
    from strata.sim.reference import sink_totals

    sc = scenario(SCALE)
    ctl = Controller(sc, HierarchyConfig(window_s=WINDOW_S, epoch_s=EPOCH_S))
    first = ctl.start(0.0)
    # The node holding the most instances in the first plan; the planner is time-budgeted, so the other runs
    # are handed the first run's victim rather than choosing again.
    victim = node or Counter(n for insts in first.placement.values() for n, _ in insts).most_common(1)[0][0]
    fail_at = duration / 2 + WINDOW_S / 2  # mid-window: the detection delay is not hidden by a lucky tick
    recovery = mode != "no recovery"
    extra = {"recovery": "replay", "checkpoint_interval": CHECKPOINT_S, "record_inputs": True} if recovery else {}
    engine = SimEngine(
        sc,
        SimOptions(seed=seed, failures=[(victim, fail_at, None)], **extra),
        dispatch=sim_dispatch(sc),
    )
    # The static run keeps the first plan and decides nothing after: no rate caps it would never revise.
    engine.apply(replace(first, rate_limits=None) if mode == "static" else first)
    windows: list[WindowStats] = []

    class Loop:
        """The control loop of the run: records every window; the static run decides nothing."""

        def step(self, obs: Observation) -> Decisions:
            windows.append(obs.window)
            return Decisions(epoch=0) if mode == "static" else ctl.step(obs)

    # The window the failure falls in is run in two parts, to count what was lost at the failure itself; its
    # control step comes at the window's end, as every other (no extra step right after the failure).
    loop.run(engine, Loop(), start=False, window_s=WINDOW_S, until=fail_at - WINDOW_S / 2)
    engine.sim.run(fail_at + 1e-6)
    lost_at_failure = engine.sim.metrics.drop_totals().get("failure", 0)
    rest = fail_at + WINDOW_S / 2
    loop.run(engine, Loop(), start=False, window_s=rest - engine.now(), until=rest)
    loop.run(engine, Loop(), start=False, window_s=WINDOW_S, until=duration)
    if recovery:
        engine.sim.run(duration, drain=DRAIN_S)
    replan = next((e for e in ctl.log if mode != "static" and any(s.startswith("node-loss") for s in e.signals)), None)
    # The instances the node-loss re-plan moved (later epochs may move others, for other reasons).
    at = replan.time if replan is not None else None
    moved = [r for r in engine.sim.migrations.relocations if at is not None and abs(r.requested - at) < 1e-9]
    summary = engine.sim.metrics.summary()
    return {
        "mode": mode,
        "failed_node": victim,
        "fail_at_s": fail_at,
        "replanned_at_s": replan.time if replan else None,
        "replanned_jobs": list(replan.replanned) if replan else [],
        "plan_wall_s": replan.plan_seconds if replan else None,
        "restored": len(engine.sim.metrics.recovery()),
        "instances_moved": len(moved),
        "placement_enforced_at_s": max((r.installed for r in moved), default=None),
        "lost_at_failure": lost_at_failure,
        "lost": engine.sim.metrics.drop_totals().get("failure", 0),
        "rolled_back": summary.get("rolled_back"),
        "replayed": summary.get("replayed"),
        "duplicates": summary.get("duplicates"),
        "exactly_once": engine.sim.metrics.sink_totals() == sink_totals(engine.sim) if recovery else None,
        "other_drops": {k: v for k, v in engine.sim.metrics.drop_totals().items() if k != "failure"},
        "before": latency_between(windows, 0.0 + EPOCH_S / 2, fail_at),
        "epoch_after": latency_between(windows, fail_at, fail_at + EPOCH_S),
        "end": latency_between(windows, duration - EPOCH_S / 2, duration),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--duration", type=float, default=120.0)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    console = Console(width=240)
    first = run("hierarchy", args.duration, args.seed)
    runs = [first] + [run(m, args.duration, args.seed, first["failed_node"]) for m in ("static", "no recovery")]
    t = Table(
        title=f"Experiment 3: node loss at {args.duration / 2 + WINDOW_S / 2:.1f} s "
        f"(window {WINDOW_S:.0f} s, checkpoints every {CHECKPOINT_S:.0f} s, rates × {SCALE}, seed {args.seed})"
    )
    for col in (
        "mode",
        "node",
        "new plan after",
        "enforced after",
        "plan wall",
        "restored / moved",
        "lost",
        "rolled back / replayed / dup",
        "exactly once",
        "miss before",
        "miss epoch after",
        "p99 before (s)",
        "p99 epoch after (s)",
    ):
        t.add_column(col)

    def fmt(d: dict, key: str) -> str:
        return " ".join(f"{j}={v[key]:.3f}" for j, v in sorted(d.items()))

    def after(r: dict, key: str) -> str:
        return "-" if r[key] is None else f"{r[key] - r['fail_at_s']:.2f} s sim"

    for r in runs:
        t.add_row(
            r["mode"],
            r["failed_node"],
            after(r, "replanned_at_s") if r["replanned_at_s"] is not None else "never",
            after(r, "placement_enforced_at_s"),
            f"{r['plan_wall_s']:.2f} s" if r["plan_wall_s"] is not None else "-",
            f"{r['restored']} / {r['instances_moved']}",
            str(r["lost"]),
            "-" if r["rolled_back"] is None else f"{r['rolled_back']} / {r['replayed']} / {r['duplicates']}",
            "-" if r["exactly_once"] is None else str(r["exactly_once"]),
            fmt(r["before"], "miss_rate"),
            fmt(r["epoch_after"], "miss_rate"),
            fmt(r["before"], "p99_s"),
            fmt(r["epoch_after"], "p99_s"),
        )
    console.print(t)
    out = Path(__file__).parent / "results" / "hierarchy_node_loss.json"
    out.write_text(
        json.dumps(
            {
                "duration_s": args.duration,
                "seed": args.seed,
                "window_s": WINDOW_S,
                "checkpoint_s": CHECKPOINT_S,
                "runs": runs,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
