"""A demo run's metrics tables, and the side-by-side comparison of its two modes."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

TABLES = ("summary", "latency", "batches", "partitions", "checks", "decisions", "gate", "observations", "learning")


@dataclass
class RunTables:
    """Everything ``strata demo`` measured, as written under ``<run>/metrics``."""

    directory: Path
    meta: dict
    summary: pd.DataFrame
    latency: pd.DataFrame
    batches: pd.DataFrame
    partitions: pd.DataFrame
    checks: pd.DataFrame
    decisions: pd.DataFrame
    gate: pd.DataFrame
    observations: pd.DataFrame
    learning: pd.DataFrame


class ReportError(ValueError):
    """A run directory without the tables a report needs; the message names the missing file."""


def load_tables(run_dir: str | Path) -> RunTables:
    """Read ``<run_dir>/metrics/*.csv``; a missing directory or table raises :class:`ReportError`."""
    directory = Path(run_dir)
    metrics = directory / "metrics"
    if not (metrics / "run.json").exists():
        raise ReportError(f"{metrics / 'run.json'}: not found; expected a directory written by `strata demo`")
    frames = {}
    for name in TABLES:
        path = metrics / f"{name}.csv"
        if not path.exists():
            raise ReportError(f"{path}: not found; the run directory is incomplete")
        try:
            frames[name] = pd.read_csv(path)
        except pd.errors.EmptyDataError:
            frames[name] = pd.DataFrame()
    return RunTables(directory, json.loads((metrics / "run.json").read_text()), **frames)


def _fmt(value, spec: str) -> str:
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return "–"
    return format(value, spec)


def _ratio(base, new, better_low: bool = True) -> str:
    if base is None or new is None or pd.isna(base) or pd.isna(new):
        return ""
    if better_low:
        return f"{base / new:.1f}× lower" if new > 0 else "∞× lower"
    return f"{new / base:.0%} of baseline" if base > 0 else ""


def _mode_row(summary: pd.DataFrame, job: str, mode: str) -> pd.Series:
    """The job's summary row in ``mode``; a run of one mode (``strata run``) leaves the other's figures empty."""
    rows = summary[summary["job"] == job]
    mine = rows[rows["mode"] == mode]
    if not mine.empty:
        return mine.iloc[0]
    other = rows.iloc[0]
    empty = pd.Series({k: None for k in other.index}, dtype=object)
    empty.update({"rank": other["rank"], "target_s": other["target_s"], "misses": 0, "outputs": 0})
    return empty


def comparison(summary: pd.DataFrame, decisions: pd.DataFrame) -> list[dict[str, str]]:
    """One row per (job, metric): baseline, strata and how they compare, as display strings."""
    rows: list[dict[str, str]] = []
    for job in summary["job"].drop_duplicates():
        b, s = (_mode_row(summary, job, mode) for mode in ("baseline", "strata"))

        def add(metric, bv, sv, note="", job=job):
            rows.append({"job": job, "metric": metric, "baseline": bv, "strata": sv, "change": note})

        add("rank / target", f"{b['rank']} / {b['target_s']:g} s", f"{s['rank']} / {s['target_s']:g} s")
        add("p50 latency s", _fmt(b["p50_s"], ".2f"), _fmt(s["p50_s"], ".2f"), _ratio(b["p50_s"], s["p50_s"]))
        add("p99 latency s", _fmt(b["p99_s"], ".2f"), _fmt(s["p99_s"], ".2f"), _ratio(b["p99_s"], s["p99_s"]))
        miss_note = ""
        if b["misses"] or s["misses"]:
            miss_note = f"{b['misses'] / s['misses']:.0f}× fewer" if s["misses"] else "none left"
        add("deadline misses", f"{b['misses']} of {b['outputs']}", f"{s['misses']} of {s['outputs']}", miss_note)
        add(
            "throughput rec/s",
            _fmt(b["throughput"], ".0f"),
            _fmt(s["throughput"], ".0f"),
            _ratio(b["throughput"], s["throughput"], better_low=False),
        )
        add("importance (on time)", _fmt(b["importance"], ".1f"), _fmt(s["importance"], ".1f"))
        if not pd.isna(b.get("imbalance")) or not pd.isna(s.get("imbalance")):
            add(
                "partition imbalance", _fmt(b.get("imbalance"), ".2f"), _fmt(s.get("imbalance"), ".2f"), "max/mean rows"
            )
        mine = (
            decisions[(decisions["mode"] == "strata") & (decisions["job"] == job)] if not decisions.empty else decisions
        )
        admit = [
            f"{d['kind']}: {d['detail']}" for _, d in mine.iterrows() if d["kind"] in ("admit", "hold back", "template")
        ]
        if admit:
            add("admission / template", "admitted (first template)", "; ".join(admit[:3]))
        caps = [d["detail"] for _, d in mine.iterrows() if d["kind"] == "rate cap"]
        if caps:
            capped = [c for c in caps if c != "lifted"]
            add(
                "rate caps",
                "none",
                f"{len(capped)} set, {len(caps) - len(capped)} lifted",
                f"first: {capped[0].split(' (')[0]}" if capped else "",
            )
    total_b = summary[summary["mode"] == "baseline"]["importance"].sum()
    total_s = summary[summary["mode"] == "strata"]["importance"].sum()
    rows.append(
        {
            "job": "all",
            "metric": "total importance (on time)",
            "baseline": f"{total_b:.1f}",
            "strata": f"{total_s:.1f}",
            "change": f"{total_s - total_b:+.1f}",
        }
    )
    return rows


def learned(learning: pd.DataFrame) -> list[dict[str, str]]:
    """Per PE: the spec's prior and the learner's last estimate of cost per record and selectivity."""
    if learning.empty:
        return []
    last = learning[learning["t"] == learning["t"].max()]
    return [
        {
            "PE": r["pe"],
            "cost per record (prior → learned)": f"{r['prior_cost_per_record']:.2e} → {r['cost_per_record']:.2e}",
            "selectivity (prior → learned)": f"{r['prior_selectivity']:.3f} → {r['selectivity']:.3f}",
            "fixed s / marginal s per record": f"{r['fixed_s']:.3f} / {r['marginal_s']:.2e}",
            "windows observed": str(int(r["samples"])),
        }
        for _, r in last.iterrows()
    ]
