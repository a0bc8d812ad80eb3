"""``strata.protocol``: the plain-data contract between engines and scheduling levels (DESIGN.md, rule 1).

Policies (``strata.dispatch``, ``strata.balance``, ``strata.control``,
``strata.adapt``) import their data types from here, never from an engine.
:mod:`strata.protocol.units` holds what one unit of work looks like and what a
per-node dispatch policy implements; :mod:`strata.protocol.window` holds what an
engine measures over a window and the actions it enforces. Both engines
(``strata.sim`` and ``strata.spark``) produce and consume these types.
"""
