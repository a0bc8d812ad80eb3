"""One self-contained HTML file: the comparison table, the figures as embedded PNGs, checks, decisions."""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path

import pandas as pd

from strata.report import plots
from strata.report.tables import RunTables, comparison, decisions_by_lane, learned, load_tables, verdict
from strata.report.targets import judged

STYLE = """
body { font-family: -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif; margin: 2em auto; max-width: 1000px;
       color: #222; }
table { border-collapse: collapse; margin: 1em 0; font-size: 13px; }
th, td { border-bottom: 1px solid #ddd; padding: 4px 10px; text-align: left; }
th { background: #f4f6f8; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
img { max-width: 100%; }
.bad { color: #c0392b; font-weight: bold; } .good { color: #1e8449; font-weight: bold; }
.note { color: #555; font-size: 13px; }
"""


DPI = 110


def _png(fig, attributes: str = "") -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    plots.plt.close(fig)
    return f'<img src="data:image/png;base64,{base64.b64encode(buf.getvalue()).decode()}"{attributes}>'


def _timeline(timeline: plots.Timeline) -> str:
    """The timeline's PNG with an image map: each decision's marker shows its time, kind, job, detail and
    reasons on hover (the image is kept at its own size so the map's pixels stay on the markers)."""
    fig = timeline.figure
    scale = DPI / fig.dpi
    height = fig.bbox.height * scale
    areas = []
    for x, y, text in timeline.marks:
        px, py = timeline.lanes_axes.transData.transform((x, y))
        title = html.escape(text, quote=True)
        areas.append(
            f'<area shape="circle" coords="{px * scale:.0f},{height - py * scale:.0f},6" title="{title}" alt="{title}">'
        )
    image = _png(fig, ' usemap="#decisions" style="max-width:none"')
    return f'{image}<map name="decisions">{"".join(areas)}</map>'


