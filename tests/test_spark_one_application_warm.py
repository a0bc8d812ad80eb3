"""``strata run --cells 1`` with Strata in control warms its one application's queries as a cell does, before its
sources' epoch, and stays exactly once across a resume; ``--no-control`` (plain Spark as a team starts it) runs
cold (issue 29; :func:`strata.runners.warmup.warm_application`).

Known answers: the warm-up ran both jobs (``copy``, ``wide``) and its scratch is gone; the sources' epoch is
:func:`~strata.runners.warmup.lead_after` of what it measured; every sink equals the reference recomputed from
the records the run read (the warm-up wrote only to its own memory sinks, on an earlier epoch of its own: a row of
it in a run's sink would be an event time before the run's epoch, and a reference mismatch).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from strata.runners.warmup import Warmed, lead_after
from strata.spark.sinks import ParquetSink
from tests.test_cli_spark_failures import SPEC as COPY
from tests.test_cli_spark_failures import STRATA

# test_cli_spark_failures' one job (`copy`, value < 0.5) and, ranked below it, its complement on another seed
WIDE = COPY.split("jobs:\n")[1].replace("copy", "wide").replace("rank: 1", "rank: 2").replace("< 0.5", ">= 0.5")
SPEC = COPY + WIDE.replace("seed: 4", "seed: 5")


def strata_run(spec: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    run = subprocess.run(
        [STRATA, "run", str(spec), "--duration", "5", "--out", str(out), *extra],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return run


def recorded(out: Path) -> dict:
    return json.loads((out / "metrics" / "run.json").read_text())["config"]


@pytest.mark.spark
def test_one_application_warms_as_a_cell_does_stays_exactly_once_and_plain_spark_stays_cold(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    out = tmp_path / "run"

    first = strata_run(spec, out, "--cells", "1")
    config = recorded(out)
    warmed = Warmed(**{k: tuple(v) if isinstance(v, list) else v for k, v in config["warm_up"].items()})
    assert warmed.jobs == ("copy", "wide") and warmed.skipped == {} and warmed.start_s > 0
    assert config["lead_s"] == pytest.approx(lead_after([warmed]))
    assert "queries warmed: this application" in first.stdout and "(copy, wide: started in" in first.stdout
    assert "exactly once" in first.stdout and not (out / "warmup").exists()
    epoch = json.loads((out / "strata" / "run.json").read_text())["epoch"]
    sinks = [out / "strata" / "jobs" / job / "0-default" / "sinks" / job for job in ("copy", "wide")]
    for sink in sinks:  # only the run's own records, none of the warm-up's earlier epoch
        frame = ParquetSink(sink).read()
        assert not frame.empty and frame["event_time"].min().timestamp() >= epoch - 1e-3

    again = strata_run(spec, out, "--cells", "1")  # resumed on the same run directory, warmed again
    assert "copy: resuming (default) after batch" in again.stdout and "queries warmed" in again.stdout
    assert "exactly once" in again.stdout  # every sink over both runs equals the reference of every row read
    assert json.loads((out / "strata" / "run.json").read_text())["epoch"] == epoch  # the time base kept

    cold = strata_run(spec, tmp_path / "plain", "--no-control")
    assert "queries warmed" not in cold.stdout and "warm_up" not in recorded(tmp_path / "plain")
    assert "exactly once" in cold.stdout
