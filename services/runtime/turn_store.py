"""What a turn reads from and writes to the sessions service besides its event log: the answer
to a paused turn (recorded, then consumed by one resume), what a paused turn waits for (its
checkpoint, appended with its pause), and the effects of a slash command.

A resume whose caller answered through sessions' AnswerPause brings the decided checkpoint and the
turn's journal with it (ResumeTurnRequest.paused) and takes the checkpoint with its first append
(services/runtime/runner.py): `answered` and `consume` serve a caller of the previous version, and
a takeover of a resume recorded by one.

A turn's messages go with its final event (services/runtime/turn_log.py); a slash command's
are stored first when its effect needs them stored (/reset's summary covers them).
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
from services.kit.clients import Clients
from services.kit.dependencies import SessionsClient
from services.kit.errors import CogmeshError, DependencyError, Violations
from services.kit.logging import log
from services.kit.protos import dict_to_struct, struct_to_dict
from services.lib import answers
from services.runtime.assembly import CommandTurn
from services.runtime.context_link import Memory, SessionMemory
from services.runtime.turn import Decision, Turn

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
    except DependencyError as exc:
        if exc.status_code != grpc.StatusCode.UNAVAILABLE:
            raise
        failure = exc
    pause = _RESEND_FIRST_S
    while deadline - loop.time() > pause:
        log.warning(
            "resending an idempotent write to sessions", request=type(request).__name__, after=failure.status_message
        )
        await asyncio.sleep(pause * (0.5 + random.random() / 2))
        try:
            return await rpc(request, timeout=deadline - loop.time(), wait_for_ready=True)
        except DependencyError as again:
            if again.status_code == grpc.StatusCode.DEADLINE_EXCEEDED:
                break  # no connection within the budget: what the connection attempts said is the answer
            if again.status_code != grpc.StatusCode.UNAVAILABLE:
                raise
            failure = again
        pause = min(pause * 2, _RESEND_MAX_S)
    raise failure


class TurnStore:
    def __init__(self, clients: Clients, memory: SessionMemory, resolve: Callable[[str], Awaitable[Any]]) -> None:
        self.clients, self.memory, self.resolve = clients, memory, resolve
        self.sessions = SessionsClient.of(clients)

    def checkpoint_of(self, turn: Turn) -> sessions_pb2.Checkpoint:
        """What a paused turn waits for, as the session's checkpoint (its state is in the turn's journal)."""
        pause = turn.pause
        assert pause is not None
        checkpoint = sessions_pb2.Checkpoint(interrupt_id=pause.interrupt_id, turn_id=turn.turn_id)
        kind = pause.event.WhichOneof("payload") or ""
        getattr(checkpoint, _CHECKPOINT_FIELD[kind]).CopyFrom(getattr(pause.event, kind))
        return checkpoint

    async def append(self, request: runtime_pb2.RunTurnRequest, messages: list[messages_pb2.Message]) -> int:
        """Store messages under the turn's lease, once however often this is resent; the session's count after."""
        append = sessions_pb2.AppendMessagesRequest(
            tenant_id=request.tenant_id,
            session_id=request.session_id,
            messages=messages,
            lease_token=request.lease_token,
            request_id=f"{request.turn_id}:final",
        )
        reply = await send_idempotent(self.sessions.AppendMessages, append, self.clients.call_timeout_s)
        return int(reply.message_count)

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
            await self.sessions.UpdateSession(update)
        return notices

    async def reset(self, request: runtime_pb2.RunTurnRequest, message_count: int) -> None:
        """/reset: an empty summary that covers every stored message, so the next turn starts afresh."""
        await self.sessions.UpdateSummary(
            sessions_pb2.UpdateSummaryRequest(
                tenant_id=request.tenant_id,
                session_id=request.session_id,
                text="",
                covered_message_count=message_count,
                lease_token=request.lease_token,
            )
        )
        self.memory.put(request.session_id, Memory("", message_count, message_count))

    async def answered(
        self, request: runtime_pb2.ResumeTurnRequest, decision: sessions_pb2.CheckpointDecision | None
    ) -> sessions_pb2.Checkpoint:
        """The paused turn's checkpoint, after recording the answer when the request brings one."""
        if decision is not None:
            decided = await self.sessions.DecideCheckpoint(
                sessions_pb2.DecideCheckpointRequest(
                    tenant_id=request.tenant_id,
                    session_id=request.session_id,
                    interrupt_id=request.interrupt_id,
                    decision=decision,
                )
            )
            return decided.checkpoint
        found = await self.sessions.GetCheckpoint(
            sessions_pb2.GetCheckpointRequest(
                tenant_id=request.tenant_id, session_id=request.session_id, interrupt_id=request.interrupt_id
            )
        )
        return found.checkpoint

    async def consume(self, request: runtime_pb2.ResumeTurnRequest, allow_undecided: bool) -> None:
        """Take the checkpoint, fenced by the resuming turn's lease, so exactly one resume happens."""
        await self.sessions.ConsumeCheckpoint(
            sessions_pb2.ConsumeCheckpointRequest(
                tenant_id=request.tenant_id,
                session_id=request.session_id,
                interrupt_id=request.interrupt_id,
                lease_token=request.lease_token,
                allow_undecided=allow_undecided,
            )
        )


def decision_of(
    request: runtime_pb2.ResumeTurnRequest, answer: str, problems: Violations | None = None
) -> sessions_pb2.CheckpointDecision:
    """The request's answer (approval, user_input or tool_result) as the sessions service records it, its
    fields' problems noted in `problems` (services/lib/answers.py: the gateway's rules)."""
    problems = problems if problems is not None else Violations()
    if answer == "approval":
        given = request.approval
        edited = given.edited_arguments if given.HasField("edited_arguments") else None
        return answers.approval(given.decision, edited, given.reason, problems, "approval.", given.decided_by)
    if answer == "user_input":
        return answers.user_input(request.user_input)
    return answers.tool_result(request.tool_result.content, request.tool_result.is_error)


def decision_from(checkpoint: sessions_pb2.Checkpoint) -> Decision | None:
    """The loop's view of a recorded answer."""
    if not checkpoint.HasField("decision"):
        return None
    recorded = checkpoint.decision
    kind = checkpoint.WhichOneof("request")
    if kind == "approval":
        if recorded.approval == events_pb2.APPROVAL_DECISION_EDIT:
            return Decision("edit", struct_to_dict(recorded.edited_arguments), decided_by=recorded.decided_by)
        if recorded.approval == events_pb2.APPROVAL_DECISION_APPROVE:
            return Decision("approve", decided_by=recorded.decided_by)
        # Fail closed: only an explicit APPROVE runs the call; anything else that got this far is a rejection.
        reason = recorded.text if recorded.approval == events_pb2.APPROVAL_DECISION_REJECT else ""
        reason = reason or f"unknown approval decision {recorded.approval}: rejected"
        return Decision("reject", text=reason, decided_by=recorded.decided_by)
    if kind == "user_input":
        return Decision("input", text=recorded.text, decided_by=recorded.decided_by)
    content = recorded.tool_result.content
    return Decision("tool_result", text=content, is_error=content.startswith("error:"), decided_by=recorded.decided_by)
