"""The producer's files (strata.runners.producer): each format reads back as exactly the records written."""

import json

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from strata.model import SourceSpec
from strata.model.inputs import static_dimension
from strata.runners.producer import Producer, redelivered, team_b_input, team_c_input, team_d_input

SOURCE = SourceSpec(rate=200, keys={"count": 50, "zipf_s": 1.1}, seed=3)
EPOCH = 1_700_000_000.0
READ = {
    "json": lambda f: pd.read_json(f, lines=True, convert_dates=False, precise_float=True),
    "csv": lambda f: pd.read_csv(f, float_precision="round_trip"),
    "parquet": pd.read_parquet,
}


def as_utc(column: pd.Series) -> pd.Series:
    return pd.to_datetime(column, utc=True).astype("datetime64[us, UTC]")


@pytest.mark.parametrize("fmt", ["json", "csv", "parquet"])
def test_each_format_reads_back_as_the_records(tmp_path, fmt):
    producer = Producer(tmp_path / fmt, SOURCE, EPOCH, 10.0, fmt=fmt)
    producer.write(0, 40)
    producer.write(40, 97)
    files = sorted(p.name for p in (tmp_path / fmt).iterdir())
    assert files == [f"part-000000000000.{fmt}", f"part-000000000040.{fmt}"]  # no temporary left behind
    back = pd.concat([READ[fmt](tmp_path / fmt / f) for f in files], ignore_index=True)
    expected = producer.rows(0, 97)
    assert list(back.columns) == ["id", "key", "value", "event_time"]
    assert back["id"].tolist() == list(range(97))
    assert back["key"].tolist() == expected["key"].tolist()
    assert back["value"].tolist() == expected["value"].tolist()  # exact: no digits lost in text
    assert (as_utc(back["event_time"]) == as_utc(expected["event_time"])).all()  # to the microsecond
    # the records' times are the source's (200/s from EPOCH): record 96 is in the source's 0.5th second
    assert EPOCH <= as_utc(back["event_time"]).iloc[-1].timestamp() < EPOCH + 1.0


def test_parquet_times_are_microseconds_in_utc(tmp_path):
    """Spark reads Parquet TIMESTAMP(MICROS, UTC) as TIMESTAMP; pandas' nanoseconds it would refuse."""
    producer = Producer(tmp_path, SOURCE, EPOCH, 10.0, fmt="parquet")
    producer.write(0, 5)
    field = pq.read_schema(tmp_path / "part-000000000000.parquet").field("event_time")
    assert str(field.type) == "timestamp[us, tz=UTC]"


def test_json_lines_hold_iso_times(tmp_path):
    producer = Producer(tmp_path, SOURCE, EPOCH, 10.0)
    producer.write(0, 1)
    record = json.loads((tmp_path / "part-000000000000.json").read_text())
    stamp = pd.Timestamp(record["event_time"])
    assert record["event_time"].endswith("Z") and len(record["event_time"]) == len("2023-11-14T22:13:20.002500Z")
    assert stamp == as_utc(producer.rows(0, 1)["event_time"]).iloc[0]


def test_redelivered_repeats_every_tenth_record(tmp_path):
    producer = Producer(tmp_path, SOURCE, EPOCH, 10.0, extra=redelivered(), fmt="csv")
    producer.write(0, 35)
    back = READ["csv"](tmp_path / "part-000000000000.csv")
    assert len(back) == 39  # ids 0, 10, 20, 30 twice
    assert back["id"].value_counts().loc[[0, 10, 20, 30]].tolist() == [2, 2, 2, 2]
    assert back.drop_duplicates().shape[0] == 35  # a repeat is the same row


def test_team_b_input_writes_the_static_table_first(tmp_path):
    producers = team_b_input(tmp_path, SOURCE, EPOCH, 10.0)
    assert sorted(p.directory.name for p in producers) == ["events_csv", "events_parquet", "orders_csv"]
    assert [p.fmt for p in producers] == ["csv", "parquet", "csv"]
    users = READ["csv"](tmp_path / "users" / "users.csv")
    expected = static_dimension(50, seed=3)
    assert users["key"].tolist() == list(range(50))
    assert np.array_equal(users["dim"].to_numpy(), expected["dim"])
    assert [p.name for p in (tmp_path / "users").iterdir()] == ["users.csv"]


def test_an_unknown_format_is_refused(tmp_path):
    with pytest.raises(ValueError, match="expected one of json, csv, parquet; found 'avro'"):
        Producer(tmp_path, SOURCE, EPOCH, 10.0, fmt="avro")


def test_the_static_table_is_written_once(tmp_path):
    team_b_input(tmp_path, SOURCE, EPOCH, 10.0)
    table = tmp_path / "users" / "users.csv"
    before = table.stat().st_ino
    team_b_input(tmp_path, SOURCE, EPOCH, 10.0)  # the producers of a run whose layout was made beforehand
    assert table.stat().st_ino == before


def test_team_c_input_writes_the_same_records_as_json_and_parquet(tmp_path):
    producers = team_c_input(tmp_path, SOURCE, EPOCH, 10.0)
    assert [(p.directory.name, p.fmt) for p in producers] == [
        ("payments_json", "json"),
        ("payments_parquet", "parquet"),
    ]
    for p in producers:
        p.write(0, 20)
    back = {p.fmt: READ[p.fmt](p.directory / f"part-000000000000.{p.fmt}") for p in producers}
    assert back["json"]["id"].tolist() == back["parquet"]["id"].tolist() == list(range(20))
    assert back["json"]["value"].tolist() == back["parquet"]["value"].tolist()


def test_team_d_input_writes_json_and_csv_and_its_registry_once(tmp_path):
    producers = team_d_input(tmp_path, SOURCE, EPOCH, 10.0)
    assert [(p.directory.name, p.fmt) for p in producers] == [("telemetry_json", "json"), ("telemetry_csv", "csv")]
    registry = tmp_path / "devices" / "devices.parquet"
    before = registry.stat().st_ino
    team_d_input(tmp_path, SOURCE, EPOCH, 10.0)
    assert registry.stat().st_ino == before
    devices = pd.read_parquet(registry)
    expected = static_dimension(50, 3)
    assert devices["key"].tolist() == list(range(50))
    assert devices["dim"].tolist() == expected["dim"].tolist()
