"""AutoFlow in the simulator: hash routing vs live migration vs stop-the-world (Lu et al.; issue 6).

Setting (``strata.runners.autoflow``): one keyed sum over Zipf(s) keys
(10 000 keys, 128 key groups), 8 instances each alone on a one-core node (an
actor), source and sink on a separate node, 1 Gbit/s NICs. Each run lasts
``--seconds`` of input, then drains; every run checks exactly once (per-key
sink aggregates = offline reference over the same generated input) and
conservation. Four experiments, each printing a table and writing
``benchmarks/results/balance_<name>.json``:

- ``grid``: s ∈ {0.8, 1.0, 1.2, 1.5}, without and with hot-key drift (the Zipf
  rank → key mapping shifts by one key every ``--drift`` s, which permutes the
  key-group loads), policies ``static`` (hash routing), ``live`` (AutoFlow,
  marker protocol), ``precopy`` (the same decisions, the marker protocol after
  a snapshot of the state was copied), ``handover`` (precopy, the moved
  group's queued records shipped with the state instead of run by the old
  owner first), ``stop`` (the same decisions, stop-the-world). The mean
  instance load is 0.7 of a core, lowered where one key group alone would
  exceed a core (load = min(0.7, 0.9 / best achievable imbalance)), so a
  balanced table exists. Reported: imbalance (max/mean busy per 2 s window)
  against the best achievable for the window's key-group loads (LPT), rounds
  until within 10% of it, throughput, p50/p99 latency while converging, during
  migrations and steady after ``--warmup`` s, migration time, bytes moved.
  AutoFlow rounds every 2 s window on demand (``--no-demand``: processed busy
  time, the earlier behaviour) and, looking every ``--tick`` s (0.25; 0 = off),
  early when an instance falls behind. Each
  balancer run is replayed — the same moves at the same times, no balancer —
  with negligible state (1 byte/key): the p99 of the same "during" intervals
  in that replay is what the load change alone costs, so during / replay is
  what the migrations add. Recovery: windows after each drift step until one
  is within 10% of its LPT bound.
- ``seeds``: every grid cell over seeds 1–5 for chosen ``VARIANTS`` (default:
  ``handover``, ``precopy`` and ``stop``, the grid's controller; also ``after`` = live with
  early rounds, ``before`` = busy time, one round per window, and ``demand`` =
  one round per window),
  with recovery and p99 during / steady per seed (``--replay-runs``: and
  during / replay).
- ``attribution``: where the latency of the slowest outputs during migration
  comes from (held for the migration, queued at a move's source or
  destination, or at an instance no move involves), from a trace of every
  message the keyed operator runs.
- ``migration``: s = 1.0 at load 0.5 (hash routing already sustainable), no
  balancer; four forced moves of one key group (the 16th hottest, to the next
  instance) at 10, 20, 30, 40 s, live vs precopy vs handover vs stop, state per key 1 KB …
  1 MB: migration time (request → state installed) and p99 latency of outputs
  completing during a move (or 2 s after) vs the steady p99.

Targets (issue 6): imbalance within 10% of the LPT bound within 3 rounds; p99
during migration ≤ 1.3× steady and clearly below stop-the-world's. Reported
as measured, met or not. Timing in the simulator is simulated time (not
affected by machine load); only the wall-clock column is.

    .venv/bin/python benchmarks/bench_balance_sim.py all
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from strata.balance import BalanceConfig, best_imbalance_bounds
from strata.runners.autoflow import PE, Run, actor_scenario, expected_group_loads, replay, run
from strata.sim import Move

RESULTS = Path(__file__).parent / "results"
app = typer.Typer(add_completion=False, help=__doc__)
console = Console(width=200)
CONFIG = BalanceConfig(threshold=1.08, max_moves=8, cooldown_s=10.0)
SMOOTHING = 1.0  # no smoothing: under drift an EWMA lags (measured: p99 26 ms vs 14 ms at s=1, drift 15 s)
WINDOW_S = 2.0
TICK_S = 0.25  # AutoFlow looks this often for an instance falling behind (early rounds)
FREE_STATE = 1  # bytes per key in the replay: the routing decisions without the state to ship
SETTLE_S = 2.0  # forced moves: an output within 2 s after a move ends still counts as "during" (backlog drains)


def balanced(policy: str, scenario, placement, seconds: float, **kw: Any) -> Run:
    """One run under the benchmark's balancer settings (window, config, no smoothing)."""
    return run(policy, scenario, placement, seconds, window_s=WINDOW_S, config=CONFIG, smoothing=SMOOTHING, **kw)


