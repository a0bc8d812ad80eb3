"""The fleet as one Engine (issue 28): its cells' observations merged, decisions routed to the cell holding each
job, cell shares and moves enforced in order; L0's cell decisions from the Controller. No Spark: fake cells."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from strata.control.cells import CellConfig, light_compiling
from strata.control.controller import Controller, HierarchyConfig
from strata.model import load_scenario
from strata.protocol.engine import Decisions, InstanceLoad, KeyGroupLoad, LatencyStats, Move, Observation, WindowStats
from strata.runners.cell import gate_bound
from strata.runners.fleet import (
    FleetEngine,
    cell_request,
    cells_over,
    first_tier_only,
    fleet_config,
    host_cell,
    merge_observations,
    route,
)
from strata.runners.live import RunRequest
from strata.runners.shares import ClusterCores
from strata.runners.spark_loop import RunConfig
from strata.spark.conf import SparkSettings

ROOT = Path(__file__).resolve().parents[1]
PIPELINE = "src/strata/examples/pipeline.yaml"


def window(now: float, start: float, job: str, busy: float, rows: int, ingest: float) -> WindowStats:
    return WindowStats(
        now=now,
        start=start,
        key_groups=(KeyGroupLoad(f"{job}.agg", 0, 0, rows, busy / 2, 0.0),),
        instances=(InstanceLoad(f"{job}.src", 0, "local", rows, busy, 5, 0),),
        node_utilisation={},
        queue_lengths={},
        latency={job: LatencyStats(rows, 0.5, 0.9, 1.0, 1.2, 0.1)},
        rates={f"{job}.src": rows / (now - start)},
        ingest={f"{job}.src": ingest},
        routing={f"{job}.agg": (0, 1)},
        placement={},
        migrating=(),
        dropped={"shed": 3},
    )


class FakeCell:
    """A cell that answers from fixed observations and records every call, in one shared order."""

    def __init__(self, name: str, obs: Observation | None, calls: list) -> None:
        self.name = name
        self.obs = obs
        self.calls = calls

    def call(self, method: str, *args):
        self.calls.append((self.name, method, args))
        return {"observe": self.obs, "alive": True}.get(method)


class FakeShares:
    backend = "fake"

    def __init__(self) -> None:
        self.given: list[dict] = []
        self.critical: list[set] = []

    def set(self, shares, critical=()) -> None:
        self.given.append(dict(shares))
        self.critical.append(set(critical))

    def held(self, shares) -> dict:
        return dict(shares)


def observation(job: str, start: float, busy: float, rows: int, ingest: float, units: int) -> Observation:
    """A cell's window ending at 10 s: ``units`` batches of ``rows`` / ``units`` records each."""
    w = window(10.0, start, job, busy, rows, ingest)
    return Observation(w, templates={job: job[0]}, dispatch="llf", units=units, unit_records=rows / units)


def test_observations_of_disjoint_cells_merge_into_one():
    a = observation("alerts", 8.0, 1.0, 200, 100.0, 4)
    b = observation("counts", 7.0, 3.0, 900, 300.0, 1)
    obs = merge_observations({"c0": a, "c1": b}, {"c0": 0.5, "c1": 1.5}, now=10.5)
    w = obs.window
    assert (w.now, w.start) == (10.5, 7.0)
    assert set(w.latency) == {"alerts", "counts"} and w.ingest == {"alerts.src": 100.0, "counts.src": 300.0}
    assert [i.pe for i in w.instances] == ["alerts.src", "counts.src"] and len(w.key_groups) == 2
    assert w.routing == {"alerts.agg": (0, 1), "counts.agg": (0, 1)} and w.dropped == {"shed": 6}
    # busy cores over the cell's share: c0 1.0 core-s in 2 s over 0.5 cores; c1 3.0 in 3 s over 1.5
    assert w.node_utilisation == pytest.approx({"c0": 1.0, "c1": 1.0 / 1.5})
    assert obs.templates == {"alerts": "a", "counts": "c"} and obs.dispatch == "llf"
    assert obs.units == 5 and obs.unit_records == pytest.approx((4 * 50 + 900) / 5)


