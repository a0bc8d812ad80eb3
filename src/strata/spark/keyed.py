"""A user's keyed aggregate (:func:`strata.model.keyed.keyed_aggregate`) on Strata's movable store.

A Python job whose template returns ``per_user(df)`` streams ``df`` itself;
each micro-batch of it then goes through the same steps as a YAML template's
managed keyed operator in :meth:`strata.spark.pipelines.Pipeline._batch`:
``store.prepare`` (route by key group, fold into the key groups' state),
the job's sink, ``store.commit`` (manifest, garbage collection). The store
reports rows per key group and per partition in each batch's record, which the
engine turns into the key-group loads AutoFlow's balancer reads (§3), and
``store.route`` is the knob its moves turn — exactly as for YAML jobs.

The store's directory is the job's, next to its one checkpoint
(``jobs/<job>/state/<name>``), so a restart for a new read limit or a resumed
run continues the same state; a rebuilt template keeps the store object (and
so the routing table L1 set) when its spec is unchanged.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from strata.model import AggregateSpec
from strata.model.keyed import KeyedAggregate, KeyedFrame
from strata.model.user import DeclarationError
from strata.spark.state import KeyedSpec, KeyedStateStore


def spec_of(frame: KeyedFrame, partitions: int) -> KeyedSpec:
    """The store's spec for a template's result (``partitions``: the state partitions, Spark tasks per batch)."""
    d = frame.declaration
    return KeyedSpec(
        AggregateSpec(fn=d.aggregate, column=d.value or "value"),
        d.window,
        d.key_groups,
        partitions,
        key=d.key,
        # a count without a value column counts rows, even if the frame has a column named "value"
        value=d.value or "*",
        event_time=d.event_time,
        key_type=frame.key_type,
    )


def attach(pipeline, result: object, declared: KeyedAggregate):
    """The DataFrame ``pipeline`` streams (the rows to aggregate), with its store set up for ``declared``.

    ``pipeline`` is a :class:`strata.spark.user.UserPipeline`; ``result`` what its template returned. Raises
    :class:`DeclarationError` (located by the caller) when the template did not return ``declared``'s result.
    """
    if not isinstance(result, KeyedFrame) or result.declaration is not declared:
        found = f"a keyed aggregate of job {result.declaration.job!r}" if isinstance(result, KeyedFrame) else result
        raise DeclarationError(
            f"template of job {declared.job!r}",
            f"the result of {declared.name}(df): the job declares keyed_aggregate(name={declared.name!r})",
            type(found).__name__ if not isinstance(found, str) else found,
        )
    spec = spec_of(result, pipeline.options.state_partitions)
    if pipeline.store is None or pipeline.store.spec != spec:
        directory = Path(pipeline.run_dir).parent / "state" / declared.name
        pipeline.store = KeyedStateStore(spec, directory)
    # the aggregate is the managed keyed PE of this pipeline whatever the engine's default (windows included):
    # the engine's observation and its moves look it up through options.is_managed
    pipeline.options = replace(pipeline.options, managed=frozenset({declared.name}))
    pipeline.in_batch = []
    return result.df
