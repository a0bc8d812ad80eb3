"""Reports: metrics tables → matplotlib plots → one self-contained HTML file (images embedded).

``tables`` reads a run directory's metrics tables and lays out the side-by-side
comparison; ``plots`` draws latency over time, latency CDFs, partition load and
the decisions timeline; ``html`` writes ``report.html``, which opens in any
browser with no server (``strata report RUN_DIR`` rebuilds it); ``targets``
judges a run's summary against the demo's targets (Strata vs FAIR by hand, vs
plain Spark) and finds the worst seed.
"""

from strata.report.html import write_report
from strata.report.tables import RunTables, comparison, load_tables

__all__ = ["RunTables", "comparison", "load_tables", "write_report"]