def replayed_p99(r: Run, free, placement, seed: int, warmup: float, seconds: float) -> tuple[float, bool]:
    """p99 during migration when ``r``'s moves are replayed with negligible state; and whether the replay was exact.

    "During" is the summary's: the same migration intervals, the same outputs.
    """
    f = replay(r, free, placement, window_s=WINDOW_S, seed=seed)
    t = f.output_time
    during = (t >= warmup) & (t < seconds) & f.during(r.migration_intervals(1.0))
    return f.percentiles(during)["p99"], f.exactly_once and f.conserved


def write(name: str, doc: dict[str, Any]) -> None:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"balance_{name}.json"
    path.write_text(json.dumps(doc, indent=2, default=float))
    console.print(f"wrote {path}")


def ms(x: float) -> str:
    return "—" if x is None or math.isnan(x) else f"{1e3 * x:.1f}"


def rounds_to_target(r: Run, within: float = 1.10) -> int | None:
    """Rounds until a window's imbalance is within ``within`` × its LPT bound (window k shows round k−1's moves)."""
    for k, w in enumerate(r.windows):
        if w.imbalance <= within * w.best_lpt:
            return k
    return None


def recovery(r: Run, steps: list[float], within: float = 1.10) -> list[int | None]:
    """Per drift step: windows ending after it until one is within ``within`` × its LPT bound (0: the first is)."""
    out: list[int | None] = []
    for step in steps:
        after = [w for w in r.windows if w.time > step]
        out.append(next((k for k, w in enumerate(after) if w.imbalance <= within * w.best_lpt), None))
    return out


