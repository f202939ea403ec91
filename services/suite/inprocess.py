"""The whole suite inside one event loop, each service on its own port: for tests and benchmarks."""

from __future__ import annotations

from dataclasses import dataclass

from gateway import main as gateway_main
from services.context import main as context_main
from services.kit.server import Build, RunningServer, start
from services.memory import main as memory_main
from services.models import main as models_main
from services.policy import main as policy_main
from services.runtime import main as runtime_main
from services.sessions import main as sessions_main
from services.suite.settings import SuiteSettings

# Dependency order: a service is built once the services it calls are listening.
ORDER: list[tuple[str, Build[SuiteSettings]]] = [
    ("models", models_main.build),
    ("sessions", sessions_main.build),
    ("memory", memory_main.build),
    ("context", context_main.build),  # calls models and sessions
    ("policy", policy_main.build),  # calls context (ContextCompressor)
    ("runtime", runtime_main.build),
    ("gateway", gateway_main.build),
]


@dataclass
class Suite:
    servers: dict[str, RunningServer]  # by service; replicas after the first as runtime-2, runtime-3, ...
    settings: SuiteSettings | None = None  # with every service's address

    async def restart(self, name: str) -> RunningServer:
        """Start server `name` again on its port (after `servers[name].stop()`), as a restarted process would."""
        assert self.settings is not None
        build = dict(ORDER)[self.servers[name].app.name]
        self.servers[name] = await start(build, self.settings, self.servers[name].address)
        return self.servers[name]

    @property
    def gateway_address(self) -> str:
        return self.servers["gateway"].address

    def replicas(self, service: str) -> list[RunningServer]:
        return [server for name, server in self.servers.items() if name.partition("-")[0] == service]

    async def stop(self, grace: float = 0.5) -> None:
        for name in reversed(self.servers):  # the gateway first, dependencies last
            await self.servers[name].stop(grace)


async def start_suite(settings: SuiteSettings | None = None, host: str = "127.0.0.1", runtimes: int = 1) -> Suite:
    """Every service on a port of its own; `runtimes` runtime replicas, which the gateway balances over."""
    settings = settings or SuiteSettings()
    if settings.api_keys_file is None:
        settings = settings.model_copy(update={"dev_mode": True})  # a local test suite: loopback, no keys
    servers: dict[str, RunningServer] = {}
    for name, build in ORDER:
        count = runtimes if name == "runtime" else 1
        for k in range(count):
            servers[name if k == 0 else f"{name}-{k + 1}"] = await start(build, settings, f"{host}:0")
        listed = ",".join(server.address for server in servers.values() if server.app.name == name)
        settings = settings.model_copy(update={f"{name}_addr": listed})
    return Suite(servers, settings)
