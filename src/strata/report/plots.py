"""The demo's figures (matplotlib, Agg backend): each function takes tables, returns a Figure."""

from __future__ import annotations

from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

COLORS = {"baseline": "#c0392b", "fair": "#e67e22", "dedicated": "#7d3c98", "strata": "#2471a3"}
MAX_POINTS = 5000  # per job and mode in the scatter plots


def _jobs(latency: pd.DataFrame) -> list[str]:
    return list(dict.fromkeys(latency["job"])) if not latency.empty else []


def latency_over_time(latency: pd.DataFrame, targets: dict[str, float], horizon_s: float) -> Figure:
    """Per job: each output record's latency against its event time, both modes; the target dashed."""
    jobs = _jobs(latency)
    fig, axes = plt.subplots(len(jobs), 1, figsize=(9, 2.6 * max(1, len(jobs))), squeeze=False)
    for ax, job in zip(axes[:, 0], jobs, strict=True):
        for mode, color in COLORS.items():
            d = latency[(latency["job"] == job) & (latency["mode"] == mode)]
            if len(d) > MAX_POINTS:  # a random sample keeps the picture and the file small
                d = d.sample(MAX_POINTS, random_state=0)
            done, late = d[d["delivered"]], d[~d["delivered"]]
            ax.scatter(done["event_s"], done["latency_s"], s=3, color=color, alpha=0.5, label=mode)
            if not late.empty:
                ax.scatter(
                    late["event_s"],
                    late["latency_s"],
                    s=6,
                    marker="x",
                    color=color,
                    alpha=0.7,
                    label=f"{mode}: not delivered (≥)",
                )
        ax.axhline(targets.get(job, np.nan), color="black", linestyle="--", linewidth=1, label="target")
        ax.set_xlim(0, horizon_s)
        ax.set_yscale("log")
        ax.set_title(f"{job}: latency by event time", fontsize=10)
        ax.set_ylabel("latency s")
        ax.legend(fontsize=7, loc="upper left", markerscale=3)
    axes[-1, 0].set_xlabel("event time s (since the run's start)")
    fig.tight_layout()
    return fig


def latency_cdf(latency: pd.DataFrame, targets: dict[str, float]) -> Figure:
    """Per job: the CDF of output-record latency, both modes (undelivered records at their lower bound)."""
    jobs = _jobs(latency)
    fig, axes = plt.subplots(1, len(jobs), figsize=(3.3 * max(1, len(jobs)), 3), squeeze=False)
    for ax, job in zip(axes[0], jobs, strict=True):
        for mode, color in COLORS.items():
            v = np.sort(latency[(latency["job"] == job) & (latency["mode"] == mode)]["latency_s"].to_numpy())
            if v.size:
                ax.step(v, np.arange(1, v.size + 1) / v.size, where="post", color=color, label=mode)
        ax.axvline(targets.get(job, np.nan), color="black", linestyle="--", linewidth=1)
        ax.set_xscale("log")
        ax.set_title(f"{job}", fontsize=10)
        ax.set_xlabel("latency s")
        ax.set_ylim(0, 1.01)
        ax.grid(alpha=0.3)
    axes[0, 0].set_ylabel("share of outputs")
    axes[0, 0].legend(fontsize=8)
    fig.tight_layout()
    return fig


def partition_load(partitions: pd.DataFrame) -> Figure | None:
    """Managed keyed operators: per batch, max/mean rows over partitions; and rows per partition in all."""
    if partitions.empty:
        return None
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3))
    shown = [(m, c) for m, c in COLORS.items() if (partitions["mode"] == m).any()]
    width = 0.8 / max(1, len(shown))
    for k, (mode, color) in enumerate(shown):
        d = partitions[partitions["mode"] == mode]
        per_batch = d.groupby(["job", "batch_id"]).agg(t=("t", "first"), mx=("rows", "max"), mean=("rows", "mean"))
        per_batch = per_batch[per_batch["mean"] > 0]
        left.plot(
            per_batch["t"], per_batch["mx"] / per_batch["mean"], marker="o", markersize=3, color=color, label=mode
        )
        totals = d.groupby("partition")["rows"].sum()
        right.bar(
            totals.index + (k - (len(shown) - 1) / 2) * width, totals.to_numpy(), width=width, color=color, label=mode
        )
    left.axhline(1.2, color="black", linestyle="--", linewidth=1, label="1.2")
    left.set_title("imbalance per batch (max / mean rows)", fontsize=10)
    left.set_xlabel("time s")
    left.legend(fontsize=8)
    right.set_title("rows per partition, whole run", fontsize=10)
    right.set_xlabel("partition")
    right.legend(fontsize=8)
    fig.tight_layout()
    return fig


