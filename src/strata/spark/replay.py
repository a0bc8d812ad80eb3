"""What neither a replay nor a recomputation reproduces: nondeterministic expressions in a query.

Exactly once on Spark rests on replay: a batch that died is run again from
its checkpointed offsets and must write the same rows (Zaharia et al.,
Structured Streaming §6). An expression that draws a new value on each
evaluation — ``rand()``, ``uuid()``, a UDF declared nondeterministic,
``monotonically_increasing_id()`` — breaks that, and so does any reference
recomputation of the sink from the input. ``current_timestamp()`` is fixed per
micro-batch by Spark's offset log, so a replay repeats it, but an offline
recomputation cannot know it. Such a query's sink is reported "not
verifiable", never as lost or duplicated records.

Two checks, one list of names: :func:`sql_calls` reads a YAML template's SQL
text before any session exists (``strata validate``); :func:`plan_reason`
asks Spark's analyser about any query, a user's own included
(``LogicalPlan.deterministic``), naming a culprit from the same list.
"""

from __future__ import annotations

import re

NONDETERMINISTIC = (
    "rand",
    "randn",
    "random",
    "uuid",
    "shuffle",
    "monotonically_increasing_id",
    "spark_partition_id",
    "input_file_name",
)
"""Spark SQL functions whose value differs between two evaluations of the same row."""

CLOCK = ("current_timestamp", "current_date", "current_time", "localtimestamp", "now")
"""Spark SQL functions that read the batch's clock: repeated by a replay, unknown to a recomputation."""

_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"|`[^`]*`")


BARE_CLOCK = ("current_timestamp", "current_date", "localtimestamp")
"""The clock functions Spark SQL also accepts without brackets."""


def sql_calls(text: str, bare: bool = True) -> list[str]:
    """The calls in Spark SQL ``text`` to functions in :data:`NONDETERMINISTIC` or :data:`CLOCK`, in order.

    With ``bare``, a :data:`BARE_CLOCK` name also counts without brackets, as
    Spark SQL allows (not in a plan's text, where such a name is a column).
    """
    names = {*NONDETERMINISTIC, *CLOCK}
    found = []
    for m in re.finditer(r"\b([A-Za-z_][A-Za-z_0-9]*)\b(\s*\()?", _QUOTED.sub("''", text)):
        name = m.group(1).lower()
        called = m.group(2) or (bare and name in BARE_CLOCK)
        if name in names and called and name not in found:
            found.append(name)
    return found


def plan_reason(df) -> str | None:
    """Why the streaming DataFrame ``df``'s output cannot be recomputed from its input; None when it can.

    Spark's analysed plan says whether every expression is deterministic
    (a Python UDF counts as deterministic unless declared otherwise, as Spark
    treats it); the plan's text names the culprit where it is a known function.
    """
    plan = df._jdf.queryExecution().analyzed()
    text = plan.toString()
    calls = sql_calls(text, bare=False)
    if not plan.deterministic():
        named = [c for c in calls if c in NONDETERMINISTIC]
        what = ", ".join(f"{c}()" for c in named) if named else "a nondeterministic expression (e.g. a UDF so declared)"
        return f"{what} in its query: a replay or a recomputation draws other values"
    clock = [c for c in calls if c in CLOCK]
    if clock:
        return f"{', '.join(f'{c}()' for c in clock)} in its query: a recomputation cannot know the batch's clock"
    return None
