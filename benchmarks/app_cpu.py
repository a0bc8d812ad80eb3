"""The CPU each Spark application of a benchmark uses, per process role (issue 28: a critical cell's appetite).

A sampler thread in the benchmark's process follows every process below it. Each is assigned to an application
by ``rule(cmdline)`` (the nearest ancestor the rule names wins: a JVM, its Python workers and its short-lived
children belong to the application that started them) and, where the machine has cgroup v1's ``cpuacct``
hierarchy mounted on its own (as here: the ``cpu`` controller's groups, which Strata's cells use, are another
hierarchy and stay untouched), moved into a ``cpuacct`` group per application, so ``cpuacct.usage`` counts
everything it runs, the ``chmod``/``readlink`` processes Hadoop's local file system forks per checkpoint write
included. Without it an application's CPU is the sum over its live processes (``utime + stime`` from ``/proc``),
which misses those short-lived children. Per role (JVM, Python driver, Python workers) the figures are always the
live processes'.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
import time
from bisect import bisect_left
from collections.abc import Callable, Sequence
from pathlib import Path

import pandas as pd
from rich.table import Table

from strata.spark.accounting import PYSPARK_DAEMON, PYSPARK_WORKER
from strata.spark.session import STRATA_DAEMON

TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")
ACCT = Path("/sys/fs/cgroup/cpuacct")
STOP_WAIT_S = 10.0  # how long stop waits for the groups to empty (one still holding a process stays)
WALK_S = 0.5  # how often new processes are looked for (a JVM's forks live milliseconds: cpuacct counts them)


def _stat(pid: int | str) -> tuple[str, int, int, str] | None:
    """(command name, parent pid, utime + stime in ticks, start time) of a process, or None if it has ended."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return text[text.index("(") + 1 : text.rindex(")")], int(fields[1]), int(fields[11]) + int(fields[12]), fields[19]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def role_of(name: str, cmdline: str) -> str:
    """A process's role in its application: ``jvm``, ``workers`` (the worker daemon, PySpark's or Strata's on a
    local master, and the workers it forks) or ``driver`` (the Python process that started the application, and
    anything else)."""
    if name == "java":
        return "jvm"
    if any(module in cmdline for module in (PYSPARK_DAEMON, STRATA_DAEMON, PYSPARK_WORKER)):
        return "workers"
    return "driver"


def _accounting_root() -> Path | None:
    """Where per-application cpuacct groups can be made: a v1 ``cpuacct`` hierarchy without ``cpu`` (moving a
    process there changes no CPU share), writable; else None."""
    try:
        mounts = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return None
    for line in mounts:
        fields = line.split()
        if len(fields) >= 4 and fields[2] == "cgroup":
            options = fields[3].split(",")
            if "cpuacct" in options and "cpu" not in options and os.access(fields[1], os.W_OK):
                return Path(fields[1])
    return None


