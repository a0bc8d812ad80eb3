"""Cameo's evaluation, reproduced in shape in the simulator (Xu et al., NSDI'21, §Evaluation).

Four experiments, each over several seeds, each printing a table and writing
``benchmarks/results/dispatch_<name>.json``:

- ``single``: one query, source → parse → 1 s tumbling window group-by sum →
  sink, on one 4-core node, steady (Poisson) and bursty (on/off) input:
  median and p99 latency of the window results, Cameo vs FIFO vs slots.
- ``single-parallel``: the same query as Cameo runs it: every operator in
  partitions sharing the cores of 4 workers, 1,000 keys, the window's per-key
  sums shuffled by key to a separate sum stage (or straight to the sink with
  ``--stages 1``), so each firing's burst of results competes with the next
  window's ingest on the same workers.
- ``single-firing``: the same partitioned query with a window that computes
  its results when it fires (``fire_cost``: the group-by sum runs over the
  window's buffered records, so the work for each result arrives as a burst at
  the window's end and competes with the next window's ingest): FIFO, Cameo
  (least laxity), EDF and slots; latency measured as the simulator does (from
  the key's newest record) and from the window's end. ``--actor-turns``: each
  operator instance runs one message at a time, as an Orleans activation
  (``SimOptions(actor_turns=True)``; FIFO is then Orleans' round-robin of
  ready activations).
- ``multi``: the ``multi-tenant`` generator (latency-sensitive filters, L = 1 s,
  next to bursty bulk window aggregations, L = 30 s): per-tenant latency,
  deadline-miss rate, bulk throughput (records through the bulk windows / s).
- ``spikes``: the same tenants at nominal load 0.6 with Poisson bulk input
  plus transient spikes (1–5 s long, 2–5× the base rate, about one a minute):
  tail latency.
- ``fair``: three identical dataflows on one node whose sources start 300 s
  apart (a source's ``rate_curve`` is 0 until its start: no model change),
  each alone needing 60% of the node: cpu shares per 10 s window once all
  three run, proportional fair share vs FIFO; plus weights 1:2:3.

Targets (issue 5): (1) median ≥ 2.7× lower than FIFO; (2) latency-sensitive
≥ 4.6× lower with bulk throughput ≥ 95% of FIFO's; (3) p99 ≥ 20× lower;
(4) shares within 5% of equal. They are reported as measured, met or not.

    .venv/bin/python benchmarks/bench_dispatch_cameo.py all --seeds 3
"""

from __future__ import annotations

import itertools
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from strata.control import loop
from strata.control.loop import Plain
from strata.dispatch import Priors, dispatcher, model_demand, slot_dispatcher
from strata.generators import multi_tenant
from strata.model import OperatorKind, Scenario
from strata.protocol.engine import Decisions, Observation
from strata.protocol.units import DispatchPolicy, Message
from strata.sim import DispatchFactory, SimOptions, Simulation
from strata.sim.adapter import SimEngine
from strata.sim.fifo import fifo, turn_fifo

RESULTS = Path(__file__).parent / "results"
app = typer.Typer(add_completion=False, help=__doc__)
console = Console(width=180)

Policies = dict[str, Callable[[Scenario], DispatchFactory | None]]
BASE: Policies = {
    "fifo": lambda s: None,  # the simulator's default: the actor runtime's FIFO
    "cameo": lambda s: dispatcher("cameo", Priors.from_scenario(s)),
    "slots": lambda s: slot_dispatcher(model_demand(s)),
}


def write(name: str, doc: dict[str, Any]) -> None:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"dispatch_{name}.json"
    path.write_text(json.dumps(doc, indent=2, default=float))
    console.print(f"wrote {path}")


def ratio(a: float, b: float) -> float:
    return a / b if b > 0 else float("inf")


def query_row(sim: Simulation, bursty: bool, seed: int, policy: str, t0: float, **extra: float) -> dict[str, Any]:
    """One single-query run's row: the query's latency, ``extra``, utilisation and wall time since ``t0``."""
    return {
        "input": "bursty" if bursty else "steady",
        "seed": seed,
        "policy": policy,
        **latency_rows(sim)["q"],
        **extra,
        "utilisation": sim.metrics.summary()["node_utilisation_mean"],
        "wall_s": time.perf_counter() - t0,
    }


def latency_rows(sim: Simulation) -> dict[str, dict[str, float]]:
    table = sim.metrics.latency()
    return {
        r.job: {
            "records": int(r.records),
            "p50": float(r.p50),
            "p99": float(r.p99),
            "max": float(r.max),
            "miss_rate": float(r.miss_rate),
        }
        for r in table.itertuples()
    }


