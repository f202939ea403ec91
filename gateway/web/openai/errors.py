"""Errors in OpenAI's shape: `{"error": {"message", "type", "param", "code"}}` with the HTTP status it goes with.

Three sources, one shape: a request this edge refuses before calling the gateway (it names the
OpenAI parameter), a gRPC status from the gateway (auth, tenancy, limits, unknown agents and
sessions: the gateway's own message, its ErrorInfo reason as `code`), and a turn that failed
(its TurnError kind decides the status; `error.cogmesh` keeps the session, turn and partial text).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from starlette.responses import JSONResponse

from cogmesh.common.v1 import errors_pb2, events_pb2

# The openai SDKs retry 408, 409, 429 and 5xx unless the server says otherwise; a turn that
# failed for good, or a refusal that will not change, must not be sent again behind the caller's back.
SHOULD_RETRY = "x-should-retry"


@dataclass
class OpenAIError(Exception):
    """An error response: HTTP status, OpenAI's error object, and headers (Retry-After...)."""

    status: int
    message: str
    type: str = "invalid_request_error"
    param: str | None = None
    code: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)  # `cogmesh`: what a failed turn left

    def __str__(self) -> str:
        return self.message

    def body(self) -> dict[str, Any]:
        error: dict[str, Any] = {"message": self.message, "type": self.type, "param": self.param, "code": self.code}
        return {"error": {**error, **self.extra}}

    def response(self, headers: Mapping[str, str] | None = None) -> JSONResponse:
        return JSONResponse(self.body(), self.status, headers={**self.headers, **(headers or {})})


def invalid(param: str | None, message: str, code: str = "invalid_value") -> OpenAIError:
    """A request this edge refuses: 400, naming the OpenAI parameter at fault."""
    return OpenAIError(400, message, param=param, code=code, headers={SHOULD_RETRY: "false"})


@dataclass(frozen=True)
class GatewayStatus:
    """A gRPC status from the gateway with its google.rpc details decoded."""

    code: grpc.StatusCode
    message: str
    reason: str = ""  # ErrorInfo reason, e.g. "AGENT_NOT_FOUND"
    metadata: Mapping[str, str] = field(default_factory=dict)
    violations: tuple[tuple[str, str], ...] = ()  # BadRequest (field, description)
    retry_after_s: float | None = None

    @classmethod
    def of(cls, error: grpc.aio.AioRpcError) -> GatewayStatus:
        reason, metadata, retry = "", {}, None
        violations: list[tuple[str, str]] = []
        try:
            status = rpc_status.from_call(error)  # type: ignore[arg-type]
        except ValueError:  # details disagree with the status: keep code and message
            status = None
        for detail in status.details if status is not None else ():
            if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                info = error_details_pb2.ErrorInfo()
                detail.Unpack(info)
                reason, metadata = info.reason, dict(info.metadata)
            elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
                bad = error_details_pb2.BadRequest()
                detail.Unpack(bad)
                violations.extend((v.field, v.description) for v in bad.field_violations)
            elif detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
                info_retry = error_details_pb2.RetryInfo()
                detail.Unpack(info_retry)
                retry = info_retry.retry_delay.ToTimedelta().total_seconds()
        return cls(error.code(), error.details() or "", reason, metadata, tuple(violations), retry)


# gRPC code -> (HTTP status, OpenAI error type, default code)
_GRPC = {
    grpc.StatusCode.INVALID_ARGUMENT: (400, "invalid_request_error", "invalid_request"),
    grpc.StatusCode.OUT_OF_RANGE: (400, "invalid_request_error", "out_of_range"),
    grpc.StatusCode.UNAUTHENTICATED: (401, "invalid_request_error", "invalid_api_key"),
    grpc.StatusCode.PERMISSION_DENIED: (403, "invalid_request_error", "permission_denied"),
    grpc.StatusCode.NOT_FOUND: (404, "invalid_request_error", "not_found"),
    grpc.StatusCode.ALREADY_EXISTS: (409, "invalid_request_error", "already_exists"),
    grpc.StatusCode.FAILED_PRECONDITION: (409, "invalid_request_error", "failed_precondition"),
    grpc.StatusCode.ABORTED: (409, "invalid_request_error", "aborted"),
    grpc.StatusCode.RESOURCE_EXHAUSTED: (429, "requests", "rate_limit_exceeded"),
    grpc.StatusCode.CANCELLED: (499, "invalid_request_error", "cancelled"),
    grpc.StatusCode.UNIMPLEMENTED: (501, "server_error", "unimplemented"),
    grpc.StatusCode.UNAVAILABLE: (503, "server_error", "service_unavailable"),
    grpc.StatusCode.DEADLINE_EXCEEDED: (504, "server_error", "timeout"),
}
_REASON_CODES = {
    "AGENT_NOT_FOUND": "model_not_found",
    "SESSION_NOT_FOUND": "session_not_found",
    "TURN_NOT_FOUND": "interrupt_not_found",
    "TURN_IN_PROGRESS": "session_busy",
    "SCOPE_DENIED": "scope_denied",
    "LIMIT_EXCEEDED": "limit_exceeded",
    "MODEL_NOT_FOUND": "model_not_found",
}
_RETRIED = {429, 503}  # the gateway's rate limit and an unreachable dependency: worth the SDK's retry


