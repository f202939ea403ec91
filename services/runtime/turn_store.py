"""What a turn writes to the sessions service: its messages at the end, its checkpoint when it
pauses, and the effects of a slash command.

The messages go in one append, fenced by the turn's lease and idempotent by request id,
before the final event announces them. A paused turn's checkpoint is written before its
interrupt event goes out, so whoever sees the event can answer at once. Both remember
the session's summary state (`SessionMemory`) for this replica's next turn.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc
from google.protobuf import field_mask_pb2

from cogmesh.common.v1 import events_pb2, messages_pb2
from cogmesh.runtime.v1 import runtime_pb2
from cogmesh.sessions.v1 import sessions_pb2
from services.kit.clients import Clients, call
from services.kit.errors import CogmeshError
from services.kit.llm import ChatMessage
from services.kit.logging import log
from services.kit.protos import dict_to_struct
from services.runtime.assembly import CommandTurn
from services.runtime.context_link import Memory, SessionMemory
from services.runtime.steps.state import encode_snapshot
from services.runtime.turn import Turn

_TO_ROLE = {
    "user": messages_pb2.ROLE_USER,
    "assistant": messages_pb2.ROLE_ASSISTANT,
    "tool": messages_pb2.ROLE_TOOL,
    "system": messages_pb2.ROLE_SYSTEM,
}
_CHECKPOINT_FIELD = {
    "approval_required": "approval",
    "user_input_requested": "user_input",
    "client_tool_call": "client_tool",
}
_RESEND_FIRST_S = 0.05  # the first pause before resending; it doubles up to _RESEND_MAX_S
_RESEND_MAX_S = 0.5
_T = TypeVar("_T")


async def send_idempotent(rpc: Callable[..., Awaitable[_T]], request: Any, budget_s: float) -> _T:
    """Send a write that sessions applies once however often it gets it (same request id or
    interrupt id), resending it on UNAVAILABLE until it goes through or `budget_s` (one call's
    deadline) has passed since the first attempt.

    A dropped connection fails the call on it before the channel has noticed: just after the
    UNAVAILABLE the channel can still read READY, and a resend at once goes down the same dead
    connection ("Socket closed"). So each resend comes after a short, growing pause and with
    wait_for_ready, the rest of the budget as its deadline: it waits for the reconnect instead of
    failing fast while the channel backs off. When sessions is really down the budget runs out and
    the last UNAVAILABLE is raised. Never use this for a write that is not idempotent.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + budget_s
    try:
        return await rpc(request, timeout=budget_s)
    except grpc.aio.AioRpcError as exc:
        if exc.code() != grpc.StatusCode.UNAVAILABLE:
            raise
        failure = exc
    pause = _RESEND_FIRST_S
    while deadline - loop.time() > pause:
        log.warning(
            "resending an idempotent write to sessions", request=type(request).__name__, after=failure.details()
        )
        await asyncio.sleep(pause * (0.5 + random.random() / 2))
        try:
            return await rpc(request, timeout=deadline - loop.time(), wait_for_ready=True)
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                break  # no connection within the budget: what the connection attempts said is the answer
            if exc.code() != grpc.StatusCode.UNAVAILABLE:
                raise
            failure = exc
        pause = min(pause * 2, _RESEND_MAX_S)
    raise failure


def message_to_proto(message: ChatMessage, turn_id: str) -> messages_pb2.Message:
    return messages_pb2.Message(
        role=_TO_ROLE[message.role],
        content=message.content,
        tool_calls=[
            messages_pb2.ToolCall(id=c.id, name=c.name, arguments=dict_to_struct(c.arguments))
            for c in message.tool_calls
        ],
        tool_call_id=message.tool_call_id,
        name=message.name,
        turn_id=turn_id,
    )