def test_decisions_are_routed_to_the_cell_holding_each_job():
    d = Decisions(
        3,
        admitted={"alerts": "t", "counts": "u"},
        cpu_share={"alerts": 0.5, "counts": 1.5},
        pools={"alerts": "urgent", "counts": "w1"},
        triggers={"counts": 2.0},
        rate_limits={"counts.src": 900.0, "alerts.src": None},
        moves=[Move("counts.agg", 3, 0, 1)],
        dispatch="edf",
    )
    routed = route(d, {"alerts": "c0", "counts": "c1"}, ["c0", "c1"], None)
    assert routed["c0"].admitted == {"alerts": "t"} and routed["c1"].admitted == {"counts": "u"}
    assert routed["c0"].pools == {"alerts": "urgent"} and routed["c1"].cpu_share == {"counts": 1.5}
    assert routed["c0"].rate_limits == {"alerts.src": None} and routed["c1"].rate_limits == {"counts.src": 900.0}
    assert routed["c0"].moves == [] and routed["c1"].moves == [Move("counts.agg", 3, 0, 1)]
    assert routed["c0"].dispatch == routed["c1"].dispatch == "edf" and routed["c0"].triggers == {"counts": 2.0}
    # a placement change alone re-sends the admission in force, each cell its own jobs
    moved = route(
        Decisions(4, cells={"alerts": "c0", "counts": "c0"}),
        {"alerts": "c0", "counts": "c0"},
        ["c0", "c1"],
        {"alerts": "t", "counts": "u"},
    )
    assert moved["c0"].admitted == {"alerts": "t", "counts": "u"} and moved["c1"].admitted == {}
    assert route(Decisions(5), {"alerts": "c0"}, ["c0"], {"alerts": "t"})["c0"].admitted is None


def test_a_move_reserves_the_target_then_stops_the_job_before_the_target_continues_it():
    calls: list = []
    cells = {name: FakeCell(name, None, calls) for name in ("c0", "c1")}
    spawned: list[tuple[str, tuple[str, ...]]] = []

    def spawn(name: str, share: float, jobs: tuple[str, ...]) -> FakeCell:
        spawned.append((name, jobs))
        return FakeCell(name, None, calls)

    shares = FakeShares()
    fleet = FleetEngine(cells, shares, spawn)
    fleet.apply(
        Decisions(1, admitted={"a": "t", "b": "t"}, cells={"a": "c0", "b": "c1"}, cell_shares={"c0": 1.0, "c1": 1.0})
    )
    assert next(c for c in calls if c[1] == "apply")[2][0].admitted == {"a": "t"}
    calls.clear()
    fleet.apply(Decisions(2, cells={"a": "c1", "b": "c2"}, cell_shares={"c0": 0.2, "c1": 1.0, "c2": 0.8}))
    # the new cell is told the jobs it will hold (it warms their queries before it is ready)
    assert spawned == [("c2", ("b",))] and shares.given[-1] == {"c0": 0.2, "c1": 1.0, "c2": 0.8}
    order = [(cell, method) for cell, method, _ in calls]
    # shares first (the targets reserved), then the cells the jobs leave stop them, then the targets adopt
    assert order.index(("c1", "share")) < order.index(("c0", "apply")) < order.index(("c1", "adopt"))
    assert order.index(("c1", "apply")) < order.index(("c2", "adopt")) < order.index(("c2", "apply"))
    applied = {cell: args[0] for cell, method, args in calls if method == "apply"}
    assert (
        applied["c0"].admitted == {} and applied["c1"].admitted == {"a": "t"} and applied["c2"].admitted == {"b": "t"}
    )
    adopt = [args for cell, method, args in calls if method == "adopt"]
    assert [(a[0], a[2]) for a in adopt] == [("a", "c0"), ("b", "c1")]
    kinds = [(d["kind"], d["job"]) for d in fleet.decisions]
    assert ("move", "a") in kinds and ("move", "b") in kinds and ("cell", "*") in kinds


def test_the_cells_holding_a_critical_job_are_named_to_the_shares_and_follow_its_move():
    shares = FakeShares()
    cells = {name: FakeCell(name, None, []) for name in ("c0", "c1")}
    fleet = FleetEngine(cells, shares, critical=frozenset({"alerts"}))
    fleet.apply(Decisions(1, cells={"alerts": "c0", "counts": "c1"}, cell_shares={"c0": 1.7, "c1": 0.3}))
    assert shares.given == [{"c0": 1.7, "c1": 0.3}] and shares.critical == [{"c0"}]
    fleet.apply(Decisions(2, cell_shares={"c0": 1.6, "c1": 0.4}))  # shares alone: the critical cell stays
    assert shares.critical[-1] == {"c0"}
    # the critical job moves, the shares are the same numbers: the weight still moves with it
    fleet.apply(Decisions(3, cells={"alerts": "c1", "counts": "c0"}))
    assert shares.given[-1] == {"c0": 1.6, "c1": 0.4} and shares.critical[-1] == {"c1"}
    fleet.apply(Decisions(4, cells={"alerts": "c1", "counts": "c1"}))  # no change to the critical cells: no set
    assert len(shares.given) == 3


