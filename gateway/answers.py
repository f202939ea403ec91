"""Answers to paused turns as the gateway takes them: ResolveApproval, AnswerInterrupt and their Converse
frames, and an A2A message to an input-required task.

Each becomes the CheckpointDecision sessions records (services/lib/answers.py: the rules the sessions
service and the runtime apply too), every field problem named as the caller spelled it. Sessions'
AnswerPause judges the answer against the pause in the same step that records it, so its verdict (an
unknown interrupt, an answer of the wrong kind, another answer first) comes back here as the
caller's error (`refusal`).
"""

from __future__ import annotations

import grpc
from google.rpc import error_details_pb2

from cogmesh.common.v1 import errors_pb2, events_pb2
from cogmesh.gateway.v1 import gateway_pb2
from cogmesh.sessions.v1 import sessions_pb2
from gateway.a2a import mapping
from services.kit.errors import CogmeshError, DependencyError, FailedPrecondition, InvalidArgument, NotFound, Violations
from services.lib import answers

# The field of AnswerInterruptRequest that answers each kind of pause.
ANSWERED_BY = {answers.APPROVAL: "approval", answers.USER_INPUT: "user_input", answers.CLIENT_TOOL: "tool_result"}
# The pauses an A2A message answers: it carries text (an approval's answer is a word), never a tool's result.
A2A_RESUMABLE = (answers.APPROVAL, answers.USER_INPUT)


def resolve_approval(
    request: gateway_pb2.ResolveApprovalRequest, problems: Violations, prefix: str = ""
) -> sessions_pb2.CheckpointDecision:
    """ResolveApproval (or its Converse frame) as the decision to record."""
    edited = request.edited_arguments if request.HasField("edited_arguments") else None
    return answers.approval(request.decision, edited, request.reason, problems, prefix)


def answer_interrupt(
    request: gateway_pb2.AnswerInterruptRequest, problems: Violations, prefix: str = ""
) -> tuple[str, sessions_pb2.CheckpointDecision]:
    """AnswerInterrupt (or its Converse frame): which answer field it sets, and the decision to record
    (the answer itself is required by the request's rules)."""
    given = request.WhichOneof("answer") or ""
    if given == "approval":
        approval = request.approval
        edited = approval.edited_arguments if approval.HasField("edited_arguments") else None
        return given, answers.approval(approval.decision, edited, approval.reason, problems, f"{prefix}approval.")
    if given == "user_input":
        return given, answers.user_input(request.user_input)
    result = request.tool_result
    return given, answers.tool_result(result.content, result.is_error)


def from_a2a(kind: str, text: str) -> sessions_pb2.CheckpointDecision | None:
    """An A2A message's text as the answer to a pause of `kind` (approval or user input); None when it is
    no answer to it (an approval's reply is neither approve nor reject: gateway/a2a/mapping.py's words)."""
    if kind == answers.APPROVAL:
        approve = mapping.approval_answer(text)
        if approve is None:
            return None
        return sessions_pb2.CheckpointDecision(
            approval=events_pb2.APPROVAL_DECISION_APPROVE if approve else events_pb2.APPROVAL_DECISION_REJECT
        )
    return sessions_pb2.CheckpointDecision(text=text)


def _details(exc: DependencyError) -> tuple[error_details_pb2.ErrorInfo, list[tuple[str, str]]]:
    """The ErrorInfo (empty when none) and the field violations of a failed call."""
    info = exc.error_info or error_details_pb2.ErrorInfo()
    bad = exc.details_of(error_details_pb2.BadRequest)
    return info, [(v.field, v.description) for request in bad for v in request.field_violations]


def resuming(exc: DependencyError) -> str:
    """The paused turn another attempt is resuming right now (AnswerPause's busy answer), else ""."""
    if exc.status_code != grpc.StatusCode.FAILED_PRECONDITION:
        return ""
    info, _ = _details(exc)
    return info.metadata.get("turn_id", "") if info.metadata.get("resuming") == "true" else ""


def refusal(exc: DependencyError, session_id: str, interrupt_id: str, given: str) -> CogmeshError | None:
    """Sessions' refusal of an answer (AnswerPause) as the caller's error; `given` names the caller's field
    that carried the answer. None: no refusal of this answer in particular (`exc` is the caller's answer)."""
    info, violations = _details(exc)
    code, where = exc.status_code, {"session_id": session_id, "interrupt_id": interrupt_id}
    if code == grpc.StatusCode.NOT_FOUND and info.reason == "TURN_NOT_FOUND":
        return NotFound(
            f"no paused turn of session {session_id!r} waits for interrupt {interrupt_id!r} "
            "(unknown, or already answered and resumed)",
            reason=errors_pb2.ERROR_REASON_TURN_NOT_FOUND,
            metadata=where,
        )
    if code == grpc.StatusCode.INVALID_ARGUMENT and violations:  # an answer of the wrong kind for this pause
        return InvalidArgument([(given or field, why) for field, why in violations])
    if code == grpc.StatusCode.FAILED_PRECONDITION and "decided differently" in info.metadata.get("conflict", ""):
        return FailedPrecondition(
            f"interrupt {interrupt_id!r} was already answered differently; the first answer wins", metadata=where
        )
    return None
