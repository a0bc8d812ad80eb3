"""No two files of strata import each other, directly or through a cycle (DESIGN.md "Layout"; issue 27).

import-linter checks the layers between packages; this checks the files inside them. The import graph is
grimp's (the one import-linter uses), which counts every import in a file, function-level ones included, so
an import moved into a function to dodge a cycle is still seen. Every package and top-level module is held to
it.
"""

from __future__ import annotations

import grimp
import networkx as nx

CHECKED = (
    *("adapt", "api", "balance", "cli", "control", "dispatch", "generators", "model", "plan"),
    *("protocol", "report", "runners", "sim", "spark"),
)


def import_graph() -> nx.DiGraph:
    """strata's modules and the imports between them (an edge a → b: a imports b)."""
    graph = grimp.build_graph("strata", cache_dir=None)
    out = nx.DiGraph()
    for module in graph.modules:
        out.add_node(module)
        out.add_edges_from((module, imported) for imported in graph.find_modules_directly_imported_by(module))
    return out


def cycles(graph: nx.DiGraph, packages: tuple[str, ...]) -> list[list[str]]:
    """One import cycle (its modules in import order) per set of modules that import each other, for the sets
    holding a module of ``packages`` (names under ``strata.``)."""
    prefixes = tuple(f"strata.{p}" for p in packages)
    found = []
    for component in nx.strongly_connected_components(graph):
        if len(component) > 1 and any(m == p or m.startswith(p + ".") for m in component for p in prefixes):
            found.append([a for a, _ in nx.find_cycle(graph.subgraph(component), source=min(component))])
    return sorted(found)


def test_the_cycle_finder_names_a_cycle_and_passes_a_layered_graph():
    layered = nx.DiGraph([("strata.plan.a", "strata.plan.b"), ("strata.plan.b", "strata.model.c")])
    assert cycles(layered, ("plan", "model")) == []
    looped = nx.DiGraph([*layered.edges, ("strata.model.c", "strata.plan.a"), ("strata.sim.x", "strata.sim.y")])
    looped.add_edge("strata.sim.y", "strata.sim.x")
    assert cycles(looped, ("plan", "model")) == [["strata.model.c", "strata.plan.a", "strata.plan.b"]]
    assert cycles(looped, ("sim",)) == [["strata.sim.x", "strata.sim.y"]]


def test_no_two_files_import_each_other():
    found = cycles(import_graph(), CHECKED)
    assert not found, "files that import each other (each cycle in import order, back to its first file):\n" + (
        "\n".join("  " + " → ".join([*c, c[0]]) for c in found)
    )
