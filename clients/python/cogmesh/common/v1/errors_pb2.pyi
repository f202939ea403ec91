from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from typing import ClassVar as _ClassVar

DESCRIPTOR: _descriptor.FileDescriptor

class ErrorReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ERROR_REASON_UNSPECIFIED: _ClassVar[ErrorReason]
    ERROR_REASON_INVALID_ARGUMENT: _ClassVar[ErrorReason]
    ERROR_REASON_SESSION_NOT_FOUND: _ClassVar[ErrorReason]
    ERROR_REASON_AGENT_NOT_FOUND: _ClassVar[ErrorReason]
    ERROR_REASON_MODEL_NOT_FOUND: _ClassVar[ErrorReason]
    ERROR_REASON_TURN_IN_PROGRESS: _ClassVar[ErrorReason]
    ERROR_REASON_TURN_NOT_FOUND: _ClassVar[ErrorReason]
    ERROR_REASON_CURSOR_EXPIRED: _ClassVar[ErrorReason]
    ERROR_REASON_SUBSCRIBER_TOO_SLOW: _ClassVar[ErrorReason]
    ERROR_REASON_DEPENDENCY_UNAVAILABLE: _ClassVar[ErrorReason]
    ERROR_REASON_UNAUTHENTICATED: _ClassVar[ErrorReason]
    ERROR_REASON_RATE_LIMITED: _ClassVar[ErrorReason]
    ERROR_REASON_TOOL_DENIED: _ClassVar[ErrorReason]
    ERROR_REASON_SHUTTING_DOWN: _ClassVar[ErrorReason]
    ERROR_REASON_TOOL_RESULT_NOT_FOUND: _ClassVar[ErrorReason]
    ERROR_REASON_CHECKPOINT_CONFLICT: _ClassVar[ErrorReason]
    ERROR_REASON_LIMIT_EXCEEDED: _ClassVar[ErrorReason]
    ERROR_REASON_MEMORY_NOT_FOUND: _ClassVar[ErrorReason]
    ERROR_REASON_SCOPE_DENIED: _ClassVar[ErrorReason]
ERROR_REASON_UNSPECIFIED: ErrorReason
ERROR_REASON_INVALID_ARGUMENT: ErrorReason
ERROR_REASON_SESSION_NOT_FOUND: ErrorReason
ERROR_REASON_AGENT_NOT_FOUND: ErrorReason
ERROR_REASON_MODEL_NOT_FOUND: ErrorReason
ERROR_REASON_TURN_IN_PROGRESS: ErrorReason
ERROR_REASON_TURN_NOT_FOUND: ErrorReason
ERROR_REASON_CURSOR_EXPIRED: ErrorReason
ERROR_REASON_SUBSCRIBER_TOO_SLOW: ErrorReason
ERROR_REASON_DEPENDENCY_UNAVAILABLE: ErrorReason
ERROR_REASON_UNAUTHENTICATED: ErrorReason
ERROR_REASON_RATE_LIMITED: ErrorReason
ERROR_REASON_TOOL_DENIED: ErrorReason
ERROR_REASON_SHUTTING_DOWN: ErrorReason
ERROR_REASON_TOOL_RESULT_NOT_FOUND: ErrorReason
ERROR_REASON_CHECKPOINT_CONFLICT: ErrorReason
ERROR_REASON_LIMIT_EXCEEDED: ErrorReason
ERROR_REASON_MEMORY_NOT_FOUND: ErrorReason
ERROR_REASON_SCOPE_DENIED: ErrorReason
