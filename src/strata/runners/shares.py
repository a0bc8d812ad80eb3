"""A cell's CPU share, enforced by the operating system (issue 28; docs/spark.md, "Cells' CPU shares").

SODA's decisions "are enforced by System S during the following epoch" (Wolf et al., §1.2), each PE in a PE
Execution Container that keeps it apart from the others (§2). Here a cell — one Spark application: its Python
driver, its JVM and the JVM's Python workers — is that container, and the cores L0 gives it are enforced by the
kernel's fair scheduler (CFS), through the first of these that this process can write (on a standalone cluster,
by the cluster's workers instead: :class:`ClusterCores`):

- ``cgroup-v1``: one group per cell, ``strata-<run>+cell-<cell>``, at the top of the ``cpu`` hierarchy,
  ``cpu.shares`` = :data:`V1_PER_CORE` per core (kernel range 2–262144);
- ``cgroup-v2``: the same in the unified hierarchy with ``cpu.weight`` = :data:`V2_PER_CORE` per core (range
  1–10000), ``+cpu`` written into the top's ``cgroup.subtree_control``;
- ``nice``: each cell's processes (every thread of each) reniced by its share relative to the largest
  (:func:`nice_levels`).

Weights, not quotas (``cpu.cfs_quota_us`` / ``cpu.max``): a weight only divides contended cores, so a cell whose
neighbours are idle still gets every core, as plain Spark would (DESIGN.md rule 8, do no harm).

The latency class sets the weight, not only the cores. A weight proportional to cores gives a cell its share of
the machine when every cell is busy at once; a latency-critical cell is idle most of the time and needs, for the
short batches it has, what it would get alone. With its share (e.g. 1.69 of 2 cores against a bulk cell's 0.31)
as the weight it got 84.5% of each contended core, and its batches ran 1.13–1.2× longer than alone whenever the
bulk cell was busy (issue 28: a bursty two-process load against four busy ones, 0.092 s against 0.081 s alone
at the median; the platform's alerts 1.21× its floor in a producer's burst). So a cell holding a critical job
weighs the kernel's maximum (critical cells among themselves in proportion to their cores) and every other cell
together at most 1/:data:`CRITICAL_DOMINANCE` of the lightest critical cell: contended, a critical cell keeps
≥ 99% of each core it runs on (same load: 0.081 s, as alone). The bulk cells lose only what the critical cells
use, the critical cells' mean cores, which L0 already counts against them; idle cores stay theirs.

Against the rest of the machine the bulk cells together weigh what the run's cores would as busy nice-0
processes (:data:`V1_PER_CORE` per core, as plain Spark's threads would), within that cap, whatever L0's shares
say: their shares only divide the bulk cells' weight among them. So the cells are siblings at the top of the
hierarchy, not children of one run group. Under one group, the kernel gives the group's weight to each core in
proportion to the weight running there (CFS group shares), and a bulk cell on a core beside a critical cell 1,400
times heavier got ~1/1,400 of the group's weight: less than one nice-19 process (weight 15). Measured on
``strata run examples/demo.yaml`` (28 Nov) with a nice-19 simulation beside it: the bulk cell ran 0.52 cores and
the simulation 0.76 (as siblings: 0.81 and 0.43); synthetic, one busy thread in a critical cell half the time,
two in a bulk cell, one nice-19 process: the bulk cell 0.39 cores nested against 0.97 as a sibling of weight
2048 (``docs/spark.md``, "Cells' CPU shares").

Orphans: :meth:`CpuShares.preexec` also gives the child ``PR_SET_PDEATHSIG`` = SIGKILL
(:mod:`strata.spark.orphans`), so a cell dies with the fleet process even when that is SIGKILLed; a cell's JVM
follows its Python driver (PySpark's gateway JVM exits when the driver's pipe to its stdin closes), and the
JVM's Python workers follow the JVM the same way. :meth:`CpuShares.close` SIGKILLs whatever is still in the
run's cells before removing the groups.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from pathlib import Path
from urllib.parse import quote

from strata.spark.orphans import parent_death_signal

V1, V2, NICE = "cgroup-v1", "cgroup-v2", "nice"
V1_PER_CORE, V1_MIN, V1_MAX = 1024, 2, 262144  # 1024 is the kernel's default cpu.shares: one nice-0 task's weight
V2_PER_CORE, V2_MIN, V2_MAX = 100, 1, 10000  # 100 is the kernel's default cpu.weight
NICE_STEP = 1.25  # CFS: each nice level weighs 1.25× less (sched_prio_to_weight: 0 → 1024, 5 → 335, 10 → 110)
MAX_NICE = 19
CLOSE_TIMEOUT_S = 10.0
# A critical cell outweighs every other cell together by this much: contended, it keeps ≥ 99% of a core it runs on.
CRITICAL_DOMINANCE = 100


def _scaled(shares: Mapping[str, float], scale: float, low: int, high: int) -> dict[str, int]:
    return {cell: max(low, min(high, round(cores * scale))) for cell, cores in shares.items()}


def cgroup_weights(
    shares: Mapping[str, float], per_core: int, low: int, high: int, critical: Collection[str] = ()
) -> dict[str, int]:
    """cell → its weight. Without ``critical`` cells: ``per_core`` × cores, rounded; if the largest would pass
    ``high`` every weight is scaled down alike (the proportions hold), and none is below ``low`` (a cell with no
    share still runs on idle cores).

    With ``critical`` cells (those holding a latency-critical job; module docstring): they weigh ``high`` × their
    cores / the largest critical cell's; the others together ``per_core`` × every cell's cores (what the run's
    cores weigh without critical cells), capped at the lightest critical weight / :data:`CRITICAL_DOMINANCE`,
    divided in proportion to their cores (none below ``low``). 1.69 critical and 0.31 bulk cores in v1: 262144
    and 2048 (128 : 1)."""
    crit = {cell: cores for cell, cores in shares.items() if cell in critical}
    rest = {cell: cores for cell, cores in shares.items() if cell not in critical}
    if not crit:
        top = max(shares.values(), default=0.0)
        return _scaled(shares, min(per_core, high / top) if top > 0 else per_core, low, high)
    top = max(crit.values())
    weights = _scaled(crit, high / top if top > 0 else 0.0, low, high)
    budget = min(per_core * sum(shares.values()), min(weights.values()) / CRITICAL_DOMINANCE)
    bulk = sum(rest.values())
    return weights | _scaled(rest, budget / bulk if bulk > 0 else per_core, low, high)


def nice_levels(shares: Mapping[str, float], critical: Collection[str] = ()) -> dict[str, int]:
    """cell → nice: the largest share at 0, each other ``round(log_1.25(largest / share))`` above it, at most 19.
    With ``critical`` cells, the largest share and the levels are theirs, and every other cell is at 19: the
    weight :data:`CRITICAL_DOMINANCE` asks for is 21 levels, past the range (nice 0 against 19: 1024 : 15 a
    thread).

    CFS weighs a nice-n thread 1024 / 1.25ⁿ, so two busy threads, one per cell, split a core in the ratio of their
    cells' shares: 1.5 against 0.5 cores gives nice 0 and 5, weights 1024 and 335, a 3.06 : 1 split. Nice is per
    thread, not per cell: a cell with more busy threads gets more than its share; cgroups have no such bias."""
    ranked = {cell: cores for cell, cores in shares.items() if cell in critical} or shares
    top = max(ranked.values(), default=0.0)

    def level(cores: float) -> int:
        return 0 if cores >= top else MAX_NICE if cores <= 0 else min(MAX_NICE, round(math.log(top / cores, NICE_STEP)))

    return {cell: level(cores) if cell in ranked else MAX_NICE for cell, cores in shares.items()}


def standalone_conf(cores: int, executor_cores: int | None = None) -> dict[str, str]:
    """A cell's share on a Spark standalone cluster: at most ``cores`` cores in all (``spark.cores.max``), in
    executors of ``executor_cores`` each (``spark.executor.cores``; None: unset, so each worker gives the
    application one executor with as many of its free cores as ``spark.cores.max`` still allows). Spark reads both
    when the application starts: changing a cell's share on a cluster means restarting it (a move)."""
    if isinstance(cores, bool) or not isinstance(cores, int) or cores < 1:
        raise ValueError(f"standalone_conf: cores must be a whole number ≥ 1, got {cores!r}")
    conf = {"spark.cores.max": str(cores)}
    if executor_cores is not None:
        if isinstance(executor_cores, bool) or not isinstance(executor_cores, int) or not 1 <= executor_cores <= cores:
            raise ValueError(f"standalone_conf: executor_cores must be in 1..{cores}, got {executor_cores!r}")
        if cores % executor_cores:
            raise ValueError(
                f"standalone_conf: cores {cores} is not a multiple of executor_cores {executor_cores}: "
                f"Spark would leave {cores % executor_cores} of them unused"
            )
        conf["spark.executor.cores"] = str(executor_cores)
    return conf


