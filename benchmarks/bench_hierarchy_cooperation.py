"""Experiment 2 (issue 9): the balancer under the planner — co-operative vs uncoordinated, in the simulator.

Three runs of the same seeded workload (4 nodes × 4 cores; two skewed keyed
jobs — Zipf 1.2 over 300 keys, 16 key groups on 4 instances — and a
latency-bound stateless job; about 76% of the cluster's cpu):

- ``planner only``: L0 (SODA + multi-resource placement) and dispatch; no key-group balancing;
- ``co-operative``: the hierarchy as designed — budgets down, signals up,
  debounced signals, re-plan cooldowns, a placement move budget, and L1 frozen
  on PEs that L0 is re-placing;
- ``uncoordinated``: the same levels acting alone on the same signals — every
  signal acted on at once by L0, no cooldowns or move budgets, L1 unaware of L0.

Reported per run: key-group and instance moves per epoch, oscillations (an item
— key group or instance — moved back to where it was within ``N`` epochs),
time to converge (the last move; "no" if moves continue into the last two
epochs), and final objectives over the last epoch: load imbalance (max/mean
busy over the instances of each keyed PE), max node utilisation, records-
weighted deadline-miss rate and p99 latency per job.

    .venv/bin/python benchmarks/bench_hierarchy_cooperation.py [--duration 300] [--seed 1]
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from strata.control import loop
from strata.control.controller import Controller, HierarchyConfig
from strata.model import Scenario
from strata.protocol.engine import Decisions, Observation
from strata.runners.sim_loop import sim_dispatch
from strata.sim.adapter import SimEngine
from strata.sim.options import SimOptions

WINDOW_S = 2.0
EPOCH_S = 30.0
N_EPOCHS = 2  # an item moved back to where it was within this many epochs is an oscillation


def scenario(scale: float = 1.0) -> Scenario:
    """The workload; ``scale`` multiplies every source rate."""

    def keyed(jid: str, rate: float, seed: int, target: float) -> dict:
        return {
            "id": jid,
            "rank": 2,
            "target_latency_s": target,
            "templates": [
                {
                    "operators": [
                        {
                            "name": "src",
                            "kind": "source",
                            "cost_per_record": 0.0,
                            "source": {"rate": rate * scale, "seed": seed, "keys": {"count": 300, "zipf_s": 1.2}},
                        },
                        {
                            "name": "kv",
                            "kind": "keyed_stateful",
                            "cost_per_record": 0.012,
                            "instances": 4,
                            "key_groups": 16,
                            "cpu_max": 8.0,
                            "state_bytes": 64 * 2**20,
                        },
                        {"name": "sink", "kind": "sink", "cost_per_record": 0.0},
                    ],
                    "streams": [{"from": "src", "to": "kv"}, {"from": "kv", "to": "sink"}],
                }
            ],
        }

    doc = {
        "name": "cooperation",
        "cluster": {"nodes": [{"name": f"n{i}", "cores": 4} for i in range(4)]},
        "jobs": [
            keyed("clicks", 450, 11, 2.0),
            keyed("orders", 400, 12, 2.0),
            {
                "id": "alerts",
                "rank": 1,
                "target_latency_s": 0.3,
                "templates": [
                    {
                        "operators": [
                            {
                                "name": "src",
                                "kind": "source",
                                "cost_per_record": 0.0,
                                "source": {"rate": 400 * scale, "seed": 13},
                            },
                            {"name": "check", "kind": "map", "cost_per_record": 0.005, "instances": 2},
                            {"name": "sink", "kind": "sink", "cost_per_record": 0.0},
                        ],
                        "streams": [{"from": "src", "to": "check"}, {"from": "check", "to": "sink"}],
                    }
                ],
            },
        ],
    }
    return Scenario.model_validate(doc)


@dataclass
class Recorder:
    """Wraps the controller: records every observation, and every item's location over time."""

    ctl: Controller
    observations: list[Observation] = field(default_factory=list)
    decisions: list[Decisions] = field(default_factory=list)
    history: dict[tuple, list[tuple[float, object]]] = field(default_factory=dict)  # item → [(since, where)]
    moves: list[tuple[float, str, bool]] = field(default_factory=list)  # (time, kind, oscillation)

    def _moved(self, item: tuple, now: float, origin: object, dst: object, kind: str) -> None:
        hist = self.history.setdefault(item, [(0.0, origin)])
        horizon = now - N_EPOCHS * EPOCH_S
        back = any(
            where == dst and (hist[i + 1][0] if i + 1 < len(hist) else now) > horizon
            for i, (_, where) in enumerate(hist)
            if where != hist[-1][1]
        )
        hist.append((now, dst))
        self.moves.append((now, kind, back))

    def step(self, obs: Observation) -> Decisions:
        before = {pe: [n for n, _ in insts] for pe, insts in self.ctl.placement.items()}
        d = self.ctl.step(obs)
        now = obs.now
        for m in d.moves:
            self._moved(("kg", m.pe, m.key_group), now, obs.window.routing[m.pe][m.key_group], m.dst, "key group")
        for pe, insts in (d.placement or {}).items():
            for i, (node, _) in enumerate(insts):
                old = before.get(pe, [None] * len(insts))[i]
                if old is not None and old != node:
                    self._moved(("inst", pe, i), now, old, node, "instance")
        self.observations.append(obs)
        self.decisions.append(d)
        return d


