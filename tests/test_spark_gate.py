"""The micro-batch dispatch gate's mechanism (no Spark: a fake pipeline): blocking, release order, cpu-share pools."""

from __future__ import annotations

import threading
import time

from strata.dispatch.gate import GateConfig, GateCore
from strata.model import Job
from strata.spark.gate import Gate


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