def whole_cores(shares: Mapping[str, float], cores: int) -> dict[str, int]:
    """cell → the whole cores it starts with on a standalone cluster of ``cores`` cores (the master grants whole
    cores): at least 1 each, ``cores`` in all, by the largest-remainder method (Hamilton's apportionment).

    Every cell gets 1 core first; the ``cores − cells`` left go by the shares above 1 core (cells whose share is
    under 1 core ask for none of them), scaled to what is left: each its whole part, then one more each in order
    of the largest fractional part (ties by name). With every share at least 1 this is the plain largest-remainder
    rounding of the shares scaled to ``cores``: 2.6, 1.3, 0.1 on 4 cores give 2, 1, 1 (plain rounding: 3, 1, 0).
    Raises :class:`ValueError` when there are more cells than cores: each needs a core of its own."""
    if isinstance(cores, bool) or not isinstance(cores, int) or cores < 1:
        raise ValueError(f"whole_cores: cores must be a whole number ≥ 1, got {cores!r}")
    for cell, share in shares.items():
        if not math.isfinite(share) or share < 0:
            raise ValueError(f"whole_cores: cell {cell!r} has {share!r} cores; expected a number ≥ 0")
    if len(shares) > cores:
        raise ValueError(
            f"whole_cores: {len(shares)} cells ({', '.join(sorted(shares))}) on a cluster of {cores} cores: each "
            f"cell is an application with at least 1 core; expected at most {cores} cells"
        )
    total = sum(shares.values())
    quota = {c: v * cores / total if total > 0 else cores / len(shares) for c, v in shares.items()}
    above = {c: max(0.0, q - 1.0) for c, q in quota.items()}
    left, weight = cores - len(shares), sum(above.values())
    extra = {c: a * left / weight if weight > 0 else left / len(shares) for c, a in above.items()}
    out = {c: 1 + math.floor(e) for c, e in extra.items()}
    rest = cores - sum(out.values())
    for cell in sorted(extra, key=lambda c: (-(extra[c] - math.floor(extra[c])), c))[:rest]:
        out[cell] += 1
    return out


