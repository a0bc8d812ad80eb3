"""The simulator's event kernel: a heap of timed events over nodes, NICs and operator instances.

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

The kernel decides nothing: dispatch comes from the plugged-in policies, and
key-group moves, placement and rate limits arrive as
:class:`~strata.protocol.engine.Decisions` (:meth:`Simulation.apply`), from a
script or from the control loop through the engine adapter
(:mod:`strata.sim.adapter`). The world it runs is built by
:mod:`strata.sim.world`; its submodules (metrics, migration, recovery,
scaling) reach it through :class:`strata.sim.kernel_api.Kernel`.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from strata.model import Scenario
from strata.protocol.engine import Decisions
from strata.protocol.units import DispatchFactory, Kind, Message
from strata.sim.assignment import decided
from strata.sim.fifo import fifo, turn_fifo
from strata.sim.metrics import Metrics
from strata.sim.migration import Migrations
from strata.sim.options import SimOptions
from strata.sim.recovery import Recovery
from strata.sim.routing import reroute
from strata.sim.runtime import (
    DUPLICATE,
    EV_ACTION,
    EV_CHECKPOINT,
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
from strata.sim.scaling import grown, scale_out
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
from strata.sim.world import build

SHARE_BURST = 0.01  # seconds of cpu an instance may run ahead of its share
CONTROL_BYTES = 64.0
_DATA = Kind.DATA
_INF = float("inf")


class Simulation:
    """A cluster running a scenario's jobs message by message (see :mod:`strata.sim` for the API)."""

    def __init__(self, scenario: Scenario, options: SimOptions | None = None) -> None:
        options = options or SimOptions()
        self.scenario = scenario
        self.seed = options.seed
        self.batch = options.batch
        self.latency = options.network_latency
        self.rack_latency = options.rack_latency
        self.wm_interval = options.watermark_interval
        self.bin_s = options.bin_s
        self._inv_bin = 1.0 / options.bin_s
        self.record_inputs = options.record_inputs
        self.enforce_shares = options.enforce_shares
        # Shares as guarantees rather than caps (Linux CFS weights, not a cpu quota): a core that would idle runs
        # the oldest message an instance holds back over its share, uncharged, so the plan's work runs first and
        # work beyond it only on cores the plan leaves idle.
        self.borrow_idle = options.borrow_idle
        self.fire_cost = dict(options.fire_cost)
        self.actor_turns = options.actor_turns
        self.routing = options.routing
        self.factory: DispatchFactory = options.dispatch or (turn_fifo if options.actor_turns else fifo)
        world = build(scenario, options, self.factory)
        self.graph, self.order, self.pes = world.graph, world.order, world.pes
        self.nodes, self.node_by_name, self.instances = world.nodes, world.node_by_name, world.instances
        self._no_cpu = world.no_cpu
        self._instances_of = {name: pe.instances for name, pe in self.pes.items()}
        self.now = 0.0
        self._seq = 0
        self._heap: list[tuple] = []
        self._svc_rng = np.random.default_rng([options.seed, 0x5E41CE])
        self._exp: list[float] = []
        self.events = 0
        self.inputs: list[tuple[str, int, float, int, int, int]] = []  # (pe, uid, t, key, value, records)
        self.recovery: Recovery | None = None  # set below: the start's routing tables are built without it
        self.reroute()
        self.metrics = Metrics(self)
        self.migrations = Migrations(self)
        self._schedule_start(options.failures)
        self._gen_stop = _INF
        if options.recovery:
            self.recovery = Recovery(self, options.checkpoint_interval)
        if options.rate_limits:  # from the start, e.g. a plan's source rates (strata simulate --plan)
            self.apply(Decisions(0, rate_limits=dict(options.rate_limits), limit_mode="drop"))

    def _schedule_start(self, failures: Iterable[tuple[str, float, float | None]]) -> None:
        """The first events: each source's first record and watermark tick, and the failures to come."""
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

    # ------------------------------------------------------------------ public API

    def reroute(self) -> None:
        """routing="local": rebuild the sources' and senders' weighted tables from where the instances run now.

        Called at start and after instances move or are added (not under recovery="replay"). Key-group
        ownership is not re-apportioned (controllers move key groups themselves).
        """
        if self.routing != "local" or self.recovery is not None:
            # recovery="replay" routes by record id through the tables: they stay fixed, so a record
            # computed again after a restore reaches the instance that de-duplicates it.
            return
        reroute(self.pes.values())

    def set_bin_width(self, bin_s: float) -> None:
        """Width of the time-series bins from now on (the metrics coarsen their bins to bound their memory)."""
        self.bin_s = bin_s
        self._inv_bin = 1.0 / bin_s

    def apply(self, decisions: Decisions, at: float | None = None) -> None:
        """Enforce ``decisions`` now (or at sim time ``at``): key-group moves, placement, source rate limits.

        ``placement`` gives, per PE it names, one ``(node, cpu cores)`` per instance (cpu 0: no share); a longer
        list than the PE's instances adds instances there (scale-out, :mod:`strata.sim.scaling`), before the moves
        and the relocations, so moves may name the new instances. ``rate_limits``: source PE → records/s (None
        lifts the limit), over-limit records dropped (``limit_mode="drop"``, counted as ``shed``) or deferred
        (``"defer"``: admitted later at the limited rate, keeping their event time, counted as ``deferred``).
        Admission, cpu shares and the dispatch strategy are the engine adapter's (:mod:`strata.sim.adapter`).
        """
        for name in ("admitted", "cpu_share", "dispatch"):
            if getattr(decisions, name) is not None:
                raise ValueError(f"{name}: enforced by strata.sim.adapter.SimEngine, not by the simulation kernel")
        if at is not None and at > self.now:
            self.schedule(at, EV_ACTION, decisions, None)
            return
        self._apply(decisions)

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

    # ---------------------------------------------------------- decisions

    def _apply(self, decisions: Decisions) -> None:
        limits = decisions.rate_limits or {}
        mode = decisions.limit_mode
        if mode not in ("drop", "defer"):
            raise ValueError(f"limit_mode: expected 'drop' or 'defer'; found {mode!r}")
        for pe_name, limit in limits.items():  # all or nothing
            pe = self.pes.get(pe_name)
            if pe is None or pe.stream is None:
                raise ValueError(f"rate_limits[{pe_name!r}]: expected a source PE 'job.operator'")
            if limit is not None and limit < 0:
                raise ValueError(f"rate_limits[{pe_name!r}]: expected records/s ≥ 0 or None; found {limit}")
        placement = decided(decisions.placement or {})
        new = grown(self, decisions.placement or {})
        for pe_name, limit in limits.items():
            self.pes[pe_name].limit = limit
            self.pes[pe_name].limit_drop = mode == "drop"
        spread = [m for pe_name, where in new.items() for m in scale_out(self, pe_name, where)]
        if spread or decisions.moves:
            self.migrations.request(spread + list(decisions.moves), self.now)
        if placement:
            self.migrations.relocate(placement, self.now)