def test_the_controller_places_jobs_onto_cells_only_when_the_engine_runs_cells():
    scenario = load_scenario(ROOT / PIPELINE)
    plain = Controller(scenario, HierarchyConfig(plan=HierarchyConfig().plan)).start(0.0)
    assert plain.cells is None and plain.cell_shares is None
    d = Controller(scenario, HierarchyConfig(cells=CellConfig(max_cells=2))).start(0.0)
    assert set(d.cells) == {j.id for j in scenario.jobs} and set(d.cells.values()) == set(d.cell_shares)
    assert sum(d.cell_shares.values()) == pytest.approx(scenario.cluster.total_cores)
    assert d.cells["alerts"] != d.cells["counts"]  # the latency-critical job away from the bulk one
    one = Controller(scenario, HierarchyConfig(cells=CellConfig(max_cells=1))).start(0.0)
    assert set(one.cells.values()) == {"c0"}
    pinned = Controller(scenario, HierarchyConfig(cells=CellConfig(pins=(("counts", "pin-counts"),)))).start(0.0)
    assert pinned.cells["counts"] == "pin-counts" and pinned.cells["alerts"] != "pin-counts"


def test_on_a_standalone_cluster_the_cells_fit_its_cores_and_start_with_them():
    scenario = load_scenario(ROOT / PIPELINE)  # a cluster of two 4-core nodes: 8 cores
    cluster = "spark://127.0.0.1:7077"

    def limit(cells, master):
        return fleet_config(scenario, (), cells, master, RunConfig()).control.cells.max_cells

    assert limit(None, cluster) == 8 and limit(3, cluster) == 3 and limit(12, cluster) == 8
    assert limit(None, "local[2]") is None and limit(12, None) == 12  # one machine: the planner's default
    assert cells_over(scenario, 8) is None
    assert "has 8 cores" in cells_over(scenario, 9) and "expected at most 8 cells" in cells_over(scenario, 9)
    shares = ClusterCores(8, 4)
    shares.set({"c0": 5.5, "c1": 2.5})
    request = RunRequest(files=("jobs.py",), spark=SparkSettings((("spark.cores.max", "8"), ("a", "b"))))
    mine = cell_request(request, shares.conf("c1", 2.5)).spark.as_dict  # the cell's cores win over the user's
    assert mine == {"spark.cores.max": "2", "a": "b", "spark.executor.cores": "2"}
    # the fleet hands each cell the cores it holds, and logs both
    calls: list = []
    fleet = FleetEngine({"c0": FakeCell("c0", None, calls), "c1": FakeCell("c1", None, calls)}, shares)
    fleet.apply(Decisions(2, cell_shares={"c0": 4.0, "c1": 4.0}))
    assert [(c, args) for c, m, args in calls if m == "share"] == [("c0", (6.0,)), ("c1", (2.0,))]
    assert shares.unenforced == {"c0", "c1"}
    assert fleet.decisions[-1]["detail"] == "c0 4.00, c1 4.00; held c0 6, c1 2 cores (standalone)"


def test_a_cell_of_latency_critical_jobs_only_compiles_with_c1_before_the_users_java_options():
    scenario = load_scenario(ROOT / PIPELINE)  # alerts: target 2 s; counts: 30 s
    members = {"c0": ("alerts",), "c1": ("counts",), "c2": ("alerts", "counts"), "c3": ()}
    assert light_compiling(scenario, members, critical_s=5.0) == {"c0"}
    assert light_compiling(scenario, members, critical_s=1.0) == set()  # no job is latency-critical
    assert light_compiling(scenario, members, critical_s=30.0) == {"c0", "c1", "c2"}
    theirs = (("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=4 -Dx=1"), ("a", "b"))
    mine = first_tier_only(RunRequest(files=("jobs.py",), spark=SparkSettings(theirs))).spark.as_dict
    # a later option of the user's wins in the JVM: theirs still hold
    assert mine == {"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:TieredStopAtLevel=4 -Dx=1", "a": "b"}
    alone = first_tier_only(RunRequest(files=("jobs.py",))).spark.as_dict
    assert alone == {"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1"}


