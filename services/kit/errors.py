"""Errors as google.rpc.Status: one exception family for domain code, mapped in one place.

Domain and servicer code raise `CogmeshError` subclasses; `ErrorMappingInterceptor`
turns them into a status with ErrorInfo (reason, domain "cogmesh.dev") and, for bad
input, BadRequest field violations. Anything unexpected becomes INTERNAL, logged once.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, NoReturn, TypeVar

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.protobuf.message import DecodeError, Message
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from cogmesh.common.v1 import errors_pb2
from services.kit.logging import log

DOMAIN = "cogmesh.dev"


def reason_name(reason: int) -> str:
    """ERROR_REASON_SESSION_NOT_FOUND -> "SESSION_NOT_FOUND" (ErrorInfo.reason is UPPER_SNAKE)."""
    return errors_pb2.ErrorReason.Name(reason).removeprefix("ERROR_REASON_")


class CogmeshError(Exception):
    """An error with a gRPC status code, an ErrorInfo reason and optional metadata."""

    code: grpc.StatusCode = grpc.StatusCode.INTERNAL
    reason: int = errors_pb2.ERROR_REASON_UNSPECIFIED

    def __init__(self, message: str, *, reason: int | None = None, metadata: Mapping[str, str] | None = None):
        super().__init__(message)
        self.message = message
        if reason is not None:
            self.reason = reason
        self.metadata = dict(metadata or {})

    def details(self) -> list[Any]:
        info = error_details_pb2.ErrorInfo(reason=reason_name(self.reason), domain=DOMAIN, metadata=self.metadata)
        return [info]

    def to_status(self) -> status_pb2.Status:
        packed = []
        for detail in self.details():
            item = any_pb2.Any()
            item.Pack(detail)
            packed.append(item)
        return status_pb2.Status(code=self.code.value[0], message=self.message, details=packed)


class InvalidArgument(CogmeshError):
    code = grpc.StatusCode.INVALID_ARGUMENT
    reason = errors_pb2.ERROR_REASON_INVALID_ARGUMENT

    def __init__(self, violations: list[tuple[str, str]]):
        self.violations = violations
        text = "; ".join(f"{field}: {desc}" for field, desc in violations)
        super().__init__(f"invalid argument: {text}")

    def details(self) -> list[Any]:
        bad = error_details_pb2.BadRequest(
            field_violations=[
                error_details_pb2.BadRequest.FieldViolation(field=f, description=d) for f, d in self.violations
            ]
        )
        return [*super().details(), bad]


class NotFound(CogmeshError):
    code = grpc.StatusCode.NOT_FOUND


class PermissionDenied(CogmeshError):
    code = grpc.StatusCode.PERMISSION_DENIED
    reason = errors_pb2.ERROR_REASON_SCOPE_DENIED


class FailedPrecondition(CogmeshError):
    code = grpc.StatusCode.FAILED_PRECONDITION


class OutOfRange(CogmeshError):
    code = grpc.StatusCode.OUT_OF_RANGE


class ResourceExhausted(CogmeshError):
    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class Unauthenticated(CogmeshError):
    code = grpc.StatusCode.UNAUTHENTICATED
    reason = errors_pb2.ERROR_REASON_UNAUTHENTICATED


class RateLimited(CogmeshError):
    """RESOURCE_EXHAUSTED with RetryInfo, so clients know when to come back."""

    code = grpc.StatusCode.RESOURCE_EXHAUSTED
    reason = errors_pb2.ERROR_REASON_RATE_LIMITED

    def __init__(self, message: str, retry_after_s: float, metadata: Mapping[str, str] | None = None):
        super().__init__(message, metadata=metadata)
        self.retry_after_s = retry_after_s

    def details(self) -> list[Any]:
        delay = duration_pb2.Duration()
        delay.FromNanoseconds(int(self.retry_after_s * 1e9))
        return [*super().details(), error_details_pb2.RetryInfo(retry_delay=delay)]


class Unimplemented(CogmeshError):
    code = grpc.StatusCode.UNIMPLEMENTED


class Unavailable(CogmeshError):
    code = grpc.StatusCode.UNAVAILABLE
    reason = errors_pb2.ERROR_REASON_DEPENDENCY_UNAVAILABLE


class Violations:
    """Collects every field problem of a request so the caller sees them all at once."""

    def __init__(self) -> None:
        self.items: list[tuple[str, str]] = []

    def require(self, value: str, field: str) -> None:
        if not value.strip():
            self.items.append((field, "is required"))

    def check(self, ok: bool, field: str, description: str) -> None:
        if not ok:
            self.items.append((field, description))

    def raise_if_any(self) -> None:
        if self.items:
            raise InvalidArgument(self.items)


_D = TypeVar("_D", bound=Message)


class DependencyError(CogmeshError):
    """A call to another service of the suite failed (services/kit/dependencies.py raises only this).

    `code` and `to_status()` are this service's answer when nothing handles it (see
    `from_dependency`); what the dependency answered is kept for callers that decide on it:
    `status_code`, `status_message`, `status` (its google.rpc.Status with every detail: ErrorInfo,
    BadRequest, RetryInfo..., None when it sent none), `error_info`, `error_reason`, `details_of`.
    """

    def __init__(
        self,
        message: str,
        *,
        dependency: str,
        status_code: grpc.StatusCode,
        status_message: str,
        status: status_pb2.Status | None,
        reason: int | None = None,
        metadata: Mapping[str, str] | None = None,
    ):
        super().__init__(message, reason=reason, metadata=metadata)
        self.dependency = dependency
        self.status_code = status_code
        self.status_message = status_message
        self.status = status

    def details_of(self, kind: type[_D]) -> list[_D]:
        """The dependency's status details of one type (e.g. error_details_pb2.BadRequest)."""
        found = []
        for packed in self.status.details if self.status is not None else ():
            if packed.Is(kind.DESCRIPTOR):
                detail = kind()
                packed.Unpack(detail)
                found.append(detail)
        return found

    @property
    def error_info(self) -> error_details_pb2.ErrorInfo | None:
        infos = self.details_of(error_details_pb2.ErrorInfo)
        return infos[0] if infos else None

    @property
    def error_reason(self) -> str:
        """The dependency's ErrorInfo reason (e.g. "TURN_NOT_FOUND"); "" when it gave none."""
        info = self.error_info
        return info.reason if info is not None else ""


