"""Shared fixtures: one local SparkSession for every test marked ``spark``."""

from __future__ import annotations

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
