"""The simulator as an :class:`~strata.protocol.engine.Engine`: observe and enforce, nothing decided here.

Everything goes through the simulator's public API (``Simulation.apply``
with :class:`~strata.protocol.engine.Decisions`, :mod:`strata.sim.observation`,
the ``DispatchPolicy`` hook); this adapter adds what the hierarchy needs on top:

- **switching the dispatch strategy** between units of work: every node runs
  a :class:`SwitchableDispatch` that, when the strategy changes, re-files the
  messages still queued under the new strategy's keys; a message already
  running is never touched (Cameo's dispatch is non-preemptive), so a switch
  happens between units;
- **re-placement** of instances (after a node loss, or when L0 moves them):
  ``Decisions(placement=…)`` — the simulator pauses a moved instance, ships its
  state once nothing of it runs or waits at the old node, and resumes it on
  the new node with everything it held (exactly once). Each node's policy is
  built over every PE of the run, since an instance may be relocated to any node;
- **stopping and restarting a job** (admission): its sources are capped at
  0 records/s in drop mode (a stopped query reads nothing) and lifted on restart.

Template switches are not supported by the simulator; a request is recorded
in :attr:`SimEngine.unsupported` and the job keeps its template.

The simulation is built when the first decisions arrive (the controller's
``start``: admitted templates, placement, dispatch), so the loop of
:mod:`strata.control.loop` drives it like any engine: ``advance`` runs
simulated time, ``observe`` measures the window since the last call. The
dispatch policies are given to the adapter (``dispatch``: strategy name and
admitted templates → a node policy factory), so the engine imports no policy.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from strata.model import Scenario, joined_graph
from strata.protocol.engine import Decisions, Observation
from strata.protocol.units import DispatchFactory, DispatchPolicy, Message, NodeView
from strata.sim.assignment import decided
from strata.sim.kernel import Simulation
from strata.sim.observation import snapshot, window
from strata.sim.options import SimOptions


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


DispatchMaker = Callable[[str, Mapping[str, str]], DispatchFactory]
"""Strategy name and the admitted templates → the factory of each node's dispatch policy (given by the loop)."""


class SimEngine:
    """``strata.sim`` behind the Engine protocol; the simulation is built from the first decisions applied.

    ``SimEngine(scenario, SimOptions(...), dispatch=maker)``, then
    :func:`strata.control.loop.run` (start → apply; every window: advance,
    observe, step, apply). ``progress(now, events)`` is called about once per
    simulated second while time advances (events: heap events run so far). Without ``dispatch`` (or with first
    decisions that name no strategy) every node runs ``options.dispatch`` (default: the simulator's FIFO). The first
    decisions' admitted templates and placement, when given, replace ``options.templates`` and ``options.placement``.
    """

    def __init__(
        self,
        scenario: Scenario,
        options: SimOptions | None = None,
        *,
        dispatch: DispatchMaker | None = None,
        progress: Callable[[float, int], None] | None = None,
    ) -> None:
        self.scenario = scenario
        self.options = options or SimOptions()
        self.progress = progress
        self._make_dispatch = dispatch
        self.sim: Simulation | None = None
        self.choice: DispatchChoice | None = None
        self.templates: dict[str, str] = {}
        self.stopped: set[str] = set()
        self.unsupported: list[str] = []
        self.switches: list[tuple[float, str]] = []  # (time, strategy) of every dispatch switch
        self._sources: dict[str, list[str]] = {}
        self._snap: dict | None = None
        self._start = 0.0

    def _build(self, first: Decisions) -> None:
        scenario = self.scenario
        options = self.options
        admitted = first.admitted if first.admitted is not None else {j.id: j.templates[0].name for j in scenario.jobs}
        graph = joined_graph(scenario, admitted)
        every_pe = tuple(graph)
        policy = options.dispatch
        if first.dispatch is not None and self._make_dispatch is not None:
            make, choice = self._make_dispatch, DispatchChoice(first.dispatch)
            self.choice = choice

            def policy(view: NodeView) -> SwitchableDispatch:
                # The simulator does not rebuild a node's view when an instance is relocated onto it; a view of
                # every PE keeps a moved PE's window semantics (Cameo's frontier) wherever it lands.
                return SwitchableDispatch(replace(view, pes=every_pe), choice, lambda name: make(name, admitted))

        placement = decided(first.placement) if first.placement is not None else options.placement
        self.sim = Simulation(scenario, replace(options, templates=admitted, dispatch=policy, placement=placement))
        self.templates = dict(admitted)
        self._sources = {
            job: [pe for pe in graph if graph.nodes[pe]["job"] == job and graph.nodes[pe]["op"].source is not None]
            for job in admitted
        }
        self._snap, self._start = snapshot(self.sim), self.sim.now

    # ------------------------------------------------------------------ Engine protocol

    def now(self) -> float:
        return self.sim.now if self.sim is not None else 0.0

    def advance(self, until: float) -> bool:
        """Run the simulation to ``until`` simulated seconds."""
        if self.sim is None:
            raise RuntimeError("advance() before the first decisions were applied")
        sim, report = self.sim, self.progress
        sim.run(until, progress=None if report is None else lambda now: report(now, sim.events))
        return True

    def observe(self) -> Observation:
        """The window since the last observation, plus nodes down and the strategy in force."""
        if self.sim is None:
            raise RuntimeError("observe() before the first decisions were applied")
        w = window(self.sim, self._snap, self._start)
        self._snap, self._start = snapshot(self.sim), self.sim.now
        records = sum(i.records for i in w.instances)
        down = frozenset(n.name for n in self.sim.nodes if not n.up)
        strategy = self.choice.name if self.choice is not None else None
        return Observation(w, down, dict(self.templates), strategy, records // self.sim.batch, float(self.sim.batch))

    def apply(self, decisions: Decisions) -> None:
        if self.sim is None:
            self._build(decisions)
        now = self.sim.now
        if decisions.dispatch is not None and self.choice is not None and decisions.dispatch != self.choice.name:
            self.choice.set(decisions.dispatch)
            self.switches.append((now, decisions.dispatch))
        limits: dict[str, float | None] = dict(decisions.rate_limits or {})
        mode = decisions.limit_mode
        if decisions.admitted is not None:
            for job, tpl in decisions.admitted.items():
                if job in self.templates and tpl != self.templates[job]:
                    self.unsupported.append(
                        f"{now:.1f}: template switch {job} → {tpl} (simulator keeps {self.templates[job]})"
                    )
            for job in self.templates:
                stop = job not in decisions.admitted
                if stop != (job in self.stopped):
                    # A stopped query reads nothing: its sources drop, whatever mode the other limits use.
                    limits_now = {pe: 0.0 if stop else None for pe in self._sources[job]}
                    self.sim.apply(Decisions(decisions.epoch, rate_limits=limits_now, limit_mode="drop"))
                    (self.stopped.add if stop else self.stopped.discard)(job)
        # a stopped job's sources stay at 0 whatever pacing says
        limits = {pe: r for pe, r in limits.items() if not any(pe in self._sources[j] for j in self.stopped)}
        if limits or decisions.moves or decisions.placement:
            self.sim.apply(
                Decisions(
                    decisions.epoch,
                    placement=decisions.placement,
                    rate_limits=limits,
                    limit_mode=mode,
                    moves=list(decisions.moves),
                )
            )