@app.command()
def grid(
    seconds: float = 60.0,
    rate: float = 4000.0,
    drift: float = 15.0,
    warmup: float = 10.0,
    state_per_key: int = 32768,
    seed: int = 1,
    tick: float = TICK_S,
    demand: bool = True,
    zipf: str = "0.8,1.0,1.2,1.5",
    policies: str = "static,live,precopy,handover,stop",
    out: str = "grid",
) -> None:
    """Zipf s × drift × ``--policies``; ``--zipf`` picks values of s, ``--out`` names the JSON."""
    rows = []
    tick_s = tick or None
    table = Table(
        title=f"AutoFlow grid: {seconds:g} s at {rate:g} rec/s, 8 one-core instances, "
        f"{state_per_key // 1024} KB state/key, window {WINDOW_S:g} s, tick {tick:g} s, "
        f"demand {demand}; latency ms"
    )
    cols = (
        "s",
        "drift",
        "load",
        "policy",
        "imb",
        "LPT",
        "rounds→10%",
        "recovery",
        "within 10%",
        "thr/s",
        "p50",
        "p99",
        "p99 conv",
        "p99 migr",
        "p99 steady",
        "migr/steady",
        "replay migr",
        "migr/replay",
        "moves",
        "early",
        "migr ms p50/max",
        "MB",
        "exact",
        "wall s",
    )
    for col in cols:
        table.add_column(col, justify="right")
    for s in (float(x) for x in zipf.split(",")):
        _, best = best_imbalance_bounds(expected_group_loads(s), 8)
        load = min(0.7, 0.9 / best)
        for drift_s in (None, drift):
            scenario, placement = actor_scenario(
                s, drift_s, rate=rate, load=load, state_bytes_per_key=state_per_key, seed=seed
            )
            free, _ = actor_scenario(s, drift_s, rate=rate, load=load, state_bytes_per_key=FREE_STATE, seed=seed)
            steps = [k * drift_s for k in range(1, math.ceil(seconds / drift_s))] if drift_s else []
            for policy in policies.split(","):
                t0 = time.perf_counter()
                r = balanced(
                    policy,
                    scenario,
                    placement,
                    seconds,
                    seed=seed,
                    tick_s=tick_s,
                    demand=demand,
                )
                summ = r.summary(warmup)
                after = [w for w in r.windows if w.time > warmup]
                within = float(np.mean([w.imbalance <= 1.1 * w.best_lpt for w in after])) if after else math.nan
                steady, during = summ["steady"]["p99"], summ["during_migration"]["p99"]
                replayed = math.nan
                if r.balancer is not None:
                    replayed, exact = replayed_p99(r, free, placement, seed, warmup, seconds)
                    assert exact
                wall = time.perf_counter() - t0
                early = sum(1 for x in r.balancer.rounds if x.trigger == "overload") if r.balancer else 0
                row = {
                    "zipf_s": s,
                    "drift_s": drift_s,
                    "load": load,
                    **summ,
                    "rounds_to_10pct": rounds_to_target(r),
                    "recovery_windows_per_drift_step": recovery(r, steps),
                    "drift_steps": steps,
                    "early_rounds": early,
                    "windows_within_10pct_after_warmup": within,
                    "during_over_steady_p99": during / steady if steady and not math.isnan(during) else math.nan,
                    "replay_free_state_during_p99": replayed,
                    "during_over_replay_p99": during / replayed if replayed and not math.isnan(replayed) else math.nan,
                    "irreducible": max((len(x.irreducible) for x in r.balancer.rounds), default=0)
                    if r.balancer
                    else None,
                    "series": [
                        {
                            "t": w.time,
                            "imbalance": w.imbalance,
                            "best_lpt": w.best_lpt,
                            "best_low": w.best_low,
                            "migrating": w.migrating,
                        }
                        for w in r.windows
                    ],
                    "wall_s": wall,
                }
                rows.append(row)
                table.add_row(
                    f"{s:g}",
                    "yes" if drift_s else "no",
                    f"{load:.2f}",
                    policy,
                    f"{summ['imbalance_after_warmup']:.3f}",
                    f"{summ['best_lpt_after_warmup']:.3f}",
                    str(row["rounds_to_10pct"]),
                    ",".join(map(str, row["recovery_windows_per_drift_step"])) or "—",
                    f"{within:.0%}",
                    f"{summ['throughput']:.0f}",
                    ms(summ["overall"]["p50"]),
                    ms(summ["overall"]["p99"]),
                    ms(summ["converging"]["p99"]),
                    ms(during),
                    ms(steady),
                    "—" if math.isnan(row["during_over_steady_p99"]) else f"{row['during_over_steady_p99']:.2f}",
                    ms(replayed),
                    "—" if math.isnan(row["during_over_replay_p99"]) else f"{row['during_over_replay_p99']:.2f}",
                    str(summ["migrations"]),
                    str(early),
                    f"{ms(summ['migration_s_p50'])}/{ms(summ['migration_s_max'])}",
                    f"{summ['moved_bytes'] / 1e6:.0f}",
                    "yes" if summ["exactly_once"] and summ["conserved"] else "NO",
                    f"{wall:.0f}",
                )
                console.print(f"  s={s:g} drift={drift_s} {policy}: done in {wall:.0f} s")
    console.print(table)
    write(
        out,
        {
            "seconds": seconds,
            "rate": rate,
            "drift_period_s": drift,
            "warmup_s": warmup,
            "state_bytes_per_key": state_per_key,
            "window_s": WINDOW_S,
            "tick_s": tick_s,
            "demand": demand,
            "replay_state_bytes_per_key": FREE_STATE,
            "smoothing": SMOOTHING,
            "config": {
                "threshold": CONFIG.threshold,
                "max_moves": CONFIG.max_moves,
                "cooldown_s": CONFIG.cooldown_s,
                "min_gain": CONFIG.min_gain,
            },
            "rows": rows,
        },
    )


VARIANTS = {  # name → (policy, tick_s, demand)
    "before": ("live", None, False),  # one round per 2 s window on processed busy time
    "demand": ("live", None, True),  # the same rounds on demand
    "after": ("live", TICK_S, True),  # demand and early rounds
    "precopy": ("precopy", TICK_S, True),  # the same decisions, state pre-copied
    "handover": ("handover", TICK_S, True),  # precopy, queued records shipped with the state
    "stop": ("stop", TICK_S, True),  # the same decisions, stop-the-world
}


