"""What the event kernel offers its submodules: a structural type, so none of them imports the kernel back.

:class:`~strata.sim.kernel.Simulation` is built from the world
(:mod:`strata.sim.world`) and owns the metrics, migrations, recovery and
scaling machinery; those call back into it — schedule an event, number a
message, send, deliver, offer a node's cores — through :class:`Kernel`, which
the kernel satisfies structurally. The three parts they reach through the
kernel are typed by what is used of them here, for the same reason.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import networkx as nx

from strata.model import Scenario
from strata.protocol.units import Kind, Message
from strata.protocol.window import LatencySoFar
from strata.sim.runtime import Channel, InstanceRt, NodeRt, PeRt


class MetricsApi(Protocol):
    """The kernel's metrics as its submodules use them (:class:`strata.sim.metrics.Metrics`)."""

    def remote_bytes(self, now: float, nbytes: float) -> None: ...

    def lat_cursor(self) -> dict[str, int]: ...

    def lat_since(self, cursor: dict[str, int]) -> dict[str, tuple[Any, Any]]: ...

    def drop_totals(self) -> dict[str, int]: ...

    def latency_so_far(self) -> dict[str, LatencySoFar]: ...


class MigrationsApi(Protocol):
    """The kernel's migrations as its submodules use them (:class:`strata.sim.migration.Migrations`)."""

    log: list
    active: dict
    stop_active: dict

    def check_relocation(self, inst: InstanceRt, now: float) -> None: ...

    def state_sizes(self, pe: PeRt) -> list[float]: ...

    def pending(self) -> tuple[tuple[str, int], ...]: ...


class RecoveryApi(Protocol):
    """The kernel's recovery as its submodules use it (:class:`strata.sim.recovery.Recovery`)."""

    log: list


class Kernel(Protocol):
    """The world the kernel runs and the operations its submodules call (migration, recovery, scaling, metrics)."""

    scenario: Scenario
    now: float
    events: int  # heap events run so far
    bin_s: float  # width of the metrics' time bins
    latency: float  # network latency, s
    pes: dict[str, PeRt]  # by name, in topological order
    instances: list[InstanceRt]  # every instance, by global id
    nodes: list[NodeRt]  # in cluster order
    node_by_name: dict[str, NodeRt]
    order: list[str]  # PE names, topological
    graph: nx.DiGraph  # the joined graph of the running templates
    metrics: MetricsApi
    migrations: MigrationsApi
    recovery: RecoveryApi | None

    def schedule(self, t: float, code: int, a: object, b: object) -> None: ...

    def next_seq(self) -> int: ...

    def pending(self) -> Sequence[tuple]: ...

    def cancel(self, drop: Callable[[tuple], bool]) -> None: ...

    def set_bin_width(self, bin_s: float) -> None: ...

    def reroute(self) -> None: ...

    def offer(self, node: NodeRt, now: float) -> None: ...

    def send(self, src: InstanceRt, dst: InstanceRt, msg: Message, nbytes: float, now: float) -> None: ...

    def deliver(self, inst: InstanceRt, msg: Message, now: float) -> None: ...

    def release(self, inst: InstanceRt, ch: Channel, now: float) -> None: ...

    def fire(self, inst: InstanceRt, now: float) -> None: ...

    def transfer_time(self, src: NodeRt, dst: NodeRt, nbytes: float, now: float) -> float: ...

    def state_arrives(self, t: float, migration: object) -> None: ...

    def new_message(
        self,
        pe: PeRt,
        instance: int,
        upstream: int,
        now: float,
        event_time: float,
        key: int,
        kg: int,
        kind: Kind = Kind.DATA,
        payload: object = None,
    ) -> Message: ...