def from_gateway(status: GatewayStatus, param: str | None = None) -> OpenAIError:
    """The gateway's refusal as OpenAI's error: same message, the ErrorInfo reason as `code`."""
    http, kind, code = _GRPC.get(status.code, (500, "server_error", "server_error"))
    if status.code == grpc.StatusCode.RESOURCE_EXHAUSTED and status.reason != "RATE_LIMITED":
        http, kind, code = 400, "invalid_request_error", "limit_exceeded"  # a size or count cap: waiting won't help
    code = _REASON_CODES.get(status.reason, code)
    headers = {SHOULD_RETRY: "true" if http in _RETRIED else "false"}
    if http == 429 and status.retry_after_s is not None:
        headers["retry-after"] = str(max(1, math.ceil(status.retry_after_s)))  # whole seconds, as HTTP wants
        headers["retry-after-ms"] = str(max(1, math.ceil(status.retry_after_s * 1000)))  # the SDKs read it first
    if param is None and code == "model_not_found":
        param = "model"
    return OpenAIError(http, status.message, kind, param, code, headers)


# TurnError kind -> (HTTP status, code). The provider's credentials failing is the suite's
# problem, not the caller's key: 502, never 401.
_TURN = {
    events_pb2.ERROR_KIND_CANCELLED: (409, "turn_cancelled"),
    events_pb2.ERROR_KIND_BUDGET_EXCEEDED: (400, "budget_exceeded"),
    events_pb2.ERROR_KIND_LOOP_LIMIT: (500, "loop_limit"),
    events_pb2.ERROR_KIND_TOOL_TIMEOUT: (504, "tool_timeout"),
    events_pb2.ERROR_KIND_PROVIDER_ERROR: (502, "provider_error"),
    events_pb2.ERROR_KIND_RATE_LIMITED: (429, "rate_limit_exceeded"),
    events_pb2.ERROR_KIND_GUARDRAIL: (400, "content_policy_violation"),
    events_pb2.ERROR_KIND_INVALID_REQUEST: (400, "invalid_request"),
    events_pb2.ERROR_KIND_UNAVAILABLE: (503, "service_unavailable"),
    events_pb2.ERROR_KIND_INTERNAL: (500, "server_error"),
    events_pb2.ERROR_KIND_DEADLINE_EXCEEDED: (504, "timeout"),
    events_pb2.ERROR_KIND_OUTPUT_INVALID: (500, "output_invalid"),
    events_pb2.ERROR_KIND_CONTEXT_LENGTH: (400, "context_length_exceeded"),
    events_pb2.ERROR_KIND_AUTHENTICATION: (502, "provider_authentication"),
}


def error_kind(error: events_pb2.TurnError) -> str:
    """The TurnError's kind in lower case ("provider_error"), as cogmesh's docs and CLI spell it."""
    return events_pb2.ErrorKind.Name(error.kind).removeprefix("ERROR_KIND_").lower()


def from_turn(error: events_pb2.TurnError, session_id: str, turn_id: str) -> OpenAIError:
    """A turn that ended with an error event, as the error a non-streaming call answers."""
    http, code = _TURN.get(error.kind, (500, "server_error"))
    kind = "server_error" if http >= 500 else ("requests" if http == 429 else "invalid_request_error")
    extra = {
        "cogmesh": {
            "session_id": session_id,
            "turn_id": turn_id,
            "kind": error_kind(error),
            "retryable": error.retryable,
            "partial_text": error.partial_text,
        }
    }
    headers = {SHOULD_RETRY: "true" if error.retryable else "false"}
    return OpenAIError(
        http, f"the turn failed ({error_kind(error)}): {error.message}", kind, None, code, headers, extra
    )


def is_paused_refusal(status: GatewayStatus) -> str:
    """The interrupt a refused SendMessage's session waits on ("" when it is busy otherwise or not refused so)."""
    if status.code == grpc.StatusCode.FAILED_PRECONDITION and status.reason == _reason(
        errors_pb2.ERROR_REASON_TURN_IN_PROGRESS
    ):
        return status.metadata.get("interrupt_id", "")
    return ""


def _reason(value: int) -> str:
    return errors_pb2.ErrorReason.Name(value).removeprefix("ERROR_REASON_")