_CODES = {code.value[0]: code for code in grpc.StatusCode}
# Client errors of the dependency are the caller's too; anything else is ours (INTERNAL).
_PASSTHROUGH = frozenset(
    {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.OUT_OF_RANGE,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
    }
)


def from_dependency(err: grpc.aio.AioRpcError, dependency: str) -> DependencyError:
    """Map a failed call to another cogmesh service onto this service's answer."""
    status = rpc_status.from_call(err)  # type: ignore[arg-type]
    return _dependency_error(err.code(), err.details() or "", status, dependency)


def from_dependency_status(raw: bytes, dependency: str) -> DependencyError:
    """`from_dependency` for a status a dependency sent as a message (google.rpc.Status bytes), not as a call's end."""
    status = status_pb2.Status.FromString(raw)
    return _dependency_error(_CODES.get(status.code, grpc.StatusCode.UNKNOWN), status.message, status, dependency)


def _dependency_error(
    code: grpc.StatusCode, message: str, status: status_pb2.Status | None, dependency: str
) -> DependencyError:
    details = message or code.name
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED):
        return _DependencyUnavailable(
            f"{dependency} service unavailable: {details}",
            metadata={"dependency": dependency, "retryable": "true"},
            dependency=dependency,
            status_code=code,
            status_message=message,
            status=status,
        )
    answer = code if code in _PASSTHROUGH else grpc.StatusCode.INTERNAL
    return _PassThrough(answer, details, dependency=dependency, status_code=code, status_message=message, status=status)


class _DependencyUnavailable(DependencyError, Unavailable):
    """The dependency could not answer: this service is unavailable for the call (retryable)."""


class _PassThrough(DependencyError):
    """Re-raises a dependency's status (code, message, details) unchanged."""

    def __init__(
        self,
        code: grpc.StatusCode,
        message: str,
        *,
        dependency: str,
        status_code: grpc.StatusCode,
        status_message: str,
        status: status_pb2.Status | None,
    ):
        super().__init__(
            message, dependency=dependency, status_code=status_code, status_message=status_message, status=status
        )
        self.code = code

    def to_status(self) -> status_pb2.Status:
        if self.status is not None:
            return self.status
        return super().to_status()