def test_more_cells_than_a_clusters_cores_is_a_located_error_before_any_cell_starts(tmp_path, monkeypatch):
    from rich.console import Console

    from strata.runners import fleet

    class Session:
        stopped = False

        def stop(self) -> None:
            self.stopped = True

    session, master = Session(), "spark://127.0.0.1:7077"
    started: list = []
    monkeypatch.setattr(fleet, "check_master", lambda m: started.append(("checked", m)))
    monkeypatch.setattr(fleet, "start_session", lambda request, *a: started.append(request.master) or session)
    monkeypatch.setattr(fleet, "prepare", lambda *a: load_scenario(ROOT / PIPELINE))  # 8 cores
    monkeypatch.setattr(fleet, "launch_cell", lambda *a: pytest.fail("no cell may start"))
    said = io.StringIO()
    errors = Console(file=said, width=300)
    request = RunRequest(files=(str(ROOT / PIPELINE),), master=master, out=tmp_path)
    assert fleet.run_fleet(request, Console(file=io.StringIO()), errors, max_cells=9) == 2
    assert started == [("checked", master), "local[1]"] and session.stopped  # the fleet's own session: local
    assert f"--master {master}: the spec's cluster has 8 cores" in said.getvalue()
    assert (
        "expected at most 8 cells (--cells, a cell per --dedicate job and one for the others); found 9"
        in said.getvalue()
    )


def test_the_host_cell_and_each_cells_gate_bound():
    assert host_cell({"c0": ("alerts",), "c1": ("a", "b")}, {"c0": 1.5, "c1": 0.5}) == "c1"
    assert host_cell({"c0": ("a",), "c1": ("b",)}, {"c0": 0.5, "c1": 1.5}) == "c1"
    assert gate_bound(2.0, 2.0, 1) == 1  # the whole machine: as one application's gate
    assert gate_bound(1.6, 2.0, 1) == 2 and gate_bound(0.3, 2.0, 1) == 1
    # a cell with no latency-critical job shields nothing: its batches run as plain Spark runs them
    assert gate_bound(0.3, 2.0, 1, shields_critical=False) == 2 and gate_bound(2.0, 2.0, 1, False) == 2


