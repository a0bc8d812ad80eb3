"""The terminal output of runs (rich): the side-by-side table, the verification line, the warnings of what was
not measured."""

from __future__ import annotations

import pandas as pd
from rich.table import Table

from strata.model import Scenario
from strata.report.tables import comparison, verdict


def side_by_side(summary: pd.DataFrame, decisions: pd.DataFrame, title: str) -> Table:
    """Per job and metric: plain Spark (FIFO; FAIR pools by hand and the hand deployment where those modes ran),
    Strata, and how Strata compares with each."""
    table = Table(title=title, title_justify="left", show_lines=False)
    rows = comparison(summary, decisions)
    heads = {
        "job": "job",
        "metric": "metric",
        "baseline": "plain Spark",
        "fair": "FAIR by hand",
        "dedicated": "own application",
        "strata": "Strata",
        "change": "vs plain",
        "vs fair": "vs FAIR",
        "vs dedicated": "vs own app.",
    }
    keys = [k for k in heads if rows and k in rows[0]]
    for k in keys:
        left = k in ("job", "metric", "change") or k.startswith("vs ")
        table.add_column(heads[k], justify="left" if left else "right")
    previous = None
    for row in rows:
        if previous is not None and row["job"] != previous:
            table.add_section()
        table.add_row(*[row[k] if k != "job" or row["job"] != previous else "" for k in keys])
        previous = row["job"]
    return table


def verification_line(checks: pd.DataFrame) -> str:
    """One line: nothing lost or duplicated, or what was; and which sinks no recomputation could verify, and why."""
    v = verdict(checks)
    if checks.empty:
        return "[yellow]no sink was verified[/]"
    if v.bad:
        line = f"[bold red]reference mismatch[/]: {v.missing} missing, {v.duplicated} duplicated, {v.wrong} wrong"
        line += " values"
    elif v.segments:
        line = (
            f"[green]exactly once[/]: every sink equals the reference recomputed from the {v.rows_read:,} input "
            f"records read ({v.segments} query segments, every mode)"
        )
    else:
        line = "[yellow]no sink was verified[/]"
    for job, template, why in v.unverifiable:
        line += f"\n[yellow]not verifiable[/]: {job} ({template}): {why}"
    return line


def untimed_lines(summary: pd.DataFrame, scenario: Scenario) -> list[str]:
    """One warning per job whose sink wrote rows with a null event-time column (the summary's ``untimed`` of its
    ``written``): those rows are neither outputs nor misses, so a job could look idle while its sink fills (e.g.
    a CSV schema whose columns are not in the files' order)."""
    if summary.empty or "untimed" not in summary:
        return []
    counts = summary.groupby("job", sort=False)[["untimed", "written"]].sum()
    lines = []
    for job in scenario.jobs:
        if job.id not in counts.index or not counts.loc[job.id, "untimed"] > 0:
            continue
        untimed, written = int(counts.loc[job.id, "untimed"]), int(counts.loc[job.id, "written"])
        declared = job.declared
        where = f" ({declared.origin})" if declared is not None else ""
        column = declared.event_time if declared is not None else "event_time"
        lines.append(
            f"[yellow]warning[/] job {job.id}{where}: {untimed:,} of {written:,} rows its sink wrote have no event "
            f"time (column {column!r} is null): latency and misses cannot be measured for them"
        )
    return lines