def final_objectives(rec: Recorder, since: float) -> dict:
    obs = [o for o in rec.observations if o.window.start >= since - 1e-9]
    busy: dict[tuple[str, int], float] = {}
    for o in obs:
        for i in o.window.instances:
            if i.key_groups or i.pe.endswith(".kv"):
                busy[i.pe, i.instance] = busy.get((i.pe, i.instance), 0.0) + i.busy
    imbalance = {}
    for pe in sorted({pe for pe, _ in busy}):
        loads = [b for (p, _), b in busy.items() if p == pe]
        imbalance[pe] = max(loads) * len(loads) / sum(loads) if sum(loads) > 0 else 1.0
    util: dict[str, list[float]] = {}
    for o in obs:
        for n, u in o.window.node_utilisation.items():
            util.setdefault(n, []).append(u)
    jobs: dict[str, dict] = {}
    for o in obs:
        for job, s in o.window.latency.items():
            j = jobs.setdefault(job, {"records": 0, "missed": 0.0, "p99": []})
            j["records"] += s.records
            j["missed"] += s.records * s.miss_rate
            j["p99"].append(s.p99)
    return {
        "imbalance": imbalance,
        "max_node_utilisation": max(float(np.mean(v)) for v in util.values()),
        "miss_rate": {j: v["missed"] / v["records"] for j, v in jobs.items() if v["records"]},
        "p99_s": {j: float(np.max(v["p99"])) for j, v in jobs.items() if v["p99"]},
        "importance": rec.ctl.plan.importance,
    }


def run(mode: str, duration: float, seed: int) -> dict:
    sc = scenario()
    cfg = HierarchyConfig(
        window_s=WINDOW_S,
        epoch_s=EPOCH_S,
        coordinated=mode != "uncoordinated",
        balancing="off" if mode == "planner only" else "threshold",
    )
    ctl = Controller(sc, cfg)
    t0 = time.perf_counter()
    rec = Recorder(ctl)
    engine = SimEngine(sc, SimOptions(seed=seed), dispatch=sim_dispatch(sc))
    engine.apply(ctl.start(0.0))
    loop.run(engine, rec, window_s=WINDOW_S, until=duration, start=False)
    epochs = int(duration // EPOCH_S)
    per_epoch = {k: [0] * epochs for k in ("key group", "instance")}
    for t, kind, _ in rec.moves:
        per_epoch[kind][min(int(t // EPOCH_S), epochs - 1)] += 1
    last = max((t for t, _, _ in rec.moves), default=0.0)
    return {
        "mode": mode,
        "moves_per_epoch": per_epoch,
        "oscillations": sum(1 for _, _, back in rec.moves if back),
        "oscillations_by_kind": {k: sum(1 for _, kind, b in rec.moves if b and kind == k) for k in per_epoch},
        "last_move_s": last,
        "converged": last < duration - 2 * EPOCH_S,
        "replans": sum(1 for entry in ctl.log if entry.replanned and entry.replanned != ("*",)),
        "final": final_objectives(rec, duration - EPOCH_S),
        "drops": engine.sim.metrics.drop_totals(),
        "wall_s": time.perf_counter() - t0,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--duration", type=float, default=300.0)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    console = Console(width=240)
    runs = [run(mode, args.duration, args.seed) for mode in ("planner only", "co-operative", "uncoordinated")]
    table = Table(
        title=f"Experiment 2: balancer under the planner ({args.duration:.0f} s, epoch {EPOCH_S:.0f} s, "
        f"window {WINDOW_S:.0f} s, seed {args.seed})"
    )
    for col in (
        "mode",
        "kg moves/epoch",
        "inst moves/epoch",
        "oscillations",
        "component re-plans",
        "converged",
        "imbalance (last epoch)",
        "max node util",
        "miss rate",
        "p99 (s)",
    ):
        table.add_column(col)
    for r in runs:
        f = r["final"]
        table.add_row(
            r["mode"],
            f"{np.mean(r['moves_per_epoch']['key group']):.1f}",
            f"{np.mean(r['moves_per_epoch']['instance']):.1f}",
            str(r["oscillations"]),
            str(r["replans"]),
            f"at {r['last_move_s']:.0f} s" if r["converged"] else f"no (last move {r['last_move_s']:.0f} s)",
            " ".join(f"{v:.2f}" for v in f["imbalance"].values()),
            f"{f['max_node_utilisation']:.2f}",
            " ".join(f"{j}={v:.3f}" for j, v in sorted(f["miss_rate"].items())),
            " ".join(f"{j}={v:.2f}" for j, v in sorted(f["p99_s"].items())),
        )
    console.print(table)
    out = Path(__file__).parent / "results" / "hierarchy_cooperation.json"
    out.write_text(
        json.dumps(
            {
                "duration_s": args.duration,
                "seed": args.seed,
                "window_s": WINDOW_S,
                "epoch_s": EPOCH_S,
                "oscillation_epochs": N_EPOCHS,
                "runs": runs,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