class AppCpu:
    """Samples, every ``interval_s``, the CPU of every application below process ``root`` (see the module)."""

    def __init__(self, rule: Callable[[str], str | None], root: int | None = None, interval_s: float = 0.2) -> None:
        self.rule = rule
        self.root = root if root is not None else os.getpid()
        self.interval_s = interval_s
        acct = _accounting_root()
        self.group = acct / f"bench-app-cpu-{self.root}" if acct is not None else None
        self.times: list[float] = []
        self.usage: dict[str, list[tuple[float, float]]] = {}  # app → (time, core-seconds so far) from cpuacct
        self.processes: dict[str, list[tuple[float, float]]] = {}  # "pid:start" → (time, core-seconds so far)
        self.owner: dict[str, tuple[str | None, str]] = {}  # "pid:start" → (application, role)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="app-cpu", daemon=True)

    def start(self) -> AppCpu:
        if self.group is not None:
            self.group.mkdir(exist_ok=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        deadline = time.time() + STOP_WAIT_S  # an application's last processes may still be exiting
        while self.group is not None and self.group.is_dir() and time.time() < deadline:
            for path in [*self.group.iterdir(), self.group]:
                if path.is_dir():
                    with contextlib.suppress(OSError):
                        path.rmdir()
            time.sleep(0.2)

    # ------------------------------------------------------------------ sampling

    def _walk(self, known: dict[int, str]) -> None:
        children: dict[int, list[int]] = {}
        for entry in os.listdir("/proc"):
            stat = _stat(entry) if entry.isdigit() else None
            if stat is not None:
                children.setdefault(stat[1], []).append(int(entry))
        todo: list[tuple[int, str | None]] = [(self.root, None)]
        while todo:
            parent, app = todo.pop()
            for pid in children.get(parent, ()):
                stat = _stat(pid)
                if stat is None:
                    continue
                key = f"{pid}:{stat[3]}"
                cmdline = _cmdline(pid)
                # named once for good; a process not named yet is asked again: seen between its fork and its exec
                # (spark-submit's script before it execs the JVM), its command line did not say what it would be
                known_app = self.owner[key][0] if key in self.owner else None
                mine = known_app or self.rule(cmdline) or app
                self.owner[key] = (mine, role_of(stat[0], cmdline))  # again: a role changes with an exec
                known[pid] = key
                if mine is not None and self.group is not None:
                    self._account(pid, mine)
                todo.append((pid, mine))

    def _account(self, pid: int, app: str) -> None:
        group = self.group / app
        try:
            lines = [line.split(":", 2) for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines()]
            if f"/{self.group.name}/{app}" not in {path for _, names, path in lines if "cpuacct" in names.split(",")}:
                group.mkdir(exist_ok=True)
                (group / "cgroup.procs").write_text(str(pid))
        except (OSError, ValueError):  # ended meanwhile
            pass

    def _run(self) -> None:
        known: dict[int, str] = {}
        walked = 0.0
        while not self._stop.is_set():
            now = time.time()
            if now - walked >= WALK_S:
                self._walk(known)
                walked = now
            self.times.append(now)
            for pid, key in list(known.items()):
                stat = _stat(pid)
                if stat is None or f"{pid}:{stat[3]}" != key:
                    del known[pid]
                    continue
                self.processes.setdefault(key, []).append((now, stat[2] * TICK_S))
            if self.group is not None:
                for group in self.group.iterdir():
                    if group.is_dir():
                        with contextlib.suppress(OSError, ValueError):
                            used = int((group / "cpuacct.usage").read_text()) / 1e9
                            self.usage.setdefault(group.name, []).append((now, used))
            self._stop.wait(max(0.0, self.interval_s - (time.time() - now)))

    # ------------------------------------------------------------------ figures

    def apps(self) -> list[str]:
        return sorted({app for app, _ in self.owner.values() if app is not None})

    def core_s(self, app: str, start: float, end: float) -> float:
        """Core-seconds ``app`` used from ``start`` to ``end`` (cpuacct, else its live processes)."""
        if app in self.usage:
            return between(self.usage[app], start, end)
        return sum(self.roles(app, start, end).values())

    def roles(self, app: str, start: float, end: float) -> dict[str, float]:
        """Core-seconds of ``app``'s live processes from ``start`` to ``end``, per role."""
        out = {"driver": 0.0, "jvm": 0.0, "workers": 0.0}
        for key, series in self.processes.items():
            owner, role = self.owner[key]
            if owner == app:
                out[role] += between(series, start, end)
        return out

    def split(self, app: str, start: float, end: float, batches: Sequence[tuple[float, float]]) -> dict[str, float]:
        """``app``'s core-seconds from ``start`` to ``end`` inside ``batches`` ((started, finished) wall times) and
        between them, and the seconds of each, sample interval by sample interval (cpuacct, else live processes)."""
        series = self.usage.get(app) or _summed([s for k, s in self.processes.items() if self.owner[k][0] == app])
        out = {"in_batch_core_s": 0.0, "in_batch_s": 0.0, "between_core_s": 0.0, "between_s": 0.0}
        for (t0, v0), (t1, v1) in itertools.pairwise(series):
            lo, hi = max(t0, start), min(t1, end)
            if hi <= lo:
                continue
            used = (v1 - v0) * (hi - lo) / (t1 - t0)
            cover = min(1.0, sum(max(0.0, min(hi, f) - max(lo, s)) for s, f in batches) / (hi - lo))
            out["in_batch_core_s"] += used * cover
            out["between_core_s"] += used * (1 - cover)
            out["in_batch_s"] += (hi - lo) * cover
            out["between_s"] += (hi - lo) * (1 - cover)
        return out


def at(series: Sequence[tuple[float, float]], t: float) -> float:
    """A cumulative counter's value at ``t``, linear between samples (its first value before, its last after)."""
    if not series:
        return 0.0
    i = bisect_left(series, (t, float("-inf")))
    if i == 0:
        return series[0][1]
    if i == len(series):
        return series[-1][1]
    (t0, v0), (t1, v1) = series[i - 1], series[i]
    return v0 + (v1 - v0) * (t - t0) / (t1 - t0) if t1 > t0 else v1


def between(series: Sequence[tuple[float, float]], start: float, end: float) -> float:
    """How much a cumulative counter grew from ``start`` to ``end``; a process born after ``start`` counts from 0
    (its first sample is its CPU since it started, which the window holds)."""
    if not series:
        return 0.0
    first = 0.0 if series[0][0] > start else at(series, start)
    return max(0.0, at(series, end) - first) if series[0][0] <= end else 0.0


def _summed(parts: list[list[tuple[float, float]]]) -> list[tuple[float, float]]:
    """The sum of cumulative counters sampled at shared times (each carried at its last value once it ends)."""
    times = sorted({t for s in parts for t, _ in s})
    return [(t, sum(at(s, t) if s[0][0] <= t else 0.0 for s in parts)) for t in times]


def demo_application(cmdline: str) -> str | None:
    """The application a process of ``strata demo`` belongs to, for :class:`app_cpu.AppCpu`: a cell
    (``strata.runners.cell OUT/<mode>/cells/<cell>/cell.spec``: ``<mode>.<cell>``), the JVM of the fleet's host
    cell (its work directory ``OUT/strata/spark``: ``strata.host``) or the demo's session (``OUT/spark``:
    ``session``); their Python workers belong to the JVM that forked them."""
    words = cmdline.split()
    if "strata.runners.cell" in words:
        spec = Path(words[words.index("strata.runners.cell") + 1])
        return f"{spec.parents[2].name}.{spec.parent.name}"
    work = next((Path(w.split("=", 1)[1]) for w in words if w.startswith("-Dderby.system.home=")), None)
    if work is None or "cells" in work.parts:  # a cell's JVM: its cell process named it
        return None
    return "strata.host" if work.parent.name == "strata" else "session"


class OwnCpu:
    """This process's core-seconds (every thread: os.times), sampled every ``interval_s``."""

    def __init__(self, interval_s: float = 0.2) -> None:
        self.series: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(interval_s,), name="own-cpu", daemon=True)
        self._thread.start()

    def _run(self, interval_s: float) -> None:
        while not self._stop.is_set():
            used = os.times()
            self.series.append((time.time(), used.user + used.system))
            self._stop.wait(interval_s)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def cpu_rows(batches: pd.DataFrame, modes: Sequence[str], duration: float, cpu: AppCpu, own: OwnCpu) -> list[dict]:
    """Per mode (in ``modes``, with batches in ``batches``: a run's ``batches.csv``), the core-seconds each
    application used over its measured window (its sources' epoch, from its batches, to ``duration`` after), and
    this process's (``driver``)."""
    rows = []
    for mode in modes:
        mine = batches[batches["mode"] == mode]
        if mine.empty:
            continue
        epoch = float((mine["started"] - mine["t_started"]).median())
        end = epoch + duration
        used = {app: cpu.core_s(app, epoch, end) for app in cpu.apps()}
        used["driver"] = between(own.series, epoch, end)
        for app, core_s in sorted(used.items()):
            if core_s > 0.05:
                roles = {f"{r}_s": v for r, v in cpu.roles(app, epoch, end).items()} if app != "driver" else {}
                rows.append({"mode": mode, "app": app, "core_s": core_s, "cores": core_s / duration, **roles})
    return rows


def cpu_table(rows: list[dict], duration: float) -> Table:
    """Every seed's ``cpu`` rows (:func:`cpu_rows`) as one table."""
    table = Table(title=f"CPU per application over each mode's {duration:g} s (core-seconds; app_cpu)")
    for col in ("seed", "mode", "application", "core-s", "cores", "JVM / Python driver / workers core-s"):
        table.add_column(col, justify="right")
    for r in rows:
        for c in r.get("cpu", []):
            roles = " / ".join(f"{c[k]:.1f}" for k in ("jvm_s", "driver_s", "workers_s")) if "jvm_s" in c else "—"
            table.add_row(str(r["seed"]), c["mode"], c["app"], f"{c['core_s']:.1f}", f"{c['cores']:.2f}", roles)
    return table