def test_cells_1_and_no_control_run_one_application_and_the_default_runs_cells(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from strata.cli import app

    called: list[tuple[str, object]] = []
    monkeypatch.setattr("strata.runners.live.run_live", lambda request, *a: called.append(("one", request)) or 0)
    monkeypatch.setattr(
        "strata.runners.fleet.run_fleet", lambda request, c, e, cells: called.append(("fleet", cells)) or 0
    )
    spec = str(ROOT / PIPELINE)
    for args, expected in (
        ([], ("fleet", None)),
        (["--cells", "3"], ("fleet", 3)),
        (["--dedicate", "alerts"], ("fleet", None)),
        (["--cells", "1"], "one"),
        (["--no-control"], "one"),
    ):
        called.clear()
        result = CliRunner().invoke(app, ["run", spec, "--out", str(tmp_path), *args])
        assert result.exit_code == 0, result.output
        assert (called[0][0] if expected == "one" else called[0]) == expected, args
    for args, said in (
        (["--cells", "1", "--dedicate", "alerts"], "--dedicate: expected cells"),
        (["--cells", "0"], "--cells: expected a number of applications ≥ 1"),
    ):
        result = CliRunner().invoke(app, ["run", spec, "--out", str(tmp_path), *args])
        assert result.exit_code == 2 and said in result.output, result.output


def test_a_restarted_fleet_removes_the_empty_cgroups_of_fleets_killed_before_it(tmp_path):
    from strata.runners.fleet import RUN_PREFIX, sweep_stale
    from strata.runners.shares import CpuShares

    (tmp_path / "cpu.shares").write_text("1024\n")  # a fake cgroup v1 root
    dead, alive = tmp_path / "strata-strata-999999999+cell-c0", tmp_path / f"strata-strata-{os.getppid()}+cell-c0"
    old = tmp_path / "strata-strata-999999998"  # a dead fleet's run group, as fleets before 28 Nov made them
    (old / "cell-c0").mkdir(parents=True)
    for group in (dead, alive):
        group.mkdir()
    (tmp_path / "strata-other").mkdir()  # not a fleet's
    shares = CpuShares(f"{RUN_PREFIX}{os.getpid()}", root=tmp_path)
    mine = shares.entry("c0")
    mine.mkdir()
    assert shares.backend == "cgroup-v1" and sorted(sweep_stale(shares)) == [old, dead]
    assert not dead.exists() and not old.exists()
    assert alive.is_dir() and mine.is_dir() and (tmp_path / "strata-other").is_dir()


def test_the_cells_metrics_merge_into_one_set_with_a_moved_jobs_sink_checked_once(tmp_path):
    import pandas as pd

    from strata.runners.fleet import merge_metrics
    from strata.spark.measure import ModeRun

    scenario = load_scenario(ROOT / PIPELINE)
    check = {
        "template": "t",
        "expected": 10,
        "missing": 0,
        "duplicated": 0,
        "wrong": 0,
        "unverifiable": "",
        "mode": "strata",
        "segment": 0,
    }
    tables = {  # counts ran in c1, then moved to c0 (its segment continued there: 300 rows read in all)
        "c0": {
            "checks": [{**check, "job": "alerts", "rows_read": 50}, {**check, "job": "counts", "rows_read": 300}],
            "batches": [{"mode": "strata", "job": "counts", "batch_id": 2, "rows_in": 100.0}],
            "latency": [
                {
                    "mode": "strata",
                    "job": "counts",
                    "template": "sampled",
                    "event_s": 1.0,
                    "latency_s": 40.0,
                    "delivered": True,
                }
            ],
        },
        "c1": {
            "checks": [{**check, "job": "counts", "rows_read": 200}],
            "batches": [{"mode": "strata", "job": "counts", "batch_id": b, "rows_in": 100.0} for b in (0, 1)],
            "latency": [
                {
                    "mode": "strata",
                    "job": "counts",
                    "template": "sampled",
                    "event_s": 2.0,
                    "latency_s": 1.0,
                    "delivered": True,
                }
            ],
        },
    }
    dirs = {}
    for cell, frames in tables.items():
        dirs[cell] = tmp_path / cell
        dirs[cell].mkdir()
        for name, rows in frames.items():
            pd.DataFrame(rows).to_csv(dirs[cell] / f"{name}.csv", index=False)
    fleet = FleetEngine({}, FakeShares(), holder={"alerts": "c0", "counts": "c0"})
    fleet.decisions.append(
        {"t": 105.0, "epoch": 2, "kind": "move", "job": "counts", "detail": "c1 → c0", "reasons": ""}
    )
    run_ = ModeRun("strata", 100.0, 110.0, None)
    merged = merge_metrics(tmp_path / "out", dirs, run_, fleet, scenario, 10.0, {})
    checks = merged["checks"].set_index("job")
    assert list(checks.index) == ["alerts", "counts"] and checks.loc["counts", "rows_read"] == 300
    assert checks.loc["counts", "cell"] == "c0"
    assert sorted(merged["batches"]["cell"]) == ["c0", "c1", "c1"]
    summary = merged["summary"].set_index("job")
    # counts: 300 rows over the 10 s run; two outputs, one over its 30 s target
    assert summary.loc["counts", "throughput"] == 30.0 and summary.loc["counts", "outputs"] == 2
    assert summary.loc["counts", "misses"] == 1 and summary.loc["counts", "cell"] == "c0"
    moves = merged["decisions"][merged["decisions"]["kind"] == "move"]
    assert list(moves["t"]) == [5.0] and list(moves["cell"]) == ["fleet"]
    assert (tmp_path / "out" / "metrics" / "summary.csv").exists() and (
        tmp_path / "out" / "metrics" / "run.json"
    ).exists()


def test_stacking_the_cells_tables_leaves_out_empty_frames_and_all_na_columns_without_a_warning():
    import io
    import warnings

    import pandas as pd

    from strata.runners.fleet import stack

    read = pd.read_csv(io.StringIO("t,kind,reasons\n1.0,move,\n"))  # a cell's decisions: reasons all empty (NA)
    header_only = pd.read_csv(io.StringIO("t,kind,reasons,extra\n"))
    own = pd.DataFrame([{"t": 0.5, "kind": "shares", "reasons": "hot", "cell": "fleet"}])
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        out = stack([read, header_only, own])
    assert list(out.columns) == ["t", "kind", "reasons", "extra", "cell"]
    assert out["t"].tolist() == [1.0, 0.5] and out["kind"].tolist() == ["move", "shares"]
    assert out["reasons"].dtype == object and out["reasons"].isna().tolist() == [True, False]
    assert out["extra"].isna().all() and out["cell"].isna().tolist() == [True, False]
    assert stack([header_only]).empty and list(stack([header_only]).columns) == ["t", "kind", "reasons", "extra"]
    assert stack([]).empty
