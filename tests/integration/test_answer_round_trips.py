"""What crosses the wire when a paused turn is answered (issue 32, item 4): one approval through the
gateway, counted call by call until the model is called again.

The gateway makes one call to sessions (AnswerPause: the answer recorded, the resume's lease taken, the
checkpoint and the journal read) and one to a runtime replica (ContinueTurn, carrying what AnswerPause
returned); the runtime reads nothing from sessions and writes only its appends (the first one takes the
checkpoint). Before, the same answer cost the gateway GetCheckpoint, DecideCheckpoint and AcquireTurnLease,
and the runtime GetCheckpoint, GetJournal and ConsumeCheckpoint besides its appends.

Calls are counted on the callers' stubs (and on the runtime's append channel, whichever transport it uses);
the loops that run on a timer (lease renewals, takeover polls) and the gateway's reads of the event log are
counted apart, since they do not belong to the answer.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from cogmesh.common.v1 import events_pb2
from cogmesh.gateway.v1 import gateway_pb2
from cogmesh.runtime.v1 import runtime_pb2
from cogmesh.sessions.v1 import sessions_pb2
from tests.integration.conftest import TIMEOUT_S, new_session
from tests.integration.test_pause_resume import agents_suite, message, stream

pytestmark = pytest.mark.asyncio(loop_scope="function")

SESSIONS_RPCS = [m.name for m in sessions_pb2.DESCRIPTOR.services_by_name["SessionsService"].methods]
RUNTIME_RPCS = [m.name for m in runtime_pb2.DESCRIPTOR.services_by_name["RuntimeService"].methods]
TIMED = {"RenewTurnLeases", "ClaimOrphanedTurns"}  # the runtime's loops: on a timer, whatever the turn does
LOG_READS = {"ReadEvents", "WatchEvents", "GetEventLogState"}  # the gateway following the log for its caller
APPENDS = {"AppendEvents", "AppendEventsStream"}


class Calls:
    """Counts the calls made through some stubs, by (caller, callee, method), while `counting`."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str, str]] = Counter()
        self.counting = False

    def watch(self, caller: str, callee: str, stub: Any, names: Sequence[str]) -> None:
        for name in names:
            original = getattr(stub, name, None)
            if original is not None:
                setattr(stub, name, self._counted(caller, callee, name, original))

    def _counted(self, caller: str, callee: str, name: str, original: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            if self.counting:
                self.counts[(caller, callee, name)] += 1
            return original(*args, **kwargs)

        return call

    def of(self, caller: str, callee: str, leave_out: frozenset[str] | set[str] = frozenset()) -> dict[str, int]:
        return {m: n for (c, s, m), n in self.counts.items() if (c, s) == (caller, callee) and m not in leave_out}


async def test_an_approval_costs_one_call_to_sessions_and_one_to_a_runtime(tmp_path: Path) -> None:
    async with agents_suite(tmp_path) as env:
        session_id = await new_session(env.gateway, agent="careful")
        paused = await stream(env.gateway.SendMessage(message(session_id, "What is 6 * 7?"), timeout=TIMEOUT_S))
        interrupt_id = paused[-1].status.interrupt_id

        gateway = env.suite.servers["gateway"].app.mounts[0].servicer
        runtime = env.suite.servers["runtime"].app.mounts[0].servicer
        calls = Calls()
        calls.watch("gateway", "sessions", gateway.turns.clients.sessions, SESSIONS_RPCS)
        calls.watch("gateway", "runtime", gateway.turns.clients.runtime, RUNTIME_RPCS)
        calls.watch("runtime", "sessions", runtime.runner.clients.sessions, SESSIONS_RPCS)
        channel = getattr(runtime.runner, "appends", None)  # every turn's appends on one stream, when it has one
        if channel is not None:
            calls.watch("runtime", "sessions", channel, ["AppendEvents"])

        # The counts stand still once the model is called again: what came before is the answer's cost.
        at_model: dict[str, dict[str, int]] = {}
        model, model_called = runtime.local_model, asyncio.Event()
        original_stream = model.stream

        def stream_and_count(*args: Any, **kwargs: Any) -> Any:
            if not model_called.is_set():
                model_called.set()
                at_model.update(
                    gateway_sessions=calls.of("gateway", "sessions", LOG_READS),
                    gateway_runtime=calls.of("gateway", "runtime"),
                    runtime_sessions=calls.of("runtime", "sessions", TIMED),
                )
            return original_stream(*args, **kwargs)

        model.stream = stream_and_count
        try:
            calls.counting = True
            approve = gateway_pb2.ResolveApprovalRequest(
                session_id=session_id, interrupt_id=interrupt_id, decision=events_pb2.APPROVAL_DECISION_APPROVE
            )
            resumed = await stream(env.gateway.ResolveApproval(approve, timeout=TIMEOUT_S))
            await asyncio.wait_for(model_called.wait(), TIMEOUT_S)
        finally:
            model.stream = original_stream
            calls.counting = False
        assert resumed[-1].final.text == "6 * 7 = 42."

        print(f"\ncalls of one approval until the model is called again: {at_model}")
        assert at_model["gateway_sessions"] == {"AnswerPause": 1}
        assert at_model["gateway_runtime"] == {"ContinueTurn": 1}
        assert set(at_model["runtime_sessions"]) <= APPENDS, "the runtime reads nothing: it only appends"
        assert sum(at_model["runtime_sessions"].values()) >= 1, "the answer is recorded before the model runs"
