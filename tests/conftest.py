"""Shared fixtures: one local SparkSession for every test marked ``spark``; running a scenario under Strata until
its queries have read their input."""

from __future__ import annotations

import importlib.util
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    """A local[2] session with small shuffle partitions and no UI, shared by the whole run."""
    from strata.spark import build_session

    session = build_session("strata-tests", cores=2, shuffle_partitions=2, work_dir=tmp_path_factory.mktemp("spark"))
    yield session
    session.stop()


def rows_read(engine) -> dict[str, int]:
    """Input rows each job's queries have read so far (Spark's progress), by job."""
    return {s.job: sum(engine.progress.of(s.pipeline.query).values()) for s in engine.segments}


def run_until(spark, scenario, run_dir: Path, config, enough: Callable, timeout_s: float = 120.0, **hooks):
    """Run ``scenario`` under Strata's control loop until ``enough(engine)`` holds (or ``timeout_s`` passes);
    the run's result. ``hooks``: more of ``run_mode``'s callbacks (``on_step``)."""
    from strata.runners.spark_loop import run_mode

    engines: list = []
    epoch = time.time() + 1
    return run_mode(
        spark,
        scenario,
        "strata",
        run_dir,
        config,
        epoch,
        epoch + timeout_s,
        should_stop=lambda: bool(engines) and enough(engines[0]),
        on_engine=engines.append,
        **hooks,
    )


def written_at_once(producers, seconds: float, file_s: float = 0.5) -> dict:
    """Every file ``producers`` (a workload's input, from ``seconds`` ago) would have written by now, written at
    once, a file per ``file_s``; the rows each directory holds, by its name."""
    import pandas as pd

    out = {}
    for p in producers:
        step = round(file_s / p.tick_s)
        frames = []
        for tick in range(step, round(seconds / p.tick_s) + 1, step):
            lo, up = p.timeline.rows_before_tick(tick - step), p.timeline.rows_before_tick(tick)
            if up > lo:
                p.write(lo, up)
                frames.append(p.rows(lo, up))
        out[p.directory.name] = pd.concat(frames, ignore_index=True)
    return out


@contextmanager
def benchmark_script(name: str) -> Iterator:
    """The benchmark script ``benchmarks/<name>.py`` as a module, its directory on the path meanwhile (its sibling
    modules, e.g. app_cpu, as running the script finds them) and the module registered under ``name`` (its
    dataclasses look their module up)."""
    script = ROOT / "benchmarks" / f"{name}.py"
    sys.path.insert(0, str(script.parent))
    spec = importlib.util.spec_from_file_location(name, script)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[name]
        sys.path.remove(str(script.parent))
