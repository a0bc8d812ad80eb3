"""What a simulation is run with, besides the scenario: every option of the simulator, typed, with its default.

``Simulation(scenario, SimOptions(seed=3, routing="local"))``; the engine
adapter (:class:`strata.sim.adapter.SimEngine`), ``strata simulate`` and the
benchmarks pass one :class:`SimOptions` rather than keyword arguments, so an
option is spelt, checked and documented here once. Checks that need the
scenario (node and PE names) are made when the world is built
(:mod:`strata.sim.world`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from strata.protocol.units import DispatchFactory

SERVICE_TIMES = ("deterministic", "exponential")
ROUTINGS = ("round-robin", "local")


@dataclass(frozen=True)
class SimOptions:
    """The simulator's options (DESIGN.md "How each level maps onto the simulator"); defaults in brackets.

    - ``seed`` [1]: same seed → identical metrics, bit for bit.
    - ``dispatch`` [None: FIFO, or ``turn_fifo`` with ``actor_turns``]: node view → the node's dispatch policy.
    - ``placement`` [None: round-robin]: ``{pe: [(node, share), ...]}`` | ``{pe: {node: share}}`` |
      ``{pe: [node, ...]}`` | ``{pe: node}`` | ``{(pe, i) or "pe#i": node}`` (:mod:`strata.sim.assignment`).
    - ``templates`` [None: every job's first template]: job → template name.
    - ``batch`` [1]: records per source message (coarse-graining for big runs; 1 = exact).
    - ``service`` ["deterministic"]: or "exponential", or ``{pe: ...}``; service time = records × cost_per_record.
    - ``network_latency`` [5e-4 s]: one way, after bytes / NIC bandwidth through the sender's NIC.
    - ``rack_latency`` [0 s]: more between racks, after bytes / the sending rack's uplink.
    - ``watermark_interval`` [0.2 s]: between source watermarks.
    - ``bin_s`` [1 s]: width of the time-series bins.
    - ``failures`` [none]: ``(node, down_at, up_at or None)``; None: the node stays down.
    - ``record_inputs`` [False]: keep every generated record (reference checks, :mod:`strata.sim.reference`).
    - ``base_dir`` [None: the working directory]: where a source's relative file paths start.
    - ``enforce_shares`` [False]: an instance placed with a cpu share never uses more (cgroup-like).
    - ``fire_cost`` [none]: window PE → core-seconds per record its results cost when the window fires.
    - ``recovery`` [None]: "replay": upstream backup, checkpoints and de-duplication, no record lost.
    - ``checkpoint_interval`` [5 s]: between checkpoints (``recovery="replay"``).
    - ``actor_turns`` [False]: an instance runs one message at a time (an actor's turns); the dispatch
      policy must be a :class:`~strata.protocol.units.TurnPolicy`.
    - ``routing`` ["round-robin"]: or "local", the plan's traffic model (:mod:`strata.model.traffic`).
    - ``shed_after_s`` [None: unbounded]: seconds of backlog over an enforced share before arrivals are dropped.
    - ``rate_limits`` [none]: source PE → records/s, from the start, over-limit records dropped.
    - ``borrow_idle`` [False]: with ``enforce_shares`` and FIFO, shares are guarantees and idle cores are lent.
    """

    seed: int = 1
    dispatch: DispatchFactory | None = None
    placement: Mapping | None = None
    templates: Mapping[str, str] | None = None
    batch: int = 1
    service: str | Mapping[str, str] = "deterministic"
    network_latency: float = 5e-4
    rack_latency: float = 0.0
    watermark_interval: float = 0.2
    bin_s: float = 1.0
    failures: Sequence[tuple[str, float, float | None]] = ()
    record_inputs: bool = False
    base_dir: Path | None = None
    enforce_shares: bool = False
    fire_cost: Mapping[str, float] = field(default_factory=dict)
    recovery: str | None = None
    checkpoint_interval: float = 5.0
    actor_turns: bool = False
    routing: str = "round-robin"
    shed_after_s: float | None = None
    rate_limits: Mapping[str, float | None] = field(default_factory=dict)
    borrow_idle: bool = False

    def __post_init__(self) -> None:
        """Raise ValueError naming the first option out of its range (those that need no scenario)."""
        if self.batch < 1:
            raise ValueError(f"batch: expected records per source message ≥ 1; found {self.batch}")
        if self.network_latency < 0 or self.rack_latency < 0 or self.watermark_interval <= 0 or self.bin_s <= 0:
            raise ValueError("network_latency and rack_latency must be ≥ 0; watermark_interval and bin_s > 0")
        if self.shed_after_s is not None and (not self.enforce_shares or self.shed_after_s < 0):
            raise ValueError("shed_after_s: expected seconds ≥ 0, with enforce_shares")
        if self.borrow_idle and (not self.enforce_shares or self.dispatch is not None or self.actor_turns):
            raise ValueError("borrow_idle: expected enforce_shares with the default FIFO dispatch (no actor turns)")
        if self.recovery not in (None, "replay"):
            raise ValueError(f"recovery: expected None or 'replay'; found {self.recovery!r}")
        if self.recovery and self.fire_cost:
            # A result computed by a queued unit of work after its window left the state has no checkpoint to return to.
            raise ValueError("recovery='replay' does not support fire_cost")
        if self.routing not in ROUTINGS:
            raise ValueError(f"routing: expected 'round-robin' or 'local'; found {self.routing!r}")
        chosen = [self.service] if isinstance(self.service, str) else self.service.values()
        bad = {s for s in chosen if s not in SERVICE_TIMES}
        if bad:
            raise ValueError(f"service: expected 'deterministic' or 'exponential'; found {sorted(bad)}")
