"""A Python worker's heap frozen out of PySpark's per-task full collection, again only once it loads modules."""

from __future__ import annotations

import gc
import sys
import types
import weakref

import pytest

from strata.spark import worker_heap
from strata.spark.worker_heap import freeze_worker_heap


class Node:
    """A container the cyclic collector tracks."""

    def __init__(self) -> None:
        self.other: Node | None = None


@pytest.fixture
def fresh_heap(monkeypatch):
    """This process as a worker that has never frozen its heap; unfrozen again afterwards."""
    gc.unfreeze()
    monkeypatch.setattr(worker_heap, "_loaded_at_freeze", 0)
    yield
    gc.unfreeze()


def test_the_heap_is_collected_then_frozen_and_frozen_again_only_after_modules_are_loaded(fresh_heap, monkeypatch):
    kept = Node()
    garbage = Node()
    garbage.other = Node()
    garbage.other.other = garbage  # a cycle only the collector frees
    gone = weakref.ref(garbage)
    del garbage
    assert freeze_worker_heap() is True
    assert gone() is None  # collected first: cyclic garbage is not frozen for good
    frozen = gc.get_freeze_count()
    assert frozen > 0
    assert not any(o is kept for o in gc.get_objects())  # out of every generation the collector scans
    assert freeze_worker_heap() is False  # nothing loaded since: no collection, nothing more frozen
    # nothing frozen since; other threads of the process (py4j's, Spark's) may free frozen objects meanwhile
    assert gc.get_freeze_count() <= frozen
    monkeypatch.setitem(sys.modules, "strata_test_loaded_later", types.ModuleType("strata_test_loaded_later"))
    later = Node()
    assert any(o is later for o in gc.get_objects())
    assert freeze_worker_heap() is True
    # frozen: out of every generation; the count is not compared, as other threads free frozen objects meanwhile
    assert not any(o is later for o in gc.get_objects())
