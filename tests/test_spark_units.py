"""Pieces of the data plane that need no Spark: routing tables, window assignment, progress rows, latency."""

from __future__ import annotations

import socket

import numpy as np
import pandas as pd
import pytest

from strata.model import AggregateSpec, WindowSpec
from strata.spark.listener import progress_row
from strata.spark.pipelines import latency_percentiles
from strata.spark.prompt_ack import acknowledge_promptly
from strata.spark.sinks import MemorySink, event_micros
from strata.spark.state import BatchPlan, KeyedSpec, KeyedStateStore, _explode_windows, hash_routing


def test_hash_routing_and_route_validation(tmp_path):
    assert hash_routing(6, 4) == (0, 1, 2, 3, 0, 1)
    store = KeyedStateStore(KeyedSpec(AggregateSpec(), None, key_groups=6, partitions=4), tmp_path)
    assert store.routing == hash_routing(6, 4)
    store.route([3, 3, 3, 0, 1, 2])
    assert store.routing == (3, 3, 3, 0, 1, 2)
    with pytest.raises(ValueError, match="6 entries"):
        store.route([0, 1])
    with pytest.raises(ValueError, match=r"0\.\.3"):
        store.route([0, 1, 2, 3, 4, 0])
    assert store.routing == (3, 3, 3, 0, 1, 2)  # a refused table changes nothing


def test_partition_rows_follow_the_batch_routing():
    plan = BatchPlan(7, 0, routing=(1, 1, 0, 2), partitions=4, group_rows={0: 5, 1: 7, 2: 11, 3: 2}, previous=None)
    assert plan.partition_rows == [11, 12, 2, 0]


def test_sliding_windows_match_a_direct_enumeration():
    et = np.array([0, 999_999, 1_000_000, 2_500_000, 7_300_000], dtype=np.int64)
    base = pd.DataFrame({"kg": 0, "key": 1, "x": 1.0, "et": et})
    out = _explode_windows(base, WindowSpec(size_s=3, slide_s=1))
    for t in et:
        starts = sorted(out.loc[out["et"] == t, "ws"])
        expected = [s for s in range(-3_000_000, 9_000_000, 1_000_000) if s <= t < s + 3_000_000]
        assert starts == expected, t
    tumbling = _explode_windows(base, WindowSpec(size_s=2))
    assert list(tumbling["ws"]) == [0, 0, 0, 2_000_000, 6_000_000]


def test_progress_rows_read_offsets_as_text_or_objects():
    event = {
        "name": "q",
        "batchId": 3,
        "numInputRows": 40,
        "durationMs": {"triggerExecution": 120},
        "eventTime": {"watermark": "2026-01-01T00:00:00.000Z"},
        "stateOperators": [{"numRowsTotal": 9}],
        "sources": [
            {
                "startOffset": '{"row": 100, "epoch": 1.0}',
                "endOffset": {"row": 140, "epoch": 1.0},
                "latestOffset": '{"row": 400, "epoch": 1.0}',
            }
        ],
    }
    row = progress_row(event)
    assert (row["start_row"], row["end_row"], row["latest_row"], row["backlog_rows"]) == (100, 140, 400, 260)
    assert row["batch_ms"] == 120 and row["state_rows"] == 9
    file_source = progress_row({"name": "f", "sources": [{"startOffset": '{"logOffset": 3}', "endOffset": None}]})
    assert file_source["backlog_rows"] is None and file_source["start_row"] is None
    # Kafka: offsets per topic and partition count records, so their sums do (two topics, three partitions)
    kafka = progress_row(
        {
            "name": "k",
            "sources": [
                {
                    "startOffset": '{"clicks": {"0": 10, "1": 20}, "views": {"0": 5}}',
                    "endOffset": {"clicks": {"0": 15, "1": 28}, "views": {"0": 5}},
                    "latestOffset": '{"clicks": {"0": 40, "1": 28}, "views": {"0": 9}}',
                }
            ],
        }
    )
    assert (kafka["start_row"], kafka["end_row"], kafka["latest_row"]) == (35, 48, 77)
    assert kafka["backlog_rows"] == 29  # 25 behind on clicks/0, 4 on views/0


def test_latency_percentiles_and_event_time_conversion():
    now = 1_000.0
    times = event_micros(pd.Series(pd.to_datetime([999.0, 998.0, 990.0], unit="s")))
    lat = latency_percentiles(now, times)
    assert lat["latency_max"] == pytest.approx(10.0) and lat["latency_p50"] == pytest.approx(2.0)
    assert latency_percentiles(now, np.zeros(0, np.int64))["latency_p50"] is None


def test_memory_sink_replaces_a_replayed_batch():
    class Frame:
        def __init__(self, n):
            self.n = n

        def toPandas(self):  # the one DataFrame method MemorySink uses
            return pd.DataFrame({"id": range(self.n), "event_time": pd.to_datetime([0] * self.n, unit="s")})

    sink = MemorySink()
    sink.write(Frame(3), 0)
    sink.write(Frame(5), 1)
    sink.write(Frame(2), 1)  # replay of batch 1
    assert list(sink.read().groupby("batch_id").size()) == [3, 2]


@pytest.mark.skipif(not hasattr(socket, "TCP_QUICKACK"), reason="TCP_QUICKACK is Linux's")
def test_acknowledge_promptly_leaves_delayed_ack_mode_on_every_tcp_socket():
    # TCP_QUICKACK 0 puts a socket in delayed-ACK ("pingpong") mode, where the worker's sockets sit mid-task
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
    accepted, _ = server.accept()
    unix = socket.socketpair(socket.AF_UNIX)
    try:
        for sock in (client, accepted):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 0)
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK) == 0
        acknowledge_promptly()
        for sock in (client, accepted):
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK) == 1
        unix[0].sendall(b"x")  # other sockets are left as they were, and open
        assert unix[1].recv(1) == b"x"
        client.sendall(b"y")
        assert accepted.recv(1) == b"y"
    finally:
        for sock in (client, accepted, server, *unix):
            sock.close()
