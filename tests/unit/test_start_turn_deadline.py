"""A StartTurn read after its deadline, the turn lease's end, starts nothing (issue 32 item 6).

The gateway gives StartTurn the lease's remaining time as its deadline. A runtime replica too busy to read
the call before then would run the turn beside the replica that claimed its lapsed lease meanwhile.
"""

from __future__ import annotations

from typing import Any

import pytest

from cogmesh.runtime.v1 import runtime_pb2
from services.kit.errors import DeadlineExceeded
from services.runtime.servicer import RuntimeServicer


class Context:
    def __init__(self, remaining: float | None) -> None:
        self.remaining = remaining

    def time_remaining(self) -> float | None:
        return self.remaining


class Runner:
    address = "runtime-1:1"

    def __init__(self) -> None:
        self.started: list[Any] = []

    def admit(self) -> None:
        pass

    async def start(self, turn: Any, output: Any, grant: Any = None) -> None:
        self.started.append(turn)


def servicer() -> tuple[RuntimeServicer, Runner]:
    runtime = RuntimeServicer.__new__(RuntimeServicer)  # only the runner is used by StartTurn
    runner = Runner()
    runtime.runner = runner  # type: ignore[assignment]
    return runtime, runner


@pytest.mark.parametrize("remaining", [0.0, -0.5])
async def test_a_start_read_after_its_deadline_starts_nothing(remaining: float) -> None:
    runtime, runner = servicer()
    request = runtime_pb2.StartTurnRequest(turn=runtime_pb2.RunTurnRequest(session_id="s", turn_id="t"))
    with pytest.raises(DeadlineExceeded, match="lease lapsed"):
        await runtime.StartTurn(request, Context(remaining))
    assert runner.started == []


async def test_a_start_within_its_deadline_goes_on_to_the_runner() -> None:
    runtime, runner = servicer()
    request = runtime_pb2.StartTurnRequest(turn=runtime_pb2.RunTurnRequest(session_id="s", turn_id="t"))
    reply = await runtime.StartTurn(request, Context(4.0))
    assert reply.holder == "runtime-1:1" and len(runner.started) == 1
