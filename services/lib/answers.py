"""Answers to paused turns: what each pause takes, the decision an answer is recorded as, and when two
answers are the same.

A paused turn waits for one of three things, named by its checkpoint's request
(sessions.v1.Checkpoint): an approval, the user's input, or a client-side tool's result. An
answer is recorded as a sessions.v1.CheckpointDecision. The gateway (its API and A2A), the
sessions service (AnswerPause) and the runtime (ContinueTurn) build, check and compare answers
with these functions, so an answer means the same wherever it arrives. The rules of the answers' own
fields (a known decision, the lengths of a reason, a user's input, a tool's result) are declared on
the requests that carry them (ResolveApprovalRequest, ApprovalAnswer, ClientToolResult, ...) and
checked before any of this runs (services/kit/validation.py).
"""

from __future__ import annotations

from google.protobuf import struct_pb2

from cogmesh.common.v1 import events_pb2, messages_pb2
from cogmesh.sessions.v1 import sessions_pb2
from services.kit.errors import Violations
from services.kit.protos import APPROVAL_DECISIONS
from services.lib.turn_options import MAX_SCHEMA_BYTES

# The pauses, by the Checkpoint.request field that says what the turn waits for.
APPROVAL, USER_INPUT, CLIENT_TOOL = "approval", "user_input", "client_tool"
KINDS = (APPROVAL, USER_INPUT, CLIENT_TOOL)
WAITS_FOR = {APPROVAL: "an approval", USER_INPUT: "user input", CLIENT_TOOL: "a client tool result"}
MAX_EDITED_BYTES = MAX_SCHEMA_BYTES  # an edit's arguments, serialized


def kind_of(decision: sessions_pb2.CheckpointDecision) -> str:
    """The kind of pause `decision` answers: a tool result, else an approval (a rejection may carry its
    reason as text), else user input; "" when it carries no answer."""
    if decision.HasField("tool_result"):
        return CLIENT_TOOL
    if decision.approval:
        return APPROVAL
    if decision.text:
        return USER_INPUT
    return ""


def misfit(interrupt_id: str, waits: str, given: str) -> str:
    """Why an answer of kind `given` does not answer a pause of kind `waits`."""
    return (
        f"interrupt {interrupt_id!r} waits for {WAITS_FOR.get(waits, waits)}, "
        f"not for {WAITS_FOR.get(given, given or 'an empty answer')}"
    )


def approval(
    decision: int,
    edited: struct_pb2.Struct | None,
    reason: str,
    problems: Violations,
    prefix: str = "",
    decided_by: str = "",
) -> sessions_pb2.CheckpointDecision:
    """A human's decision on a tool call (its fields `decision`, `edited_arguments`, `reason` after `prefix`).

    Only APPROVE, EDIT and REJECT are answers (the requests' rules refuse any other value, so one from a
    newer or hostile client is never read as an approval); EDIT needs the arguments to run the call with."""
    problems.check(
        decision != events_pb2.APPROVAL_DECISION_EDIT or edited is not None,
        f"{prefix}edited_arguments",
        "is required with APPROVAL_DECISION_EDIT",
    )
    problems.check(
        edited is None or edited.ByteSize() <= MAX_EDITED_BYTES,
        f"{prefix}edited_arguments",
        f"must be at most {MAX_EDITED_BYTES} bytes",
    )
    recorded = sessions_pb2.CheckpointDecision(approval=decision, text=reason, decided_by=decided_by)  # type: ignore[arg-type]
    if decision == events_pb2.APPROVAL_DECISION_EDIT and edited is not None:
        recorded.edited_arguments.CopyFrom(edited)
    return recorded


def user_input(text: str) -> sessions_pb2.CheckpointDecision:
    """The user's answer to a question: some text."""
    return sessions_pb2.CheckpointDecision(text=text)


def tool_result(content: str, is_error: bool) -> sessions_pb2.CheckpointDecision:
    """A client-side tool's result, given back to the model as a tool message; a failure's content says
    so ("error: ..."), which is how the turn tells it from a result."""
    if is_error and not content.startswith("error:"):
        content = f"error: {content}"
    message = messages_pb2.Message(role=messages_pb2.ROLE_TOOL, content=content)
    return sessions_pb2.CheckpointDecision(tool_result=message)


def check(decision: sessions_pb2.CheckpointDecision, problems: Violations, prefix: str = "decision") -> str:
    """Check a recorded decision's fields for the kind of pause it answers; returns that kind."""
    kind = kind_of(decision)
    problems.check(bool(kind), prefix, "must carry an answer: approval, text or tool_result")
    if kind == APPROVAL:
        problems.check(
            decision.approval in APPROVAL_DECISIONS,
            f"{prefix}.approval",
            f"must be APPROVAL_DECISION_APPROVE, _EDIT or _REJECT to answer an approval, not {decision.approval}",
        )
        problems.check(
            decision.approval != events_pb2.APPROVAL_DECISION_EDIT or decision.HasField("edited_arguments"),
            f"{prefix}.edited_arguments",
            "is required with APPROVAL_DECISION_EDIT",
        )
    return kind


def key(decision: sessions_pb2.CheckpointDecision) -> bytes:
    """What makes two answers the same answer: everything but who gave it and when."""
    same = sessions_pb2.CheckpointDecision()
    same.CopyFrom(decision)
    same.ClearField("decided_by")
    same.ClearField("decide_time")
    return same.SerializeToString(deterministic=True)


def same(a: sessions_pb2.CheckpointDecision, b: sessions_pb2.CheckpointDecision) -> bool:
    """Whether two answers are the same answer (a second reviewer's identical answer is not a conflict)."""
    return key(a) == key(b)


def decided(checkpoint: sessions_pb2.Checkpoint) -> events_pb2.ApprovalDecided | None:
    """The audit record of a human's decision on an approval pause (None for other pauses, or one not
    decided yet): what was decided, by whom (the principal the gateway recorded), and why."""
    if checkpoint.WhichOneof("request") != APPROVAL or not checkpoint.HasField("decision"):
        return None
    asked, given = checkpoint.approval, checkpoint.decision
    record = events_pb2.ApprovalDecided(
        interrupt_id=checkpoint.interrupt_id,
        correlation_id=asked.correlation_id,
        action_name=asked.action_name,
        decision=given.approval,
        principal=given.decided_by,
        comment=given.text,
    )
    if given.approval == events_pb2.APPROVAL_DECISION_EDIT and given.HasField("edited_arguments"):
        record.edited_arguments.CopyFrom(given.edited_arguments)
    return record
