"""Dispatch overhead per message: push + pop + completed through the DispatchPolicy hook (Cameo).

A node with ``--operators`` operators of 4 dataflows keeps ``depth`` messages
queued; each step pushes one message, pops one and reports its completion, so
the figure is the whole per-message cost a strategy adds to the engine. The
target is ≤ 10 µs per message. Timings are wall-clock on a shared machine:
the median over ``--repeats`` runs is reported.

    .venv/bin/python benchmarks/bench_dispatch_overhead.py
"""

from __future__ import annotations

import json
import random
import statistics
import time
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from strata.dispatch import dispatcher, slot_dispatcher
from strata.protocol.units import Message, NodeView

RESULTS = Path(__file__).parent / "results"
TARGET_US = 10.0


def make_messages(count: int, operators: int, seed: int) -> list[Message]:
    rng = random.Random(seed)
    msgs = []
    for seq in range(count):
        op = rng.randrange(operators)
        job = f"j{op % 4}"
        t = seq * 1e-4
        msgs.append(
            Message(
                seq=seq,
                job=job,
                pe=f"{job}.op{op}",
                instance=0,
                upstream=-1,
                created=t,
                event_time=t - rng.random(),
                frontier=t + rng.random(),
            )
        )
    return msgs


def per_message_us(factory, view: NodeView, msgs: list[Message], depth: int) -> float:
    node = factory(view)
    for m in msgs[:depth]:
        node.push(m, m.created)
    start = time.perf_counter()
    for m in msgs[depth:]:
        now = m.created
        node.push(m, now)
        out = node.pop(now)
        node.completed(out, 1e-4, now)
    elapsed = time.perf_counter() - start
    return elapsed / (len(msgs) - depth) * 1e6


def main(operators: int = 40, messages: int = 100_000, repeats: int = 5, seed: int = 1) -> None:
    pes = tuple(f"j{op % 4}.op{op}" for op in range(operators))
    down = {pe: () for pe in pes}
    view = NodeView(
        name="n0",
        cores=8,
        pes=pes,
        target_latency={f"j{i}": 1.0 + i for i in range(4)},
        weight={f"j{i}": 1.0 + i for i in range(4)},
        downstream=down,
    )
    factories = {name: dispatcher(name) for name in ("cameo", "edf", "sjf", "fifo", "fair")}
    factories["slots"] = slot_dispatcher()
    rows = []
    for depth in (10, 1_000, 50_000):
        msgs = make_messages(messages + depth, operators, seed)
        for name, factory in factories.items():
            runs = [per_message_us(factory, view, msgs, depth) for _ in range(repeats)]
            rows.append(
                {
                    "strategy": name,
                    "queued": depth,
                    "us_per_message": statistics.median(runs),
                    "min_us": min(runs),
                    "max_us": max(runs),
                }
            )
    table = Table(title=f"dispatch overhead per message (push+pop+completed), {operators} operators")
    for col in ("strategy", "queued", "µs/msg (median)", "min", "max", f"≤ {TARGET_US} µs"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(
            r["strategy"],
            f"{r['queued']:,}",
            f"{r['us_per_message']:.2f}",
            f"{r['min_us']:.2f}",
            f"{r['max_us']:.2f}",
            "met" if r["us_per_message"] <= TARGET_US else "NOT met",
        )
    Console().print(table)
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / "dispatch_overhead.json"
    out.write_text(
        json.dumps(
            {"target_us": TARGET_US, "operators": operators, "messages": messages, "repeats": repeats, "rows": rows},
            indent=2,
        )
    )
    Console().print(f"wrote {out}")


if __name__ == "__main__":
    typer.run(main)