def pooled(sim: Simulation, jobs: list[str]) -> dict[str, float]:
    """Records-weighted latency percentiles over several jobs' outputs pooled together."""
    lat = np.concatenate([np.frombuffer(sim.metrics.lat[j], dtype=float) for j in jobs])
    n = np.concatenate([np.frombuffer(sim.metrics.lat_n[j], dtype=np.int64) for j in jobs])
    target = {j: sim.scenario.job[j].target_latency_s for j in jobs}
    over = np.concatenate([np.frombuffer(sim.metrics.lat[j], dtype=float) > target[j] for j in jobs])
    order = np.argsort(lat, kind="stable")
    cum = np.cumsum(n[order])

    def q(p: float) -> float:
        return float(lat[order][np.searchsorted(cum, p * cum[-1], side="left")])

    return {
        "records": int(cum[-1]),
        "p50": q(0.5),
        "p99": q(0.99),
        "max": float(lat.max()),
        "miss_rate": float(n[over].sum() / cum[-1]),
    }


# --------------------------------------------------------------------------- (1) single query


def single_query(
    seed: int, bursty: bool, rate: float = 1000.0, cores: int = 4, load: float = 0.9, target: float = 1.0
) -> Scenario:
    """source → parse → 1 s tumbling window, group by key, sum → sink; mean cpu demand = ``load`` × cores.

    Bursty input is on/off: 2 s at 3× every 10 s, i.e. 1.4× the nominal rate on
    average, so the nominal rate is scaled down to keep the mean load.
    """
    per_record = load * cores / rate / (1.4 if bursty else 1.0)
    arrivals = (
        {"process": "onoff", "period_s": 10.0, "on_s": 2.0, "burst_factor": 3.0} if bursty else {"process": "poisson"}
    )
    ops = [
        {
            "name": "events",
            "kind": "source",
            "cost_per_record": 0.1 * per_record,
            "source": {"rate": rate, "seed": seed, "arrivals": arrivals, "keys": {"count": 100}},
        },
        {"name": "parse", "kind": "map", "cost_per_record": 0.55 * per_record},
        {
            "name": "per_key",
            "kind": "window_aggregate",
            "window": {"size_s": 1.0, "watermark_s": 0.0},
            "aggregate": {"fn": "sum", "column": "value"},
            "cost_per_record": 0.3 * per_record,
        },
        {"name": "out", "kind": "sink", "cost_per_record": 0.5 * per_record},
    ]
    streams = [{"from": "events", "to": "parse"}, {"from": "parse", "to": "per_key"}, {"from": "per_key", "to": "out"}]
    return Scenario.model_validate(
        {
            "name": f"single-{'bursty' if bursty else 'steady'}-seed{seed}",
            "cluster": {"nodes": [{"name": "n0", "cores": cores}]},
            "jobs": [
                {
                    "id": "q",
                    "rank": 1,
                    "target_latency_s": target,
                    "templates": [{"operators": ops, "streams": streams}],
                }
            ],
        }
    )


