"""Key-group migration, the engine side of AutoFlow (SEEDS.md "AutoFlow", migration protocol).

``mode='live'`` — no global barrier, no pause. Moving key group ``g`` of a
keyed PE from its owner ``h`` to instance ``c``:

1. every upstream router switches ``g``'s route to ``c`` and sends a MARKER to
   ``h`` on its channel (behind every record of ``g`` it sent ``h`` before);
2. ``c`` buffers ``g``'s records until ``g``'s state arrives (they still count
   as received on their channels, so watermarks cannot overtake them);
3. ``h`` handles a marker only once every earlier data message of that channel
   has been processed (:class:`strata.sim.runtime.Channel`); with the marker from
   every upstream instance in hand it ships ``g``'s state to ``c`` over the
   network (bytes / bandwidth + latency, behind earlier state transfers of its
   node) and forgets it;
4. ``c`` installs the state, fires windows of ``g`` already due, and drains the
   buffer into dispatch in arrival order (hence per-upstream order).

Other key groups keep flowing throughout. A move of a key group that is
already moving waits for the first to finish (back-to-back moves are queued per
key group, in request order).

``mode='precopy'`` — the live protocol with the state pre-copied (as live VM
migration and Rhino do), so the new owner's buffer waits for the changes only:
before step 1, ``h`` ships a snapshot of ``g``'s state to ``c`` while it keeps
processing ``g`` (the route is unchanged); once the snapshot has arrived, steps
1–4 run as above, except that in step 3 ``h`` ships only the entries of ``g``
changed or added since the snapshot (the state installed is ``h``'s whole
state, so the result is the same; only the bytes on the wire differ).

``mode='handover'`` — ``precopy`` with the queued records handed over instead
of waited for. In step 3 ``h`` handles a marker as soon as it arrives (every
record of ``g`` sent before it on its channel has arrived, run or not); with
every marker in hand it takes ``g``'s records still queued (or held, or
throttled) out of its dispatch and ships them with the changes, ahead of
whatever ``c`` buffered, in arrival order; it waits only for the records of
``g`` running on its cores. The records keep their place in their channels:
``h`` counts them until they ship (its watermark cannot pass them while it
still holds ``g``'s windows), then ``c`` counts them. For window operators
``c`` holds back every watermark that reaches it after the switch (a token
in each upstream channel) until the handover is installed, and a record is
handed over only if none of its windows is due at the watermark ``c`` can
reach before that token; any other record of ``g`` runs at ``h`` first, as
in ``precopy``. It needs a dispatch policy that can give queued messages
back (``withdraw``, as FIFO does); if the old owner's node has a policy that
cannot, the move is a plain ``precopy``, with no watermark hold either.

``mode='stop'`` — the stop-the-world baseline. The PE pauses (its instances take
no new messages: arrivals and anything dispatch pops are held), the routes
switch, and once no message of the PE is running every moved group's state is
shipped; when the last state is installed the PE resumes, held records of
moved groups go to their new owners first, then everything held is dispatched
in arrival order. Stop moves requested together for one PE share one pause;
a stop batch waits for live moves of its PE to finish, and vice versa.

State size of a key group: the operator's ``state_bytes`` split over key groups
in proportion to their state entries (keys; (window, key) pairs for windows),
or, when ``state_bytes`` is 0, 64 bytes per entry (measured).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from strata.protocol.units import MIGRATION_MODES as MODES
from strata.protocol.units import Kind, Message, Move
from strata.sim.assignment import resolve_placement
from strata.sim.kernel_api import Kernel
from strata.sim.runtime import WINDOW, Channel, InstanceRt, NodeRt, PeRt
from strata.sim.semantics import window_due

ENTRY_BYTES = 64.0


@dataclass(eq=False)
class Migration:
    """One key-group move and its timeline (sim seconds; nan until reached)."""

    pe: str
    group: int
    src: int
    dst: int
    mode: str
    requested: float
    started: float = math.nan  # the route switched (precopy: once the snapshot arrived)
    shipped: float = math.nan
    installed: float = math.nan
    bytes: float = 0.0  # state shipped: the whole group, or (precopy) the snapshot plus the changes
    expected: int = 0  # markers awaited (upstream instances)
    seen: int = 0
    state: dict | None = field(default=None, repr=False)
    snapshot: dict | None = field(default=None, repr=False)  # precopy: the state as copied, until the markers
    hands_over: bool = False  # handover proper, decided at the switch; else it runs as precopy
    handed: int = 0  # handover: records shipped with the state instead of run by the old owner
    left: int = 0  # handover: records of the group still to run at the old owner before it ships
    forward: list[Message] = field(default_factory=list, repr=False)  # handover: taken, not yet shipped
    tokens: dict[int, int] = field(default_factory=dict, repr=False)  # window handover: upstream → held epoch at dst
    bound: dict[int, float] = field(default_factory=dict, repr=False)  # … → watermark dst reaches before it


@dataclass(eq=False)
class Relocation:
    """One operator instance moving to another node (a new placement applied at runtime)."""

    pe: str
    instance: int
    src: str
    dst: str
    requested: float
    shipped: float = math.nan
    installed: float = math.nan
    bytes: float = 0.0


class Migrations:
    """Carries out moves for one simulation; decides nothing."""

    def __init__(self, sim: Kernel) -> None:
        self.sim = sim
        self.active: dict[tuple[str, int], Migration] = {}
        self.waiting: dict[tuple[str, int], deque[Move]] = {}
        self.stop_waiting: dict[str, deque[list[Move]]] = {}
        self.stop_active: dict[str, list[Migration]] = {}
        self.stop_shipped: set[str] = set()
        self.log: list[Migration] = []
        self.redirected = 0  # records that reached a stop-moved group's old owner and were passed on
        self.relocations: list[Relocation] = []
        self.pending_relocations: list[tuple[InstanceRt, str]] = []
        self.snapshot_free: dict[str, float] = {}  # per node: when its last precopy snapshot is sent
        self.handing: dict[tuple[str, int, int], Migration] = {}  # (pe, old owner, group) → handover waiting

    # -------------------------------------------------------------- requests

    def request(self, moves: list[Move], now: float) -> None:
        for move in moves:  # all or nothing
            self._validate(move)
        stop: dict[str, list[Move]] = {}
        for move in moves:
            if move.mode == "stop":
                stop.setdefault(move.pe, []).append(move)
            else:
                self.waiting.setdefault((move.pe, move.key_group), deque()).append(move)
        for pe, batch in stop.items():
            self.stop_waiting.setdefault(pe, deque()).append(batch)
        for pe in dict.fromkeys(m.pe for m in moves):  # request order: same seed, same run
            self._kick(self.sim.pes[pe], now)

    def _validate(self, move: Move) -> None:
        pe = self.sim.pes.get(move.pe)
        if pe is None or not pe.keyed:
            raise ValueError(f"Move.pe: expected a keyed PE 'job.operator'; found {move.pe!r}")
        if not 0 <= move.key_group < pe.groups:
            raise ValueError(f"Move.key_group of {move.pe!r}: expected 0..{pe.groups - 1}; found {move.key_group}")
        if not 0 <= move.dst < len(pe.instances):
            raise ValueError(f"Move.dst of {move.pe!r}: expected 0..{len(pe.instances) - 1}; found {move.dst}")
        if move.mode not in MODES:
            raise ValueError(f"Move.mode: expected one of {MODES}; found {move.mode!r}")

    def _kick(self, pe: PeRt, now: float) -> None:
        """Start whatever may start on ``pe``: a waiting stop batch first, else waiting live moves."""
        if pe.name in self.stop_active:
            return
        live = [k for k in self.active if k[0] == pe.name]
        if self.stop_waiting.get(pe.name):
            if not live:
                self._start_stop(pe, self.stop_waiting[pe.name].popleft(), now)
            return
        for key in [k for k, q in self.waiting.items() if k[0] == pe.name and q]:
            if key not in self.active:
                self._start_live(pe, self.waiting[key].popleft(), now)
                if not self.waiting[key]:
                    del self.waiting[key]

    def pending(self) -> tuple[tuple[str, int], ...]:
        keys = set(self.active) | {k for k, q in self.waiting.items() if q}
        keys |= {(m.pe, m.group) for batch in self.stop_active.values() for m in batch}
        keys |= {(pe, m.key_group) for pe, q in self.stop_waiting.items() for batch in q for m in batch}
        return tuple(sorted(keys))

    # -------------------------------------------------------------- live

    def _start_live(self, pe: PeRt, move: Move, now: float) -> None:
        g = move.key_group
        h = pe.instances[pe.route[g]]
        c = pe.instances[move.dst]
        mig = Migration(pe.name, g, h.index, c.index, move.mode, now)
        self.log.append(mig)
        if h is c:
            mig.started = mig.shipped = mig.installed = now
            return
        self.active[(pe.name, g)] = mig
        if move.mode in ("precopy", "handover"):
            state = h.state.get(g)
            mig.snapshot = _copy_state(pe, state) if state else {}
            mig.bytes = self._entry_bytes(pe) * (_entries(pe, state) if state else 0)
            self.sim.state_arrives(self._snapshot_time(h.node, c.node, mig.bytes, now), mig)
            return
        self._switch(pe, mig, now)

    def _snapshot_time(self, src: NodeRt, dst: NodeRt, nbytes: float, now: float) -> float:
        """When a precopy snapshot sent now arrives: bytes / bandwidth + latency, behind earlier snapshots.

        Snapshots queue behind each other on their own, not in front of the
        changes shipped after the markers: those are what records wait for
        (the engine's model of state vs data transfers, one level down).
        """
        if src is dst:
            return now
        start = max(self.snapshot_free.get(src.name, 0.0), now)
        self.snapshot_free[src.name] = start + nbytes / src.nic
        self.sim.metrics.remote_bytes(now, nbytes)
        return self.snapshot_free[src.name] + self.sim.latency

    def _switch(self, pe: PeRt, mig: Migration, now: float) -> None:
        """Steps 1–2 of the live protocol: route ``mig.group`` to its new owner, markers to the old."""
        g = mig.group
        h = pe.instances[mig.src]
        c = pe.instances[mig.dst]
        mig.started = now
        c.gone.discard(g)
        pe.route[g] = c.index
        c.incoming[g] = []
        mig.expected = len(pe.upstream)
        # Without ``withdraw`` the old owner's markers wait behind their channels' data (precopy), so no window
        # hold either: lifted only by this move's install, it would also keep waiting the marker of a move out of
        # ``c``, and two crossing moves would wait for each other for ever.
        mig.hands_over = mig.mode == "handover" and hasattr(h.node.policy, "withdraw")
        if mig.hands_over and pe.needs_wm:
            self._hold_watermarks(pe, c, mig)
        sim = self.sim
        for u in pe.upstream:
            marker = sim.new_message(pe, h.index, u.gid, now, now, -1, g, Kind.MARKER, mig)
            sim.send(u, h, marker, 64.0, now)
        if not pe.upstream:
            self._ship(pe, mig, now)

    def _hold_watermarks(self, pe: PeRt, c: InstanceRt, mig: Migration) -> None:
        """Window handover: a token in every upstream channel of ``c`` keeps later watermarks waiting.

        Records ``h`` hands over were sent before the switch; a watermark sent
        after it may be later than they are, so ``c`` takes none until they are
        in its channels. ``bound``: the watermark ``c`` reaches on the channel
        before the token (what it has, or what waits there already).
        """
        for u in pe.upstream:
            ch = c.chans.get(u.gid)
            if ch is None:
                ch = c.chans[u.gid] = Channel()
            waiting = [m.event_time for m in ch.ctrl if m.kind is Kind.WATERMARK]
            mig.bound[u.gid] = max([c.wm_in.get(u.gid, -math.inf), *waiting])
            mig.tokens[u.gid] = ch.epoch
            ch.counts[ch.epoch] = ch.counts.get(ch.epoch, 0) + 1

    def on_arrival(self, inst: InstanceRt, msg: Message, now: float) -> bool:
        """A marker reached its old owner: a handover takes it at once (True); any other waits for its channel."""
        mig: Migration = msg.payload
        if not mig.hands_over:
            return False
        mig.seen += 1
        if mig.seen == mig.expected:
            self._hand_over(inst.pe, mig, now)
        return True

    def on_marker(self, inst: InstanceRt, msg: Message, now: float) -> None:
        mig: Migration = msg.payload
        mig.seen += 1
        if mig.seen == mig.expected:
            self._ship(inst.pe, mig, now)

    def _hand_over(self, pe: PeRt, mig: Migration, now: float) -> None:
        """Every marker is in: take the group's waiting records from the old owner; ship once none runs there."""
        h = pe.instances[mig.src]
        g, name, index = mig.group, pe.name, h.index
        horizon = mig.bound
        windowed = pe.code == WINDOW
        due = (pe.size, pe.slide, pe.lateness)
        left = 0

        def take(m: Message) -> bool:
            nonlocal left
            if m.pe != name or m.instance != index or m.key_group != g or not m.records:
                return False  # records=0: a window's firing work, which has left the state already
            if not windowed or horizon.get(m.upstream, -math.inf) < window_due(m.event_time, *due):
                return True
            left += 1
            return False

        taken = h.node.policy.withdraw(take)
        h.queued -= sum(m.records for m in taken)
        h.held = _keep(h.held, take, taken)
        kept = _keep(h.throttled, take, taken)
        h.throttled.clear()
        h.throttled.extend(kept)
        running = sum(1 for m in h.node.running.values() if m.pe == name and m.instance == index and m.key_group == g)
        mig.forward = sorted(taken, key=lambda m: m.seq)  # arrival order on every channel
        mig.left = left + running
        if mig.left:
            self.handing[(name, index, g)] = mig
        else:
            self._ship(pe, mig, now)

    def finished(self, inst: InstanceRt, msg: Message, now: float) -> None:
        """A message ran to completion: a handover waiting for it may ship."""
        key = (inst.pe.name, inst.index, msg.key_group)
        mig = self.handing.get(key)
        if mig is None or not msg.records:
            return
        mig.left -= 1
        if not mig.left:
            del self.handing[key]
            self._ship(inst.pe, mig, now)

    def _ship(self, pe: PeRt, mig: Migration, now: float) -> None:
        h = pe.instances[mig.src]
        c = pe.instances[mig.dst]
        mig.state = h.state.pop(mig.group, None)
        if mig.snapshot is None:
            nbytes = self.group_bytes(pe, mig.state)
        else:
            changed = _changed_entries(pe, mig.snapshot, mig.state or {})
            nbytes = self._entry_bytes(pe, _entries(pe, mig.state) if mig.state else 0) * changed
            mig.snapshot = None
        if mig.forward:
            nbytes += self._forward(pe, h, c, mig, now)
        mig.bytes += nbytes
        mig.shipped = now
        if mig.mode == "stop":
            h.gone.add(mig.group)
        arrive = self.sim.transfer_time(h.node, c.node, nbytes, now)
        self.sim.state_arrives(arrive, mig)

    def _forward(self, pe: PeRt, h: InstanceRt, c: InstanceRt, mig: Migration, now: float) -> float:
        """Put the handed-over records in ``c``'s buffer, ahead of what it holds; their bytes.

        They travel with the state and wait there for it (the buffer is where
        conservation and the controller see them); their channel accounting
        moves from ``h`` to ``c`` now, so ``h``'s watermark may pass them.
        """
        records, mig.forward = mig.forward, []
        chans = {id(ch): ch for ch in (self._rechannel(h, c, m, mig.tokens.get(m.upstream)) for m in records)}
        for ch in chans.values():
            self.sim.release(h, ch, now)
        c.incoming.setdefault(mig.group, [])[:0] = records  # cleared if c's node failed meanwhile
        mig.handed = sum(m.records for m in records)
        per_record = {u.gid: next(b for d, b in u.pe.down if d is pe) for u in pe.upstream}
        return sum(per_record.get(m.upstream, 0.0) * m.records for m in records)

    def arrived(self, item: Migration | Relocation, now: float) -> None:
        """Shipped state reached its destination."""
        if isinstance(item, Relocation):
            self._relocated(item, now)
        elif math.isnan(item.started):  # a precopy snapshot: now switch the route
            self._switch(self.sim.pes[item.pe], item, now)
        else:
            self.on_state(item, now)

    def on_state(self, mig: Migration, now: float) -> None:
        sim = self.sim
        pe = sim.pes[mig.pe]
        c = pe.instances[mig.dst]
        g = mig.group
        mig.installed = now
        if mig.state:
            c.state[g] = mig.state
            if pe.code == WINDOW:
                c.win_starts.update(mig.state)
        mig.state = None
        if mig.mode == "stop":
            batch = self.stop_active[pe.name]
            if all(not math.isnan(m.installed) for m in batch):
                self._resume(pe, now)
            return
        if pe.code == WINDOW:
            sim.fire(c, now)
        buffered = c.incoming.pop(g, [])
        held = self._release_tokens(c, mig)
        if c.paused:
            c.held.extend(buffered)
        elif not c.node.up:
            pe.dropped["failure"] = pe.dropped.get("failure", 0) + sum(m.records for m in buffered)
        else:
            policy = c.node.policy
            for msg in buffered:
                c.queued += msg.records
                policy.push(msg, now)
            for ch in held:
                sim.release(c, ch, now)
            sim.offer(c.node, now)
        del self.active[(pe.name, g)]
        self._kick(pe, now)

    def _release_tokens(self, c: InstanceRt, mig: Migration) -> list[Channel]:
        """Take a window handover's tokens out of ``c``'s channels; the channels to release."""
        held = []
        for gid, epoch in mig.tokens.items():
            ch = c.chans.get(gid)
            if ch is None:  # cleared by a failure of c's node
                continue
            left = ch.counts.get(epoch, 0) - 1
            if left > 0:
                ch.counts[epoch] = left
            else:
                ch.counts.pop(epoch, None)
            held.append(ch)
        mig.tokens = {}
        return held

    # -------------------------------------------------------------- stop-the-world

    def _start_stop(self, pe: PeRt, moves: list[Move], now: float) -> None:
        final: dict[int, int] = {}
        for move in moves:  # within one pause, a group's last requested destination wins
            final[move.key_group] = move.dst
        batch = []
        for g, dst in final.items():
            h = pe.route[g]
            mig = Migration(pe.name, g, h, dst, "stop", now, started=now)
            self.log.append(mig)
            if h == dst:
                mig.shipped = mig.installed = now
                continue
            pe.instances[dst].gone.discard(g)
            pe.route[g] = dst
            batch.append(mig)
        if not batch:
            return
        pe.paused = True
        for inst in pe.instances:
            inst.paused += 1
        self.stop_active[pe.name] = batch
        if not pe.running:
            self.on_drained(pe, now)

    def on_drained(self, pe: PeRt, now: float) -> None:
        """No message of the paused ``pe`` is running: ship the moved groups' state."""
        if pe.name in self.stop_shipped or pe.name not in self.stop_active:
            return
        self.stop_shipped.add(pe.name)
        for mig in self.stop_active[pe.name]:
            self._ship(pe, mig, now)

    def _resume(self, pe: PeRt, now: float) -> None:
        sim = self.sim
        pe.paused = False
        del self.stop_active[pe.name]
        self.stop_shipped.discard(pe.name)
        moved: dict[int, list[Message]] = {i.index: [] for i in pe.instances}
        for inst in pe.instances:
            keep = []
            for msg in inst.held:
                owner = pe.route[msg.key_group] if msg.key_group >= 0 else inst.index
                if owner != inst.index:
                    self._rechannel(inst, pe.instances[owner], msg)
                    moved[owner].append(msg)
                else:
                    keep.append(msg)
            inst.held = keep
        for inst in pe.instances:
            inst.paused -= 1
            inst.held = moved[inst.index] + inst.held
            if inst.paused:  # still relocating: it takes its held messages along
                continue
            self._requeue_held(pe, inst, now)
        for inst in pe.instances:
            for ch in list(inst.chans.values()):
                sim.release(inst, ch, now)
            if pe.code == WINDOW:
                sim.fire(inst, now)
        for node in dict.fromkeys(i.node for i in pe.instances):
            sim.offer(node, now)
        self._kick(pe, now)

    def _requeue_held(self, pe: PeRt, inst: InstanceRt, now: float) -> None:
        """Hand a resumed instance's held messages to its node's dispatch, or count them lost if the node is down."""
        held, inst.held = inst.held, []
        if inst.node.up:
            for msg in held:
                inst.queued += msg.records
                inst.node.policy.push(msg, now)
        else:
            pe.dropped["failure"] = pe.dropped.get("failure", 0) + sum(m.records for m in held)

    def _rechannel(self, src: InstanceRt, dst: InstanceRt, msg: Message, epoch: int | None = None) -> Channel:
        """Move a received record's channel accounting from ``src`` to ``dst``.

        It is tagged with ``epoch`` or else ``dst``'s oldest unreleased epoch on
        that channel, so no control message waiting there overtakes it.
        """
        ch = src.chans[msg.upstream]
        left = ch.counts.get(msg.epoch, 0) - 1
        if left > 0:
            ch.counts[msg.epoch] = left
        else:
            ch.counts.pop(msg.epoch, None)
        dch = dst.chans.get(msg.upstream)
        if dch is None:
            dch = dst.chans[msg.upstream] = Channel()
        if epoch is None:
            epoch = dch.ctrl[0].epoch if dch.ctrl else dch.epoch
        msg.epoch = epoch
        dch.counts[msg.epoch] = dch.counts.get(msg.epoch, 0) + 1
        msg.instance = dst.index
        return ch

    def redirect(self, inst: InstanceRt, msg: Message, now: float) -> None:
        """A record of a group this instance shipped away by a stop move arrived late: pass it on."""
        pe = inst.pe
        dst = pe.instances[pe.route[msg.key_group]]
        ch = self._rechannel(inst, dst, msg)
        self.sim.release(inst, ch, now)
        self.redirected += msg.records
        if dst.paused:
            dst.held.append(msg)
        elif msg.key_group in dst.incoming:
            dst.incoming[msg.key_group].append(msg)
        else:
            dst.queued += msg.records
            dst.node.policy.push(msg, now)
            self.sim.offer(dst.node, now)

    # -------------------------------------------------------------- relocation

    def relocate(self, placement: Mapping, now: float) -> None:
        """Apply a new placement to the PEs it names, keeping their instance counts.

        An instance whose node changes pauses (arrivals and whatever dispatch
        pops are held), and once nothing of it is running or queued at its old
        node, its whole state ships to the new node (bytes / bandwidth +
        latency); there it resumes with everything held, in arrival order.
        A new destination for an instance still moving replaces the old one if
        its state has not shipped yet, else it takes effect after the move.
        """
        sim = self.sim
        named = {_pe_of(key) for key in placement}
        counts = {name: len(pe.instances) for name, pe in sim.pes.items()}
        assign = resolve_placement(placement, sim.order, counts, [n.name for n in sim.nodes])
        for name in sorted(named):  # all or nothing
            if len(assign[name]) != counts[name]:
                raise ValueError(
                    f"placement[{name!r}]: a runtime placement keeps the {counts[name]} instances; "
                    f"found {len(assign[name])}"
                )
        for name in sorted(named):
            pe = sim.pes[name]
            for inst, (node, share) in zip(pe.instances, assign[name], strict=True):
                inst.share = share
                rel = inst.moving
                if rel is not None and math.isnan(rel.shipped):
                    rel.dst = node
                    continue
                if rel is not None:
                    self.pending_relocations.append((inst, node))
                    continue
                if node != inst.node.name:
                    self._start_relocation(inst, node, now)

    def _start_relocation(self, inst: InstanceRt, node: str, now: float) -> None:
        rel = Relocation(inst.pe.name, inst.index, inst.node.name, node, now)
        self.relocations.append(rel)
        inst.moving = rel
        inst.paused += 1
        self.check_relocation(inst, now)

    def check_relocation(self, inst: InstanceRt, now: float) -> None:
        """Ship a relocating instance's state once nothing of it runs or waits at its old node."""
        rel: Relocation = inst.moving
        if not math.isnan(rel.shipped) or inst.running or inst.queued:
            return
        if rel.dst == inst.node.name:  # redirected back home before anything shipped
            self._relocated(rel, now)
            return
        pe = inst.pe
        entries = sum(_entries(pe, st) for st in inst.state.values())
        if pe.op.state_bytes > 0:
            total = sum(_entries(pe, st) for i in pe.instances for st in i.state.values()) or 1
            rel.bytes = pe.op.state_bytes * entries / total
        else:
            rel.bytes = ENTRY_BYTES * entries
        rel.shipped = now
        sim = self.sim
        sim.state_arrives(sim.transfer_time(inst.node, sim.node_by_name[rel.dst], rel.bytes, now), rel)

    def _relocated(self, rel: Relocation, now: float) -> None:
        sim = self.sim
        pe = sim.pes[rel.pe]
        inst = pe.instances[rel.instance]
        inst.node = sim.node_by_name[rel.dst]
        sim.reroute()  # routing="local": locality follows the instance
        rel.installed = now
        if math.isnan(rel.shipped):
            rel.shipped = now
        inst.moving = None
        inst.paused -= 1
        if not inst.paused:
            self._requeue_held(pe, inst, now)
            for ch in list(inst.chans.values()):
                sim.release(inst, ch, now)
            sim.offer(inst.node, now)
        for waiting in [w for w in self.pending_relocations if w[0] is inst]:
            self.pending_relocations.remove(waiting)
            if waiting[1] != inst.node.name:
                self._start_relocation(inst, waiting[1], now)
                break

    # -------------------------------------------------------------- sizes

    def group_bytes(self, pe: PeRt, state: dict | None) -> float:
        """Bytes of ``state``, a group's state just taken out of its instance."""
        if not state:
            return 0.0
        entries = _entries(pe, state)
        return self._entry_bytes(pe, entries) * entries

    def _entry_bytes(self, pe: PeRt, detached: int = 0) -> float:
        """Bytes per state entry of ``pe``; ``detached``: entries taken out of the instances, still counted."""
        if pe.op.state_bytes > 0:
            total = sum(_entries(pe, st) for inst in pe.instances for st in inst.state.values()) + detached
            return pe.op.state_bytes / (total or 1)
        return ENTRY_BYTES

    def state_sizes(self, pe: PeRt) -> list[float]:
        """Bytes of state per key group of ``pe`` (0 for groups in flight or empty)."""
        entries = [0] * pe.groups
        for inst in pe.instances:
            for g, st in inst.state.items():
                entries[g] += _entries(pe, st)
        if pe.op.state_bytes > 0:
            total = sum(entries) or 1
            return [pe.op.state_bytes * e / total for e in entries]
        return [ENTRY_BYTES * e for e in entries]


def _pe_of(key: object) -> str:
    if isinstance(key, tuple):
        return key[0]
    return key.rsplit("#", 1)[0] if isinstance(key, str) and "#" in key else key


def _keep(msgs: Iterable[Message], take: Callable[[Message], bool], taken: list[Message]) -> list[Message]:
    """The messages ``take`` rejects; the others are appended to ``taken``."""
    kept = []
    for m in msgs:
        (taken if take(m) else kept).append(m)
    return kept


def _entries(pe: PeRt, state: dict) -> int:
    if pe.code == WINDOW:
        return sum(len(win) for win in state.values())
    return len(state)


def _copy_state(pe: PeRt, state: dict) -> dict:
    """A snapshot of one group's state (accumulators are updated in place, so they are copied too)."""
    if pe.code == WINDOW:
        return {k: {key: list(acc) for key, acc in win.items()} for k, win in state.items()}
    return {key: list(acc) for key, acc in state.items()}


def _changed_entries(pe: PeRt, snapshot: dict, state: dict) -> int:
    """Entries of ``state`` added or changed since ``snapshot`` (what a precopy move ships last)."""
    if pe.code == WINDOW:
        return sum(
            sum(1 for key, acc in win.items() if snapshot.get(k, {}).get(key) != acc) for k, win in state.items()
        )
    return sum(1 for key, acc in state.items() if snapshot.get(key) != acc)
