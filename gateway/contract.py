"""The public API's own types and their internal twins.

gateway.proto imports no internal proto, so a client ships no internal stub. The five types
it used to borrow from the services' protos have public twins in cogmesh.common.v1
(turns.proto) with the same field names, numbers and types, which keeps old clients' bytes
and JSON valid: TurnLimits, CostBudget (with BudgetAction), ApprovalAnswer, ClientToolResult
and MultitaskStrategy. The gateway maps them here, where a request crosses into the
services; TWINS is what tests/unit/test_public_protos.py holds to the same shape.
"""

from __future__ import annotations

from typing import TypeVar

from google.protobuf.message import Message

from cogmesh.common.v1 import turns_pb2
from cogmesh.runtime.v1 import runtime_pb2
from cogmesh.sessions.v1 import sessions_pb2

M = TypeVar("M", bound=Message)

# (public, internal): same fields, numbers and types; enums with the same value names and numbers.
TWINS = (
    (turns_pb2.TurnLimits.DESCRIPTOR, runtime_pb2.TurnLimits.DESCRIPTOR),
    (turns_pb2.CostBudget.DESCRIPTOR, runtime_pb2.CostBudget.DESCRIPTOR),
    (turns_pb2.ApprovalAnswer.DESCRIPTOR, runtime_pb2.ApprovalAnswer.DESCRIPTOR),
    (turns_pb2.ClientToolResult.DESCRIPTOR, runtime_pb2.ClientToolResult.DESCRIPTOR),
    (turns_pb2.BudgetAction.DESCRIPTOR, runtime_pb2.BudgetAction.DESCRIPTOR),
    (turns_pb2.MultitaskStrategy.DESCRIPTOR, sessions_pb2.MultitaskStrategy.DESCRIPTOR),
)


def internal(message: Message, kind: type[M]) -> M:
    """The internal twin of a public message: the same fields and numbers, so its bytes carry over."""
    twin = kind()
    twin.ParseFromString(message.SerializeToString())
    return twin


def strategy(value: int) -> sessions_pb2.MultitaskStrategy:
    """The sessions service's MultitaskStrategy for the public one, by name (ROLLBACK too); unset is REJECT."""
    if value == turns_pb2.MULTITASK_STRATEGY_UNSPECIFIED:
        return sessions_pb2.MULTITASK_STRATEGY_REJECT
    return sessions_pb2.MultitaskStrategy.Value(turns_pb2.MultitaskStrategy.Name(value))  # type: ignore[return-value]