def executor_cores(cores: int, worker_cores: int) -> int:
    """``spark.executor.cores`` for a cell of ``cores`` cores on workers of at least ``worker_cores`` each: the
    largest divisor of ``cores`` that fits one worker — every executor can be placed, ``spark.cores.max`` is a
    whole number of executors (no core left unused), and a cell runs as few executor JVMs as that allows
    (6 cores on 4-core workers: two executors of 3)."""
    return max(d for d in range(1, max(1, min(cores, worker_cores)) + 1) if cores % d == 0)


def cgroup_kind(where: Path) -> str | None:
    """Which cgroup hierarchy ``where`` is the root of, if it can carry cpu shares: v1 with the ``cpu`` controller
    (it has ``cpu.shares``), v2 with ``cpu`` among its ``cgroup.controllers``; else None."""
    if (where / "cpu.shares").is_file():
        return V1
    try:
        return V2 if "cpu" in (where / "cgroup.controllers").read_text().split() else None
    except OSError:
        return None


def cgroup_mounts(mounts: str) -> list[Path]:
    """The mount points of cgroup hierarchies in ``/proc/self/mounts`` text that may carry the ``cpu``
    controller: v1 ones mounted with it first, then v2 (in a hybrid setup ``cpu`` is on v1, never on both)."""
    v1, v2 = [], []
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[2] == "cgroup" and "cpu" in fields[3].split(","):
            v1.append(Path(fields[1]))
        elif len(fields) >= 4 and fields[2] == "cgroup2":
            v2.append(Path(fields[1]))
    return v1 + v2