def staleness(sim: Simulation, size: float = 1.0) -> dict[str, float]:
    """Age at its window's end of each key's newest record, per (window, key): part of every result's latency.

    The simulator measures a window result from the event time of the key's
    newest record in the window, so this much of the latency is fixed by the
    input before any dispatcher acts (needs ``record_inputs=True``).
    """
    newest: dict[tuple[int, int], float] = {}
    for _, _, t, key, _, _ in sim.inputs:
        cell = (int(t // size), key)
        if t > newest.get(cell, -1.0):
            newest[cell] = t
    age = np.array([(w + 1) * size - t for (w, _), t in newest.items()])
    return {"p50": float(np.median(age)), "mean": float(age.mean()), "p99": float(np.percentile(age, 99))}


def record_unit(stages: int, keys: int, cores: int = 16, rate: float = 8000.0, load: float = 0.9) -> float:
    """Core-seconds of a record's unit in ``parallel_query``: 0.95 of it per record, 0.5 per result and stage."""
    return load * cores / (0.95 * rate + 0.5 * stages * keys)


def parallel_query(
    seed: int,
    bursty: bool,
    stages: int = 2,
    nodes: int = 4,
    cores: int = 4,
    partitions: int = 4,
    keys: int = 1000,
    rate: float = 8000.0,
    load: float = 0.9,
    target: float = 1.0,
    fire: float = 0.0,
) -> Scenario:
    """``.window(1000).groupBy(e.key).sum()`` partitioned over ``nodes`` workers, ``partitions`` per worker.

    source → parse → per_key (1 s tumbling window, per-key sums) → [sum] → sink,
    every operator with ``nodes × partitions`` instances placed round-robin, so
    each worker's cores are shared by partitions of every operator. With
    ``stages=2`` the window's per-key sums are shuffled by key to a separate sum
    stage (``keyed_stateful``: the group-by's aggregation, two-phase as a
    partitioned groupBy → sum runs) before the sink; with ``stages=1`` they go
    straight to the sink. Per-record costs are split as in ``single_query``;
    each stage after the window costs 0.5 of a record's unit per result, and
    the mean cpu demand, results included (one per key per second), is
    ``load`` × all cores. Bursty input as in ``single_query``, with the same
    mean rate ``rate`` as steady input. ``fire``: the part of a record's unit
    the window spends on it when it fires (``SimOptions(fire_cost=...)``, see
    ``firing_cost``), taken from parse so the demand stays the same.
    """
    n = nodes * partitions
    # On/off input runs at 3× for 2 s of every 10 s, 1.4× its nominal rate on average: scale the nominal rate
    # down so that both inputs bring ``rate`` records/s on average, the same per-key density and demand.
    per_record = record_unit(stages, keys, nodes * cores, rate, load)
    arrivals = (
        {"process": "onoff", "period_s": 10.0, "on_s": 2.0, "burst_factor": 3.0} if bursty else {"process": "poisson"}
    )
    ops = [
        {
            "name": "events",
            "kind": "source",
            "cost_per_record": 0.1 * per_record,
            "instances": n,
            "source": {
                "rate": rate / (1.4 if bursty else 1.0),
                "seed": seed,
                "arrivals": arrivals,
                "keys": {"count": keys},
            },
        },
        {"name": "parse", "kind": "map", "cost_per_record": (0.55 - fire) * per_record, "instances": n},
        {
            "name": "per_key",
            "kind": "window_aggregate",
            "window": {"size_s": 1.0, "watermark_s": 0.0},
            "aggregate": {"fn": "sum", "column": "value"},
            "cost_per_record": 0.3 * per_record,
            "instances": n,
        },
        *(
            [{"name": "sum", "kind": "keyed_stateful", "cost_per_record": 0.5 * per_record, "instances": n}]
            if stages == 2
            else []
        ),
        {"name": "out", "kind": "sink", "cost_per_record": 0.5 * per_record, "instances": n},
    ]
    streams = [{"from": a, "to": b} for a, b in itertools.pairwise(op["name"] for op in ops)]
    return Scenario.model_validate(
        {
            "name": f"single-parallel{stages}-fire{fire:g}-{'bursty' if bursty else 'steady'}-seed{seed}",
            "cluster": {"nodes": [{"name": f"w{i}", "cores": cores} for i in range(nodes)]},
            "jobs": [
                {
                    "id": "q",
                    "rank": 1,
                    "target_latency_s": target,
                    "templates": [{"operators": ops, "streams": streams}],
                }
            ],
        }
    )


@app.command()
def single(seeds: int = 3, duration: float = 180.0, watermark: float = 0.2) -> dict[str, Any]:
    """(1) Single query: median and p99 latency, Cameo vs FIFO vs slots (per dataflow and per operator).

    ``watermark``: seconds between source watermarks (the simulator's default
    0.2 s accumulates rounding, so many ticks meant for a window's end land just
    before it and the window fires a tick late; 0.25 s is exact in binary).
    """
    policies: Policies = {**BASE, "slots/op": lambda s: slot_dispatcher(model_demand(s), per="pe")}
    runs = []
    for bursty in (False, True):
        for seed in range(1, seeds + 1):
            scenario = single_query(seed, bursty)
            for name, make in policies.items():
                t0 = time.perf_counter()
                sim = Simulation(
                    scenario,
                    SimOptions(seed=seed, dispatch=make(scenario), watermark_interval=watermark),
                )
                sim.run(duration)
                runs.append(query_row(sim, bursty, seed, name, t0))
    summary = single_table(
        f"(1) single query, one 4-core node, watermark every {watermark:g} s, {seeds} seeds × "
        f"{duration:.0f} s: window-result latency (s), mean of seeds",
        runs,
    )
    doc = {
        "experiment": "single",
        "setting": "chain on one node",
        "watermark_interval_s": watermark,
        "duration_s": duration,
        "seeds": seeds,
        "target": "median >= 2.7x lower than FIFO",
        "runs": runs,
        "mean": summary,
    }
    write("single" if watermark == 0.2 else f"single_wm{watermark:g}", doc)
    return doc


@app.command(name="single-parallel")
def single_parallel(
    seeds: int = 3, duration: float = 60.0, stages: int = 2, watermark: float = 0.25, inputs: str = "steady,bursty"
) -> dict[str, Any]:
    """(1) Single query as Cameo runs it: partitions sharing 4 workers' cores, 1,000 keys (``parallel_query``).

    Slots per dataflow give the one dataflow every core, i.e. FIFO (shown by
    ``single``); slots per operator need a core per operator on each worker,
    more than the 4 there are. So: FIFO vs Cameo. Also reports the staleness
    of the keys' newest records (``staleness``), the part of the latency no
    dispatcher changes. ``inputs``: which of steady, bursty (one each writes
    ``dispatch_single_parallel<stages>_<input>.json``, so both can run at once).
    """
    chosen = inputs.split(",")
    runs = []
    for bursty in [inp == "bursty" for inp in ("steady", "bursty") if inp in chosen]:
        for seed in range(1, seeds + 1):
            scenario = parallel_query(seed, bursty, stages)
            for name in ("fifo", "cameo"):
                t0 = time.perf_counter()
                sim = Simulation(
                    scenario,
                    SimOptions(
                        seed=seed,
                        dispatch=BASE[name](scenario),
                        watermark_interval=watermark,
                        record_inputs=name == "fifo",
                    ),
                )
                sim.run(duration)
                extra = {"staleness": staleness(sim)} if name == "fifo" else {}
                r = query_row(sim, bursty, seed, name, t0, **extra)
                runs.append(r)
                console.print(f"{r['input']} seed {seed} {name}: p50 {r['p50']:.4f} p99 {r['p99']:.4f}")
    title = (
        f"(1) single query, 4 workers × 4 cores, 16 partitions per operator, 1,000 keys, {stages} stage(s) "
        f"after the window, watermark every {watermark:g} s, {seeds} seeds × {duration:.0f} s: "
        "window-result latency (s)"
    )
    summary = single_table(title, runs)
    stale = {
        inp: statistics.fmean(r["staleness"]["p50"] for r in runs if r["input"] == inp and "staleness" in r)
        for inp in ("steady", "bursty")
        if inp in chosen
    }
    console.print(f"p50 age of the keys' newest record at the window's end (in every result's latency): {stale}")
    doc = {
        "experiment": "single",
        "setting": f"parallel, {stages} stage(s) after the window",
        "watermark_interval_s": watermark,
        "duration_s": duration,
        "seeds": seeds,
        "target": "median >= 2.7x lower than FIFO",
        "runs": runs,
        "mean": summary,
        "staleness_p50": stale,
    }
    write(f"single_parallel{stages}" + ("" if len(chosen) == 2 else f"_{chosen[0]}"), doc)
    return doc


def firing_cost(fire: float, stages: int, keys: int) -> dict[str, float]:
    """``SimOptions(fire_cost=...)`` for ``parallel_query(..., fire=fire)`` at its default size and load."""
    return {"q.per_key": fire * record_unit(stages, keys)}


class WindowEndLatency:
    """A pass-through dispatch policy that records, for each sink message, completion time − its window's end.

    The latency of a window result counted from the end of its window (the
    Yahoo streaming benchmark's definition) rather than from the key's newest
    record, as the simulator counts it; the policy it wraps decides everything.
    Tumbling windows of ``size`` seconds starting at 0.
    """

    __slots__ = ("_inner", "_out", "_sinks", "_size")

    def __init__(self, inner: DispatchPolicy, sinks: frozenset[str], size: float, out: list[float]) -> None:
        self._inner, self._sinks, self._size, self._out = inner, sinks, size, out

    def push(self, msg: Message, now: float) -> None:
        self._inner.push(msg, now)

    def pop(self, now: float) -> Message | None:
        return self._inner.pop(now)

    def completed(self, msg: Message, service: float, now: float) -> None:
        if msg.pe in self._sinks:
            self._out.append(now - (msg.event_time // self._size + 1.0) * self._size)
        self._inner.completed(msg, service, now)

    # Under actor turns only (the wrapped policy is then a TurnPolicy).
    def hold(self, pe: str, instance: int) -> None:
        self._inner.hold(pe, instance)

    def free(self, pe: str, instance: int, now: float) -> None:
        self._inner.free(pe, instance, now)

    def __len__(self) -> int:
        return len(self._inner)


def observed(factory: DispatchFactory, sinks: frozenset[str], size: float, out: list[float]) -> DispatchFactory:
    return lambda view: WindowEndLatency(factory(view), sinks, size, out)


@app.command(name="single-firing")
def single_firing(
    seeds: int = 3,
    duration: float = 40.0,
    stages: int = 2,
    fire: float = 0.3,
    keys: int = 200,
    inputs: str = "steady,bursty",
    policies: str = "fifo,cameo,slots,edf",
    actor_turns: bool = False,
) -> dict[str, Any]:
    """(1) Single query whose window computes its results when it fires: FIFO, Cameo (LLF), EDF, slots.

    ``parallel_query`` (4 workers × 4 cores, 16 partitions per operator,
    ``stages`` stages after the window) with ``fire`` of each record's unit
    spent by the window when it fires, ``keys`` keys at 8,000 records/s.
    Latency two ways: as the simulator measures it (from the key's newest
    record in the window) and from the window's end. ``slots`` gives the one
    dataflow every core of each worker, i.e. FIFO (slots per operator would
    need a core for each of the 5 operators on a 4-core worker); ``policies``
    picks which run (FIFO always, as the reference). ``actor_turns``: one
    message per operator instance at a time; FIFO is then ``turn_fifo``
    (Orleans' ready activations in turn), and slots, which have no turns, are
    refused by the simulator.
    """
    chosen = inputs.split(",")
    every: Policies = {**BASE, "edf": lambda s: dispatcher("edf", Priors.from_scenario(s))}
    names = ["fifo", *(p for p in policies.split(",") if p != "fifo")]
    runs = []
    for bursty in [inp == "bursty" for inp in ("steady", "bursty") if inp in chosen]:
        for seed in range(1, seeds + 1):
            scenario = parallel_query(seed, bursty, stages, keys=keys, fire=fire)
            for name in names:
                make = every[name]
                t0 = time.perf_counter()
                ends: list[float] = []
                sinks = frozenset({"q.out"})
                sim = Simulation(
                    scenario,
                    SimOptions(
                        seed=seed,
                        dispatch=observed(make(scenario) or (turn_fifo if actor_turns else fifo), sinks, 1.0, ends),
                        watermark_interval=0.25,
                        fire_cost=firing_cost(fire, stages, keys),
                        actor_turns=actor_turns,
                    ),
                )
                sim.run(duration)
                from_end = np.array(ends)
                end = {"end_p50": float(np.median(from_end)), "end_p99": float(np.percentile(from_end, 99))}
                r = query_row(sim, bursty, seed, name, t0, **end)
                runs.append(r)
                console.print(
                    f"{r['input']} seed {seed} {name}: p50 {r['p50']:.4f} p99 {r['p99']:.4f} "
                    f"from window end p50 {r['end_p50']:.4f} p99 {r['end_p99']:.4f}"
                )
    title = (
        f"(1) single query, window computing its results when it fires ({fire:g} of a record's unit), 4 workers × "
        f"4 cores, 16 partitions per operator, {keys} keys, {stages} stage(s) after the window, {seeds} seeds × "
        f"{duration:.0f} s{', actor turns' if actor_turns else ''}: latency from the key's newest record (s)"
    )
    summary = single_table(title, runs)
    ends_summary = single_table(
        title.replace("from the key's newest record", "from the window's end"),
        [{**r, "p50": r["end_p50"], "p99": r["end_p99"]} for r in runs],
    )
    doc = {
        "experiment": "single",
        "setting": f"parallel, window firing cost {fire:g}, {keys} keys, {stages} stage(s) after the window",
        "watermark_interval_s": 0.25,
        "actor_turns": actor_turns,
        "duration_s": duration,
        "seeds": seeds,
        "target": "median >= 2.7x lower than FIFO",
        "runs": runs,
        "mean": summary,
        "mean_from_window_end": ends_summary,
    }
    suffix = ("" if len(chosen) == 2 else f"_{chosen[0]}") + ("_turns" if actor_turns else "")
    write(f"single_firing{stages}_fire{fire:g}_keys{keys}{suffix}", doc)
    return doc


def single_table(title: str, runs: list[dict]) -> dict[str, dict[str, dict[str, float]]]:
    """Print mean-of-seeds p50/p99/miss rate by input and policy with FIFO's ratios; return the means."""
    summary = summarise(runs, ["input"], ["p50", "p99", "miss_rate"])
    table = Table(title=title)
    for col in ("input", "policy", "p50", "p99", "miss rate", "FIFO p50 / p50", "FIFO p99 / p99"):
        table.add_column(col, justify="right")
    for (inp,), by_policy in summary.items():
        fifo = by_policy["fifo"]
        for name, m in by_policy.items():
            table.add_row(
                inp,
                name,
                f"{m['p50']:.3f}",
                f"{m['p99']:.3f}",
                f"{m['miss_rate']:.3f}",
                f"{ratio(fifo['p50'], m['p50']):.2f}",
                f"{ratio(fifo['p99'], m['p99']):.2f}",
            )
    console.print(table)
    return {k[0]: v for k, v in summary.items()}


def summarise(runs: list[dict], group: list[str], metrics: list[str]) -> dict[tuple, dict[str, dict[str, float]]]:
    """Mean over seeds of each metric, by ``group`` then policy."""
    out: dict[tuple, dict[str, dict[str, float]]] = {}
    for r in runs:
        key = tuple(r[g] for g in group)
        out.setdefault(key, {}).setdefault(r["policy"], {m: [] for m in metrics})
        for m in metrics:
            out[key][r["policy"]][m].append(r[m])
    return {k: {p: {m: statistics.fmean(v) for m, v in ms.items()} for p, ms in by.items()} for k, by in out.items()}


# ---------------------------------------------------------------------- (2, 3) multi-tenant


def tenants(seed: int, spikes: bool, load: float = 0.8) -> Scenario:
    """The ``multi-tenant`` generator; with ``spikes``, Poisson bulk input plus seeded transient spikes."""
    doc = multi_tenant(seed=seed, bursty=not spikes, load=load)
    if spikes:
        rng = np.random.default_rng([seed, 0x5B1CE])
        for job in doc["jobs"]:
            if job["id"].startswith("bulk"):
                src = job["templates"][0]["operators"][0]["source"]
                src["rate_curve"] = spike_curve(rng, src["rate"], horizon=600.0)
    return Scenario.model_validate(doc)


def spike_curve(
    rng: np.random.Generator, rate: float, horizon: float, every: float = 60.0
) -> list[tuple[float, float]]:
    """Base ``rate`` with spikes 1–5 s long at 2–5× starting about every ``every`` s (10 ms edges)."""
    points = [(0.0, rate)]
    t = float(rng.uniform(5.0, 30.0))
    while t < horizon:
        length, factor = float(rng.uniform(1.0, 5.0)), float(rng.uniform(2.0, 5.0))
        points += [(t, rate), (t + 0.01, rate * factor), (t + length, rate * factor), (t + length + 0.01, rate)]
        t += length + float(rng.exponential(every))
    return points


def tenant_run(scenario: Scenario, seed: int, name: str, make: Callable, duration: float, batch: int) -> dict:
    t0 = time.perf_counter()
    sim = Simulation(scenario, SimOptions(seed=seed, dispatch=make(scenario), batch=batch)).run(duration)
    latency = [j.id for j in scenario.jobs if not j.id.startswith("bulk")]
    bulk = [j.id for j in scenario.jobs if j.id.startswith("bulk")]
    windowed = {
        f"{j}.{op.name}"
        for j in bulk
        for op in scenario.job[j].templates[0].operators
        if op.kind is OperatorKind.WINDOW_AGGREGATE
    }
    inst = sim.metrics.instances()
    windows = int(inst[inst.pe.isin(windowed)].records.sum())
    return {
        "seed": seed,
        "policy": name,
        "jobs": latency_rows(sim),
        "latency_sensitive": pooled(sim, latency),
        "bulk": pooled(sim, bulk),
        "bulk_throughput": windows / duration,
        "utilisation": sim.metrics.summary()["node_utilisation_mean"],
        "wall_s": time.perf_counter() - t0,
    }


def tenant_table(title: str, runs: list[dict]) -> dict[str, dict[str, float]]:
    by: dict[str, dict[str, list[float]]] = {}
    for r in runs:
        m = by.setdefault(r["policy"], {})
        for group in ("latency_sensitive", "bulk"):
            for k in ("p50", "p99", "miss_rate"):
                m.setdefault(f"{group}.{k}", []).append(r[group][k])
        m.setdefault("bulk_throughput", []).append(r["bulk_throughput"])
    mean = {p: {k: statistics.fmean(v) for k, v in m.items()} for p, m in by.items()}
    fifo = mean["fifo"]
    table = Table(title=title)
    for col in (
        "policy",
        "LS p50",
        "LS p99",
        "LS miss",
        "FIFO/LS p50",
        "FIFO/LS p99",
        "bulk p50",
        "bulk p99",
        "bulk miss",
        "bulk rec/s",
        "vs FIFO",
    ):
        table.add_column(col, justify="right")
    for p, m in mean.items():
        table.add_row(
            p,
            f"{m['latency_sensitive.p50']:.4f}",
            f"{m['latency_sensitive.p99']:.4f}",
            f"{m['latency_sensitive.miss_rate']:.3f}",
            f"{ratio(fifo['latency_sensitive.p50'], m['latency_sensitive.p50']):.1f}",
            f"{ratio(fifo['latency_sensitive.p99'], m['latency_sensitive.p99']):.1f}",
            f"{m['bulk.p50']:.2f}",
            f"{m['bulk.p99']:.2f}",
            f"{m['bulk.miss_rate']:.3f}",
            f"{m['bulk_throughput']:.0f}",
            f"{m['bulk_throughput'] / fifo['bulk_throughput']:.3f}",
        )
    console.print(table)
    return mean


@app.command()
def multi(seeds: int = 3, duration: float = 120.0, batch: int = 4, load: float = 0.8) -> dict[str, Any]:
    """(2) Multi-tenant: per-tenant latency and miss rate, bulk throughput (generator default load 0.8)."""
    runs = [
        tenant_run(tenants(seed, spikes=False, load=load), seed, name, make, duration, batch)
        for seed in range(1, seeds + 1)
        for name, make in BASE.items()
    ]
    mean = tenant_table(
        f"(2) multi-tenant at nominal load {load}, {seeds} seeds × {duration:.0f} s, {batch} "
        "records/message (LS = latency-sensitive tenants pooled; latency s)",
        runs,
    )
    doc = {
        "experiment": "multi",
        "load": load,
        "duration_s": duration,
        "seeds": seeds,
        "batch": batch,
        "target": "LS latency >= 4.6x lower than FIFO, bulk throughput >= 95% of FIFO",
        "runs": runs,
        "mean": mean,
    }
    write("multi" if load == 0.8 else f"multi_load{load:g}", doc)
    return doc


@app.command()
def spikes(seeds: int = 3, duration: float = 180.0, batch: int = 4, load: float = 0.6) -> dict[str, Any]:
    """(3) Transient spikes on the bulk tenants over steady Poisson input: tail latency."""
    runs = [
        tenant_run(tenants(seed, spikes=True, load=load), seed, name, make, duration, batch)
        for seed in range(1, seeds + 1)
        for name, make in BASE.items()
    ]
    mean = tenant_table(
        f"(3) transient bulk spikes (1–5 s at 2–5×, one per ~60 s) at nominal load {load}, "
        f"{seeds} seeds × {duration:.0f} s, {batch} records/message (latency s)",
        runs,
    )
    doc = {
        "experiment": "spikes",
        "load": load,
        "duration_s": duration,
        "seeds": seeds,
        "batch": batch,
        "target": "p99 >= 20x lower than FIFO",
        "runs": runs,
        "mean": mean,
    }
    write("spikes", doc)
    return doc


# ------------------------------------------------------------------------- (4) fair share


def staggered(seed: int, gap: float = 300.0, cores: int = 4, rate: float = 100.0, demand: float = 0.6) -> Scenario:
    """Three identical dataflows source → map → sink; dataflow i's source starts at i × ``gap``."""
    per_record = demand * cores / rate
    jobs = []
    for i in range(3):
        start = i * gap
        curve = [(0.0, rate)] if start == 0 else [(0.0, 0.0), (start - 0.001, 0.0), (start, rate)]
        jobs.append(
            {
                "id": f"flow{i}",
                "rank": 1,
                "target_latency_s": 5.0,
                "templates": [
                    {
                        "operators": [
                            {
                                "name": "src",
                                "kind": "source",
                                "cost_per_record": 0.1 * per_record,
                                "source": {"rate": rate, "rate_curve": curve, "seed": seed * 10 + i},
                            },
                            {"name": "work", "kind": "map", "cost_per_record": 0.8 * per_record},
                            {"name": "out", "kind": "sink", "cost_per_record": 0.1 * per_record},
                        ],
                        "streams": [{"from": "src", "to": "work"}, {"from": "work", "to": "out"}],
                    }
                ],
            }
        )
    return Scenario.model_validate(
        {"name": f"fair-seed{seed}", "cluster": {"nodes": [{"name": "n0", "cores": cores}]}, "jobs": jobs}
    )


@app.command()
def fair(seeds: int = 3, gap: float = 300.0, window: float = 10.0) -> dict[str, Any]:
    """(4) Proportional fair share: three identical dataflows started ``gap`` s apart."""
    policies: dict[str, tuple[Callable[[Scenario], DispatchFactory | None], dict[str, float]]] = {
        "fifo": (lambda s: None, {}),
        "fair": (lambda s: dispatcher("fair", Priors.from_scenario(s)), {}),
        "fair 1:2:3": (
            lambda s: dispatcher("fair", Priors.from_scenario(s), weights={"flow0": 1.0, "flow1": 2.0, "flow2": 3.0}),
            {"flow0": 1.0, "flow1": 2.0, "flow2": 3.0},
        ),
    }
    duration = 4 * gap
    runs = []
    for seed in range(1, seeds + 1):
        scenario = staggered(seed, gap)
        for name, (make, weights) in policies.items():
            shares = CpuShares(Plain(scenario))
            engine = SimEngine(scenario, SimOptions(seed=seed, dispatch=make(scenario)))
            loop.run(engine, shares, window_s=window, until=duration)
            series = shares.series
            runs.append(
                {
                    "seed": seed,
                    "policy": name,
                    "series": series,
                    **share_stats(series, gap, weights, demand=0.6 * 4, cores=4),
                }
            )
    table = Table(
        title=f"(4) fair share: 3 identical dataflows started {gap:.0f} s apart, {seeds} seeds; "
        f"cpu shares per {window:.0f} s window from t = {2.5 * gap:.0f} s"
    )
    for col in (
        "policy",
        "mean share flow0/1/2",
        "expected",
        "max |share − expected| / expected",
        "flow0 share, 2 running",
        "expected (weighted max-min)",
    ):
        table.add_column(col, justify="right")
    for name in policies:
        rs = [r for r in runs if r["policy"] == name]
        shares = np.mean([r["mean_share"] for r in rs], axis=0)
        table.add_row(
            name,
            " / ".join(f"{x:.3f}" for x in shares),
            " / ".join(f"{x:.3f}" for x in rs[0]["expected"]),
            f"{max(r['max_rel_dev'] for r in rs):.3f}",
            f"{statistics.fmean(r['two_running_share0'] for r in rs):.3f}",
            f"{rs[0]['two_running_expected0']:.3f}",
        )
    console.print(table)
    doc = {
        "experiment": "fair",
        "gap_s": gap,
        "window_s": window,
        "seeds": seeds,
        "target": "shares within 5% of equal once all three run",
        "runs": runs,
    }
    write("fair", doc)
    return doc


class CpuShares:
    """The loop's policy here: ``plain``'s decisions (every job admitted, nothing changed), and each window's
    core-seconds per dataflow recorded in ``series``."""

    def __init__(self, plain: Plain) -> None:
        self.plain = plain
        self.series: list[dict[str, float]] = []

    def start(self, now: float) -> Decisions:
        return self.plain.start(now)

    def step(self, obs: Observation) -> Decisions:
        busy: dict[str, float] = {}
        for inst in obs.window.instances:
            job = inst.pe.partition(".")[0]
            busy[job] = busy.get(job, 0.0) + inst.busy
        self.series.append({"t": obs.now, **busy})
        return self.plain.step(obs)


def max_min(demand: list[float], weights: list[float], capacity: float) -> list[float]:
    """Weighted max-min fair allocation (water-filling): what fair sharing should converge to."""
    alloc = [0.0] * len(demand)
    active = set(range(len(demand)))
    left = capacity
    while active and left > 1e-12:
        unit = left / sum(weights[i] for i in active)
        capped = {i for i in active if demand[i] - alloc[i] <= unit * weights[i]}
        if not capped:
            for i in active:
                alloc[i] += unit * weights[i]
            break
        for i in capped:
            left -= demand[i] - alloc[i]
            alloc[i] = demand[i]
        active -= capped
    return alloc


def share_stats(
    series: list[dict[str, float]], gap: float, weights: dict[str, float], demand: float, cores: float
) -> dict[str, Any]:
    """Per-window cpu shares once all three run (half a gap after the third start): mean and largest deviation.

    Also flow0's share while only flow0 and flow1 run (second half of
    ``[gap, 2 gap)``), against the weighted max-min share given each
    dataflow's nominal demand (a dataflow cannot use more than it needs).
    """
    jobs = ["flow0", "flow1", "flow2"]
    w = [weights.get(j, 1.0) for j in jobs]
    expected = np.array(max_min([demand] * 3, w, cores)) / cores
    two_expected = max_min([demand] * 2, w[:2], cores)
    rows = np.array([[s.get(j, 0.0) for j in jobs] for s in series if s["t"] > 2.5 * gap])
    shares = rows / rows.sum(axis=1, keepdims=True)
    two = np.array([[s.get(j, 0.0) for j in jobs] for s in series if 1.5 * gap < s["t"] <= 2 * gap])
    return {
        "expected": expected.tolist(),
        "mean_share": shares.mean(axis=0).tolist(),
        "max_rel_dev": float(np.max(np.abs(shares - expected) / expected)),
        "two_running_share0": float((two[:, 0] / two.sum(axis=1)).mean()),
        "two_running_expected0": two_expected[0] / sum(two_expected),
    }


@app.command(name="all")
def run_all(seeds: int = 3) -> None:
    """Every experiment."""
    single(seeds)
    single_parallel(seeds)
    multi(seeds)
    spikes(seeds)
    fair(seeds)


if __name__ == "__main__":
    app()
