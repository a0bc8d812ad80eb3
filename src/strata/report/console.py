"""The demo's terminal output (rich): the side-by-side table and the verification line."""

from __future__ import annotations

import pandas as pd
from rich.table import Table

from strata.report.tables import comparison


def side_by_side(summary: pd.DataFrame, decisions: pd.DataFrame, title: str) -> Table:
    """Per job and metric: plain Spark, Strata, and the change."""
    table = Table(title=title, title_justify="left", show_lines=False)
    for col, justify in (
        ("job", "left"),
        ("metric", "left"),
        ("plain Spark", "right"),
        ("Strata", "right"),
        ("change", "left"),
    ):
        table.add_column(col, justify=justify)
    previous = None
    for row in comparison(summary, decisions):
        if previous is not None and row["job"] != previous:
            table.add_section()
        table.add_row(
            row["job"] if row["job"] != previous else "", row["metric"], row["baseline"], row["strata"], row["change"]
        )
        previous = row["job"]
    return table


def verification_line(checks: pd.DataFrame) -> str:
    """One line: nothing lost or duplicated, or what was."""
    if checks.empty:
        return "[yellow]no sink was verified[/]"
    lost, dup, wrong = (int(checks[c].sum()) for c in ("missing", "duplicated", "wrong"))
    rows = int(checks["rows_read"].sum())
    if lost == dup == wrong == 0:
        return (
            f"[green]exactly once[/]: every sink equals the reference recomputed from the {rows:,} input records "
            f"read ({len(checks)} query segments, both modes)"
        )
    return f"[bold red]reference mismatch[/]: {lost} missing, {dup} duplicated, {wrong} wrong values"
