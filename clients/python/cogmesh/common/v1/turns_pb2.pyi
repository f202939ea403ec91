import datetime

from buf.validate import validate_pb2 as _validate_pb2
from cogmesh.common.v1 import events_pb2 as _events_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
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
    MULTITASK_STRATEGY_ROLLBACK: _ClassVar[MultitaskStrategy]

class TurnOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TURN_OUTCOME_UNSPECIFIED: _ClassVar[TurnOutcome]
    TURN_OUTCOME_RUNNING: _ClassVar[TurnOutcome]
    TURN_OUTCOME_PAUSED: _ClassVar[TurnOutcome]
    TURN_OUTCOME_COMPLETED: _ClassVar[TurnOutcome]
    TURN_OUTCOME_FAILED: _ClassVar[TurnOutcome]
    TURN_OUTCOME_CANCELLED: _ClassVar[TurnOutcome]

class TurnStepKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TURN_STEP_KIND_UNSPECIFIED: _ClassVar[TurnStepKind]
    TURN_STEP_KIND_REQUEST: _ClassVar[TurnStepKind]
    TURN_STEP_KIND_START: _ClassVar[TurnStepKind]
    TURN_STEP_KIND_COMPACTION: _ClassVar[TurnStepKind]
    TURN_STEP_KIND_MODEL_CALL: _ClassVar[TurnStepKind]
    TURN_STEP_KIND_DECISION: _ClassVar[TurnStepKind]
    TURN_STEP_KIND_TOOL_CALL: _ClassVar[TurnStepKind]
    TURN_STEP_KIND_DELEGATION: _ClassVar[TurnStepKind]
    TURN_STEP_KIND_STEP_END: _ClassVar[TurnStepKind]
    TURN_STEP_KIND_PAUSE: _ClassVar[TurnStepKind]
    TURN_STEP_KIND_ANSWER: _ClassVar[TurnStepKind]
    TURN_STEP_KIND_TAKEOVER: _ClassVar[TurnStepKind]
BUDGET_ACTION_UNSPECIFIED: BudgetAction
BUDGET_ACTION_ERROR: BudgetAction
BUDGET_ACTION_WARN: BudgetAction
MULTITASK_STRATEGY_UNSPECIFIED: MultitaskStrategy
MULTITASK_STRATEGY_REJECT: MultitaskStrategy
MULTITASK_STRATEGY_ENQUEUE: MultitaskStrategy
MULTITASK_STRATEGY_INTERRUPT: MultitaskStrategy
MULTITASK_STRATEGY_ROLLBACK: MultitaskStrategy
TURN_OUTCOME_UNSPECIFIED: TurnOutcome
TURN_OUTCOME_RUNNING: TurnOutcome
TURN_OUTCOME_PAUSED: TurnOutcome
TURN_OUTCOME_COMPLETED: TurnOutcome
TURN_OUTCOME_FAILED: TurnOutcome
TURN_OUTCOME_CANCELLED: TurnOutcome
TURN_STEP_KIND_UNSPECIFIED: TurnStepKind
TURN_STEP_KIND_REQUEST: TurnStepKind
TURN_STEP_KIND_START: TurnStepKind
TURN_STEP_KIND_COMPACTION: TurnStepKind
TURN_STEP_KIND_MODEL_CALL: TurnStepKind
TURN_STEP_KIND_DECISION: TurnStepKind
TURN_STEP_KIND_TOOL_CALL: TurnStepKind
TURN_STEP_KIND_DELEGATION: TurnStepKind
TURN_STEP_KIND_STEP_END: TurnStepKind
TURN_STEP_KIND_PAUSE: TurnStepKind
TURN_STEP_KIND_ANSWER: TurnStepKind
TURN_STEP_KIND_TAKEOVER: TurnStepKind

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

class TurnStep(_message.Message):
    __slots__ = ("kind", "seq", "record_time", "summary")
    KIND_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    RECORD_TIME_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    kind: TurnStepKind
    seq: int
    record_time: _timestamp_pb2.Timestamp
    summary: str
    def __init__(self, kind: _Optional[_Union[TurnStepKind, str]] = ..., seq: _Optional[int] = ..., record_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., summary: _Optional[str] = ...) -> None: ...

class TurnRecord(_message.Message):
    __slots__ = ("turn_id", "index", "user_message", "outcome", "first_seq", "last_seq", "start_time", "end_time", "message_count", "agent", "steps")
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    USER_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    FIRST_SEQ_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQ_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_COUNT_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    turn_id: str
    index: int
    user_message: str
    outcome: TurnOutcome
    first_seq: int
    last_seq: int
    start_time: _timestamp_pb2.Timestamp
    end_time: _timestamp_pb2.Timestamp
    message_count: int
    agent: str
    steps: _containers.RepeatedCompositeFieldContainer[TurnStep]
    def __init__(self, turn_id: _Optional[str] = ..., index: _Optional[int] = ..., user_message: _Optional[str] = ..., outcome: _Optional[_Union[TurnOutcome, str]] = ..., first_seq: _Optional[int] = ..., last_seq: _Optional[int] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., message_count: _Optional[int] = ..., agent: _Optional[str] = ..., steps: _Optional[_Iterable[_Union[TurnStep, _Mapping]]] = ...) -> None: ...

class SessionOrigin(_message.Message):
    __slots__ = ("session_id", "turn_id", "fork_time")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    FORK_TIME_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    turn_id: str
    fork_time: _timestamp_pb2.Timestamp
    def __init__(self, session_id: _Optional[str] = ..., turn_id: _Optional[str] = ..., fork_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...