async def abort(context: grpc.aio.ServicerContext[Any, Any], error: CogmeshError) -> NoReturn:
    try:
        await context.abort_with_status(rpc_status.to_status(error.to_status()))
    except grpc.aio.InternalError as exc:
        # The transport ended the call before its status could be sent (the peer hung up, or the
        # call's headers were over the size limit). grpc would have cancelled the handler had it
        # noticed first; end it the same way, not with an exception read as an UNKNOWN status.
        raise asyncio.CancelledError(f"call ended before its {error.code.name} status was sent") from exc
    raise AssertionError("unreachable")  # abort_with_status always raises


def _map(method: str, exc: Exception) -> CogmeshError:
    if isinstance(exc, CogmeshError):
        return exc
    if isinstance(exc, grpc.aio.AioRpcError):
        return from_dependency(exc, "upstream")
    if isinstance(exc, NotImplementedError):  # the generated servicer base's answer for an RPC not built yet
        return Unimplemented(f"{method} is not implemented by this server")
    log.error("unhandled error", method=method, exc_info=exc)
    return CogmeshError(f"internal error in {method}; see server logs")  # INTERNAL, details stay in the log


class _Undecodable:
    """A request whose bytes do not parse as the method's message (corrupt wire format, bad UTF-8).

    grpc answers a deserializer's exception with UNKNOWN; the handler answers this with
    INVALID_ARGUMENT instead (before authentication: nothing of the request is readable).
    """

    def __init__(self, problem: str):
        self.problem = problem

    def error(self) -> InvalidArgument:
        return InvalidArgument([("request", f"is not a valid protobuf message: {self.problem}")])


def _tolerant(deserializer: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    if deserializer is None:
        return None

    def parse(raw: bytes) -> Any:
        try:
            return deserializer(raw)
        except DecodeError as exc:
            return _Undecodable(str(exc))

    return parse


async def _checked(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
    """A request stream that aborts the RPC with INVALID_ARGUMENT at its first undecodable message."""
    async for request in requests:
        if isinstance(request, _Undecodable):
            await abort(context, request.error())
        yield request


class ErrorMappingInterceptor(grpc.aio.ServerInterceptor):
    """Wraps every handler so a raised CogmeshError becomes a rich status (and bad bytes INVALID_ARGUMENT)."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Any]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Any:
        handler: Any = await continuation(handler_call_details)
        if handler is None:
            return handler
        method = handler_call_details.method
        deserializer = _tolerant(handler.request_deserializer)

        if handler.unary_unary or handler.stream_unary:
            inner_u = handler.unary_unary or handler.stream_unary

            async def unary(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
                try:
                    if isinstance(request, _Undecodable):
                        raise request.error()
                    return await inner_u(request if handler.unary_unary else _checked(request, context), context)
                except grpc.aio.AbortError:
                    raise
                except Exception as exc:  # noqa: BLE001 - the mapping point
                    await abort(context, _map(method, exc))

            factory = (
                grpc.unary_unary_rpc_method_handler if handler.unary_unary else grpc.stream_unary_rpc_method_handler
            )
            return factory(unary, deserializer, handler.response_serializer)

        inner_s = handler.unary_stream or handler.stream_stream

        def requests(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            if handler.stream_stream:
                return _checked(request, context)
            if isinstance(request, _Undecodable):
                raise request.error()
            return request

        streaming: Any
        if inspect.isasyncgenfunction(inner_s):

            async def streaming(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
                try:
                    async for item in inner_s(requests(request, context), context):
                        yield item
                except grpc.aio.AbortError:
                    raise
                except Exception as exc:  # noqa: BLE001 - the mapping point
                    await abort(context, _map(method, exc))

        else:  # a coroutine that streams with context.write(), like grpc_health's Watch

            async def streaming(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> None:
                try:
                    await inner_s(requests(request, context), context)
                except grpc.aio.AbortError:
                    raise
                except Exception as exc:  # noqa: BLE001 - the mapping point
                    await abort(context, _map(method, exc))

        factory_s = (
            grpc.unary_stream_rpc_method_handler if handler.unary_stream else grpc.stream_stream_rpc_method_handler
        )
        return factory_s(streaming, deserializer, handler.response_serializer)
