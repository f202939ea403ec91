"""Small conversions between protobuf well-known types and plain Python."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from google.protobuf import json_format, struct_pb2, timestamp_pb2

from cogmesh.common.v1 import events_pb2


def struct_to_dict(value: struct_pb2.Struct) -> dict[str, Any]:
    return json_format.MessageToDict(value)


def dict_to_struct(value: Mapping[str, Any]) -> struct_pb2.Struct:
    out = struct_pb2.Struct()
    out.update(value)
    return out


def now() -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.GetCurrentTime()
    return stamp


# The longest id a request may carry (session, turn, interrupt, schedule, webhook...), everywhere: the
# protos' rules say it on each request field (`string.max_len = 256`); code checking ids of anything
# else (stored records, keys files) uses this.
MAX_ID = 256

# The approval answers a turn knows. Every layer checks membership, never "not UNSPECIFIED" (the
# requests' rules with `enum.in`, and this set for recorded decisions): a value from a newer or
# hostile client must be refused, not read as approval.
APPROVAL_DECISIONS = frozenset(
    {
        events_pb2.APPROVAL_DECISION_APPROVE,
        events_pb2.APPROVAL_DECISION_EDIT,
        events_pb2.APPROVAL_DECISION_REJECT,
    }
)


def error_event(turn_id: str, kind: int, message: str, retryable: bool) -> events_pb2.RuntimeEvent:
    """The error event that ends a turn."""
    error = events_pb2.TurnError(kind=kind, message=message, retryable=retryable)  # type: ignore[arg-type]
    return events_pb2.RuntimeEvent(turn_id=turn_id, error=error)
