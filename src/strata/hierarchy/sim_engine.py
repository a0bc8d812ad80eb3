"""The simulator as an :class:`~strata.hierarchy.protocol.Engine`: observe and enforce, nothing decided here.

``strata.sim`` fixes placement and dispatch when a ``Simulation`` is built.
The hierarchy needs three runtime capabilities on top; they live here, as
an adapter, so the simulator itself stays untouched:

- **switching the dispatch strategy** between units of work: every node runs
  a :class:`SwitchableDispatch` (a ``DispatchPolicy`` through the public
  hook) that, when the strategy changes, re-files the messages still queued
  under the new strategy's keys; a message already running is never touched
  (Cameo's dispatch is non-preemptive), so a switch happens between units;
- **re-placement** of an instance on another node (after a node loss, or
  when L0 moves it): the instance is rebound to the new node with its keyed
  state (the simulator keeps state across a failure, as restored from a
  checkpoint), its queued messages follow it, and both nodes' views and
  policies are rebuilt. This reaches into the simulator's runtime records
  (``InstanceRt.node``, ``NodeRt.view/policy/running/idle``) — the one place
  outside ``strata.sim`` that does, kept to :meth:`SimEngine._rebind`;
- **stopping and restarting a job** (admission): its sources are capped at
  0 records/s in drop mode (a stopped query reads nothing) and lifted on restart.

Rate caps and key-group moves go through ``Simulation.apply`` unchanged.
Template switches are not supported by the simulator; a request is recorded
in :attr:`SimEngine.unsupported` and the job keeps its template.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from strata.dispatch import Priors, dispatcher
from strata.hierarchy.protocol import Decisions, Observation, WindowStats
from strata.model import Scenario
from strata.protocol.units import DispatchFactory, DispatchPolicy, Message, NodeView
from strata.sim import Actions, Simulation


@dataclass
class DispatchChoice:
    """The strategy every node runs; ``version`` changes when it does (read by each node's policy)."""

    name: str
    version: int = 0

    def set(self, name: str) -> None:
        if name != self.name:
            self.name = name
            self.version += 1


class SwitchableDispatch:
    """A node's dispatch policy whose strategy can change at runtime; queued messages are re-filed on change."""

    __slots__ = ("_choice", "_factories", "_inner", "_version", "view")

    def __init__(self, view: NodeView, choice: DispatchChoice, factories: Callable[[str], DispatchFactory]) -> None:
        self.view = view
        self._choice = choice
        self._factories = factories
        self._version = choice.version
        self._inner: DispatchPolicy = factories(choice.name)(view)

    def _refile(self, inner: DispatchPolicy, now: float) -> None:
        old = self._inner
        self._inner = inner
        while (msg := old.pop(now)) is not None:
            inner.push(msg, now)

    def _sync(self, now: float) -> None:
        if self._version != self._choice.version:
            self._version = self._choice.version
            self._refile(self._factories(self._choice.name)(self.view), now)

    def rebuild(self, view: NodeView, now: float) -> None:
        """The node's PEs changed: a fresh policy for the new view, queued messages re-filed."""
        self.view = view
        self._version = self._choice.version
        self._refile(self._factories(self._choice.name)(view), now)

    def take(self, keep: Callable[[Message], bool], now: float) -> list[Message]:
        """Remove and return the queued messages ``keep`` rejects (an instance leaving the node)."""
        out: list[Message] = []
        old = self._inner
        self._inner = self._factories(self._choice.name)(self.view)
        while (msg := old.pop(now)) is not None:
            if keep(msg):
                self._inner.push(msg, now)
            else:
                out.append(msg)
        return out

    def push(self, msg: Message, now: float) -> None:
        self._sync(now)
        self._inner.push(msg, now)

    def pop(self, now: float) -> Message | None:
        self._sync(now)
        return self._inner.pop(now)

    def completed(self, msg: Message, service: float, now: float) -> None:
        self._inner.completed(msg, service, now)

    def __len__(self) -> int:
        return len(self._inner)


class SimEngine:
    """``strata.sim`` behind the Engine protocol, built from the controller's first decisions.

    ``SimEngine(scenario, controller.start(), seed=1, **simulation_kwargs)``;
    ``engine.drive(controller, window_s)`` registers the control loop
    (observe → ``controller.step`` → apply every ``window_s`` simulated
    seconds); then ``engine.sim.run(until)``.
    """

    def __init__(
        self, scenario: Scenario, first: Decisions, *, seed: int = 1, priors: Priors | None = None, **simulation: object
    ) -> None:
        if first.placement is None or first.admitted is None:
            raise ValueError("SimEngine needs the controller's first decisions (placement and admitted jobs)")
        self.scenario = scenario
        self.choice = DispatchChoice(first.dispatch or "llf")
        priors = priors or Priors.from_scenario(scenario, first.admitted)
        cache: dict[str, DispatchFactory] = {}

        def factories(name: str) -> DispatchFactory:
            if name not in cache:
                cache[name] = dispatcher(name, priors)
            return cache[name]

        self._factories = factories
        # The simulator records only positive shares; a PE the plan gives no cpu (a free source) has none.
        placement = {pe: [(n, c) if c > 0 else n for n, c in insts] for pe, insts in first.placement.items()}
        self.sim = Simulation(
            scenario,
            seed=seed,
            templates=first.admitted,
            placement=placement,
            dispatch=lambda view: SwitchableDispatch(view, self.choice, factories),
            **simulation,
        )  # type: ignore[arg-type]
        self.templates = dict(first.admitted)
        self.stopped: set[str] = set()
        self.unsupported: list[str] = []
        self.switches: list[tuple[float, str]] = []  # (time, strategy) of every dispatch switch
        self.rebinds: list[tuple[float, str, str, str]] = []  # (time, instance, from, to)
        self._window: WindowStats | None = None

    # ------------------------------------------------------------------ Engine protocol

    def observe(self) -> Observation:
        """The window the simulator measured for this control step, plus nodes down and the strategy in force."""
        if self._window is None:
            raise RuntimeError("observe() is called from the control loop (drive) once the first window closed")
        w = self._window
        records = sum(i.records for i in w.instances)
        down = frozenset(n.name for n in self.sim.nodes if not n.up)
        return Observation(
            w, down, dict(self.templates), self.choice.name, records // self.sim.batch, float(self.sim.batch)
        )

    def apply(self, decisions: Decisions) -> None:
        now = self.sim.now
        if decisions.dispatch is not None and decisions.dispatch != self.choice.name:
            self.choice.set(decisions.dispatch)
            self.switches.append((now, decisions.dispatch))
        limits: dict[str, float | None] = dict(decisions.rate_limits or {})
        if decisions.admitted is not None:
            for job, tpl in decisions.admitted.items():
                if job in self.templates and tpl != self.templates[job]:
                    self.unsupported.append(
                        f"{now:.1f}: template switch {job} → {tpl} (simulator keeps {self.templates[job]})"
                    )
            for job in self.templates:
                stop = job not in decisions.admitted
                if stop != (job in self.stopped):
                    for pe in self.sim.pes.values():
                        if pe.job == job and pe.stream is not None:
                            self.sim.apply(Actions(rate_limits={pe.name: 0.0 if stop else None}, limit_mode="drop"))
                    (self.stopped.add if stop else self.stopped.discard)(job)
        if decisions.placement:
            for pe, insts in decisions.placement.items():
                rt = self.sim.pes.get(pe)
                if rt is None:
                    raise ValueError(f"placement[{pe!r}]: expected a PE the simulation runs")
                if len(insts) != len(rt.instances):
                    raise ValueError(
                        f"placement[{pe!r}]: the simulator cannot change instance counts at runtime "
                        f"({len(rt.instances)} instances, {len(insts)} given)"
                    )
                for inst, (node, cpu) in zip(rt.instances, insts, strict=True):
                    self._rebind(inst, node, cpu, now)
        if limits or decisions.moves:
            self.sim.apply(Actions(moves=list(decisions.moves), rate_limits=limits, limit_mode=decisions.limit_mode))

    # ------------------------------------------------------------------ control loop

    def drive(self, controller, window_s: float) -> None:
        """Every ``window_s`` simulated seconds: observe, ``controller.step``, apply."""

        def tick(window: WindowStats) -> None:
            self._window = window
            self.apply(controller.step(self.observe()))

        self.sim.every(window_s, tick)

    # ------------------------------------------------------------------ re-placement

    def _view(self, node) -> NodeView:
        """A node's view rebuilt from the instances bound to it now (as the simulator builds it at start)."""
        pes: list[str] = []
        share: dict[str, float] = {}
        for inst in self.sim.instances:
            if inst.node is node:
                if inst.pe.name not in pes:
                    pes.append(inst.pe.name)
                if inst.share is not None:
                    share[inst.pe.name] = share.get(inst.pe.name, 0.0) + inst.share
        jobs = sorted({self.sim.pes[pe].job for pe in pes})
        every = self.sim.pes
        return replace(
            node.view,
            pes=tuple(pes),
            target_latency={j: self.scenario.job[j].target_latency_s for j in jobs},
            weight={j: node.view.weight.get(j, 1.0) for j in jobs},
            downstream={pe: tuple(d.name for d, _ in rt.down) for pe, rt in every.items() if rt.job in jobs},
            cost_per_record={pe: rt.cost for pe, rt in every.items() if rt.job in jobs},
            share=share,
        )

    def _rebind(self, inst, node_name: str, cpu: float, now: float) -> None:
        """Move one instance (state, queued and running messages) to ``node_name``."""
        dst = self.sim.node_by_name.get(node_name)
        if dst is None:
            raise ValueError(f"placement: expected a node of the cluster; found {node_name!r}")
        src = inst.node
        inst.share = cpu if cpu > 0 else None
        if src is dst:
            return
        if not dst.up:
            raise ValueError(f"placement: node {node_name!r} is down")
        moving = src.policy.take(lambda m: not (m.pe == inst.pe.name and m.instance == inst.index), now)
        # A message already running finishes where it started, but is accounted to the instance's new node.
        for seq, entry in list(src.running.items()):
            if entry[0] is inst:
                dst.running[seq] = src.running.pop(seq)
                src.idle += 1
                dst.idle -= 1
        inst.node = dst
        for n in (src, dst):
            n.view = self._view(n)
            n.policy.rebuild(n.view, now)
        for msg in moving:
            dst.policy.push(msg, now)
        self.rebinds.append((now, inst.name, src.name, dst.name))
        for n in (src, dst):
            if n.up and n.idle > 0:
                self.sim._offer(n, now)
