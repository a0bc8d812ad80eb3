"""The code's layout where import-linter's contracts do not reach: no import cycle between the files of a package.

A cycle between files (a imports b, b imports a, directly or through others) means neither can be read, tested
or replaced alone; the simulator's kernel and its submodules meet through a structural type
(:mod:`strata.sim.kernel_api`) instead. ``grimp`` is the import graph import-linter builds (type-checking
imports included).
"""

from __future__ import annotations

from collections.abc import Iterable

import grimp
import networkx as nx
import pytest


def file_cycles(edges: Iterable[tuple[str, str]], package: str) -> list[list[str]]:
    """The groups of modules inside ``package`` (itself included) that import each other, each sorted."""
    inside = lambda m: m == package or m.startswith(package + ".")  # noqa: E731
    graph = nx.DiGraph((a, b) for a, b in edges if inside(a) and inside(b) and a != b)
    return sorted(sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1)


def test_file_cycles_finds_direct_and_indirect_cycles_inside_the_package_only():
    edges = [("p.a", "p.b"), ("p.b", "p.a"), ("p.c", "p.d"), ("p.d", "p.e"), ("p.e", "p.c"), ("p.f", "p.a")]
    edges += [("p.g", "q.x"), ("q.x", "p.g"), ("p", "p.a"), ("p.a", "p.a")]
    assert file_cycles(edges, "p") == [["p.a", "p.b"], ["p.c", "p.d", "p.e"]]
    assert file_cycles([("p.a", "p.b"), ("p.b", "p.c")], "p") == []


@pytest.fixture(scope="module")
def imports() -> list[tuple[str, str]]:
    graph = grimp.build_graph("strata")
    return [(m, n) for m in graph.modules for n in graph.find_modules_directly_imported_by(m)]


@pytest.mark.parametrize("package", ["strata.sim"])
def test_no_two_files_of_a_package_import_each_other(imports, package):
    assert file_cycles(imports, package) == []
