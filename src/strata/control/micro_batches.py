"""Decisions about micro-batches, for an engine that runs queries as micro-batches (Spark; DESIGN.md rule 2).

Spark enforces three things a policy decides (docs/hierarchy.md, "Micro-batch
knobs", lists every default):

- **Trigger intervals** (:func:`trigger_intervals`): a job with a latency
  target above ``critical_latency_s`` runs a micro-batch every
  ``target / batches_per_target`` seconds, at most ``trigger_max_s``; a
  latency-critical job runs its batches back to back (no trigger). Cameo's
  deadline dispatch (Xu et al., §4) needs several batches inside a target to
  order; a longer trigger only adds latency.
- **The gate's concurrency bound** (:func:`gate_config`): the session's cores
  less ``gate_reserved_cores`` (at least 1), so a batch of a latency-critical
  query that goes over the bound always finds a core no other batch was let in
  to take (measured on bench_platform: docs/spark.md).
- **Read-limit restarts** (:class:`ReadLimitRestarts`): a source whose read
  limit Spark reads only at query start (``maxFilesPerTrigger``,
  ``maxOffsetsPerTrigger``) can follow L0's rate cap only by a restart, which
  costs a batch's planning: the limit is changed only when it moves by
  ``read_limit_ratio`` or more and not within ``restart_every_s`` of the last
  restart; with ``cap_reads`` off, never.

Pure: plain data in, plain data out.
"""

from __future__ import annotations

from dataclasses import dataclass

from strata.dispatch.gate import GateConfig
from strata.model import Scenario


def trigger_intervals(scenario: Scenario, critical_s: float, per_target: float, most_s: float) -> dict[str, float]:
    """Job → processing-time trigger (s) for every job whose latency target is over ``critical_s``:
    ``min(most_s, target / per_target)``; latency-critical jobs are absent (batches back to back)."""
    return {
        j.id: min(most_s, j.target_latency_s / per_target) for j in scenario.jobs if j.target_latency_s > critical_s
    }


def gate_config(parallelism: int, reserved: int) -> GateConfig:
    """The gate's knobs for a session of ``parallelism`` cores: at most ``parallelism − reserved`` batches
    running at once (at least 1), the other knobs at their defaults."""
    return GateConfig(max_running=max(1, parallelism - reserved))


@dataclass(frozen=True)
class ReadLimitRestarts:
    """When a read limit that only a query restart changes is worth a restart (a
    :class:`strata.protocol.units.ReadLimitPolicy`)."""

    enabled: bool = False
    ratio: float = 1.5  # the limit moves by this factor or more (either way)
    every_s: float = 20.0  # at most one restart per query this often

    def worth_restart(self, current: int | None, proposed: int | None, since_restart_s: float) -> bool:
        """True when ``current`` should become ``proposed`` now (None: no limit)."""
        if not self.enabled or current == proposed:
            return False
        both = current is not None and proposed is not None
        if both and max(current, proposed) < self.ratio * min(current, proposed):
            return False  # a small change is not worth a batch's planning
        return since_restart_s >= self.every_s