def _table(rows: list[dict], numeric: tuple[str, ...] = ()) -> str:
    if not rows:
        return "<p class='note'>(none)</p>"
    cols = list(rows[0])
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in cols)
    body = "".join(
        "<tr>"
        + "".join(f"<td class='{'num' if c in numeric else ''}'>{html.escape(str(r[c]))}</td>" for c in cols)
        + "</tr>"
        for r in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _frame_rows(frame: pd.DataFrame, columns: list[str]) -> list[dict]:
    if frame.empty:
        return []
    cols = [c for c in columns if c in frame.columns]
    return frame[cols].round(3).fillna("").to_dict("records")


def _targets(summary: pd.DataFrame, meta: dict) -> list[str]:
    """The targets Strata is judged by against each reference mode that ran (:func:`strata.report.targets.judged`;
    the latency-critical jobs as the run recorded them), as a section; none for a run without them."""
    critical = (meta.get("config") or {}).get("critical_jobs")
    found = judged(summary.to_dict("records"), critical) if critical is not None and not summary.empty else []
    if not found:
        return []
    rows = [
        {
            "against": label,
            "target": name,
            "Strata's figure": "–" if value is None else f"{value:.2f}",
            "met": "yes" if met[name] else "no",
        }
        for label, figures, met in found
        for name, value in figures.items()
    ]
    return [
        "<h2>Targets</h2>",
        "<p class='note'>Each figure is the worst job's: critical p99 and misses against the reference's, each bulk "
        "job's throughput as a share of the reference's, total on-time importance as a share (strata.report.targets)."
        "</p>",
        _table(rows, numeric=("Strata's figure",)),
    ]


def render(t: RunTables) -> str:
    """The report as an HTML string."""
    meta = t.meta
    horizon = float(meta["config"]["duration_s"])
    targets = {k: float(v) for k, v in meta["targets"].items()}
    latency = t.latency.copy()
    if not latency.empty:
        latency["delivered"] = latency["delivered"].astype(str).str.lower() == "true"
    checks = t.checks
    checked = verdict(checks)
    said = (
        "<span class='good'>no record lost or duplicated</span>"
        if checked.bad == 0
        else f"<span class='bad'>{checked.bad} records lost, duplicated or wrong: see the checks below</span>"
    )
    if checked.unverifiable:
        said += "; not verifiable: " + "; ".join(
            html.escape(f"{job} ({template}): {why}") for job, template, why in checked.unverifiable
        )
    timings = ", ".join(f"{k} {float(v):.0f} s" for k, v in (meta.get("timings") or {}).items())
    modes = set(t.summary["mode"]) if not t.summary.empty else set()
    if len(modes) == 1:
        (mode,) = modes
        who = "Strata in control" if mode == "strata" else "plain Spark (no control)"
        intro = [
            f"<h1>strata run — {html.escape(str(meta['scenario']))}</h1>",
            f"<p class='note'>One run, {who}. Measured over {horizon:g} s of event time. "
            f"Timings: {html.escape(timings)}.</p>",
        ]
    else:
        intro = [
            f"<h1>strata demo — {html.escape(str(meta['scenario']))}</h1>",
            "<p class='note'>Plain Spark (every query admitted, FIFO scheduling, hash partitioning; then FAIR "
            "pools by hand; then the latency-critical jobs in an application of their own, the others in a second "
            "one under FAIR pools by hand) and Strata as <code>strata run</code> runs by default (L0 places the "
            "jobs onto cells, Spark applications with OS-enforced CPU shares, under one hierarchy) on the same "
            f"seeded input, one after the other. Measured over {horizon:g} s of event time per mode. "
            f"Timings: {html.escape(timings)}.</p>",
            *_targets(t.summary, meta),
        ]
    parts = [
        *intro,
        f"<p>Exactly-once check against the reference: {said}.</p>",
        "<h2>Side by side</h2>",
        _table(comparison(t.summary, t.decisions)),
        *(
            [
                "<h2>Latency over time</h2>",
                _png(plots.latency_over_time(latency, targets, horizon)),
                "<h2>Latency CDF</h2>",
                _png(plots.latency_cdf(latency, targets)),
            ]
            if not latency.empty
            else ["<h2>Latency</h2>", "<p>No output was timed: no query wrote a record in the measured span.</p>"]
        ),
    ]
    load = plots.partition_load(t.partitions)
    if load is not None:
        parts += ["<h2>Partition load of the keyed operator</h2>", _png(load)]
    timeline = plots.decisions_timeline(t.decisions, t.gate, horizon, t.observations)
    if timeline is not None:
        parts += [
            "<h2>Decisions on a timeline</h2>",
            "<p class='note'>One row per kind of decision and job; hover a mark for its time, detail and reasons. "
            "Counted per row:</p>",
            _table(decisions_by_lane(t.decisions), numeric=("decisions", "first s", "last s")),
            _timeline(timeline),
        ]
    parts += [
        "<h2>Learned resource functions</h2>",
        "<p class='note'>Strata's resource-function learner, fitted on every control window's micro-batches "
        "(busy time split over a chain's operators in proportion to prior cost × records): its estimates replace "
        "the spec's priors in the model every re-plan starts from, and rate caps are derived from the plan's cpu "
        "under the model it was made on.</p>",
        _table(learned(t.learning)),
        "<h2>Verification (sink vs reference, per query segment)</h2>",
        _table(
            _frame_rows(
                checks,
                ["mode", "job", "template", "rows_read", "expected", "delivered", "missing", "duplicated", "wrong"],
            )
        ),
        "<h2>Decisions</h2>",
        _table(_frame_rows(t.decisions, ["mode", "t", "epoch", "kind", "job", "detail", "reasons"])),
    ]
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>strata demo</title><style>{STYLE}</style>"
        f"</head><body>{''.join(parts)}</body></html>"
    )


def write_report(run_dir: str | Path) -> Path:
    """Write ``<run_dir>/report.html`` from the run's metrics tables; returns its path."""
    tables = load_tables(run_dir)
    path = Path(run_dir) / "report.html"
    path.write_text(render(tables), encoding="utf-8")
    return path
