"""Python clients for the cogmesh gateway: `GatewayClient` (asyncio) and `Client` (blocking)."""

from cogmesh.client.errors import (
    Aborted,
    AlreadyExists,
    ClientClosed,
    DeadlineExceeded,
    FailedPrecondition,
    GatewayError,
    InvalidArgument,
    NotFound,
    OutOfRange,
    PermissionDenied,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
)
from cogmesh.client.gateway import GatewayClient
from cogmesh.client.results import Pause, TurnResult, is_error, is_final, is_paused, is_terminal, kind, text, voided
from cogmesh.client.sync import Client
from cogmesh.client.tools import ClientTool, client_tool

__all__ = [
    "Aborted",
    "AlreadyExists",
    "Client",
    "ClientClosed",
    "ClientTool",
    "DeadlineExceeded",
    "FailedPrecondition",
    "GatewayClient",
    "GatewayError",
    "InvalidArgument",
    "NotFound",
    "OutOfRange",
    "Pause",
    "PermissionDenied",
    "ResourceExhausted",
    "TurnResult",
    "Unauthenticated",
    "Unavailable",
    "client_tool",
    "is_error",
    "is_final",
    "is_paused",
    "is_terminal",
    "kind",
    "text",
    "voided",
]
