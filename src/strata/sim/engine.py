"""The discrete-event engine: a heap of timed events over nodes, NICs and operator instances.

Model (issue 4; DESIGN.md "How each level maps onto the simulator"):

- A node has ``round(cores)`` cores (at least one), each running one message at a
  time, non-preemptively; which queued message runs next is the node's
  dispatch policy's choice (``pop``), offered to every idle core after every
  push and completion. By default any idle core may run any instance's
  message, several of one instance at once; with ``actor_turns`` an instance
  runs one message at a time, as an actor (an Orleans activation, a Flink
  subtask's thread) does: the policy holds its other messages meanwhile.
- A message to an instance on another node leaves through the sender's NIC
  (FIFO, ``bytes / bandwidth``) and arrives ``network_latency`` later; on one
  node it arrives at once. Every upstream → instance channel is FIFO.
- Keyed PEs route by key → key group → instance (``route``); others round-robin
  from each sender. With ``routing="local"`` (the plan's traffic model,
  :mod:`strata.model.traffic`) key groups are apportioned to instances by cpu
  share, sources spread their records by cpu share, and unkeyed streams go
  locality first: from each node, min(sending share, receiving share) stays on
  the node and the rest crosses to where the downstream PE lacks input, so each
  instance receives its cpu share (a weighted round-robin table per sender
  instance and stream, rebuilt when instances move or are added). Control
  messages (watermarks, migration markers) are held at the receiver until
  every earlier data message of their channel has been processed (:class:`strata.sim.runtime.Channel`).
- Watermarks are in-band: every ``watermark_interval`` each source instance
  emits its generation time (sources are in event-time order, so it is exact);
  an instance's watermark is the minimum over its upstream instances. Only PEs
  upstream of a window carry them.
- Sinks record end-to-end latency of every output: now − the event time of the
  newest source record contributing to it (for a window result, the newest
  record in the window).

The engine decides nothing: dispatch, routing changes, placement and rate
limits come from the plugged-in objects and controllers.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

import networkx as nx
import numpy as np

from strata.model import OperatorKind, Scenario, joined_graph, topological_order
from strata.model.traffic import ROUTE_SLOTS, apportion, key_group_owners, runs, transport
from strata.protocol.units import DispatchFactory, KeyGroupLoad, Kind, Message, Move, NodeView, TurnPolicy
from strata.protocol.window import Actions, InstanceLoad, LatencyStats, WindowStats
from strata.sim import scaling
from strata.sim.fifo import fifo, turn_fifo
from strata.sim.metrics import Metrics
from strata.sim.migration import Migrations
from strata.sim.placement import resolve_placement
from strata.sim.recovery import Recovery
from strata.sim.runtime import (
    DUPLICATE,
    EV_ACTION,
    EV_CHECKPOINT,
    EV_CONTROL,
    EV_DELIVER,
    EV_DONE,
    EV_FAIL,
    EV_GEN,
    EV_RECOVER,
    EV_STATE,
    EV_THROTTLE,
    EV_TICK,
    KEYED,
    PASS,
    SINK,
    SOURCE,
    WINDOW,
    Channel,
    InstanceRt,
    NodeRt,
    PeRt,
    RackRt,
)
from strata.sim.semantics import (
    accumulate,
    aggregate,
    key_group,
    outputs,
    record_id,
    window_due,
    window_starts,
    window_uid,
)
from strata.sim.workload import SourceStream

SHARE_BURST = 0.01  # seconds of cpu an instance may run ahead of its share
_CODES = {
    OperatorKind.SOURCE: SOURCE,
    OperatorKind.FILTER: PASS,
    OperatorKind.MAP: PASS,
    OperatorKind.JOIN: KEYED,
    OperatorKind.KEYED_STATEFUL: KEYED,
    OperatorKind.WINDOW_AGGREGATE: WINDOW,
    OperatorKind.SINK: SINK,
}
CONTROL_BYTES = 64.0
_DATA = Kind.DATA
_INF = float("inf")

Controller = Callable[[WindowStats], "Actions | Iterable[Move] | Move | None"]


class Simulation:
    """A cluster running a scenario's jobs message by message (see :mod:`strata.sim` for the API)."""

    def __init__(
        self,
        scenario: Scenario,
        *,
        seed: int = 1,
        dispatch: DispatchFactory | None = None,
        placement: Mapping | None = None,
        controllers: Iterable[tuple[float, Controller]] = (),
        templates: Mapping[str, str] | None = None,
        batch: int = 1,
        service: str | Mapping[str, str] = "deterministic",
        network_latency: float = 5e-4,
        rack_latency: float = 0.0,
        watermark_interval: float = 0.2,
        bin_s: float = 1.0,
        failures: Iterable[tuple[str, float, float | None]] = (),
        record_inputs: bool = False,
        base_dir: Path | None = None,
        enforce_shares: bool = False,
        fire_cost: Mapping[str, float] | None = None,
        recovery: str | None = None,
        checkpoint_interval: float = 5.0,
        actor_turns: bool = False,
        routing: str = "round-robin",
        shed_after_s: float | None = None,
        rate_limits: Mapping[str, float | None] | None = None,
        borrow_idle: bool = False,
    ) -> None:
        if batch < 1:
            raise ValueError(f"batch: expected records per source message ≥ 1; found {batch}")
        if network_latency < 0 or rack_latency < 0 or watermark_interval <= 0 or bin_s <= 0:
            raise ValueError("network_latency and rack_latency must be ≥ 0; watermark_interval and bin_s > 0")
        self.scenario = scenario
        self.seed = seed
        self.batch = batch
        self.latency = network_latency
        self.rack_latency = rack_latency
        self.wm_interval = watermark_interval
        self.bin_s = bin_s
        self._inv_bin = 1.0 / bin_s
        self.record_inputs = record_inputs
        self.enforce_shares = enforce_shares
        if shed_after_s is not None and (not enforce_shares or shed_after_s < 0):
            raise ValueError("shed_after_s: expected seconds ≥ 0, with enforce_shares")
        # SODA §3's PE processes what its cpu buys and no more: an instance held to its share whose backlog over
        # the share exceeds this many seconds drops what arrives (``dropped["overflow"]``), as a PE with a bounded
        # input buffer does; None: it queues without bound. A PE downstream of a window aggregate buffers that
        # much more than the window's slide: the window emits a slide's results at once (its burst), which a
        # PE given the cpu for their mean rate takes the slide to process.
        self.shed_after_s = shed_after_s
        if borrow_idle and (not enforce_shares or dispatch is not None or actor_turns):
            raise ValueError("borrow_idle: expected enforce_shares with the default FIFO dispatch (no actor turns)")
        # Shares as guarantees rather than caps (Linux CFS weights, not a cpu quota): a core that would idle runs
        # the oldest message an instance holds back over its share, uncharged, so the plan's work runs first and
        # work beyond it only on cores the plan leaves idle.
        self.borrow_idle = borrow_idle
        self.fire_cost = dict(fire_cost or {})
        if recovery not in (None, "replay"):
            raise ValueError(f"recovery: expected None or 'replay'; found {recovery!r}")
        if recovery and self.fire_cost:
            # A result computed by a queued unit of work after its window left the state has no checkpoint to return to.
            raise ValueError("recovery='replay' does not support fire_cost")
        self.actor_turns = actor_turns
        if routing not in ("round-robin", "local"):
            raise ValueError(f"routing: expected 'round-robin' or 'local'; found {routing!r}")
        self.routing = routing
        self.factory: DispatchFactory = dispatch or (turn_fifo if actor_turns else fifo)
        self.graph = graph = joined_graph(scenario, templates)
        self.order = order = topological_order(graph)
        self.now = 0.0
        self._seq = 0
        self._heap: list[tuple] = []
        self._svc_rng = np.random.default_rng([seed, 0x5E41CE])
        self._exp: list[float] = []
        self.events = 0
        self.inputs: list[tuple[str, int, float, int, int, int]] = []  # (pe, uid, t, key, value, records)

        cluster_nodes = scenario.cluster.all_nodes
        counts = {pe: graph.nodes[pe]["op"].instances for pe in order}
        assign = resolve_placement(placement, order, counts, [n.name for n in cluster_nodes])
        # A PE the placement gives no cpu at all (a plan's PE with cpu 0 on every node) is not run, as in the
        # plan's rate model (SODA §3: a PE processes what its cpu buys): nothing is sent to it (counted as
        # ``dropped["no_cpu"]``), a source generates nothing, watermarks still pass. Sinks need no cpu and run.
        self._no_cpu: frozenset[str] = frozenset(
            pe
            for pe, v in (placement or {}).items()
            if isinstance(v, Mapping) and v and pe in graph and not runs(graph.nodes[pe]["op"], sum(v.values()))
        )
        self.pes: dict[str, PeRt] = {}
        for i, pe in enumerate(order):
            job = graph.nodes[pe]["job"]
            op = graph.nodes[pe]["op"]
            rt = PeRt(pe, job, op, i, _CODES[op.kind], scenario.job[job].target_latency_s)
            if op.kind is OperatorKind.SOURCE:
                rt.stream = SourceStream(op.source, seed, i, batch, base_dir)
            self.pes[pe] = rt
        for pe, rt in self.pes.items():
            rt.exp = (service if isinstance(service, str) else service.get(pe, "deterministic")) == "exponential"
            if shed_after_s is not None:
                slides = [self.pes[w].slide for w in nx.ancestors(graph, pe) if self.pes[w].slide > 0]
                rt.buffer = shed_after_s + max(slides, default=0.0)
        bad = {
            s
            for s in ([service] if isinstance(service, str) else service.values())
            if s not in ("deterministic", "exponential")
        }
        if bad:
            raise ValueError(f"service: expected 'deterministic' or 'exponential'; found {sorted(bad)}")
        for u, v, data in graph.edges(data=True):
            self.pes[u].down.append((self.pes[v], data["stream"].bytes_per_record))
        windows = [pe for pe in order if self.pes[pe].code == WINDOW]
        need = set(windows).union(*(nx.ancestors(graph, w) for w in windows)) if windows else set()
        for pe in need:
            self.pes[pe].needs_wm = True
        for pe, c in self.fire_cost.items():
            if pe not in windows or c < 0:
                raise ValueError(f"fire_cost[{pe!r}]: expected a window PE and core-seconds per record ≥ 0")
            if any(d in windows for d in nx.descendants(graph, pe)):
                # Its results would be computed after the watermark it forwards: a window downstream could fire early.
                raise ValueError(f"fire_cost[{pe!r}]: not supported with a window downstream")

        node_pes: dict[str, list[str]] = {n.name: [] for n in cluster_nodes}
        node_share: dict[str, dict[str, float]] = {n.name: {} for n in cluster_nodes}
        for pe in order:
            for node, share in assign[pe]:
                if pe not in node_pes[node]:
                    node_pes[node].append(pe)
                if share is not None:
                    node_share[node][pe] = node_share[node].get(pe, 0.0) + share
        # Every PE and job, not only the node's: instances may be relocated here later.
        downstream = {pe: tuple(graph.successors(pe)) for pe in order}
        costs = {pe: self.pes[pe].cost for pe in order}
        targets = {j.id: j.target_latency_s for j in scenario.jobs if any(self.pes[p].job == j.id for p in order)}
        self.nodes: list[NodeRt] = []
        racks = {r.name: RackRt(r.name, r.uplink) for r in scenario.cluster.racks}
        self.node_by_name: dict[str, NodeRt] = {}
        for k, n in enumerate(cluster_nodes):
            view = NodeView(
                name=n.name,
                cores=max(1, round(n.cores)),
                pes=tuple(node_pes[n.name]),
                target_latency=targets,
                weight=dict.fromkeys(targets, 1.0),
                downstream=downstream,
                cost_per_record=costs,
                share=node_share[n.name],
            )
            policy = self.factory(view)
            if actor_turns and not isinstance(policy, TurnPolicy):
                # Without hold/free the policy could hand a second core a message of a running instance.
                raise ValueError(
                    f"actor_turns: the dispatch policy {type(policy).__name__} has no hold/free "
                    "(strata.protocol.units.TurnPolicy); FIFO under turns is strata.sim.turn_fifo"
                )
            rt = NodeRt(n.name, k, view.cores, n.nic, view, policy)
            if n.rack is not None:
                rt.rack = racks[n.rack]
            self.nodes.append(rt)
            self.node_by_name[n.name] = rt
        self.instances: list[InstanceRt] = []
        for pe in order:
            rt = self.pes[pe]
            for j, (node, share) in enumerate(assign[pe]):
                inst = InstanceRt(len(self.instances), rt, j, self.node_by_name[node], share)
                inst.rr = [0] * len(rt.down)
                rt.instances.append(inst)
                self.instances.append(inst)
            if rt.keyed:
                rt.route[:] = [g % len(rt.instances) for g in range(rt.groups)]
        if routing == "local":
            for rt in self.pes.values():
                if rt.keyed:
                    rt.route[:] = key_group_owners(rt.groups, _weights(rt))
        for rt in self.pes.values():
            rt.outs = [
                (d, bpr, d.keyed, d.groups, d.route, d.instances, d.code == WINDOW, d.name in self._no_cpu)
                for d, bpr in rt.down
            ]
        for pe in order:
            rt = self.pes[pe]
            rt.upstream = [i for u in graph.predecessors(pe) for i in self.pes[u].instances]
            if rt.needs_wm:
                ups = [-1] if rt.code == SOURCE else [i.gid for i in rt.upstream]
                for inst in rt.instances:
                    inst.wm_in = dict.fromkeys(ups, -_INF)
        self._instances_of = {name: pe.instances for name, pe in self.pes.items()}
        if routing == "local":
            self.reroute()
        self.metrics = Metrics(self)
        self.migrations = Migrations(self)
        self._controllers: list[dict] = []
        for period, callback in controllers:
            self.every(period, callback)
        for pe in self.pes.values():
            if pe.stream is not None:
                t = pe.stream.next_time() if pe.name not in self._no_cpu else None
                if t is not None:
                    self.schedule(t, EV_GEN, pe, None)
                if pe.needs_wm:
                    pe.ticks = 1
                    self.schedule(self.wm_interval, EV_TICK, pe, None)
        for node, down_at, up_at in failures:
            if node not in self.node_by_name:
                raise ValueError(f"failures: expected a node of the cluster; found {node!r}")
            self.schedule(down_at, EV_FAIL, self.node_by_name[node], None)
            if up_at is not None:
                self.schedule(up_at, EV_RECOVER, self.node_by_name[node], None)
        self._gen_stop = _INF
        self.recovery: Recovery | None = Recovery(self, checkpoint_interval) if recovery else None
        if rate_limits:  # from the start, e.g. a plan's source rates (strata simulate --plan)
            self.apply(Actions(rate_limits=dict(rate_limits), limit_mode="drop"))

    # ------------------------------------------------------------------ public API

    def reroute(self) -> None:
        """routing="local": rebuild the sources' and senders' weighted tables from where the instances run now.

        Called at start and after instances move or are added (not under recovery="replay"). Key-group
        ownership is not re-apportioned (controllers move key groups themselves).
        """
        if self.routing != "local" or getattr(self, "recovery", None) is not None:
            # recovery="replay" routes by record id through the tables: they stay fixed, so a record
            # computed again after a restore reaches the instance that de-duplicates it.
            return
        for pe in self.pes.values():
            if pe.stream is not None:
                pe.gen = _table(dict(enumerate(_weights(pe))))
            sending = _sending(pe)
            supply: dict[str, float] = {}
            for inst, w in zip(pe.instances, sending, strict=True):
                supply[inst.node.name] = supply.get(inst.node.name, 0.0) + w
            by_node: dict[str, list] = {name: [] for name in supply}
            for d, _ in pe.down:
                w = _weights(d)
                if d.keyed or len(d.instances) == 1:
                    for tables in by_node.values():
                        tables.append(None)
                    continue
                total = sum(w)
                demand: dict[str, float] = {}
                on: dict[str, list[int]] = {}
                for k, inst in enumerate(d.instances):
                    demand[inst.node.name] = demand.get(inst.node.name, 0.0) + w[k] / total
                    on.setdefault(inst.node.name, []).append(k)
                flow = transport(supply, demand)
                for n, tables in by_node.items():
                    dist: dict[int, float] = {}
                    for m, ks in on.items():
                        x = flow.get((n, m), 0.0)
                        if x > 0:
                            wm = sum(w[k] for k in ks)
                            for k in ks:
                                dist[k] = dist.get(k, 0.0) + x * w[k] / wm
                    tables.append(_table(dist or dict(enumerate(w))))
            for inst in pe.instances:
                inst.routes = by_node.get(inst.node.name) if pe.down else None
            for inst in pe.instances:
                if inst.routes is None and pe.down:  # a sender with no share (e.g. owning no key group)
                    inst.routes = next(iter(by_node.values()), None)

    def set_bin_width(self, bin_s: float) -> None:
        """Width of the time-series bins from now on (the metrics coarsen their bins to bound their memory)."""
        self.bin_s = bin_s
        self._inv_bin = 1.0 / bin_s

    def every(self, period: float, callback: Controller) -> None:
        """Call ``callback(observation)`` every ``period`` seconds of simulated time; enforce what it returns."""
        if period <= 0:
            raise ValueError(f"every: expected a period > 0 seconds; found {period}")
        ctrl = {"period": period, "callback": callback, "start": self.now, "snap": self.snapshot()}
        self._controllers.append(ctrl)
        self.schedule(self.now + period, EV_CONTROL, ctrl, None)

    def apply(self, actions: Actions | Iterable[Move] | Move | None, at: float | None = None) -> None:
        """Enforce ``actions`` now (or at sim time ``at``): moves, placement, rate limits."""
        if at is not None and at > self.now:
            self.schedule(at, EV_ACTION, actions, None)
            return
        self._apply(actions)

    def run(
        self, until: float, *, drain: float | None = None, progress: Callable[[float], None] | None = None
    ) -> Simulation:
        """Advance to sim time ``until``.

        With ``drain`` set, sources stop generating at ``until`` and send a
        final watermark (every window fires), and the run continues up to
        ``drain`` more seconds or until nothing is left to do, so that every
        record reaches its end (exactly-once checks).
        """
        if until < self.now:
            raise ValueError(f"run: expected a time ≥ now ({self.now:g} s); found {until:g}")
        if drain is not None and drain < 0:
            raise ValueError(f"run: expected drain ≥ 0 seconds; found {drain:g}")
        end = until
        if drain is not None:
            self._gen_stop = until
            for pe in self.pes.values():
                if pe.stream is not None and pe.needs_wm:
                    self.schedule(until, EV_TICK, pe, None)
            end = until + drain
        self.metrics.extend(end)
        heap = self._heap
        pop = heapq.heappop
        gen, deliver, done = self._gen, self.deliver, self._done
        next_report = self.now + 1.0 if progress is not None else _INF  # one float compare per event
        events = 0
        while heap and heap[0][0] <= end:
            t, _, code, a, b = pop(heap)
            self.now = t
            events += 1
            if code == EV_DONE:
                done(a, b, t)
            elif code == EV_DELIVER:
                deliver(a, b, t)
            elif code == EV_GEN:
                gen(a, t)
            elif code == EV_TICK:
                self._tick(a, t)
            elif code == EV_CONTROL:
                self._control(a, t)
            elif code == EV_STATE:
                self.migrations.arrived(a, t)
                if self.recovery is not None:
                    self.recovery.installed(a, t)
            elif code == EV_FAIL:
                self._fail(a, t)
            elif code == EV_RECOVER:
                self._recover(a, t)
            elif code == EV_ACTION:
                self._apply(a)
            elif code == EV_THROTTLE:
                self._unthrottle(a, t)
            elif code == EV_CHECKPOINT:
                self.recovery.tick(t)
            if t >= next_report:
                progress(t)
                next_report = t + 1.0
        self.events += events
        # A drained run ends when its last record does (or at until + drain).
        self.now = end if drain is None else max(self.now, until)
        if progress is not None:
            progress(self.now)
        return self

    # --------------------------------------------------------------- scheduling

    # The kernel's API for its own submodules (migration, recovery, scaling, metrics):
    # schedule an event, number a message, look at or cancel what is still to happen.
    # The hot paths inside this module push onto the heap directly.

    def schedule(self, t: float, code: int, a: object, b: object) -> None:
        """Schedule event ``code`` with arguments ``a``, ``b`` at sim time ``t`` (ties run in scheduling order)."""
        self._seq += 1
        heapq.heappush(self._heap, (t, self._seq, code, a, b))

    def next_seq(self) -> int:
        """A fresh sequence number (messages and events share one counter: the order of creation)."""
        self._seq += 1
        return self._seq

    def pending(self) -> Sequence[tuple]:
        """The events still to happen, as ``(time, seq, code, a, b)`` in heap order; read only."""
        return self._heap

    def cancel(self, drop: Callable[[tuple], bool]) -> None:
        """Remove every pending event for which ``drop(event)`` is true."""
        heap = self._heap
        heap[:] = [ev for ev in heap if not drop(ev)]
        heapq.heapify(heap)

    def _service(self, pe: PeRt, records: int) -> float:
        cost = records * pe.cost
        if pe.exp:
            if not self._exp:
                self._exp = self._svc_rng.standard_exponential(4096).tolist()
            cost *= self._exp.pop()
        return cost

    def offer(self, node: NodeRt, now: float) -> None:
        """Give every idle core of ``node`` the policy's next message."""
        fifo = node.fifo
        policy = node.policy if fifo is None else None
        instances = self._instances_of
        while node.idle > 0:
            borrowed = False
            if fifo is not None:
                if not fifo:
                    if not node.over:
                        return
                    msg = self._held_back(node)
                    if msg is None:
                        return
                    borrowed = True
                else:
                    msg = fifo.popleft()
            else:
                msg = policy.pop(now)
                if msg is None:
                    return
            inst = instances[msg.pe][msg.instance]
            if not borrowed:
                inst.queued -= msg.records
            if inst.gone and msg.key_group in inst.gone:
                self.migrations.redirect(inst, msg, now)
                continue
            if inst.paused:
                inst.held.append(msg)
                if inst.moving is not None:
                    self.migrations.check_relocation(inst, now)
                continue
            self._start(node, inst, msg, now, borrowed)

    def _held_back(self, node: NodeRt) -> Message | None:
        """borrow_idle: the oldest message an instance on ``node`` holds back over its share, taken from it."""
        best = None
        for inst in list(node.over):
            if not inst.throttled or inst.node is not node or inst.paused:
                del node.over[inst]  # drained, moved or paused since (a pause holds its messages)
            elif best is None or inst.throttled[0].created < best.throttled[0].created:
                best = inst
        if best is None:
            return None
        msg = best.throttled.popleft()
        if not best.throttled:
            del node.over[best]
        return msg

    def _start(self, node: NodeRt, inst: InstanceRt, msg: Message, now: float, borrowed: bool = False) -> None:
        """Run ``msg`` on an idle core of ``node``, unless ``inst`` is over its enforced cpu share (a message
        ``borrowed`` by an idle core runs at once and is not charged to the share)."""
        if inst.share is not None and self.enforce_shares and not borrowed:
            if inst.vtime > now + SHARE_BURST:
                if not inst.throttled:
                    self.schedule(inst.vtime - SHARE_BURST, EV_THROTTLE, inst, None)
                    if self.borrow_idle:
                        node.over[inst] = None
                inst.throttled.append(msg)
                return
            inst.vtime = (inst.vtime if inst.vtime > now else now) + msg.cost / inst.share
        node.idle -= 1
        inst.pe.running += 1
        inst.running += 1
        node.running[msg.seq] = msg
        if self.actor_turns:
            node.policy.hold(msg.pe, msg.instance)
        self._seq += 1
        heapq.heappush(self._heap, (now + msg.cost, self._seq, EV_DONE, inst, msg))

    def _unthrottle(self, inst: InstanceRt, now: float) -> None:
        """An instance's cpu share has caught up: as many of its throttled messages as the share
        pays for go back to dispatch, in arrival order; the rest wait for the next release."""
        waiting = inst.throttled
        if inst.paused:
            inst.held.extend(waiting)
            waiting.clear()
            return
        if not waiting or not inst.node.up:
            return  # a failure already counted them as lost
        v = inst.vtime if inst.vtime > now else now
        policy = inst.node.policy
        while waiting and v <= now + SHARE_BURST:
            msg = waiting.popleft()
            v += msg.cost / inst.share
            inst.queued += msg.records
            policy.push(msg, now)
        if waiting:
            self.schedule(v - SHARE_BURST, EV_THROTTLE, inst, None)
        self.offer(inst.node, now)

    def send(self, src: InstanceRt, dst: InstanceRt, msg: Message, nbytes: float, now: float) -> None:
        """Put ``msg`` on the channel src → dst: at once on one node, else through src's NIC."""
        node = src.node
        if dst.node is node:
            self.metrics.local[int(now * self._inv_bin)] += nbytes
            self.deliver(dst, msg, now)
            return
        self.metrics.remote[int(now * self._inv_bin)] += nbytes
        start = node.nic_free if node.nic_free > now else now
        node.nic_free = sent = start + nbytes / node.nic
        if node.rack is not dst.node.rack:
            sent = self._uplink(node.rack, sent, nbytes, now, False)
        arrive = sent + self.latency
        last = src.last_arrival.get(dst.gid, 0.0)
        if arrive < last:  # FIFO per channel even after the destination changed node
            arrive = last
        src.last_arrival[dst.gid] = arrive
        self._seq += 1
        heapq.heappush(self._heap, (arrive, self._seq, EV_DELIVER, dst, msg))

    def transfer_time(self, src: NodeRt, dst: NodeRt, nbytes: float, now: float) -> float:
        """When ``nbytes`` of state sent now from ``src`` arrive at ``dst``: bytes / bandwidth + latency.

        State transfers from one node queue behind each other but not in front
        of data messages (packets interleave on a real NIC; a bulk transfer
        does not hold every record behind it).
        """
        if src is dst:
            return now
        start = src.state_free if src.state_free > now else now
        src.state_free = sent = start + nbytes / src.nic
        self.metrics.remote_bytes(now, nbytes)
        if src.rack is not dst.rack:
            sent = self._uplink(src.rack, sent, nbytes, now, True)
        return sent + self.latency

    def _uplink(self, rack: RackRt | None, t: float, nbytes: float, now: float, state: bool) -> float:
        """When ``nbytes`` that left their node's NIC at ``t`` have left the node's rack for another rack.

        They queue (FIFO) for the sending rack's uplink (``bytes / uplink``; a node
        outside any rack has none), then take ``rack_latency`` more. As on NICs,
        state transfers queue behind each other, not in front of data.
        """
        self.metrics.rack_bytes(now, nbytes)
        if rack is not None:
            free = rack.state_free if state else rack.free
            t = (free if free > t else t) + nbytes / rack.uplink
            if state:
                rack.state_free = t
            else:
                rack.free = t
        return t + self.rack_latency

    def state_arrives(self, t: float, migration: object) -> None:
        """Schedule a shipped key group's state to arrive at ``t``."""
        self.schedule(t, EV_STATE, migration, None)

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
    ) -> Message:
        self._seq += 1
        return Message(
            self._seq,
            pe.job,
            pe.name,
            instance,
            upstream,
            now,
            event_time,
            event_time,
            key,
            kg,
            0.0,
            kind,
            0.0,
            payload,
        )

    # ------------------------------------------------------------------ events

    def _gen(self, pe: PeRt, now: float) -> None:
        if now >= self._gen_stop:  # a drained run generates over [0, until): its final watermark is at until
            return
        stream = pe.stream
        records = self.batch
        key = stream.key(now)
        value = stream.value()
        uid = (pe.index << 40) | pe.uid
        pe.uid += 1
        pe.generated += records
        self.metrics.ingest_bins[pe.job][int(now / self.bin_s)] += records
        if self.record_inputs:
            self.inputs.append((pe.name, uid, now, key, value, records))
        nxt = stream.next_time()
        if nxt is not None:
            self._seq += 1
            heapq.heappush(self._heap, (nxt, self._seq, EV_GEN, pe, None))
        release = now
        if pe.limit is not None:
            tat = pe.tat if pe.tat > now else now
            # GCRA with 0.1 s of burst tolerance; a limit of 0 stops the source (sheds, even in defer mode)
            if pe.limit == 0 or tat - now > 0.1:
                if pe.limit_drop or pe.limit == 0:
                    pe.dropped["shed"] = pe.dropped.get("shed", 0) + records
                    return
                release = tat - 0.1
                self.metrics.deferred += records
            pe.tat = tat + records / pe.limit
        table = pe.gen  # routing="local": by cpu share
        inst = pe.instances[pe.rr % len(pe.instances)] if table is None else pe.instances[table[pe.rr % len(table)]]
        pe.rr += 1
        self._seq += 1
        msg = Message(
            self._seq,
            pe.job,
            pe.name,
            inst.index,
            -1,
            now,
            now,
            now,
            key,
            -1,
            self._service(pe, records) if pe.exp else records * pe.cost,
            _DATA,
            0.0,
            None if self.recovery is None else uid,
            records,
            uid,
            value,
        )
        pe.sent += records
        if self.recovery is not None:
            self.recovery.sent(pe, msg, 0.0)
        if release > now:
            if pe.needs_wm:
                pe.wm_deferred.append(now)
            self.schedule(release, EV_DELIVER, inst, msg)
        else:
            self.deliver(inst, msg, now)

    def _tick(self, pe: PeRt, now: float) -> None:
        """A source's watermark: every record with an earlier event time has been emitted."""
        final = now >= self._gen_stop
        wm = _INF if final else now
        deferred = pe.wm_deferred
        if deferred and not final:
            wm = min(wm, deferred[0])
        pe.wm_last = wm
        for inst in pe.instances:
            self._seq += 1
            msg = Message(self._seq, pe.job, pe.name, inst.index, -1, now, wm, wm, kind=Kind.WATERMARK)
            self.deliver(inst, msg, now)
        if not final:
            # Tick k at exactly k × interval: adding the interval again and again drifts
            # (0.2 is inexact in binary), so ticks meant for a window's end would land before it.
            pe.ticks += 1
            self.schedule(pe.ticks * self.wm_interval, EV_TICK, pe, None)

    def deliver(self, inst: InstanceRt, msg: Message, now: float) -> None:
        node = inst.node
        pe = inst.pe
        if msg.kind is _DATA:
            if pe.wm_deferred and msg.upstream == -1 and msg.created < now:
                pe.wm_deferred.popleft()
            pe.arrived += msg.records
            if not node.up:
                pe.dropped["failure"] = pe.dropped.get("failure", 0) + msg.records
                return
            msg.created = now
            ch = inst.chans.get(msg.upstream)
            if ch is None:
                ch = inst.chans[msg.upstream] = Channel()
            ep = msg.epoch = ch.epoch
            counts = ch.counts
            counts[ep] = counts.get(ep, 0) + 1
            if inst.gone and msg.key_group in inst.gone:
                self.migrations.redirect(inst, msg, now)
                return
            if inst.paused:
                inst.held.append(msg)
                return
            if inst.incoming and msg.key_group in inst.incoming:
                inst.incoming[msg.key_group].append(msg)
                return
            if inst.throttled:  # over its cpu share: wait behind the throttled ones
                bound = pe.buffer
                if bound is not None and inst.vtime - now + len(inst.throttled) * msg.cost / inst.share > bound:
                    pe.dropped["overflow"] = pe.dropped.get("overflow", 0) + msg.records
                    return
                inst.throttled.append(msg)
                if self.borrow_idle:
                    node.over[inst] = None
                    if node.idle:
                        self.offer(node, now)
                return
            fifo = node.fifo
            if fifo is not None and node.idle and not fifo:
                # FIFO with an idle core and nothing queued: the message runs now, as offer would run it.
                self._start(node, inst, msg, now)
                if node.over and node.idle:  # borrow_idle: held back over its share, it may still take the core
                    self.offer(node, now)
                return
            inst.queued += msg.records
            if fifo is None:
                node.policy.push(msg, now)
            else:
                fifo.append(msg)
            if node.idle:
                self.offer(node, now)
            return
        if not node.up:
            return
        if msg.kind is Kind.MARKER and self.migrations.on_arrival(inst, msg, now):
            return  # a handover's marker: taken on arrival, not behind the channel's data
        ch = inst.chans.get(msg.upstream)
        if ch is None:
            ch = inst.chans[msg.upstream] = Channel()
        if ch.ctrl or inst.paused or ch.counts.get(ch.epoch, 0):
            msg.epoch = ch.epoch
            ch.ctrl.append(msg)
            ch.epoch += 1
        else:
            self._control_message(inst, msg, now)

    def release(self, inst: InstanceRt, ch: Channel, now: float) -> None:
        """Handle the control messages of ``ch`` whose earlier data have all been processed."""
        counts = ch.counts
        while ch.ctrl and not inst.paused and not counts.get(ch.ctrl[0].epoch, 0):
            msg = ch.ctrl.popleft()
            counts.pop(msg.epoch, None)
            self._control_message(inst, msg, now)

    def _control_message(self, inst: InstanceRt, msg: Message, now: float) -> None:
        if msg.kind is Kind.WATERMARK:
            wm_in = inst.wm_in
            if msg.event_time <= wm_in.get(msg.upstream, -_INF):
                return
            wm_in[msg.upstream] = msg.event_time
            wm = min(wm_in.values())
            if wm <= inst.wm:
                return
            inst.wm = wm
            pe = inst.pe
            if pe.code == WINDOW:
                self.fire(inst, now)
            for d, _ in pe.down:
                if d.needs_wm:
                    for dst in d.instances:
                        self._seq += 1
                        out = Message(self._seq, d.job, d.name, dst.index, inst.gid, now, wm, wm, kind=Kind.WATERMARK)
                        self.send(inst, dst, out, CONTROL_BYTES, now)
        elif msg.kind is Kind.MARKER:
            self.migrations.on_marker(inst, msg, now)

    def _done(self, inst: InstanceRt, msg: Message, now: float) -> None:
        node = inst.node
        if node.running.pop(msg.seq, None) is None:
            return  # lost to a node failure, already counted
        node.idle += 1
        pe = inst.pe
        pe.running -= 1
        inst.running -= 1
        service = msg.cost
        records = msg.records
        fifo = node.fifo
        if fifo is None:
            policy = node.policy
            policy.completed(msg, service, now)
            if self.actor_turns:  # the turn is over now: outputs emitted below may start its next message
                policy.free(msg.pe, msg.instance, now)
        inst.busy += service
        node.busy += service
        inv = self._inv_bin
        b1 = int(now * inv)
        if int((now - service) * inv) == b1:
            node.busy_bins[b1] += service
            inst.busy_bins[b1] += service
        else:
            self.metrics.split_busy(node.busy_bins, now - service, now)
            self.metrics.split_busy(inst.busy_bins, now - service, now)
        pe.done += records
        inst.records += records
        g = msg.key_group
        if g >= 0:
            pe.kg_busy[g] += service
            pe.kg_records[g] += records
        code = pe.code
        key = msg.key
        rid = msg.payload
        if rid is not None:  # recovery="replay": a record met before has no effect; outputs get record ids
            if self.recovery.duplicate(inst, msg):
                code = DUPLICATE
            else:
                rid = record_id(rid, pe.salt)
        if code in (PASS, SOURCE):
            n = records if code == SOURCE or pe.sel == 1.0 else outputs(records, pe.sel, msg.uid, pe.salt)
            if n:
                self.emit(inst, now, key, msg.value, n, msg.uid, msg.event_time, rid)
        elif code == KEYED:
            st = inst.state.get(g)
            if st is None:
                st = inst.state[g] = {}
            acc = st.get(key)
            if acc is None:
                st[key] = [records, records * msg.value]
            else:
                acc[0] += records
                acc[1] += records * msg.value
            n = outputs(records, pe.sel, msg.uid, pe.salt)
            if n:
                self.emit(inst, now, key, msg.value, n, msg.uid, msg.event_time, rid)
        elif code == SINK:
            self.metrics.output(pe, now, now - msg.event_time, records)
            tot = pe.sink_totals.get(key)
            if tot is None:
                pe.sink_totals[key] = [records, records * msg.value]
            else:
                tot[0] += records
                tot[1] += records * msg.value
        elif not records:  # a window's firing work (``fire_cost``): the result is computed
            self.emit(inst, now, key, msg.value, 1, msg.uid, msg.event_time)
        elif code == WINDOW:
            wmap = inst.state.get(g)
            if wmap is None:
                wmap = inst.state[g] = {}
            et = msg.event_time
            size, slide = pe.size, pe.slide
            horizon = inst.wm - size - pe.lateness
            for k in window_starts(et, size, slide):
                if k * slide <= horizon:
                    pe.dropped["late"] = pe.dropped.get("late", 0) + records
                    continue
                win = wmap.get(k)
                if win is None:
                    win = wmap[k] = {}
                    inst.win_starts.add(k)
                win[key] = accumulate(win.get(key), records, msg.value, et)
        ch = inst.chans[msg.upstream]
        counts = ch.counts
        left = counts[msg.epoch] - 1
        if left:
            counts[msg.epoch] = left
        else:
            del counts[msg.epoch]
            if ch.ctrl:
                self.release(inst, ch, now)
        if inst.paused:
            if pe.paused and not pe.running:
                self.migrations.on_drained(pe, now)
            if inst.moving is not None:
                self.migrations.check_relocation(inst, now)
        if self.migrations.handing:
            self.migrations.finished(inst, msg, now)
        if fifo is None or fifo or node.over:
            self.offer(node, now)

    def emit(
        self,
        inst: InstanceRt,
        now: float,
        key: int,
        value: float,
        records: int,
        uid: int,
        event_time: float,
        rid: int | None = None,
    ) -> None:
        """Send ``records`` output records of one key to every downstream PE.

        ``rid`` (recovery="replay" only) identifies the output for de-duplication; it also routes
        to unkeyed PEs, so that an output computed again after a restore reaches the same instance.
        """
        pe = inst.pe
        pe.produced += records
        b = int(now * self._inv_bin)
        pe.out_bins[b] += records
        metrics = self.metrics
        rr = inst.rr
        routes = inst.routes
        src_node = inst.node
        for j, (d, bpr, keyed, groups, route, instances, windowed, off) in enumerate(pe.outs):
            if off:  # not run (no cpu): nothing is sent to it
                d.dropped["no_cpu"] = d.dropped.get("no_cpu", 0) + records
                continue
            if keyed:
                g = key_group(key, groups)
                dst = instances[route[g]]
            else:
                g = -1
                n = len(instances)
                if n == 1:
                    dst = instances[0]
                elif routes is not None and routes[j] is not None:  # routing="local"
                    table = routes[j]
                    if rid is not None:
                        dst = instances[table[record_id(rid, d.salt) % len(table)]]
                    else:
                        dst = instances[table[rr[j] % len(table)]]
                        rr[j] += 1
                elif rid is not None:
                    dst = instances[record_id(rid, d.salt) % n]
                else:
                    dst = instances[rr[j] % n]
                    rr[j] += 1
            cost = self._service(d, records) if d.exp else records * d.cost
            self._seq += 1
            msg = Message(
                self._seq,
                d.job,
                d.name,
                dst.index,
                inst.gid,
                now,
                event_time,
                window_due(event_time, d.size, d.slide, d.lateness) if windowed else event_time,
                key,
                g,
                cost,
                _DATA,
                0.0,
                rid,
                records,
                uid,
                value,
            )
            d.sent += records
            nbytes = bpr * records
            if rid is not None:
                self.recovery.sent(d, msg, nbytes)
            if dst.node is src_node:
                metrics.local[b] += nbytes
                self.deliver(dst, msg, now)
            else:
                self.send(inst, dst, msg, nbytes, now)

    def fire(self, inst: InstanceRt, now: float) -> None:
        """Emit every window of ``inst`` whose due time its watermark has reached.

        With a ``fire_cost`` for the PE, each key's result is instead computed by
        a unit of work queued at the instance (through dispatch, like any
        message): ``fire_cost`` × the key's records in the window core-seconds,
        standing for no new records (``records=0``), with frontier the window's
        due time; the result is emitted when it completes.
        """
        pe = inst.pe
        horizon = inst.wm - pe.size - pe.lateness
        due = sorted(k for k in inst.win_starts if k * pe.slide <= horizon)
        per_record = self.fire_cost.get(pe.name, 0.0)
        for k in due:
            inst.win_starts.discard(k)
            for g, wmap in inst.state.items():
                win = wmap.pop(k, None)
                if win:
                    for key, acc in win.items():
                        value, uid = aggregate(pe.agg, acc), window_uid(k, key, pe.index)
                        if not per_record:
                            self.emit(inst, now, key, value, 1, uid, acc[4], None if self.recovery is None else uid)
                            continue
                        self._seq += 1
                        work = Message(self._seq, pe.job, pe.name, inst.index, inst.gid, now, acc[4],
                                       k * pe.slide + pe.size + pe.lateness, key, g, acc[0] * per_record,
                                       _DATA, 0.0, None, 0, uid, value)  # fmt: skip
                        self.deliver(inst, work, now)

    # ---------------------------------------------------------- failures

    def _fail(self, node: NodeRt, now: float) -> None:
        """Node down: everything queued, held or running on it is lost and counted.

        With recovery="replay" nothing is dropped: the losses are counted as
        ``rolled_back`` and the node's instances are restored elsewhere
        (:meth:`strata.sim.recovery.Recovery.restore`), their inputs replayed.
        """
        if not node.up:
            return
        node.up = False
        node.failed_at = now
        replay = self.recovery is not None
        on_node = [inst for inst in self.instances if inst.node is node]
        for inst in on_node:
            lost = inst.queued + sum(m.records for m in inst.held) + sum(m.records for m in inst.throttled)
            inst.throttled.clear()
            lost += sum(m.records for buf in inst.incoming.values() for m in buf)
            inst.queued = 0
            inst.held.clear()
            if replay:  # key groups still awaiting their state keep buffering (replayed records)
                inst.incoming = {g: [] for g in inst.incoming}
            else:
                inst.incoming.clear()
            inst.chans.clear()
            self._lost(inst.pe, lost)
        for msg in node.running.values():
            inst = self._instances_of[msg.pe][msg.instance]
            inst.pe.running -= 1
            inst.running -= 1
            self._lost(inst.pe, msg.records)
        node.running.clear()
        node.policy = self.factory(node.view)
        node.idle = node.cores
        if replay:
            self.recovery.restore(node, on_node, now)
        for pe in self.pes.values():
            if pe.paused and not pe.running:
                self.migrations.on_drained(pe, now)
        self.metrics.failures.append((node.name, now, None))

    def _lost(self, pe: PeRt, records: int) -> None:
        """Count records lost with a failed node: dropped, or rolled back to be replayed (recovery="replay")."""
        if not records:
            return
        if self.recovery is None:
            pe.dropped["failure"] = pe.dropped.get("failure", 0) + records
        else:
            pe.rolled_back += records

    def _recover(self, node: NodeRt, now: float) -> None:
        if node.up:
            return
        node.up = True
        self.metrics.failures.append((node.name, node.failed_at, now))

    # ---------------------------------------------------------- controllers

    def snapshot(self) -> dict:
        """The counters :meth:`observe` measures a window against (opaque; pass it back unchanged)."""
        return {
            "kg": {pe.name: (list(pe.kg_busy), list(pe.kg_records)) for pe in self.pes.values() if pe.keyed},
            "inst": [(i.busy, i.records) for i in self.instances],
            "node": [n.busy for n in self.nodes],
            "out": {pe.name: pe.done for pe in self.pes.values()},
            "gen": {pe.name: pe.generated for pe in self.pes.values() if pe.stream is not None},
            "lat": self.metrics.lat_cursor(),
            "produced": {pe.name: pe.produced for pe in self.pes.values()},
        }

    def observe(self, since: dict, start: float) -> WindowStats:
        """The world since snapshot ``since`` (taken at ``start``) as plain data."""
        now = self.now
        span = max(now - start, 1e-12)
        kgs = []
        for pe in self.pes.values():
            if not pe.keyed:
                continue
            busy0, rec0 = since["kg"][pe.name]
            sizes = self.migrations.state_sizes(pe)
            for g in range(pe.groups):
                kgs.append(
                    KeyGroupLoad(
                        pe.name, g, pe.route[g], pe.kg_records[g] - rec0[g], pe.kg_busy[g] - busy0[g], sizes[g]
                    )
                )
        loads = []
        for inst, (b0, r0) in zip(self.instances, since["inst"], strict=False):
            pe = inst.pe
            waiting = inst.queued + sum(m.records for m in inst.held) + sum(m.records for m in inst.throttled)
            waiting += sum(m.records for buf in inst.incoming.values() for m in buf)
            groups = sum(1 for r in pe.route if r == inst.index) if pe.keyed else 0
            loads.append(
                InstanceLoad(pe.name, inst.index, inst.node.name, inst.records - r0, inst.busy - b0, waiting, groups)
            )
        util = {n.name: (n.busy - b0) / (n.cores * span) for n, b0 in zip(self.nodes, since["node"], strict=False)}
        latency = {}
        for job, (lat, n) in self.metrics.lat_since(since["lat"]).items():
            latency[job] = _stats(lat, n, self.scenario.job[job].target_latency_s)
        return WindowStats(
            now=now,
            start=start,
            key_groups=tuple(kgs),
            instances=tuple(loads),
            node_utilisation=util,
            queue_lengths={n.name: len(n.policy) for n in self.nodes},
            latency=latency,
            rates={name: (pe.produced - since["produced"][name]) / span for name, pe in self.pes.items()},
            ingest={pe: (self.pes[pe].generated - g0) / span for pe, g0 in since["gen"].items()},
            routing={pe.name: tuple(pe.route) for pe in self.pes.values() if pe.keyed},
            placement={pe.name: tuple(i.node.name for i in pe.instances) for pe in self.pes.values()},
            migrating=self.migrations.pending(),
            dropped=self.metrics.drop_totals(),
            latency_so_far=self.metrics.latency_so_far(),
        )

    def _control(self, ctrl: dict, now: float) -> None:
        obs = self.observe(ctrl["snap"], ctrl["start"])
        ctrl["snap"] = self.snapshot()
        ctrl["start"] = now
        self._apply(ctrl["callback"](obs))
        self.schedule(now + ctrl["period"], EV_CONTROL, ctrl, None)

    def _apply(self, actions: Actions | Iterable[Move] | Move | None) -> None:
        if actions is None:
            return
        if isinstance(actions, Move):
            actions = Actions(moves=[actions])
        elif not isinstance(actions, Actions):
            actions = Actions(moves=list(actions))
        if actions.limit_mode not in ("drop", "defer"):
            raise ValueError(f"limit_mode: expected 'drop' or 'defer'; found {actions.limit_mode!r}")
        for pe_name, limit in actions.rate_limits.items():  # all or nothing
            pe = self.pes.get(pe_name)
            if pe is None or pe.stream is None:
                raise ValueError(f"rate_limits[{pe_name!r}]: expected a source PE 'job.operator'")
            if limit is not None and limit < 0:
                raise ValueError(f"rate_limits[{pe_name!r}]: expected records/s ≥ 0 or None; found {limit}")
        scaling.validate(self, dict(actions.instances))
        for pe_name, limit in actions.rate_limits.items():
            self.pes[pe_name].limit = limit
            self.pes[pe_name].limit_drop = actions.limit_mode == "drop"
        spread = [m for pe_name, n in actions.instances.items() for m in scaling.scale_out(self, pe_name, n)]
        if spread or actions.moves:
            self.migrations.request(spread + list(actions.moves), self.now)
        if actions.placement is not None:
            self.migrations.relocate(actions.placement, self.now)


