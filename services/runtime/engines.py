"""Runtime registry: named engines that run turns, with their capabilities (seed 003).

Selection order for a turn: the turn's override, then the agent's `runtime`, then
COGMESH_RUNTIME, then the default engine. An unknown name is reported with where it
came from, so the caller knows which knob to fix.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from cogmesh.common.v1 import events_pb2
from services.runtime.loop import run_turn
from services.runtime.turn import Turn

DEFAULT_RUNTIME = "cogmesh"

EngineRun = Callable[[Turn], AsyncIterator[events_pb2.RuntimeEvent]]


@dataclass(frozen=True)
class Capabilities:
    tools: bool = False
    mcp: bool = False
    streaming: bool = False
    cancellation: bool = False
    structured_output: bool = False
    failover: bool = False
    cost_budget: bool = False
    pause_resume: bool = False
    delegation: bool = False


@dataclass(frozen=True)
class Engine:
    name: str
    run: EngineRun
    capabilities: Capabilities
    description: str = ""


class UnknownRuntime(LookupError):
    def __init__(self, name: str, source: str, known: list[str]) -> None:
        self.name, self.source = name, source
        super().__init__(f"unknown runtime {name!r} (from {source}); known runtimes: {', '.join(known)}")


class RuntimeRegistry:
    """Thread-safe name -> engine table; `register` overwrites an engine of the same name."""

    def __init__(self, default: str = DEFAULT_RUNTIME) -> None:
        self.default = default
        self._engines: dict[str, Engine] = {}
        self._lock = threading.Lock()

    def register(
        self, name: str, run: EngineRun, capabilities: Capabilities | None = None, description: str = ""
    ) -> None:
        with self._lock:
            self._engines[name] = Engine(name, run, capabilities or Capabilities(), description)

    def unregister(self, name: str) -> bool:
        with self._lock:
            return self._engines.pop(name, None) is not None

    def get(self, name: str) -> Engine | None:
        return self._engines.get(name)

    def get_capabilities(self, name: str) -> Capabilities | None:
        engine = self._engines.get(name)
        return engine.capabilities if engine else None

    def list_available(self) -> list[str]:
        return sorted(self._engines)

    def is_registered(self, name: str) -> bool:
        return name in self._engines

    def select(self, override: str = "", agent_runtime: str = "", env_default: str = "") -> Engine:
        """The engine for a turn: override > agent's runtime > COGMESH_RUNTIME > default."""
        for name, source in (
            (override, "the turn's runtime override"),
            (agent_runtime, "the agent's runtime"),
            (env_default, "COGMESH_RUNTIME"),
            (self.default, "the default runtime"),
        ):
            if name:
                engine = self._engines.get(name)
                if engine is None:
                    raise UnknownRuntime(name, source, self.list_available())
                return engine
        raise UnknownRuntime("", "the default runtime", self.list_available())


def run_single_shot(turn: Turn) -> AsyncIterator[events_pb2.RuntimeEvent]:
    """One model call and no tools: the cheapest engine, for plain chat."""
    turn.tools = {}
    turn.limits = dataclasses.replace(turn.limits, max_iterations=1)
    return run_turn(turn)


def default_registry(default: str = DEFAULT_RUNTIME) -> RuntimeRegistry:
    registry = RuntimeRegistry(default)
    registry.register(
        DEFAULT_RUNTIME,
        run_turn,
        Capabilities(
            tools=True,
            mcp=True,
            streaming=True,
            cancellation=True,
            structured_output=True,
            failover=True,
            cost_budget=True,
            pause_resume=True,
            delegation=True,
        ),
        "cogmesh's agent loop: model calls, tools (built-in, MCP, remote, client-side), approvals, "
        "limits, budgets, failover, delegation to subagents",
    )
    registry.register(
        "single-shot",
        run_single_shot,
        Capabilities(streaming=True, cancellation=True, structured_output=True, failover=True, cost_budget=True),
        "one model call without tools",
    )
    return registry