@app.command()
def seeds(
    seconds: float = 60.0,
    rate: float = 4000.0,
    drift: float = 15.0,
    warmup: float = 10.0,
    state_per_key: int = 32768,
    n: int = 5,
    zipf: str = "0.8,1.0,1.2,1.5",
    drifts: str = "yes,no",
    variants: str = "handover,precopy,stop",
    replay_runs: bool = False,
    out: str = "seeds",
) -> None:
    """Grid cells (``--zipf`` × ``--drifts``) over seeds 1..``n``, for the ``VARIANTS`` named in ``--variants``.

    One seed decides little here (the same algorithm gives 0.9–2.8 × steady at
    s = 1.2 over seeds), so every target is checked per seed. ``--replay-runs``
    also replays each run with negligible state (see ``grid``).
    """
    chosen = {name: VARIANTS[name] for name in variants.split(",")}
    rows = []
    table = Table(title=f"seeds 1..{n}, drift every {drift:g} s where on; latency ms")
    for col in (
        "s",
        "drift",
        "variant",
        "seed",
        "recovery",
        "imb",
        "LPT",
        "p99 migr",
        "p99 steady",
        "migr/steady",
        "replay migr",
        "migr/replay",
        "moves",
        "early",
        "exact",
    ):
        table.add_column(col, justify="right")
    for s in (float(x) for x in zipf.split(",")):
        _, best = best_imbalance_bounds(expected_group_loads(s), 8)
        load = min(0.7, 0.9 / best)
        for drift_s in [drift if d == "yes" else None for d in drifts.split(",")]:
            steps = [k * drift_s for k in range(1, math.ceil(seconds / drift_s))] if drift_s else []
            for seed in range(1, n + 1):
                scenario, placement = actor_scenario(
                    s, drift_s, rate=rate, load=load, state_bytes_per_key=state_per_key, seed=seed
                )
                free, _ = actor_scenario(s, drift_s, rate=rate, load=load, state_bytes_per_key=FREE_STATE, seed=seed)
                for name, (policy, tick_s, demand) in chosen.items():
                    r = balanced(
                        policy,
                        scenario,
                        placement,
                        seconds,
                        seed=seed,
                        tick_s=tick_s,
                        demand=demand,
                    )
                    summ = r.summary(warmup)
                    replayed, exact = math.nan, summ["exactly_once"] and summ["conserved"]
                    if replay_runs:
                        replayed, replay_exact = replayed_p99(r, free, placement, seed, warmup, seconds)
                        exact = exact and replay_exact
                    during, steady = summ["during_migration"]["p99"], summ["steady"]["p99"]
                    early = sum(1 for x in r.balancer.rounds if x.trigger == "overload")
                    row = {
                        "zipf_s": s,
                        "drift_s": drift_s,
                        "variant": name,
                        "policy": policy,
                        "seed": seed,
                        "tick_s": tick_s,
                        "demand": demand,
                        "load": load,
                        "rounds_to_10pct": rounds_to_target(r),
                        "recovery_windows_per_drift_step": recovery(r, steps),
                        "imbalance_after_warmup": summ["imbalance_after_warmup"],
                        "best_lpt_after_warmup": summ["best_lpt_after_warmup"],
                        "throughput": summ["throughput"],
                        "p50_during": summ["during_migration"]["p50"],
                        "p50_steady": summ["steady"]["p50"],
                        "p99_during": during,
                        "p99_steady": steady,
                        "during_over_steady_p99": during / steady,
                        "replay_free_state_during_p99": replayed,
                        "during_over_replay_p99": during / replayed,
                        "migrations": summ["migrations"],
                        "early_rounds": early,
                        "exactly_once": exact,
                    }
                    rows.append(row)
                    table.add_row(
                        f"{s:g}",
                        "yes" if drift_s else "no",
                        name,
                        str(seed),
                        ",".join(map(str, row["recovery_windows_per_drift_step"])) or "—",
                        f"{row['imbalance_after_warmup']:.3f}",
                        f"{row['best_lpt_after_warmup']:.3f}",
                        ms(during),
                        ms(steady),
                        f"{during / steady:.2f}",
                        ms(replayed),
                        "—" if math.isnan(replayed) else f"{during / replayed:.2f}",
                        str(row["migrations"]),
                        str(early),
                        "yes" if exact else "NO",
                    )
                    console.print(f"  s={s:g} drift={drift_s} seed={seed} {name} done")
    console.print(table)
    write(
        out,
        {
            "seconds": seconds,
            "rate": rate,
            "drift_period_s": drift,
            "warmup_s": warmup,
            "state_bytes_per_key": state_per_key,
            "replay_state_bytes_per_key": FREE_STATE if replay_runs else None,
            "window_s": WINDOW_S,
            "tick_s": TICK_S,
            "variants": {name: VARIANTS[name] for name in chosen},
            "rows": rows,
        },
    )


