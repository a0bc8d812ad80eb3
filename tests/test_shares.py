"""Cells' CPU shares (issue 28): the weight and nice mappings, the cgroup v1/v2 file protocol on fake cgroup trees,
the real cgroup v1 hierarchy of this machine (skipped where it is not writable), the kernel enforcing a 3:1 split,
and a cell dying with its parent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from strata.runners.shares import (
    NICE,
    STANDALONE,
    V1,
    V2,
    ClusterCores,
    CpuShares,
    alive,
    cgroup_mounts,
    cgroup_weights,
    executor_cores,
    nice_levels,
    process_stat,
    standalone_conf,
    whole_cores,
)

REAL_V1 = Path("/sys/fs/cgroup/cpu")
SRC = Path(__file__).resolve().parents[1] / "src"


def nice_of(pid: int) -> int:
    return int(process_stat(pid)[16])


def fake_v1(root: Path) -> Path:
    (root / "cpu.shares").write_text("1024\n")
    return root


def fake_v2(root: Path) -> Path:
    (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (root / "cgroup.subtree_control").write_text("")
    return root


def sleeper(preexec) -> subprocess.Popen:
    return subprocess.Popen(["sleep", "30"], preexec_fn=preexec)


def wait_gone(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.02)
    return False


def test_cgroup_weights_are_per_core_and_keep_proportions_at_the_kernel_limits():
    shares = {"c0": 1.5, "c1": 0.5}
    assert cgroup_weights(shares, 1024, 2, 262144) == {"c0": 1536, "c1": 512}
    assert cgroup_weights(shares, 100, 1, 10000) == {"c0": 150, "c1": 50}
    # 300 cores would pass v1's 262144: both scale by 262144/300, so the 3:1 ratio holds
    assert cgroup_weights({"a": 300.0, "b": 100.0}, 1024, 2, 262144) == {"a": 262144, "b": 87381}
    assert cgroup_weights({"a": 2.0, "idle": 0.0}, 100, 1, 10000) == {"a": 200, "idle": 1}


def test_critical_cells_weigh_the_kernel_maximum_and_the_others_the_runs_cores_up_to_a_hundredth_of_it():
    # the platform's plan: 1.69 critical cores, 0.31 bulk; by cores 1731 : 317 (84.5% of a contended core). The
    # bulk cell weighs the run's 2 cores (2048, as two busy nice-0 processes), under 262144 / 100: 128 : 1
    shares = {"crit": 1.69, "bulk": 0.31}
    assert cgroup_weights(shares, 1024, 2, 262144, {"crit"}) == {"crit": 262144, "bulk": 2048}
    # v2: 2 cores weigh 200, over 10000 / 100: capped at 100 (one nice-0 process), 100 : 1
    assert cgroup_weights(shares, 100, 1, 10000, {"crit"}) == {"crit": 10000, "bulk": 100}
    # v2 on a bigger machine: 48 cores would weigh 4800; capped at 10000 / 100 = 100 in all, 3 : 1 kept
    assert cgroup_weights({"c": 8.0, "b1": 30.0, "b2": 10.0}, 100, 1, 10000, {"c"}) == {"c": 10000, "b1": 75, "b2": 25}
    # two critical cells in proportion (2 : 1); the lighter one (131072) caps the bulk at 1310.72 (4 cores: 4096)
    two = cgroup_weights({"c1": 2.0, "c2": 1.0, "b": 1.0}, 1024, 2, 262144, {"c1", "c2"})
    assert two == {"c1": 262144, "c2": 131072, "b": 1311}
    # the bulk cells' sum capped at 32768 / 100 = 327.68: 2.5 and 0.5 cores scale by 109.2 to 273 and 55
    capped = cgroup_weights({"c1": 4.0, "c2": 0.5, "b1": 2.5, "b2": 0.5}, 1024, 2, 262144, {"c1", "c2"})
    assert capped == {"c1": 262144, "c2": 32768, "b1": 273, "b2": 55}
    # the bulk's weight is the run's, divided by their shares: 0.1 and 0.3 of 2 cores give 512 and 1536
    small = cgroup_weights({"c": 1.6, "b1": 0.1, "b2": 0.3}, 1024, 2, 262144, {"c"})
    assert small == {"c": 262144, "b1": 512, "b2": 1536}
    assert cgroup_weights({"c": 1.0, "idle": 0.0}, 1024, 2, 262144, {"c"}) == {"c": 262144, "idle": 2}
    assert cgroup_weights({"c": 2.0}, 1024, 2, 262144, {"c"}) == {"c": 262144}
    # a critical cell named but absent changes nothing
    assert cgroup_weights({"c0": 1.5, "c1": 0.5}, 1024, 2, 262144, {"gone"}) == {"c0": 1536, "c1": 512}


def test_nice_levels_follow_cfs_weights_1_25_per_step():
    assert nice_levels({"crit": 1.5, "bulk": 0.5}) == {"crit": 0, "bulk": 5}  # log_1.25(3) = 4.92
    assert nice_levels({"a": 1.0, "b": 1.0}) == {"a": 0, "b": 0}
    assert nice_levels({"a": 1.0, "b": 0.25}) == {"a": 0, "b": 6}  # log_1.25(4) = 6.21
    assert nice_levels({"a": 100.0, "b": 1.0, "c": 0.0}) == {"a": 0, "b": 19, "c": 19}
    # with critical cells: the levels are theirs (log_1.25(2) = 3.1), every other cell at 19, even a larger one
    assert nice_levels({"c1": 1.0, "c2": 0.5, "bulk": 1.5}, {"c1", "c2"}) == {"c1": 0, "c2": 3, "bulk": 19}


def test_standalone_conf_gives_the_cells_cores_and_refuses_what_spark_would_waste():
    assert standalone_conf(1) == {"spark.cores.max": "1"}
    assert standalone_conf(4, 2) == {"spark.cores.max": "4", "spark.executor.cores": "2"}
    for bad in [(0,), (1.5,), (True,), (2, 3), (3, 2), (2, 0)]:
        with pytest.raises(ValueError, match="standalone_conf"):
            standalone_conf(*bad)


def test_whole_cores_by_largest_remainder_at_least_one_each():
    # every share ≥ 1 core: plain largest remainder — floors 3, 2, 2 (7 of 8), the one left to a (.7 > .2 > .1)
    assert whole_cores({"a": 3.7, "b": 2.2, "c": 2.1}, 8) == {"a": 4, "b": 2, "c": 2}
    # shares are scaled to the cluster's cores: 1.5 : 0.5 of 4 is 3 : 1
    assert whole_cores({"a": 1.5, "b": 0.5}, 4) == {"a": 3, "b": 1}
    # c's 0.1 would round to no core: each cell gets 1 first, the 1 left goes by the shares above 1 core
    # (a 1.6, b 0.3: scaled to 1, a 0.84, b 0.16: a gets it); plain rounding would give 3, 1, 0
    assert whole_cores({"a": 2.6, "b": 1.3, "c": 0.1}, 4) == {"a": 2, "b": 1, "c": 1}
    assert whole_cores({"c0": 1.63, "c1": 0.37}, 2) == {"c0": 1, "c1": 1}
    assert whole_cores({"b": 1.0, "a": 1.0}, 3) == {"a": 2, "b": 1}  # a tie goes by name
    assert whole_cores({"a": 0.0, "b": 0.0}, 2) == {"a": 1, "b": 1}
    assert whole_cores({}, 2) == {}
    with pytest.raises(ValueError, match=r"3 cells \(a, b, c\) on a cluster of 2 cores.*at most 2 cells"):
        whole_cores({"a": 1.0, "b": 0.6, "c": 0.4}, 2)
    for bad in [({"a": 1.0}, 0), ({"a": 1.0}, 2.0), ({"a": -1.0}, 2), ({"a": float("nan")}, 2)]:
        with pytest.raises(ValueError, match="whole_cores"):
            whole_cores(*bad)


def test_executor_cores_divide_the_cells_cores_and_fit_a_worker():
    assert executor_cores(1, 1) == 1 and executor_cores(4, 1) == 1
    assert executor_cores(6, 4) == 3 and executor_cores(4, 4) == 4 and executor_cores(5, 4) == 1
    assert executor_cores(2, 8) == 2


def test_cluster_cores_fix_each_cells_cores_at_its_first_share():
    cores = ClusterCores(cores=4, worker_cores=2)
    assert cores.backend == STANDALONE
    cores.set({"c0": 2.6, "c1": 1.4})
    assert cores.granted == {"c0": 3, "c1": 1} and cores.unenforced == set()
    assert cores.conf("c0", 2.6) == {"spark.cores.max": "3", "spark.executor.cores": "1"}
    assert cores.conf("c1", 1.4) == {"spark.cores.max": "1", "spark.executor.cores": "1"}
    assert cores.held({"c0": 2.6, "c1": 1.4}) == {"c0": 3.0, "c1": 1.0}
    cores.set({"c0": 2.0, "c1": 2.0})  # a later share is recorded, not applied: the cells keep their cores
    assert cores.granted == {"c0": 3, "c1": 1} and cores.unenforced == {"c0", "c1"}
    assert cores.held({"c0": 2.0, "c1": 2.0}) == {"c0": 3.0, "c1": 1.0}
    cores.set({"c0": 3.1, "c1": 0.9})
    assert cores.unenforced == set()
    # a cell started later asks for its share rounded, at least 1 core
    assert cores.conf("c2", 0.3) == {"spark.cores.max": "1", "spark.executor.cores": "1"}
    assert cores.conf("c3", 2.2) == {"spark.cores.max": "2", "spark.executor.cores": "2"}
    with pytest.raises(ValueError, match="5 cells"):
        cores.set({"c0": 1.0, "c1": 1.0, "c2": 1.0, "c3": 0.5, "c4": 0.5})


def test_cgroup_mounts_finds_v1_cpu_before_v2():
    mounts = textwrap.dedent("""\
        tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0
        cgroup /sys/fs/cgroup/cpuacct cgroup rw,relatime,cpuacct 0 0
        cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0
        cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0
        cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,cpu,cpuacct 0 0
        """)
    assert cgroup_mounts(mounts) == [
        Path("/sys/fs/cgroup/cpu"),
        Path("/sys/fs/cgroup/cpu,cpuacct"),
        Path("/sys/fs/cgroup/unified"),
    ]


def test_v1_file_protocol_on_a_fake_tree(tmp_path):
    root = fake_v1(tmp_path)
    shares = CpuShares("run/1", root=root)
    assert shares.backend == V1
    # each cell a group at the top, siblings of the machine's other groups; any run name is one path component
    c0, c1 = root / "strata-run%2F1+cell-c0", root / "strata-run%2F1+cell-c1"
    assert shares.home == root and sorted(p.name for p in root.iterdir()) == ["cpu.shares"]
    shares.set({"c0": 1.5, "c1": 0.5})
    assert (c0 / "cpu.shares").read_text() == "1536"
    assert (c1 / "cpu.shares").read_text() == "512"
    shares.set({"c0": 1.5, "c1": 0.5}, critical={"c0"})
    assert (c0 / "cpu.shares").read_text() == "262144"
    assert (c1 / "cpu.shares").read_text() == "2048"  # the run's 2 cores, as without a critical cell
    child = sleeper(shares.preexec("c0"))
    try:
        assert (c0 / "cgroup.procs").read_text() == str(child.pid)
        shares.join("c1", child.pid)
        assert (c1 / "cgroup.procs").read_text() == str(child.pid)
        assert shares.members("c1") == {child.pid}
    finally:
        child.kill()
        child.wait()


def test_v2_file_protocol_on_a_fake_tree(tmp_path):
    root = fake_v2(tmp_path)
    shares = CpuShares("r", root=root)
    assert shares.backend == V2
    assert (root / "cgroup.subtree_control").read_text() == "+cpu"
    shares.set({"c0": 1.5, "c1": 0.5})
    assert (root / "strata-r+cell-c0" / "cpu.weight").read_text() == "150"
    assert (root / "strata-r+cell-c1" / "cpu.weight").read_text() == "50"
    child = sleeper(shares.preexec("c1"))
    try:
        assert (root / "strata-r+cell-c1" / "cgroup.procs").read_text() == str(child.pid)
    finally:
        child.kill()
        child.wait()


def test_a_hierarchy_without_cpu_or_that_refuses_the_group_falls_back_to_nice(tmp_path):
    (tmp_path / "no-cpu").mkdir()
    (tmp_path / "no-cpu" / "cgroup.controllers").write_text("memory pids\n")
    (tmp_path / "refusing").mkdir()
    refusing = fake_v2(tmp_path / "refusing")
    (refusing / "cgroup.subtree_control").unlink()
    (refusing / "cgroup.subtree_control").mkdir()  # the write of +cpu fails, as EBUSY/EACCES would
    for root in (tmp_path / "no-cpu", refusing, tmp_path / "empty"):
        root.mkdir(exist_ok=True)
        with CpuShares("r", root=root) as shares:
            assert shares.backend == NICE
            assert not [p for p in root.iterdir() if p.name.startswith("strata-")]


def test_nice_backend_renices_every_thread_of_a_cell_and_its_children_and_close_kills_them(tmp_path):
    busy = tmp_path / "tree.py"
    busy.write_text(
        "import subprocess, threading, time\n"
        "child = subprocess.Popen(['sleep', '30'])\n"
        "for _ in range(3): threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(30)\n"
    )
    shares = CpuShares("r", root=tmp_path / "empty")
    assert shares.backend == NICE
    shares.set({"crit": 1.5, "bulk": 0.5})
    parent = subprocess.Popen(
        [sys.executable, str(busy)], stdout=subprocess.PIPE, text=True, preexec_fn=shares.preexec("bulk")
    )
    try:
        grandchild = int(parent.stdout.readline())
        threads = [int(t) for t in os.listdir(f"/proc/{parent.pid}/task")]
        assert len(threads) >= 4
        assert {nice_of(t) for t in threads} == {5} and nice_of(grandchild) == 5
        shares.set({"crit": 1.0, "bulk": 0.25})
        assert {nice_of(t) for t in threads} == {6} and nice_of(grandchild) == 6
        assert shares.members("bulk") == {parent.pid, grandchild} and shares.unenforced == set()
        home = shares.home
        shares.close()
        assert parent.wait(5) == -signal.SIGKILL
        assert wait_gone(grandchild, 1.0)
        assert not home.exists()
    finally:
        parent.kill()
        parent.wait()


def test_a_cell_dies_within_a_second_of_its_parents_sigkill(tmp_path):
    """The parent spawns ``sleep`` as a cell and is SIGKILLed; the same without ``preexec`` shows the child would
    outlive it."""
    script = tmp_path / "parent.py"
    script.write_text(
        "import subprocess, sys, time\n"
        "from pathlib import Path\n"
        "from strata.runners.shares import CpuShares\n"
        "shares = CpuShares('orphans', root=Path(sys.argv[1]))\n"
        "preexec = shares.preexec('c0') if sys.argv[2] == 'cell' else None\n"
        "child = subprocess.Popen(['sleep', '30'], preexec_fn=preexec)\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(30)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    for mode in ("cell", "plain"):
        parent = subprocess.Popen(
            [sys.executable, str(script), str(fake_v1(tmp_path)), mode], stdout=subprocess.PIPE, text=True, env=env
        )
        child = int(parent.stdout.readline())
        assert alive(child)
        parent.kill()
        parent.wait()
        gone = wait_gone(child, 1.0)
        if mode == "plain":
            os.kill(child, signal.SIGKILL)
        assert gone == (mode == "cell"), mode


REAL_V1_WRITABLE = (REAL_V1 / "cpu.shares").is_file() and os.access(REAL_V1, os.W_OK)


@pytest.mark.skipif(not REAL_V1_WRITABLE, reason="no writable cgroup v1 cpu hierarchy at /sys/fs/cgroup/cpu")
def test_real_cgroup_v1_group_holds_a_cell_and_close_removes_it():
    run = f"test-{os.getpid()}"
    shares = CpuShares(run)
    assert shares.backend == V1 and shares.home == REAL_V1
    child = sleeper(shares.preexec("c0"))
    try:
        cell = REAL_V1 / f"strata-{run}+cell-c0"
        assert (cell / "cgroup.procs").read_text().split() == [str(child.pid)]
        memberships = {line.split(":", 1)[1] for line in Path(f"/proc/{child.pid}/cgroup").read_text().splitlines()}
        assert f"cpu:/strata-{run}+cell-c0" in memberships
        shares.set({"c0": 1.5, "c1": 0.5})
        assert (cell / "cpu.shares").read_text().strip() == "1536"
        assert (REAL_V1 / f"strata-{run}+cell-c1" / "cpu.shares").read_text().strip() == "512"
        shares.close()
        assert child.wait(5) == -signal.SIGKILL  # still in its cell at close: killed, not left behind
        assert not [p for p in REAL_V1.iterdir() if p.name.startswith(f"strata-{run}+")]
    finally:
        child.kill()
        child.wait()
        shares.close()


def cpu_seconds(pid: int) -> float:
    fields = process_stat(pid)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def busy_used(shares: CpuShares, seconds: float) -> list[float]:
    """Two busy loops pinned to one core, in cells c0 and c1: the cpu seconds of each."""
    loops = []
    for cell in ("c0", "c1"):
        enter = shares.preexec(cell)

        def pinned(enter=enter):
            enter()
            os.sched_setaffinity(0, {0})

        loops.append(subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=pinned))
    try:
        time.sleep(0.3)  # past the interpreters' start-up
        before = [cpu_seconds(p.pid) for p in loops]
        time.sleep(seconds)
        used = [cpu_seconds(p.pid) - b for p, b in zip(loops, before, strict=True)]
    finally:
        for p in loops:
            p.kill()
            p.wait()
    return used


def busy_split(shares: CpuShares, seconds: float) -> float:
    """Two busy loops pinned to one core, in cells c0 and c1: c0's cpu time over c1's."""
    used = busy_used(shares, seconds)
    return used[0] / used[1]


@pytest.mark.skipif(not REAL_V1_WRITABLE, reason="no writable cgroup v1 cpu hierarchy at /sys/fs/cgroup/cpu")
def test_the_kernel_splits_a_contended_core_3_to_1_by_cgroup_shares():
    with CpuShares(f"test-split-{os.getpid()}") as shares:
        shares.set({"c0": 1.5, "c1": 0.5})
        assert 2.3 < busy_split(shares, 1.5) < 3.9


@pytest.mark.skipif(not REAL_V1_WRITABLE, reason="no writable cgroup v1 cpu hierarchy at /sys/fs/cgroup/cpu")
def test_the_kernel_leaves_a_critical_cell_nearly_all_of_a_contended_core():
    with CpuShares(f"test-critical-{os.getpid()}") as shares:
        shares.set({"c0": 1.5, "c1": 0.5}, critical={"c0"})  # 262144 : 2048, c1 due 0.8%; by cores it had 25%
        critical, bulk = busy_used(shares, 1.5)
        assert bulk < 0.03 * (critical + bulk)


def test_the_kernel_splits_a_contended_core_about_3_to_1_by_nice(tmp_path):
    with CpuShares("split", root=tmp_path) as shares:
        shares.set({"c0": 1.5, "c1": 0.5})  # nice 0 and 5: weights 1024 and 335
        assert 2.3 < busy_split(shares, 1.5) < 3.9