LANE_IN = 0.24  # inches of the timeline per kind × job lane: its label in 8 pt fits with room to spare


@dataclass(frozen=True)
class Timeline:
    """The decisions timeline and, per decision, where its marker is (data coordinates of ``lanes_axes``) and
    what it was: the hover text of the HTML report."""

    figure: Figure
    lanes_axes: Axes
    marks: list[tuple[float, float, str]]


def decision_lanes(decisions: pd.DataFrame) -> list[tuple[str, str]]:
    """One lane per (kind, job) that happened, kinds and jobs each in the order they first appear: a run's
    hundred decisions fall into a dozen readable rows."""
    if decisions.empty:
        return []
    pairs = set(zip(decisions["kind"], decisions["job"].astype(str), strict=True))
    jobs = list(dict.fromkeys(decisions["job"].astype(str)))
    return [(kind, job) for kind in dict.fromkeys(decisions["kind"]) for job in jobs if (kind, job) in pairs]


def decisions_timeline(
    decisions: pd.DataFrame, gate: pd.DataFrame, horizon_s: float, observations: pd.DataFrame | None = None
) -> Timeline | None:
    """Strata's decisions over time, one lane per kind × job (no text on the plot: each marker's detail is its
    hover text, and the report's table beside it counts them), the rate caps in force per window (when the
    observations carry them), and each gated batch's pool and wait."""
    d = decisions[decisions["mode"] == "strata"] if not decisions.empty else decisions
    if d.empty and gate.empty:
        return None
    obs = observations if observations is not None else pd.DataFrame()
    obs = obs[obs["mode"] == "strata"] if not obs.empty else obs
    caps = [c for c in obs.columns if c.startswith("cap:")] if not obs.empty else []
    lanes = decision_lanes(d)
    top_in = max(1.2, LANE_IN * len(lanes) + 0.5)
    heights = [top_in, 1.6, 2.0] if caps else [top_in, 2.0]
    fig, axes = plt.subplots(
        len(heights), 1, figsize=(9, sum(heights) + 0.6), sharex=True, gridspec_kw={"height_ratios": heights}
    )
    top, bottom = axes[0], axes[-1]
    colors = dict(zip(dict.fromkeys(k for k, _ in lanes), plt.get_cmap("tab10").colors, strict=False))
    marks = []
    for lane, (kind, job) in enumerate(lanes):
        rows = d[(d["kind"] == kind) & (d["job"].astype(str) == job)]
        top.scatter(rows["t"], [lane] * len(rows), marker="|", s=120, color=colors.get(kind, "black"))
        marks += [
            (float(r["t"]), float(lane), f"t={r['t']:.1f} s  {kind} · {job}: {r['detail']}  ({r['reasons']})")
            for _, r in rows.iterrows()
        ]
    top.set_yticks(range(len(lanes)), [f"{kind} · {job}" for kind, job in lanes], fontsize=8)
    top.set_ylim(len(lanes) - 0.5, -0.5)  # first lane on top
    top.grid(axis="y", alpha=0.2)
    top.set_title(
        "Strata's decisions by kind and job (L0 admission / template / pool / cap, L1 moves, L2 strategy)", fontsize=10
    )
    if caps:
        middle = axes[1]
        for col in caps:
            # the cap a window decided holds until the next window: a step, with gaps where there was none
            middle.step(obs["t"], pd.to_numeric(obs[col], errors="coerce"), where="post", label=col[4:])
        middle.set_ylabel("rate cap rec/s", fontsize=8)
        middle.legend(fontsize=7, ncol=4)
    if not gate.empty:
        g = gate[gate["mode"] == "strata"]
        for job in dict.fromkeys(g["query"]):
            rows = g[g["query"] == job]
            bottom.scatter(rows["t"], rows["wait_s"], s=8, label=job)
        urgent = g[g["pool"] == "urgent"]
        bottom.scatter(urgent["t"], urgent["wait_s"], s=30, facecolors="none", edgecolors="black", label="urgent pool")
        bottom.legend(fontsize=7, ncol=4)
    bottom.set_ylabel("wait at gate s")
    bottom.set_xlabel("time s")
    first = min([-2.0] + ([float(d["t"].min())] if not d.empty else []))
    bottom.set_xlim(first - 1, horizon_s + 5)  # decisions before the input starts (admission) stay in view
    fig.tight_layout()
    return Timeline(fig, top, marks)
