"""A2A protocol errors as CogmeshErrors, so the kit's error mapping serves them.

The A2A gRPC binding names an error by an `ErrorInfo` with domain `a2a-protocol.org`
and the spec's reason (TASK_NOT_FOUND, ...); the a2a-sdk client raises the matching
typed exception from it (and reads BadRequest field violations for INVALID_PARAMS).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import grpc
from google.rpc import error_details_pb2

from services.kit.errors import CogmeshError

A2A_DOMAIN = "a2a-protocol.org"


class A2AProtocolError(CogmeshError):
    a2a_reason = "INTERNAL_ERROR"

    def __init__(self, message: str, metadata: Mapping[str, str] | None = None):
        super().__init__(message, metadata=metadata)

    def details(self) -> list[Any]:
        return [error_details_pb2.ErrorInfo(reason=self.a2a_reason, domain=A2A_DOMAIN, metadata=self.metadata)]


class TaskNotFound(A2AProtocolError):
    code = grpc.StatusCode.NOT_FOUND
    a2a_reason = "TASK_NOT_FOUND"

    def __init__(self, task_id: str, why: str = ""):
        super().__init__(f"task {task_id!r} not found{f': {why}' if why else ''}", {"task_id": task_id})


class TaskNotCancelable(A2AProtocolError):
    code = grpc.StatusCode.FAILED_PRECONDITION
    a2a_reason = "TASK_NOT_CANCELABLE"


class UnsupportedOperation(A2AProtocolError):
    code = grpc.StatusCode.FAILED_PRECONDITION
    a2a_reason = "UNSUPPORTED_OPERATION"


class PushNotificationNotSupported(A2AProtocolError):
    code = grpc.StatusCode.FAILED_PRECONDITION
    a2a_reason = "PUSH_NOTIFICATION_NOT_SUPPORTED"


class VersionNotSupported(A2AProtocolError):
    code = grpc.StatusCode.FAILED_PRECONDITION
    a2a_reason = "VERSION_NOT_SUPPORTED"


class ContentTypeNotSupported(A2AProtocolError):
    code = grpc.StatusCode.INVALID_ARGUMENT
    a2a_reason = "CONTENT_TYPE_NOT_SUPPORTED"


class InvalidParams(A2AProtocolError):
    """INVALID_ARGUMENT naming every bad field, as BadRequest field violations."""

    code = grpc.StatusCode.INVALID_ARGUMENT
    a2a_reason = "INVALID_PARAMS"

    def __init__(self, violations: list[tuple[str, str]]):
        self.violations = violations
        super().__init__("invalid params: " + "; ".join(f"{field}: {text}" for field, text in violations))

    def details(self) -> list[Any]:
        bad = error_details_pb2.BadRequest(
            field_violations=[
                error_details_pb2.BadRequest.FieldViolation(field=f, description=d) for f, d in self.violations
            ]
        )
        return [*super().details(), bad]