def _weights(pe: PeRt) -> list[float]:
    """Each instance's cpu share, or 1 each when any has none (routing="local")."""
    shares = [i.share for i in pe.instances]
    if all(s is not None and s > 0 for s in shares):
        return shares  # type: ignore[return-value]
    return [1.0] * len(shares)


def _sending(pe: PeRt) -> list[float]:
    """Share of ``pe``'s output each instance sends: its key groups' share if keyed, else its cpu share."""
    if pe.keyed:
        owned = [0] * len(pe.instances)
        for owner in pe.route:
            owned[owner] += 1
        return [c / len(pe.route) for c in owned]
    w = _weights(pe)
    total = sum(w)
    return [x / total for x in w]


def _table(dist: Mapping[int, float]) -> list[int]:
    """Weighted round-robin over ``dist`` (index → weight): ROUTE_SLOTS slots apportioned by weight, interleaved
    (smooth weighted round-robin, so any run of slots is close to the weights)."""
    keys = [k for k, w in dist.items() if w > 0] or list(dist)
    counts = apportion(ROUTE_SLOTS, [dist[k] for k in keys])
    if len(keys) == 1:
        return [keys[0]]
    current = [0] * len(keys)
    out = []
    for _ in range(ROUTE_SLOTS):
        best = 0
        for i, c in enumerate(counts):
            current[i] += c
            if current[i] > current[best]:
                best = i
        current[best] -= ROUTE_SLOTS
        out.append(keys[best])
    return out


def _stats(lat: np.ndarray, n: np.ndarray, target: float) -> LatencyStats:
    """Records-weighted latency percentiles of one job."""
    order = np.argsort(lat, kind="stable")
    lat, n = lat[order], n[order]
    cum = np.cumsum(n)
    total = int(cum[-1])

    def q(p: float) -> float:
        return float(lat[np.searchsorted(cum, p * total, side="left")])

    return LatencyStats(total, q(0.5), q(0.95), q(0.99), float(lat[-1]), float(n[lat > target].sum()) / total)