@app.command()
def attribution(
    cells: str = "1.0:15:1,1.0:15:3,1.2:15:1,1.2:15:3",
    variants: str = "demand,after,precopy,handover",
    seconds: float = 60.0,
    rate: float = 4000.0,
    warmup: float = 10.0,
    state_per_key: int = 32768,
    out: str = "attribution",
) -> None:
    """Where the latency of outputs during migration comes from (cells: s:drift:seed, drift 0 = none).

    Every message the keyed operator runs is traced (``TracedFifo``); its
    latency here is when it completes at the operator minus its event time
    (the sink adds the last hop). "During" and "steady" are the summary's
    phases. Of the slowest 1% during migration, the table gives the share
    held for a migration (buffered at a new owner until the state arrived, or
    held by a stop-the-world pause), the share run by an instance that is the
    source or the destination of a move in flight, and the rest (an instance
    no move involves); with the mean wait held and the mean wait in the queue.
    "p99 involved" is the p99 of the outputs run by an instance of a move in
    flight, against the steady p99.
    """
    rows = []
    table = Table(title="latency attribution, slowest 1% of outputs during migration; ms")
    for col in (
        "s",
        "drift",
        "seed",
        "variant",
        "p99 migr",
        "p99 steady",
        "held",
        "at src",
        "at dst",
        "uninvolved",
        "mean held",
        "mean queued",
        "p99 involved",
        "involved/steady",
    ):
        table.add_column(col, justify="right")
    for cell in cells.split(","):
        zs, ds, seeds_ = cell.split(":")
        s, drift_s, seed = float(zs), float(ds) or None, int(seeds_)
        _, best = best_imbalance_bounds(expected_group_loads(s), 8)
        load = min(0.7, 0.9 / best)
        scenario, placement = actor_scenario(
            s, drift_s, rate=rate, load=load, state_bytes_per_key=state_per_key, seed=seed
        )
        for name in variants.split(","):
            policy, tick_s, demand = VARIANTS[name]
            log: list[tuple[float, ...]] = []
            r = balanced(
                policy,
                scenario,
                placement,
                seconds,
                seed=seed,
                tick_s=tick_s,
                demand=demand,
                trace=log,
            )
            started, inst, _, event, arrived, pushed, cost = np.array(log).T
            done = started + cost
            lat = done - event
            held = pushed - arrived > 1e-12
            moves = r.sim.metrics.migrations()
            moves = moves[moves.src != moves.dst]
            during = np.zeros(len(done), dtype=bool)
            src = np.zeros(len(done), dtype=bool)
            dst = np.zeros(len(done), dtype=bool)
            for m in moves.itertuples():
                inside = (done >= m.requested) & (done <= m.installed + 1.0)
                during |= inside
                src |= inside & (inst == m.src)
                dst |= inside & (inst == m.dst)
            late = (done >= warmup) & (done < seconds)
            mig, steady = late & during, late & ~during
            p99_mig, p99_steady = float(np.quantile(lat[mig], 0.99)), float(np.quantile(lat[steady], 0.99))
            top = mig & (lat >= p99_mig)
            involved = mig & (src | dst)
            p99_inv = float(np.quantile(lat[involved], 0.99)) if involved.any() else math.nan
            at_src, at_dst = top & ~held & src, top & ~held & dst & ~src
            row = {
                "zipf_s": s,
                "drift_s": drift_s,
                "seed": seed,
                "variant": name,
                "p99_during": p99_mig,
                "p99_steady": p99_steady,
                "top_records": int(top.sum()),
                "share_held": float(held[top].mean()),
                "share_at_move_src": float(at_src.sum() / top.sum()),
                "share_at_move_dst": float(at_dst.sum() / top.sum()),
                "share_uninvolved": float((top & ~held & ~src & ~dst).sum() / top.sum()),
                "mean_held_s": float((pushed - arrived)[top & held].mean()) if (top & held).any() else 0.0,
                "mean_queued_s": float((started - pushed)[top].mean()),
                "p99_involved": p99_inv,
                "involved_over_steady_p99": p99_inv / p99_steady,
            }
            rows.append(row)
            table.add_row(
                f"{s:g}",
                "yes" if drift_s else "no",
                str(seed),
                name,
                ms(p99_mig),
                ms(p99_steady),
                f"{row['share_held']:.0%}",
                f"{row['share_at_move_src']:.0%}",
                f"{row['share_at_move_dst']:.0%}",
                f"{row['share_uninvolved']:.0%}",
                ms(row["mean_held_s"]),
                ms(row["mean_queued_s"]),
                ms(p99_inv),
                f"{row['involved_over_steady_p99']:.2f}",
            )
            console.print(f"  s={s:g} drift={drift_s} seed={seed} {name} done")
    console.print(table)
    write(
        out, {"seconds": seconds, "rate": rate, "warmup_s": warmup, "state_bytes_per_key": state_per_key, "rows": rows}
    )


