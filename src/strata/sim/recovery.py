"""Failure recovery with no record lost: ``SimOptions(recovery="replay", checkpoint_interval=…)``.

Upstream backup with periodic checkpoints and de-duplication at the receiver
(Hwang et al., "High-availability algorithms for distributed stream
processing", ICDE 2005; MillWheel's record ids, VLDB 2013):

- **Record ids.** Every data message carries a record id (``Message.payload``):
  the source record's ``uid`` at a source, ``record_id(input id, PE salt)`` for
  the output of a filter, map, join or keyed_stateful, the window result's
  ``window_uid`` for a window. An output computed again from the same input
  gets the same id. Unkeyed PEs receive by a hash of the id (not round-robin)
  so that such an output reaches the same instance as the first time.
- **Retention.** Every data message sent to a PE (by a source or an
  upstream instance) is retained, keyed by (record id, sender), until an
  instance that processed it has taken a checkpoint. The retained messages are
  held in durable storage at the sender: they survive the sender's node.
- **Checkpoints.** Every ``checkpoint_interval`` seconds (at k × interval)
  each instance copies its keyed state, open windows, watermarks and how many
  record keys it has processed per key group; retention is trimmed of what it
  processed since its last checkpoint. An instance that installs a migrated
  key group's state checkpoints at once (the group's earlier records were
  processed, and trimmed, by its old owner). Checkpoints take no simulated
  cpu or network time.
- **De-duplication.** A receiver records the key (record id, sender) of every
  record it processes, per key group for keyed PEs (a group's keys travel with
  it, as its state does), per instance otherwise; a record met before is
  processed without effect (it costs its service time) and counted as a
  duplicate. A sink's keys never roll back: its outputs have left the system
  (an idempotent external sink).
- **Failure.** Everything queued, held, running or in flight to a failed
  node's instances is counted ``rolled_back``; each instance is restored at
  once from its last checkpoint on the live node hosting the fewest instances
  (ties: cluster order; a controller may move it later with
  ``Decisions(placement=…)``), keeping only the key groups it owns (or is still
  to ship to a migration's new owner); then every retained message addressed
  to it is sent again from its sender (``replayed``), to the group's current
  owner if the group has moved on; then AutoFlow markers of moves it had not
  yet shipped are sent again, and every upstream instance sends its current
  watermark, behind the replayed records. Outputs it computes again are
  duplicates downstream. State already shipped by a migration arrives even if
  its sender failed (shipped state is durable). An instance relocating
  (``Decisions(placement=…)``) to the failed node stays where it was.

Result: sinks hold every record's effect exactly once (tested against
:mod:`strata.sim.reference`), ``dropped`` stays 0 and conservation holds with
the ``rolled_back`` column. Memory grows with the records processed (the
de-duplication keys are never collected).
"""

from __future__ import annotations

import copy
import math
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

from strata.protocol.units import Kind, Message
from strata.sim.kernel_api import Kernel
from strata.sim.migration import Migration
from strata.sim.runtime import EV_CHECKPOINT, EV_DELIVER, SINK, SOURCE, WINDOW

if TYPE_CHECKING:
    from strata.sim.runtime import InstanceRt, NodeRt, PeRt

SENDER_BITS = 20
SOURCE_SENDER = (1 << SENDER_BITS) - 1  # the sender field of the records a source emits (no upstream instance)
CONTROL_BYTES = 64.0


def record_key(msg: Message) -> int:
    """De-duplication and retention key of a data message: (record id, sending instance)."""
    return (msg.payload << SENDER_BITS) | (msg.upstream & SOURCE_SENDER)


@dataclass(frozen=True)
class Checkpoint:
    """One instance's state as of ``time``: keyed state, open windows, watermarks, record keys per group."""

    time: float
    state: dict
    wm: float
    wm_in: dict
    seen: dict[int, int] | int  # key group → keys processed (keyed PEs); keys processed (others)


@dataclass
class Restore:
    """One instance restored after a failure."""

    node: str  # the failed node
    failed_at: float
    pe: str
    instance: int
    to: str
    checkpoint: float  # time of the checkpoint restored
    state_entries: int  # keys (window, key pairs) restored
    replayed: int = 0  # records sent again to it


