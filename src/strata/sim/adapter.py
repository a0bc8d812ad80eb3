"""The simulator as an :class:`~strata.protocol.engine.Engine`: observe and enforce, nothing decided here.

Everything goes through the simulator's public API (``Simulation.apply``
with :class:`~strata.protocol.window.Actions`, ``Simulation.every``, the
``DispatchPolicy`` hook); this adapter adds what the hierarchy needs on top:

- **switching the dispatch strategy** between units of work: every node runs
  a :class:`SwitchableDispatch` that, when the strategy changes, re-files the
  messages still queued under the new strategy's keys; a message already
  running is never touched (Cameo's dispatch is non-preemptive), so a switch
  happens between units;
- **re-placement** of instances (after a node loss, or when L0 moves them):
  ``Actions(placement=…)`` — the simulator pauses a moved instance, ships its
  state once nothing of it runs or waits at the old node, and resumes it on
  the new node with everything it held (exactly once). Each node's policy is
  built over every PE of the run, since an instance may be relocated to any node;
- **stopping and restarting a job** (admission): its sources are capped at
  0 records/s in drop mode (a stopped query reads nothing) and lifted on restart.

Template switches are not supported by the simulator; a request is recorded
in :attr:`SimEngine.unsupported` and the job keeps its template.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from strata.dispatch import Priors, dispatcher
from strata.model import Scenario, joined_graph
from strata.protocol.engine import Decisions, Observation, Placement, WindowStats
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
        graph = joined_graph(scenario, first.admitted)
        every_pe = tuple(graph)
        cache: dict[str, DispatchFactory] = {}

        def factories(name: str) -> DispatchFactory:
            if name not in cache:
                cache[name] = dispatcher(name, priors)
            return cache[name]

        def policy(view: NodeView) -> SwitchableDispatch:
            # The simulator does not rebuild a node's view when an instance is relocated onto it; a view of every
            # PE keeps a moved PE's window semantics (Cameo's frontier) wherever it lands.
            return SwitchableDispatch(replace(view, pes=every_pe), self.choice, factories)

        self.sim = Simulation(
            scenario,
            seed=seed,
            templates=first.admitted,
            placement=_actions_placement(first.placement),
            dispatch=policy,
            **simulation,
        )  # type: ignore[arg-type]
        self.templates = dict(first.admitted)
        self._instances = {pe: len(insts) for pe, insts in first.placement.items()}
        self._sources = {
            job: [pe for pe in graph if graph.nodes[pe]["job"] == job and graph.nodes[pe]["op"].source is not None]
            for job in first.admitted
        }
        self.stopped: set[str] = set()
        self.unsupported: list[str] = []
        self.switches: list[tuple[float, str]] = []  # (time, strategy) of every dispatch switch
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
                    self.sim.apply(
                        Actions(rate_limits={pe: 0.0 if stop else None for pe in self._sources[job]}, limit_mode="drop")
                    )
                    (self.stopped.add if stop else self.stopped.discard)(job)
        placement = None
        if decisions.placement:
            for pe, insts in decisions.placement.items():
                if pe not in self._instances:
                    raise ValueError(f"placement[{pe!r}]: expected a PE the simulation runs")
                if len(insts) != self._instances[pe]:
                    raise ValueError(
                        f"placement[{pe!r}]: the simulator cannot change instance counts at runtime "
                        f"({self._instances[pe]} instances, {len(insts)} given)"
                    )
            placement = _actions_placement(decisions.placement)
        if limits or decisions.moves or placement:
            self.sim.apply(
                Actions(moves=list(decisions.moves), placement=placement, rate_limits=limits, limit_mode=mode)
            )

    # ------------------------------------------------------------------ control loop

    def drive(self, controller, window_s: float) -> None:
        """Every ``window_s`` simulated seconds: observe, ``controller.step``, apply (anything with ``step``)."""

        def tick(window: WindowStats) -> None:
            self._window = window
            self.apply(controller.step(self.observe()))

        self.sim.every(window_s, tick)


def _actions_placement(placement: Placement) -> dict[str, list]:
    """The controller's placement as ``Actions(placement=…)`` takes it: a PE given no cpu runs with no share."""
    return {pe: [(n, c) if c > 0 else n for n, c in insts] for pe, insts in placement.items()}
