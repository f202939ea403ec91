"""A server's cleanups run in the order the service lists them, after the server has stopped."""

from __future__ import annotations

from typing import Any

from services.kit.server import App, RunningServer


class Recorder:
    def __init__(self) -> None:
        self.done: list[str] = []

    def step(self, name: str) -> Any:
        async def run(*_: Any) -> None:
            self.done.append(name)

        return run


async def test_cleanups_run_in_the_listed_order_after_the_server_stops() -> None:
    record = Recorder()

    class Server:
        stop = staticmethod(record.step("server stopped"))

    class Health:
        enter_graceful_shutdown = staticmethod(record.step("not serving"))

    class Clients:
        close = staticmethod(record.step("clients closed"))

    # The runtime's order: hand the turns over first, then close what those turns use.
    app = App("runtime", [], on_close=[record.step("turns handed over"), record.step("providers closed")])
    await RunningServer(app, Server(), Health(), Clients(), 0).stop(0)  # type: ignore[arg-type]
    assert record.done == ["not serving", "server stopped", "turns handed over", "providers closed", "clients closed"]
