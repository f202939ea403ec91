from cogmesh.common.v1 import events_pb2 as _events_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class BudgetAction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BUDGET_ACTION_UNSPECIFIED: _ClassVar[BudgetAction]
    BUDGET_ACTION_ERROR: _ClassVar[BudgetAction]
    BUDGET_ACTION_WARN: _ClassVar[BudgetAction]

class MultitaskStrategy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MULTITASK_STRATEGY_UNSPECIFIED: _ClassVar[MultitaskStrategy]
    MULTITASK_STRATEGY_REJECT: _ClassVar[MultitaskStrategy]
    MULTITASK_STRATEGY_ENQUEUE: _ClassVar[MultitaskStrategy]
    MULTITASK_STRATEGY_INTERRUPT: _ClassVar[MultitaskStrategy]
BUDGET_ACTION_UNSPECIFIED: BudgetAction
BUDGET_ACTION_ERROR: BudgetAction
BUDGET_ACTION_WARN: BudgetAction
MULTITASK_STRATEGY_UNSPECIFIED: MultitaskStrategy
MULTITASK_STRATEGY_REJECT: MultitaskStrategy
MULTITASK_STRATEGY_ENQUEUE: MultitaskStrategy
MULTITASK_STRATEGY_INTERRUPT: MultitaskStrategy

class TurnLimits(_message.Message):
    __slots__ = ("max_iterations", "max_tool_calls", "max_mcp_calls", "tool_timeout_ms", "max_parallel_tools", "max_wall_clock_ms")
    MAX_ITERATIONS_FIELD_NUMBER: _ClassVar[int]
    MAX_TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    MAX_MCP_CALLS_FIELD_NUMBER: _ClassVar[int]
    TOOL_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_PARALLEL_TOOLS_FIELD_NUMBER: _ClassVar[int]
    MAX_WALL_CLOCK_MS_FIELD_NUMBER: _ClassVar[int]
    max_iterations: int
    max_tool_calls: int
    max_mcp_calls: int
    tool_timeout_ms: int
    max_parallel_tools: int
    max_wall_clock_ms: int
    def __init__(self, max_iterations: _Optional[int] = ..., max_tool_calls: _Optional[int] = ..., max_mcp_calls: _Optional[int] = ..., tool_timeout_ms: _Optional[int] = ..., max_parallel_tools: _Optional[int] = ..., max_wall_clock_ms: _Optional[int] = ...) -> None: ...

class CostBudget(_message.Message):
    __slots__ = ("max_cost_usd", "max_total_tokens", "action", "per_session")
    MAX_COST_USD_FIELD_NUMBER: _ClassVar[int]
    MAX_TOTAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    PER_SESSION_FIELD_NUMBER: _ClassVar[int]
    max_cost_usd: float
    max_total_tokens: int
    action: BudgetAction
    per_session: bool
    def __init__(self, max_cost_usd: _Optional[float] = ..., max_total_tokens: _Optional[int] = ..., action: _Optional[_Union[BudgetAction, str]] = ..., per_session: _Optional[bool] = ...) -> None: ...

class ApprovalAnswer(_message.Message):
    __slots__ = ("decision", "edited_arguments", "reason", "decided_by")
    DECISION_FIELD_NUMBER: _ClassVar[int]
    EDITED_ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    DECIDED_BY_FIELD_NUMBER: _ClassVar[int]
    decision: _events_pb2.ApprovalDecision
    edited_arguments: _struct_pb2.Struct
    reason: str
    decided_by: str
    def __init__(self, decision: _Optional[_Union[_events_pb2.ApprovalDecision, str]] = ..., edited_arguments: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., reason: _Optional[str] = ..., decided_by: _Optional[str] = ...) -> None: ...

class ClientToolResult(_message.Message):
    __slots__ = ("content", "is_error")
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    IS_ERROR_FIELD_NUMBER: _ClassVar[int]
    content: str
    is_error: bool
    def __init__(self, content: _Optional[str] = ..., is_error: _Optional[bool] = ...) -> None: ...
