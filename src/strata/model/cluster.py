"""Clusters: processing nodes and the network between them (SODA §1.1, §4.2).

Each node has cores, memory, a NIC and labels (SODA's resource matching,
security and licence attributes). Nodes may sit in racks whose uplinks carry
inter-rack traffic; without racks the network is one switch and only NICs limit.
"""

from __future__ import annotations

from functools import cached_property

from pydantic import BaseModel, ConfigDict, Field, model_validator

from strata.model.quantities import Bandwidth, Bytes


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Node(_Spec):
    """One processing node."""

    name: str = Field(min_length=1)
    cores: float = Field(gt=0, description="cpu capacity in cores")
    memory: Bytes = Field(16 * 2**30, gt=0, description="bytes, or a size such as 16GiB")
    nic: Bandwidth = Field(1.25e8, gt=0, description="NIC bandwidth, bytes/s or e.g. 1Gbit/s")
    labels: frozenset[str] = frozenset()
    rack: str | None = None


class NodeGroup(_Spec):
    """``count`` identical nodes named ``{prefix}{i}`` (i from 0): a shorthand in specs."""

    prefix: str = Field(min_length=1)
    count: int = Field(gt=0)
    cores: float = Field(gt=0)
    memory: Bytes = Field(16 * 2**30, gt=0)
    nic: Bandwidth = Field(1.25e8, gt=0)
    labels: frozenset[str] = frozenset()
    rack: str | None = None

    def expand(self) -> list[Node]:
        fields = self.model_dump(exclude={"prefix", "count"})
        return [Node(name=f"{self.prefix}{i}", **fields) for i in range(self.count)]


class Rack(_Spec):
    name: str = Field(min_length=1)
    uplink: Bandwidth = Field(gt=0, description="rack uplink bandwidth, bytes/s or e.g. 10Gbit/s")


class Cluster(_Spec):
    """Nodes (listed one by one and/or in groups) and optional racks."""

    nodes: list[Node] = []
    node_groups: list[NodeGroup] = []
    racks: list[Rack] = []

    @model_validator(mode="after")
    def _consistent(self) -> Cluster:
        names = [n.name for n in self.all_nodes]
        if not names:
            raise ValueError("a cluster needs at least one node (nodes or node_groups)")
        seen: set[str] = set()
        for name in names:
            if name in seen:
                raise ValueError(f"node name {name!r} is used twice")
            seen.add(name)
        racks = {r.name for r in self.racks}
        for node in self.all_nodes:
            if node.rack is not None and node.rack not in racks:
                raise ValueError(f"node {node.name!r} names rack {node.rack!r}, which is not in racks")
        return self

    @cached_property
    def all_nodes(self) -> tuple[Node, ...]:
        """Every node, groups expanded, in spec order."""
        out = list(self.nodes)
        for group in self.node_groups:
            out.extend(group.expand())
        return tuple(out)

    @cached_property
    def node_index(self) -> dict[str, int]:
        return {n.name: i for i, n in enumerate(self.all_nodes)}

    @property
    def total_cores(self) -> float:
        return sum(n.cores for n in self.all_nodes)

    @property
    def total_memory(self) -> float:
        return sum(n.memory for n in self.all_nodes)

    @cached_property
    def labels(self) -> frozenset[str]:
        return frozenset().union(*(n.labels for n in self.all_nodes))

    def nodes_with(self, labels: frozenset[str]) -> list[Node]:
        """Nodes that carry every label in ``labels`` (resource matching)."""
        return [n for n in self.all_nodes if labels <= n.labels]
