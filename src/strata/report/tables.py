"""A demo run's metrics tables, and the side-by-side comparison of its modes."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import partial
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


@dataclass(frozen=True)
class Verdict:
    """What the checks table says of every sink: records lost, duplicated or wrong among the segments a reference
    recomputation could verify, and the segments it could not (job, template, why)."""

    segments: int
    rows_read: int
    missing: int
    duplicated: int
    wrong: int
    unverifiable: tuple[tuple[str, str, str], ...]

    @property
    def bad(self) -> int:
        return self.missing + self.duplicated + self.wrong


def verdict(checks: pd.DataFrame) -> Verdict:
    """The :class:`Verdict` of a checks table (one row per query segment, as :mod:`strata.spark.verify` writes it;
    a table read back from CSV included)."""
    if checks.empty:
        return Verdict(0, 0, 0, 0, 0, ())
    reason = checks["unverifiable"].fillna("").astype(str) if "unverifiable" in checks else pd.Series("", checks.index)
    verified = checks[reason == ""]
    odd = checks[reason != ""].assign(why=reason[reason != ""])
    return Verdict(
        len(verified),
        int(verified["rows_read"].sum()),
        *(int(verified[c].sum()) for c in ("missing", "duplicated", "wrong")),
        tuple(dict.fromkeys(zip(odd["job"], odd["template"], odd["why"], strict=True))),
    )


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
            frames[name] = pd.read_csv(path, low_memory=False)  # a column a cell mode filled and others left empty
        except pd.errors.EmptyDataError:
            frames[name] = pd.DataFrame()
    return RunTables(directory, json.loads((metrics / "run.json").read_text()), **frames)


def _fmt(value, spec: str) -> str:
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return "–"
    return format(value, spec)


two, one, whole = (partial(_fmt, spec=spec) for spec in (".2f", ".1f", ".0f"))


def _ratio(base, new, better_low: bool = True, of: str = "baseline") -> str:
    if base is None or new is None or pd.isna(base) or pd.isna(new):
        return ""
    if better_low:
        return f"{base / new:.1f}× lower" if new > 0 else "∞× lower"
    return f"{new / base:.0%} of {of}" if base > 0 else ""


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


REFERENCES = ("fair", "dedicated")
"""The modes Strata is also compared with where they ran: FAIR pools by hand, the hand deployment (the
latency-critical jobs in an application of their own)."""


def comparison(summary: pd.DataFrame, decisions: pd.DataFrame) -> list[dict[str, str]]:
    """One row per (job, metric): baseline, the references that ran (:data:`REFERENCES`), strata and how Strata
    compares with plain Spark (``change``) and with each reference (``vs <reference>``), as display strings."""
    rows: list[dict[str, str]] = []
    references = [m for m in REFERENCES if m in set(summary["mode"])]
    for job in summary["job"].drop_duplicates():
        b, s = (_mode_row(summary, job, mode) for mode in ("baseline", "strata"))
        refs = {m: _mode_row(summary, job, m) for m in references}

        def add(metric, bv, sv, note="", job=job, key=None, fmt=None, ratio=None, refs=refs, s=s):
            row = {"job": job, "metric": metric, "baseline": bv}
            for m, r in refs.items():
                row[m] = fmt(r[key]) if fmt is not None else ""
            row.update({"strata": sv, "change": note})
            for m, r in refs.items():
                row[f"vs {m}"] = ratio(r[key], s[key], m) if ratio is not None else ""
            rows.append(row)

        def lower(base, new, _of):
            return _ratio(base, new)

        def higher(base, new, of):
            return _ratio(base, new, better_low=False, of={"fair": "FAIR", "dedicated": "own app."}.get(of, of))

        add("rank / target", f"{b['rank']} / {b['target_s']:g} s", f"{s['rank']} / {s['target_s']:g} s")
        for metric, key in (("p50 latency s", "p50_s"), ("p99 latency s", "p99_s")):
            add(metric, two(b[key]), two(s[key]), _ratio(b[key], s[key]), key=key, fmt=two, ratio=lower)
        if "floor_s" in summary:  # its batch time with the machine to itself, beside the p99 (older runs: none)
            add("floor s", two(b["floor_s"]), two(s["floor_s"]), "batch time alone", key="floor_s", fmt=two)
        add(
            "deadline misses",
            f"{b['misses']} of {b['outputs']}",
            f"{s['misses']} of {s['outputs']}",
            _fewer(b["misses"], s["misses"]),
            key="misses",
            fmt=None,
            ratio=lambda base, new, _of: _fewer(base, new),
        )
        for m, r in refs.items():  # a reference's misses read against its own outputs
            rows[-1][m] = f"{r['misses']} of {r['outputs']}"
        add(
            "throughput rec/s",
            whole(b["throughput"]),
            whole(s["throughput"]),
            _ratio(b["throughput"], s["throughput"], better_low=False),
            key="throughput",
            fmt=whole,
            ratio=higher,
        )
        add("importance (on time)", one(b["importance"]), one(s["importance"]), key="importance", fmt=one)
        if not pd.isna(b.get("imbalance")) or not pd.isna(s.get("imbalance")):
            add(
                "partition imbalance",
                two(b.get("imbalance")),
                two(s.get("imbalance")),
                "max/mean rows",
                key="imbalance",
                fmt=two,
            )
        mine = (
            decisions[(decisions["mode"] == "strata") & (decisions["job"] == job)] if not decisions.empty else decisions
        )
        admit = [
            f"{d['kind']}: {d['detail']}" for _, d in mine.iterrows() if d["kind"] in ("admit", "hold back", "template")
        ]
        if admit:
            add("admission / template", "admitted (first template)", "; ".join(admit[:3]))
        if "cell" in summary:  # the application each job ran in at the end, where a mode ran several

            def app(cell) -> str:
                return "one for all" if cell is None or pd.isna(cell) else str(cell)

            add("application (cell)", app(b.get("cell")), app(s.get("cell")), key="cell", fmt=app)
        caps = [d["detail"] for _, d in mine.iterrows() if d["kind"] == "rate cap"]
        if caps:
            capped = [c for c in caps if c != "lifted"]
            add(
                "rate caps",
                "none",
                f"{len(capped)} set, {len(caps) - len(capped)} lifted",
                f"first: {capped[0].split(' (')[0]}" if capped else "",
            )
    total = {m: summary[summary["mode"] == m]["importance"].sum() for m in ("baseline", *references, "strata")}
    row = {"job": "all", "metric": "total importance (on time)", "baseline": f"{total['baseline']:.1f}"}
    row.update({m: f"{total[m]:.1f}" for m in references})
    row.update({"strata": f"{total['strata']:.1f}", "change": f"{total['strata'] - total['baseline']:+.1f}"})
    row.update({f"vs {m}": f"{total['strata'] - total[m]:+.1f}" for m in references})
    rows.append(row)
    return rows


def _fewer(base, new) -> str:
    """How many times fewer deadline misses ``new`` has than ``base``."""
    if not base and not new:
        return ""
    return f"{base / new:.0f}× fewer" if new else "none left"


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


def decisions_by_lane(decisions: pd.DataFrame) -> list[dict[str, str]]:
    """Strata's decisions counted per kind × job (the timeline's rows): how many, first and last time, and the
    last one's detail."""
    d = decisions[decisions["mode"] == "strata"] if not decisions.empty else decisions
    if d.empty:
        return []
    # the timeline's order: kinds, then jobs, as they first happened
    kinds, jobs = list(dict.fromkeys(d["kind"])), list(dict.fromkeys(d["job"].astype(str)))
    rows = []
    groups = d.groupby([d["kind"], d["job"].astype(str)], sort=False)
    for (kind, job), lane in sorted(groups, key=lambda g: (kinds.index(g[0][0]), jobs.index(g[0][1]))):
        rows.append(
            {
                "kind": str(kind),
                "job": job,
                "decisions": str(len(lane)),
                "first s": one(lane["t"].min()),
                "last s": one(lane["t"].max()),
                "last detail": str(lane.loc[lane["t"].idxmax(), "detail"])[:60],
            }
        )
    return rows
