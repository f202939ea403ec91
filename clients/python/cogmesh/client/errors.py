"""Errors of the gateway as a small exception family.

Every failed call raises a `GatewayError` (or a subclass picked by its gRPC code) that
carries the decoded `google.rpc.Status`: the ErrorInfo `reason` and `metadata`, the
BadRequest field `violations` and the RetryInfo delay (`retry_after_s`). Branch on the
class for the kind of failure and on `reason` for the precise one:

    try:
        await client.send_message(sid, "hi")
    except FailedPrecondition as err:
        if err.reason == "TURN_IN_PROGRESS":
            print("busy with", err.metadata.get("turn_id"))
"""

from __future__ import annotations

from collections.abc import Mapping

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status


class GatewayError(Exception):
    """A call to the gateway failed; `code`, `message`, `reason`, `metadata`, `violations`, `retry_after_s`."""

    def __init__(
        self,
        code: grpc.StatusCode,
        message: str,
        reason: str = "",
        violations: list[tuple[str, str]] | None = None,
        *,
        metadata: Mapping[str, str] | None = None,
        retry_after_s: float | None = None,
    ):
        super().__init__(f"{code.name}: {message}")
        self.code, self.message, self.reason = code, message, reason
        self.violations = violations or []
        self.metadata = dict(metadata or {})
        self.retry_after_s = retry_after_s

    @classmethod
    def from_rpc(cls, err: grpc.aio.AioRpcError | grpc.RpcError) -> GatewayError:
        """Decode a failed call's status and details into the matching subclass."""
        reason, violations, metadata, retry_after_s = "", [], {}, None
        status = rpc_status.from_call(err)  # type: ignore[arg-type]
        for detail in status.details if status else []:
            if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                info = error_details_pb2.ErrorInfo()
                detail.Unpack(info)
                reason, metadata = info.reason, dict(info.metadata)
            elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
                bad = error_details_pb2.BadRequest()
                detail.Unpack(bad)
                violations = [(v.field, v.description) for v in bad.field_violations]
            elif detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
                retry = error_details_pb2.RetryInfo()
                detail.Unpack(retry)
                retry_after_s = retry.retry_delay.ToNanoseconds() / 1e9
        code: grpc.StatusCode = err.code()
        message = err.details() or code.name
        kind = _BY_CODE.get(code, GatewayError)
        return kind(code, message, reason, violations, metadata=metadata, retry_after_s=retry_after_s)

    @property
    def resumable(self) -> bool:
        """A broken stream worth reconnecting: the server went away or cut off a slow reader."""
        return self.code == grpc.StatusCode.UNAVAILABLE or self.reason == "SUBSCRIBER_TOO_SLOW"


class InvalidArgument(GatewayError):
    """The request was refused as bad input; `violations` names each bad field."""


class NotFound(GatewayError):
    """No such session, agent, model or interrupt (another tenant's look the same)."""


class AlreadyExists(GatewayError):
    """The thing to create exists already, e.g. an agent of that name."""


class Aborted(GatewayError):
    """Another change came first, e.g. UpdateAgent's `expected_version` is no longer the latest: read and retry."""


class FailedPrecondition(GatewayError):
    """The session is not in a state for this call, e.g. a turn is running or paused (TURN_IN_PROGRESS)."""


class Unauthenticated(GatewayError):
    """The API key is missing or wrong."""


class PermissionDenied(GatewayError):
    """The caller may not do this."""


class ResourceExhausted(GatewayError):
    """Over a rate or stream limit; `retry_after_s` says when to come back."""


class OutOfRange(GatewayError):
    """A cursor older than what the gateway retains (CURSOR_EXPIRED): re-read the session."""


class Unavailable(GatewayError):
    """The gateway (or a service behind it) cannot be reached right now."""


class DeadlineExceeded(GatewayError):
    """The call's deadline passed before it finished."""


class ClientClosed(RuntimeError):
    """The client was closed; open a new one."""


_BY_CODE: dict[grpc.StatusCode, type[GatewayError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExists,
    grpc.StatusCode.ABORTED: Aborted,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhausted,
    grpc.StatusCode.OUT_OF_RANGE: OutOfRange,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
}