@app.command()
def migration(seconds: float = 50.0, rate: float = 4000.0, seed: int = 1) -> None:
    """Migration time and latency impact vs state size, live / precopy / handover / stop (forced moves)."""
    loads = expected_group_loads(1.0)
    group = sorted(loads, key=lambda g: -loads[g])[15]
    rows = []
    table = Table(title=f"forced moves of key group {group} at 10/20/30/40 s (s = 1.0, load 0.5); latency ms")
    for col in (
        "KB/key",
        "mode",
        "group MB",
        "migration ms (mean)",
        "max",
        "p99 migr",
        "p99 steady",
        "migr/steady",
        "max latency migr",
        "exact",
    ):
        table.add_column(col, justify="right")
    for kb in (1, 16, 64, 256, 1024):
        scenario, placement = actor_scenario(1.0, rate=rate, load=0.5, state_bytes_per_key=kb * 1024, seed=seed)
        for mode in ("live", "precopy", "handover", "stop"):
            moves = [(10.0 * k, Move(PE, group, (group + k) % 8, mode)) for k in range(1, 5)]
            r = run("static", scenario, placement, seconds, seed=seed, moves=moves)
            summ = r.summary(warmup=5.0, settle_s=SETTLE_S)
            mig = r.sim.metrics.migrations()
            took = (mig.installed - mig.requested).to_numpy()
            t = r.output_time
            during = np.zeros(len(t), dtype=bool)
            for a, b in r.migration_intervals(SETTLE_S):
                during |= (t >= a) & (t <= b)
            worst = float(r.latency[during].max()) if during.any() else math.nan
            steady, migr = summ["steady"]["p99"], summ["during_migration"]["p99"]
            row = {
                "kb_per_key": kb,
                "mode": mode,
                "group_bytes": float(mig.bytes.mean()),
                "migration_s": took.tolist(),
                "p99_during": migr,
                "p99_steady": steady,
                "during_over_steady_p99": migr / steady,
                "max_latency_during": worst,
                "exactly_once": summ["exactly_once"],
                "conserved": summ["conserved"],
            }
            rows.append(row)
            table.add_row(
                str(kb),
                mode,
                f"{row['group_bytes'] / 1e6:.2f}",
                ms(float(took.mean())),
                ms(float(took.max())),
                ms(migr),
                ms(steady),
                f"{migr / steady:.2f}",
                ms(worst),
                "yes" if row["exactly_once"] and row["conserved"] else "NO",
            )
    console.print(table)
    write("migration", {"seconds": seconds, "rate": rate, "zipf_s": 1.0, "load": 0.5, "group": group, "rows": rows})


@app.command("all")
def run_all() -> None:
    migration()
    grid()
    seeds()
    attribution()


if __name__ == "__main__":
    app()