class TurnStore:
    def __init__(self, clients: Clients, memory: SessionMemory, resolve: Callable[[str], Awaitable[Any]]) -> None:
        self.clients, self.memory, self.resolve = clients, memory, resolve

    async def checkpoint(
        self, turn: Turn, tenant: str, session_id: str, lease_token: int
    ) -> events_pb2.RuntimeEvent | None:
        """Store the paused turn; an error event when that fails (the turn then ends)."""
        pause = turn.pause
        assert pause is not None
        checkpoint = sessions_pb2.Checkpoint(
            interrupt_id=pause.interrupt_id, turn_id=turn.turn_id, payload=encode_snapshot(pause.snapshot)
        )
        kind = pause.event.WhichOneof("payload") or ""
        getattr(checkpoint, _CHECKPOINT_FIELD[kind]).CopyFrom(getattr(pause.event, kind))
        request = sessions_pb2.WriteCheckpointRequest(
            tenant_id=tenant, session_id=session_id, checkpoint=checkpoint, lease_token=lease_token
        )
        try:  # the write is idempotent (keyed by interrupt id): resending it after UNAVAILABLE is safe
            await send_idempotent(self.clients.sessions.WriteCheckpoint, request, self.clients.call_timeout_s)
        except grpc.aio.AioRpcError as exc:
            log.error("writing the checkpoint failed", code=exc.code().name, details=exc.details())
            retryable = exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
            return events_pb2.RuntimeEvent(
                turn_id=turn.turn_id,
                error=events_pb2.TurnError(
                    kind=events_pb2.ERROR_KIND_UNAVAILABLE if retryable else events_pb2.ERROR_KIND_INTERNAL,
                    message=f"the turn could not pause for an answer: no checkpoint stored: {exc.details()}",
                    retryable=retryable,
                    partial_text=turn.partial_text,
                ),
            )
        return None

    async def persist(
        self, turn: Turn, tenant: str, session_id: str, lease_token: int, last: events_pb2.RuntimeEvent
    ) -> events_pb2.RuntimeEvent:
        memory = (turn.summary, turn.covered)
        return await self.store(turn.turn_id, turn.new_messages, memory, tenant, session_id, lease_token, last)

    async def store(
        self,
        turn_id: str,
        new_messages: list[ChatMessage],
        summary: tuple[str, int] | None,
        tenant: str,
        session_id: str,
        lease_token: int,
        last: events_pb2.RuntimeEvent,
    ) -> events_pb2.RuntimeEvent:
        """Store the turn's messages before the final event announces them; remember the summary state."""
        messages = [message_to_proto(m, turn_id) for m in new_messages]
        if not messages:
            return last
        request = sessions_pb2.AppendMessagesRequest(
            tenant_id=tenant,
            session_id=session_id,
            messages=messages,
            lease_token=lease_token,
            request_id=f"{turn_id}:final",
        )
        try:
            # The append may have landed before its connection dropped; the request id makes sessions
            # answer a repeat with the first result instead of storing the messages twice.
            reply = await send_idempotent(self.clients.sessions.AppendMessages, request, self.clients.call_timeout_s)
        except grpc.aio.AioRpcError as exc:
            log.error("persisting the turn failed", code=exc.code().name, details=exc.details())
            self.memory.forget(session_id)
            lost_lease = exc.code() == grpc.StatusCode.FAILED_PRECONDITION
            down = exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
            cause = "sessions service unavailable" if down else f"sessions answered {exc.code().name}"
            return events_pb2.RuntimeEvent(
                turn_id=turn_id,
                error=events_pb2.TurnError(
                    kind=events_pb2.ERROR_KIND_INVALID_REQUEST if lost_lease else events_pb2.ERROR_KIND_UNAVAILABLE,
                    message=f"the turn finished but its messages could not be stored ({cause}): {exc.details()}",
                    retryable=not lost_lease,
                    partial_text=last.final.text if last.HasField("final") else last.error.partial_text,
                ),
            )
        if summary is None:
            self.memory.forget(session_id)
        else:
            self.memory.put(session_id, Memory(summary[0], summary[1], reply.message_count))
        if last.HasField("final"):
            last.final.new_messages.extend(messages)
        return last

    async def apply_command(self, start: CommandTurn, request: runtime_pb2.RunTurnRequest) -> list[str]:
        """The command's effect on the session: pinned role and skills, model. Returns notices."""
        effect, notices = start.reply.effect, []
        update = sessions_pb2.UpdateSessionRequest(
            tenant_id=request.tenant_id, session_id=request.session_id, lease_token=request.lease_token
        )
        paths: list[str] = []
        if effect.HasField("set_role"):
            update.role_id = effect.set_role
            update.active_skill_ids.extend(effect.skill_ids)
            paths += ["role_id", "active_skill_ids"]
        if effect.HasField("set_model"):
            try:
                model = await self.resolve(effect.set_model)
            except CogmeshError as exc:
                notices.append(f"the session keeps its model: {exc.message}")
            else:
                config = dict(start.runtime_config) | {"model": model.id}
                update.runtime_config.CopyFrom(dict_to_struct(config))
                paths.append("runtime_config")
        if paths:
            update.update_mask.CopyFrom(field_mask_pb2.FieldMask(paths=paths))
            await call("sessions", self.clients.sessions.UpdateSession, update)
        return notices

    async def reset(self, request: runtime_pb2.RunTurnRequest, message_count: int) -> None:
        """/reset: an empty summary that covers every stored message, so the next turn starts afresh."""
        await call(
            "sessions",
            self.clients.sessions.UpdateSummary,
            sessions_pb2.UpdateSummaryRequest(
                tenant_id=request.tenant_id,
                session_id=request.session_id,
                text="",
                covered_message_count=message_count,
                lease_token=request.lease_token,
            ),
        )
        self.memory.put(request.session_id, Memory("", message_count, message_count))

    async def answered(
        self, request: runtime_pb2.ResumeTurnRequest, decision: sessions_pb2.CheckpointDecision | None
    ) -> sessions_pb2.Checkpoint:
        """The paused turn's checkpoint, after recording the answer when the request brings one."""
        if decision is not None:
            decided = await call(
                "sessions",
                self.clients.sessions.DecideCheckpoint,
                sessions_pb2.DecideCheckpointRequest(
                    tenant_id=request.tenant_id,
                    session_id=request.session_id,
                    interrupt_id=request.interrupt_id,
                    decision=decision,
                ),
            )
            return decided.checkpoint  # type: ignore[no-any-return]
        found = await call(
            "sessions",
            self.clients.sessions.GetCheckpoint,
            sessions_pb2.GetCheckpointRequest(
                tenant_id=request.tenant_id, session_id=request.session_id, interrupt_id=request.interrupt_id
            ),
        )
        return found.checkpoint  # type: ignore[no-any-return]

    async def consume(self, request: runtime_pb2.ResumeTurnRequest, allow_undecided: bool) -> None:
        """Take the checkpoint, fenced by the resuming turn's lease, so exactly one resume happens."""
        await call(
            "sessions",
            self.clients.sessions.ConsumeCheckpoint,
            sessions_pb2.ConsumeCheckpointRequest(
                tenant_id=request.tenant_id,
                session_id=request.session_id,
                interrupt_id=request.interrupt_id,
                lease_token=request.lease_token,
                allow_undecided=allow_undecided,
            ),
        )
