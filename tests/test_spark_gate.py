"""The micro-batch dispatch gate's mechanism (no Spark: a fake pipeline): blocking, release order, cpu-share pools."""

from __future__ import annotations

import json
import threading
import time

import pytest

from strata.dispatch.gate import GateConfig, GateCore
from strata.model import Job, SourceSpec
from strata.spark.gate import Gate
from strata.spark.sources import LoggedBatches, offered_rows


class _Query:
    lastProgress = None


class _Pipeline:
    """Just what the gate reads from a pipeline."""

    def __init__(self, job: Job, spark) -> None:
        from strata.spark.pipelines import PipelineOptions

        self.name, self.job, self.template = job.id, job, job.templates[0]
        self.chain = job.templates[0].operators
        self.options = PipelineOptions(epoch=0.0)
        self.rate_cap = None
        self.query = _Query()
        self.spark = spark
        self.started_at = 0.0

    def pending_batch(self, batch_id: int) -> tuple[float | None, int]:
        return 0.0, 0  # what the source reports: nothing yet, its oldest record due at the epoch


class _Context:
    def __init__(self) -> None:
        self.props: dict[str, str] = {}

    def setLocalProperty(self, key: str, value: str) -> None:
        self.props[threading.get_ident()] = value


class _Spark:
    def __init__(self) -> None:
        self.sparkContext = _Context()


def _job(jid: str, target: float) -> Job:
    return Job.model_validate(
        {
            "id": jid,
            "rank": 1,
            "target_latency_s": target,
            "templates": [
                {
                    "operators": [
                        {"name": "s", "kind": "source", "source": {"rate": 100}},
                        {"name": "o", "kind": "sink"},
                    ],
                    "streams": [{"from": "s", "to": "o"}],
                }
            ],
        }
    )


def test_gate_blocks_the_second_query_until_a_slot_frees_then_releases_by_laxity():
    spark = _Spark()
    gate = Gate(GateCore(GateConfig(max_running=1)), clock=lambda: 0.0)  # at the epoch: nobody is urgent yet
    slow, urgent, relaxed = (_Pipeline(_job(j, t), spark) for j, t in (("slow", 30), ("urgent", 2), ("relaxed", 60)))
    released: list[str] = []
    gate.on_release = lambda row: released.append(row["query"])
    gate.before(slow, 0)  # takes the only slot
    threads = [threading.Thread(target=gate.before, args=(p, 0)) for p in (relaxed, urgent)]
    for th in threads:
        th.start()
    time.sleep(0.3)
    assert released == ["slow"]  # both wait
    gate.after(slow, {"released": 0.0, "finished": 1.0})
    time.sleep(0.3)
    assert released == ["slow", "urgent"]  # same frontier (epoch 0): the 2 s target has least slack
    gate.after(urgent, {"released": 0.0, "finished": 1.0})
    for th in threads:
        th.join(timeout=5)
    assert released == ["slow", "urgent", "relaxed"]


def _log(checkpoint, batch_id: int, row: int, epoch: float) -> None:
    offsets = checkpoint / "offsets"
    offsets.mkdir(parents=True, exist_ok=True)
    meta = json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 0, "conf": {}})
    (offsets / str(batch_id)).write_text(f"v1\n{meta}\n{json.dumps({'row': row, 'epoch': epoch})}")


def test_a_generated_batch_is_priced_from_the_offsets_spark_logged_for_it(tmp_path):
    spec = SourceSpec(rate=100, arrivals={"process": "constant"})  # 10 rows every 0.1 s tick
    logged = LoggedBatches(spec, 0.1, tmp_path, start_row=20)
    assert logged.batch(0) == (None, 0)  # not planned yet
    _log(tmp_path, 0, 50, 1000.0)
    _log(tmp_path, 1, 75, 1000.0)
    assert logged.batch(0) == (pytest.approx(1000.2), 30)  # rows 20..49: the oldest is tick 2's
    assert logged.batch(1) == (pytest.approx(1000.5), 25)  # from batch 0's end, row 50 (tick 5)
    assert offered_rows(spec, 1000.0, 0.1, 1001.05) == 100  # ten whole ticks by then


def test_the_gate_prices_a_batch_its_source_does_not_report_by_what_arrived_since_the_last_release():
    spark = _Spark()
    now = [10.0]
    gate = Gate(GateCore(GateConfig(max_running=1)), clock=lambda: now[0])
    p = _Pipeline(_job("j", 30), spark)
    p.pending_batch = lambda batch_id: (None, 0)
    p.started_at = 5.0
    assert gate.pending(p, 10.0, 0) == (5.0, 0)  # never released: since the query started
    gate.before(p, 0)
    gate.after(p, {"released": 10.0, "finished": 11.0})
    assert gate.pending(p, 12.0, 1) == (10.0, 0)  # since batch 0's release