def process_stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (so index 0 is field 3, the state), or None
    when there is no such process."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return text[text.rindex(")") + 2 :].split()


def started(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot): with the pid, it names one process even after the
    pid is reused."""
    fields = process_stat(pid)
    return fields[19] if fields is not None else None


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie has ended: it only waits for its parent to read its status)."""
    fields = process_stat(pid)
    return fields is not None and fields[0] != "Z"


def descendants(pids: set[int]) -> set[int]:
    """``pids`` and every living process below them."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        fields = process_stat(int(entry)) if entry.isdigit() else None
        if fields is not None:
            children.setdefault(int(fields[1]), []).append(int(entry))
    found, todo = set(pids), list(pids)
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def renice(pid: int, nice: int) -> bool:
    """Set every thread of process ``pid`` to ``nice`` (Linux's nice is per thread: renicing the pid alone
    would leave a running JVM's threads where they were); threads and processes that ended meanwhile are skipped.
    False if the kernel refused (lowering a nice needs CAP_SYS_NICE)."""
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return True
    for tid in threads:
        try:
            os.setpriority(os.PRIO_PROCESS, int(tid), nice)
        except ProcessLookupError:
            pass
        except PermissionError:
            return False
    return True


def dir_name(prefix: str, name: str) -> str:
    """A directory name for a run or cell name: percent-encoded, so any name is one path component and two names
    never meet, and prefixed, so it never collides with a control file (``tasks``, ``cpu.shares``)."""
    return prefix + quote(name, safe="")


class CpuShares:
    """The CPU shares of one fleet run's cells (issue 28, Deliver 1). ``backend``: ``"cgroup-v1"``,
    ``"cgroup-v2"`` or ``"nice"``: the first that works, found by creating (and removing) a group in each cgroup
    hierarchy carrying ``cpu`` (``root``: only that directory, for tests on a fake cgroup tree).

    A cell's group (``home`` / :meth:`entry`) is made the first time the cell is named. Before any :meth:`set`, a
    cell weighs one core (``nice`` 0). Spawn cells with ``preexec_fn=shares.preexec(cell)``; :meth:`close` when
    the run ends (also as a context manager)."""

    def __init__(self, run: str, root: Path | None = None):
        self.run = run
        candidates = [Path(root)] if root is not None else cgroup_mounts(Path("/proc/self/mounts").read_text())
        self.backend, self.home = NICE, Path()
        for where in candidates:
            kind = cgroup_kind(where)
            if kind is not None and self._create(kind, where):
                break
        if self.backend == NICE:
            # the nice backend's "groups" are pid files, one per cell ("pid start-time" lines), in a directory
            self.home = Path(tempfile.mkdtemp(prefix=dir_name("strata-", run) + "-"))
        self._nice: dict[str, int] = {}
        self._closed = False
        self.unenforced: set[str] = set()
        """Cells whose last share could not be applied (``nice`` without CAP_SYS_NICE: a nice only goes up)."""

    @property
    def prefix(self) -> str:
        """What the name of each of this run's cell groups in ``home`` starts with: ``strata-<run>+`` in a cgroup
        hierarchy (``+`` is percent-encoded in any run name, so it ends the run's part), nothing in the nice
        backend's directory of its own."""
        return "" if self.backend == NICE else dir_name("strata-", self.run) + "+"

    def entry(self, cell: str) -> Path:
        """Where ``cell``'s group is (made or not)."""
        return self.home / (self.prefix + dir_name("cell-", cell))

    def _create(self, kind: str, where: Path) -> bool:
        probe = where / (dir_name("strata-", self.run) + "+probe")  # a cell's name starts with cell-: never this
        try:
            if kind == V2:
                (where / "cgroup.subtree_control").write_text("+cpu")
            probe.mkdir(exist_ok=True)
            probe.rmdir()
        except OSError:
            return False
        self.backend, self.home = kind, where
        return True

    def __enter__(self) -> CpuShares:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def cell_path(self, cell: str) -> Path:
        """The cell's cgroup directory (its pid file with the ``nice`` backend), made if it is not there yet."""
        if self._closed:
            raise RuntimeError(f"the CPU shares of run {self.run!r} are closed")
        path = self.entry(cell)
        if self.backend == NICE:
            path.touch()
        else:
            path.mkdir(exist_ok=True)
        return path

    def preexec(self, cell: str) -> Callable[[], None]:
        """For ``subprocess.Popen(preexec_fn=...)``, called in the process that spawns, just before: the child
        joins ``cell`` (its cgroup, or the cell's nice and pid file) and gets ``PR_SET_PDEATHSIG`` = SIGKILL, so it
        never outlives this process — more exactly, the thread calling Popen: spawn cells from the main thread."""
        path = self.cell_path(cell)
        die_with_parent = parent_death_signal()
        if self.backend == NICE:
            nice = self._nice.get(cell, 0)

            def enter() -> None:
                os.setpriority(os.PRIO_PROCESS, 0, nice)
                with open(path, "a") as pids:
                    pids.write(f"{os.getpid()} {started(os.getpid())}\n")
                die_with_parent()

        else:
            procs = str(path / "cgroup.procs")

            def enter() -> None:
                with open(procs, "w") as group:
                    group.write(str(os.getpid()))
                die_with_parent()

        return enter

    def join(self, cell: str, pid: int) -> None:
        """Move running process ``pid`` into ``cell``: its future children follow it; its present ones (and,
        with cgroups, their threads) stay where they are, except with ``nice``, where its whole tree is reniced."""
        path = self.cell_path(cell)
        if self.backend == NICE:
            start = started(pid)
            if start is None:
                raise ProcessLookupError(f"no process {pid} to join cell {cell!r}")
            with open(path, "a") as pids:
                pids.write(f"{pid} {start}\n")
            if not all([renice(member, self._nice.get(cell, 0)) for member in descendants({pid})]):
                self.unenforced.add(cell)
        else:
            (path / "cgroup.procs").write_text(str(pid))

    def set(self, shares: Mapping[str, float], critical: Collection[str] = ()) -> None:
        """Give each cell its cores: cgroup weights proportional to them (:func:`cgroup_weights`: the cells
        together weigh the total, as that many busy nice-0 processes would against the rest of the machine), or
        nice levels by each cell's share relative to the largest (:func:`nice_levels`); the ``critical`` cells
        (holding a latency-critical job) outweigh the others (module docstring). Cells not named keep theirs."""
        for cell, cores in shares.items():
            if not math.isfinite(cores) or cores < 0:
                raise ValueError(f"CpuShares.set: cell {cell!r} has {cores!r} cores; expected a number ≥ 0")
        if not shares:
            return
        if self.backend == NICE:
            self._nice.update(nice_levels(shares, critical))
            for cell in shares:
                if all([renice(member, self._nice[cell]) for member in self.members(cell)]):
                    self.unenforced.discard(cell)
                else:
                    self.unenforced.add(cell)
            return
        knob, per_core, low, high = (
            ("cpu.shares", V1_PER_CORE, V1_MIN, V1_MAX)
            if self.backend == V1
            else ("cpu.weight", V2_PER_CORE, V2_MIN, V2_MAX)
        )
        for cell, weight in cgroup_weights(shares, per_core, low, high, critical).items():
            (self.cell_path(cell) / knob).write_text(str(weight))

    def held(self, shares: Mapping[str, float]) -> dict[str, float]:
        """The cores each cell of ``shares`` holds: its share (the kernel applies a change at once)."""
        return dict(shares)

    def members(self, cell: str) -> set[int]:
        """The processes in ``cell`` now: its cgroup's, or (``nice``) those that joined it and still run, with
        every process below them."""
        return self._members(self.entry(cell))

    def _members(self, path: Path) -> set[int]:
        try:
            text = (path / "cgroup.procs").read_text() if self.backend != NICE else path.read_text()
        except FileNotFoundError:
            return set()
        if self.backend != NICE:
            return {int(pid) for pid in text.split()}
        joined = {int(pid) for pid, start in (line.split() for line in text.splitlines()) if started(int(pid)) == start}
        return descendants(joined)

    def _cells(self) -> Iterator[Path]:
        if self.home.is_dir():
            mine = self.prefix + "cell-"
            yield from (path for path in self.home.iterdir() if path.name.startswith(mine))

    def close(self) -> None:
        """End the run's cells and remove their groups: every process still in one is SIGKILLed first — a cell
        left running would be the orphan the fleet must never leave, and moving it to the parent group would
        leave it running with no share at all. Call it after stopping the cells cleanly. Idempotent."""
        if self._closed:
            return
        deadline = time.monotonic() + CLOSE_TIMEOUT_S
        for path in list(self._cells()):
            while members := {pid for pid in self._members(path) if alive(pid)}:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"cell {path} still holds processes {sorted(members)} after SIGKILL")
                for pid in members:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                time.sleep(0.02)
            if self.backend != NICE:
                path.rmdir()
        if self.backend == NICE:
            shutil.rmtree(self.home, ignore_errors=True)
        self._closed = True


STANDALONE = "standalone"


class ClusterCores:
    """The cores of one fleet run's cells on a Spark standalone cluster of ``cores`` cores whose workers have at
    least ``worker_cores`` each (issue 28, Deliver 4): what :class:`CpuShares` is on one machine, with the
    cluster's workers enforcing instead of the kernel.

    A cell is an application whose executors run on the workers, so its share is the whole cores the master
    grants it: the first :meth:`set` (the first plan's shares) fixes each cell's (:func:`whole_cores`), and
    :meth:`conf` is what its application starts with (:func:`standalone_conf`). Spark reads those settings once,
    when the application registers: a later share is recorded, not applied — a cell whose whole cores it would
    change is listed in :attr:`unenforced` (only a restart of that cell, a move of its jobs, would apply it).
    A cell started after the first plan asks for its share rounded (at least 1 core) and gets what the cluster
    has free. The cells' drivers run on this machine outside any cgroup; they still die with the fleet
    (:meth:`preexec`)."""

    backend = STANDALONE

    def __init__(self, cores: int, worker_cores: int) -> None:
        self.cores = cores
        self.worker_cores = worker_cores
        self.granted: dict[str, int] = {}
        """cell → the cores its application started with."""
        self.unenforced: set[str] = set()
        """Cells whose latest share differs from the cores they started with."""

    def set(self, shares: Mapping[str, float], critical: Collection[str] = ()) -> None:
        """The first call fixes every named cell's cores; later ones only mark what they would change. The
        ``critical`` cells change nothing here: a worker grants whole cores, no weight."""
        wanted = whole_cores(shares, self.cores)
        if not self.granted:
            self.granted = dict(wanted)
        self.unenforced = {c for c, n in wanted.items() if c in self.granted and self.granted[c] != n}

    def held(self, shares: Mapping[str, float]) -> dict[str, float]:
        """The cores each cell of ``shares`` holds: those it started with (its share, if it has not started)."""
        return {c: float(self.granted.get(c, v)) for c, v in shares.items()}

    def conf(self, cell: str, share: float) -> dict[str, str]:
        """The Spark settings ``cell``'s application starts with: its granted cores, or (a cell the first plan did
        not name) ``share`` rounded, at least 1 and at most the cluster's."""
        cores = self.granted.setdefault(cell, max(1, min(self.cores, round(share))))
        return standalone_conf(cores, executor_cores(cores, self.worker_cores))

    def preexec(self, cell: str) -> Callable[[], None]:
        """For ``subprocess.Popen(preexec_fn=...)``: the cell's driver dies with this process (its executors die
        with their driver: the worker kills an application's executors when it ends)."""
        return parent_death_signal()

    def close(self) -> None:
        """Nothing to remove: no group was made."""
