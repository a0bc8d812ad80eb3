"""The Spark engine adapter on the shared session: a template switch at a batch boundary loses and repeats
nothing; a rate cap holds a source back; observe() reports what ran."""

from __future__ import annotations

import time

import pytest

from strata.control.estimation import attribute
from strata.model import Scenario
from strata.protocol.engine import Decisions
from strata.spark.engine import EngineConfig, SparkEngine
from strata.spark.verify import verify_segment

pytestmark = pytest.mark.spark

SOURCE = {"rate": 300, "arrivals": {"process": "constant"}, "keys": {"count": 50}, "seed": 3}
SCENARIO = Scenario.model_validate(
    {
        "name": "switch",
        "cluster": {"nodes": [{"name": "local", "cores": 2}]},
        "jobs": [
            {
                "id": "j",
                "rank": 1,
                "target_latency_s": 5,
                "templates": [
                    {
                        "name": "wide",
                        "operators": [
                            {"name": "src", "kind": "source", "source": SOURCE},
                            {"name": "f", "kind": "filter", "predicate": "value > 0.5"},
                            {"name": "out", "kind": "sink"},
                        ],
                        "streams": [{"from": "src", "to": "f"}, {"from": "f", "to": "out"}],
                    },
                    {
                        "name": "narrow",
                        "operators": [
                            {"name": "src", "kind": "source", "source": SOURCE},
                            {"name": "f", "kind": "filter", "predicate": "value > 0.5 AND pmod(id, 3) = 0"},
                            {"name": "out", "kind": "sink"},
                        ],
                        "streams": [{"from": "src", "to": "f"}, {"from": "f", "to": "out"}],
                    },
                ],
            }
        ],
    }
)


def wait_for_rows(engine: SparkEngine, job: str, rows: int, timeout_s: float = 90.0) -> None:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        segment = engine.running[job]
        if engine.end_row(segment) >= rows:
            return
        time.sleep(0.2)
    raise AssertionError(f"{job} did not read {rows} rows in {timeout_s} s")


def wait_for_batches(engine: SparkEngine, segment: int, count: int, timeout_s: float = 90.0) -> None:
    """Until the segment has ``count`` committed batches (a loaded machine runs them slowly)."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        done = [b for b in engine.batch_observations() if b["segment"] == segment and b["rows_in"] is not None]
        if len(done) >= count:
            return
        time.sleep(0.2)
    raise AssertionError(f"segment {segment} did not commit {count} batches in {timeout_s} s")


def test_template_switch_at_a_batch_boundary_is_exactly_once_and_caps_hold(spark, tmp_path):
    engine = SparkEngine(spark, SCENARIO, tmp_path, EngineConfig(epoch=time.time()), attribute=attribute)
    engine.apply(Decisions(0, admitted={"j": "wide"}, triggers={"j": 0.5}))
    wait_for_rows(engine, "j", 300)
    engine.apply(Decisions(1, admitted={"j": "narrow"}))
    first, second = engine.segments
    assert first.end_row == second.start_row > 0  # the new variant starts exactly where the old one stopped
    wait_for_rows(engine, "j", second.start_row + 300)

    # 100 rec/s × the batch interval: the 0.5 s trigger, or the measured interval (to 0.5 s) when batches are slower
    engine.apply(Decisions(2, rate_limits={"j.src": 100.0}))
    cap = second.pipeline.rate_cap.get()
    assert cap >= 50 and cap % 50 == 0
    before = len(list(second.pipeline.batch_records()))
    wait_for_batches(engine, 1, before + 3)  # the batch in flight when the cap came, then two capped ones
    obs = engine.observe()
    engine.stop_all()

    batches = engine.batch_observations()
    # A batch the stop interrupted never committed, so it has no progress event (rows_in None).
    capped = [b for b in batches if b["segment"] == 1][before + 1 :]
    committed = [b for b in capped if b["rows_in"] is not None]
    assert committed and all(b["rows_in"] <= cap for b in committed)
    assert obs.templates == {"j": "narrow"}
    assert obs.window.ingest["j.src"] == pytest.approx(300, rel=0.3)  # offered, not the capped read rate
    for segment in engine.segments:
        check = verify_segment(spark, segment, engine.config.epoch, engine.config.tick_s)
        assert check["expected"] > 0
        assert (check["missing"], check["duplicated"]) == (0, 0), check
    assert [d["kind"] for d in engine.decisions][:2] == ["admit", "template"]
    engine.close()
