"""The checkpoint guard: a changed query never reuses an incompatible checkpoint (nor mixes two sinks' outputs).

Every query segment's run directory (``<run>/jobs/<job>/<index>-<template>``)
records ``fingerprint.json``: what determines the segment's results — its
template's operators (kinds, predicates, expressions, windows, aggregates,
joins, keys; not the planner's priors such as cost per record or cpu bounds),
its streams, its source, its sink and its state layout — and the row it
started from. A restart reuses a segment's checkpoint only if the fingerprint
of the same template is unchanged; otherwise it is refused, naming the job and
what changed, unless that job is started afresh (its old directory set aside,
never mixed). A Python template's fingerprint adds its function's source
(:func:`code_fingerprint`). :func:`last_commit` reads where a segment's query stopped from
its Spark checkpoint (the last committed batch's source offset).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from strata.model import Job, Template
from strata.model.callables import source_text
from strata.model.user import PythonJob

# Fields of an operator that only inform the planner: changing them changes no record a query writes.
PLANNING_ONLY = frozenset(
    {"cost_per_record", "selectivity", "cpu_min", "cpu_max", "resource", "constraints", "memory", "state_bytes"}
)


class CheckpointChanged(ValueError):
    """A restart would reuse a checkpoint written by a different query."""

    def __init__(self, changes: dict[str, list[str]]):
        self.changes = changes
        lines = [f"{job}: {'; '.join(what)}" for job, what in changes.items()]
        super().__init__(
            "the run directory holds checkpoints of a different query for "
            + ", ".join(changes)
            + " ("
            + " | ".join(lines)
            + ")"
        )


def fingerprint(job: Job, template: Template, sink: str, state: dict) -> dict:
    """What determines a segment's results, as plain JSON data."""
    operators = [
        {k: v for k, v in op.model_dump(mode="json", exclude_none=True).items() if k not in PLANNING_ONLY}
        for op in template.operators
    ]
    streams = [{"from": st.src, "to": st.dst} for st in sorted(template.streams, key=lambda st: (st.src, st.dst))]
    return {"job": job.id, "template": template.name, "operators": operators, "streams": streams, "sink": sink, **state}


def differences(old: object, new: object, path: str = "") -> list[str]:
    """Human-readable paths where two fingerprints differ (``operators[1].predicate: 'a' → 'b'``)."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for key in sorted(set(old) | set(new), key=str):
            here = f"{path}.{key}" if path else str(key)
            if key not in old:
                out.append(f"{here}: added ({new[key]!r})")
            elif key not in new:
                out.append(f"{here}: removed (was {old[key]!r})")
            else:
                out += differences(old[key], new[key], here)
        return out
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [d for i, (a, b) in enumerate(zip(old, new, strict=True)) for d in differences(a, b, f"{path}[{i}]")]
    return [] if old == new else [f"{path}: {old!r} → {new!r}"]


@dataclass(frozen=True)
class Existing:
    """A segment directory an earlier run left: its index, template, fingerprint and where its query stopped."""

    index: int
    template: str
    path: Path
    fingerprint: dict | None
    start_row: int
    committed_batch: int | None
    end_row: int | None


def segments(job_dir: Path) -> list[Existing]:
    """The job's segment directories, oldest first (``<index>-<template>``)."""
    found = []
    for d in job_dir.iterdir() if job_dir.is_dir() else ():
        index, _, template = d.name.partition("-")
        if not d.is_dir() or not index.isdigit() or not template:
            continue
        meta = d / "fingerprint.json"
        data = json.loads(meta.read_text()) if meta.exists() else None
        batch, row = last_commit(d / "checkpoints")
        start = int(data["start_row"]) if data else 0
        found.append(Existing(int(index), template, d, data and data["fingerprint"], start, batch, row))
    return sorted(found, key=lambda e: e.index)


def last_commit(checkpoints: Path) -> tuple[int | None, int | None]:
    """(batch id, end row) of the last committed batch of the (one) query checkpointed under ``checkpoints``."""
    for query in sorted(checkpoints.iterdir()) if checkpoints.is_dir() else ():
        commits = [int(p.name) for p in (query / "commits").glob("[0-9]*")]
        if not commits:
            continue
        batch = max(commits)
        offsets = query / "offsets" / str(batch)
        row = None
        if offsets.exists():
            for line in offsets.read_text().splitlines()[2:]:
                try:
                    value = json.loads(line)
                except ValueError:
                    continue
                if isinstance(value, dict) and "row" in value:
                    row = int(value["row"])
        return batch, row
    return None, None


def clear_unplanned(query: Path) -> list[str]:
    """Remove what a query killed before it logged its first batch left in its checkpoint; returns the names.

    Spark writes each log entry to a temporary file and renames it into place, so a SIGKILL between the two
    leaves the temporary file. A query whose offset log holds no batch starts from batch 0, and Spark then
    refuses any file in its offset, commit or state logs (``STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY``). With
    no batch logged nothing was read or written, so those leftovers hold nothing; a checkpoint with a logged
    batch is left as it is.
    """
    offsets = query / "offsets"
    if not offsets.is_dir() or any(p.name.isdigit() for p in offsets.iterdir()):
        return []
    removed = []
    for log in ("offsets", "commits", "state"):
        for p in sorted((query / log).iterdir()) if (query / log).is_dir() else ():
            if p.is_dir():
                shutil.rmtree(p)
            else:
                p.unlink()
            removed.append(f"{log}/{p.name}")
    return removed


def record(segment_dir: Path, print_: dict, start_row: int) -> None:
    """Write the segment's fingerprint and start row (before its query starts)."""
    segment_dir.mkdir(parents=True, exist_ok=True)
    (segment_dir / "fingerprint.json").write_text(json.dumps({"fingerprint": print_, "start_row": start_row}, indent=1))


def set_aside(job_dir: Path) -> Path:
    """Move a job's directory out of the way (kept, never mixed); returns where it went."""
    n = 1
    while (target := job_dir.with_name(f"{job_dir.name}.old-{n}")).exists():
        n += 1
    job_dir.rename(target)
    return target


def code_fingerprint(declared: PythonJob, template: str) -> dict:
    """What determines a Python template's results: its function's source text (a hash: a changed function is a
    changed query; code it calls in other functions is not seen), the sink and the event-time column."""
    text = source_text(declared.templates[template])  # a partial's or a bound method's function
    sink = declared.sink
    return {
        "code": hashlib.sha256(text.encode()).hexdigest()[:16],
        "output": {"sink": sink.kind, "path": sink.path, "table": sink.table, "mode": sink.output_mode},
        "event_time": declared.event_time,
    }