class Recovery:
    """Retention, checkpoints, de-duplication and restores for one simulation; decides nothing but the default node."""

    def __init__(self, sim: Kernel, interval: float) -> None:
        if interval <= 0:
            raise ValueError(f"checkpoint_interval: expected seconds > 0; found {interval}")
        if len(sim.instances) >= SOURCE_SENDER:
            raise ValueError(f"recovery='replay': at most {SOURCE_SENDER - 1} instances; found {len(sim.instances)}")
        self.sim = sim
        self.interval = interval
        self.log: list[Restore] = []
        for inst in sim.instances:
            self.checkpoint(inst, sim.now)
        self._tick = math.floor(sim.now / interval) + 1
        sim.schedule(self._tick * interval, EV_CHECKPOINT, None, None)

    # ------------------------------------------------------------ steady state

    def sent(self, pe: PeRt, msg: Message, nbytes: float) -> None:
        """Retain ``msg`` (sent to ``pe``) until a checkpoint of the instance that processes it."""
        pe.log[record_key(msg)] = (msg, nbytes)

    def duplicate(self, inst: InstanceRt, msg: Message) -> bool:
        """Whether ``inst`` has processed ``msg``'s record before; else remember that it now has."""
        key = record_key(msg)
        pe = inst.pe
        seen = pe.seen[msg.key_group] if msg.key_group >= 0 else inst.seen
        if key in seen:
            pe.duplicates += msg.records
            return True
        seen[key] = None
        inst.fresh.append(key)
        return False

    def tick(self, now: float) -> None:
        """Checkpoint every instance; the next round is due at the next multiple of the interval."""
        for inst in self.sim.instances:
            self.checkpoint(inst, now)
        if self.sim.pending():  # nothing else left to happen: stop, so that a drained run ends
            self._tick += 1
            self.sim.schedule(self._tick * self.interval, EV_CHECKPOINT, None, None)

    def checkpoint(self, inst: InstanceRt, now: float) -> None:
        pe = inst.pe
        log = pe.log
        for key in inst.fresh:
            log.pop(key, None)
        inst.fresh = []
        if pe.keyed:
            groups = {g for g, r in enumerate(pe.route) if r == inst.index and g not in inst.incoming}
            seen: dict[int, int] | int = {g: len(pe.seen[g]) for g in groups.union(inst.state)}
        else:
            seen = len(inst.seen)
        inst.ckpt = Checkpoint(now, copy.deepcopy(inst.state), inst.wm, dict(inst.wm_in), seen)

    def installed(self, item: object, now: float) -> None:
        """A migrated key group's state was installed: its new owner checkpoints at once."""
        if isinstance(item, Migration) and item.installed == now:
            self.checkpoint(self.sim.pes[item.pe].instances[item.dst], now)

    # ------------------------------------------------------------ failures

    def restore(self, failed: NodeRt, instances: list[InstanceRt], now: float) -> None:
        """Restore the instances of ``failed`` (already emptied by the engine) on live nodes and replay their inputs."""
        sim = self.sim
        live = [n for n in sim.nodes if n.up]
        if not live and instances:
            raise RuntimeError(f"recovery: node {failed.name} failed at {now:g} s and no node is up to restore on")
        load = Counter(i.node.name for i in sim.instances if i.node.up)
        held: dict[int, set[int]] = {}
        rows: dict[int, Restore] = {}
        for inst in instances:
            target = min(live, key=lambda n: (load[n.name], n.index))
            load[target.name] += 1
            held[inst.gid] = self._restore(inst, target, failed, now)
            rows[inst.gid] = self.log[-1]
        self._void({inst.gid for inst in instances})
        for inst in instances:
            rows[inst.gid].replayed = self._replay(inst, held[inst.gid], now)
        for inst in instances:
            self._resume(inst, failed, now)
        for inst in sim.instances:  # a relocation heading for the failed node goes back where it came from
            rel = inst.moving
            if rel is not None and rel.dst == failed.name and inst.node is not failed:
                rel.dst = inst.node.name
                if math.isnan(rel.shipped):
                    sim.migrations.check_relocation(inst, now)

    def _restore(self, inst: InstanceRt, target: NodeRt, failed: NodeRt, now: float) -> set[int]:
        """Put ``inst`` back in the state of its last checkpoint on ``target``; returns the key groups it holds."""
        pe = inst.pe
        ck: Checkpoint = inst.ckpt
        inst.node = target
        inst.vtime = now
        inst.fresh = []
        inst.wm = ck.wm
        inst.wm_in = dict(ck.wm_in)
        held: set[int] = set()
        if pe.keyed:
            arriving, leaving = set(), set()
            for mig in self._moves(pe):
                if mig.dst == inst.index and math.isnan(mig.installed):
                    arriving.add(mig.group)
                if mig.src == inst.index and math.isnan(mig.shipped):
                    leaving.add(mig.group)
            owned = {g for g, r in enumerate(pe.route) if r == inst.index}
            held = (owned - arriving - set(inst.incoming)) | leaving
            inst.state = {g: st for g, st in copy.deepcopy(ck.state).items() if g in held}
            for g in held:
                n = ck.seen.get(g)
                if n is not None:  # a group's keys roll back with its state
                    keys = pe.seen[g]
                    while len(keys) > n:
                        keys.popitem()
        else:
            inst.state = copy.deepcopy(ck.state)
            # A sink's outputs have left the system (delivered, latency recorded): it keeps every key it has
            # seen, as an idempotent external sink does, rather than roll back to its checkpoint.
            while pe.code != SINK and len(inst.seen) > ck.seen:
                inst.seen.popitem()
        inst.win_starts = {k for st in inst.state.values() for k in st} if pe.code == WINDOW else set()
        entries = sum(sum(len(w) for w in st.values()) if pe.code == WINDOW else len(st) for st in inst.state.values())
        self.log.append(Restore(failed.name, now, pe.name, inst.index, target.name, ck.time, entries))
        return held

    def _moves(self, pe: PeRt) -> list[Migration]:
        migs = self.sim.migrations
        live = [m for (name, _), m in migs.active.items() if name == pe.name]
        return live + list(migs.stop_active.get(pe.name, ()))

    def _void(self, gids: set[int]) -> None:
        """Messages in flight to restored instances are lost with their node (the replay re-sends the data)."""

        def lost(ev: tuple) -> bool:
            if ev[2] != EV_DELIVER or ev[3].gid not in gids:
                return False
            msg = ev[4]
            if msg.kind is not Kind.DATA:
                return True
            if msg.upstream != -1:  # a source admission deferred by a rate limit is not at the node yet
                ev[3].pe.arrived += msg.records
                ev[3].pe.rolled_back += msg.records
                return True
            return False

        self.sim.cancel(lost)

    def _replay(self, inst: InstanceRt, held: set[int], now: float) -> int:
        """Send again every retained message addressed to ``inst``, in the order first sent; returns the records."""
        sim = self.sim
        pe = inst.pe
        n = 0
        for key, (msg, nbytes) in list(pe.log.items()):
            if msg.instance != inst.index:
                continue
            dst = inst
            if pe.keyed and msg.key_group not in held:  # the group has moved on: its owner de-duplicates
                dst = pe.instances[pe.route[msg.key_group]]
            again = copy.copy(msg)
            again.seq = sim.next_seq()
            again.created = now
            again.epoch = 0
            again.instance = dst.index
            pe.log[key] = (again, nbytes)
            pe.sent += msg.records
            pe.replayed += msg.records
            n += msg.records
            if msg.upstream == -1:
                sim.deliver(dst, again, now)
            else:
                sim.send(sim.instances[msg.upstream], dst, again, nbytes, now)
        return n

    def _resume(self, inst: InstanceRt, failed: NodeRt, now: float) -> None:
        """Behind the replayed records: markers of unshipped moves again, every upstream's watermark."""
        sim = self.sim
        pe = inst.pe
        for mig in self._moves(pe):
            if mig.mode != "stop" and mig.src == inst.index and math.isnan(mig.shipped) and not math.isnan(mig.started):
                mig.seen = 0
                for u in pe.upstream:
                    marker = sim.new_message(pe, inst.index, u.gid, now, now, -1, mig.group, Kind.MARKER, mig)
                    sim.send(u, inst, marker, CONTROL_BYTES, now)
        if pe.needs_wm:
            if pe.code == SOURCE:
                if pe.wm_last > -math.inf:
                    sim.deliver(inst, self._watermark(pe, inst, -1, pe.wm_last, now), now)
            else:
                for u in pe.upstream:
                    if u.wm > -math.inf:
                        sim.send(u, inst, self._watermark(pe, inst, u.gid, u.wm, now), CONTROL_BYTES, now)
        rel = inst.moving
        if rel is not None and math.isnan(rel.shipped):
            sim.migrations.check_relocation(inst, now)

    def _watermark(self, pe: PeRt, inst: InstanceRt, upstream: int, wm: float, now: float) -> Message:
        return Message(self.sim.next_seq(), pe.job, pe.name, inst.index, upstream, now, wm, wm, kind=Kind.WATERMARK)
