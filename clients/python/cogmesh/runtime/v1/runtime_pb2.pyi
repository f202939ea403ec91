import datetime

from buf.validate import validate_pb2 as _validate_pb2
from cogmesh.common.v1 import events_pb2 as _events_pb2
from cogmesh.common.v1 import messages_pb2 as _messages_pb2
from cogmesh.sessions.v1 import sessions_pb2 as _sessions_pb2
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
BUDGET_ACTION_UNSPECIFIED: BudgetAction
BUDGET_ACTION_ERROR: BudgetAction
BUDGET_ACTION_WARN: BudgetAction

class RunTurnRequest(_message.Message):
    __slots__ = ("tenant_id", "session_id", "turn_id", "content", "model", "lease_token", "runtime", "output_schema", "limits", "cost_budget", "client_tools", "session_usage", "deadline", "agents")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    COST_BUDGET_FIELD_NUMBER: _ClassVar[int]
    CLIENT_TOOLS_FIELD_NUMBER: _ClassVar[int]
    SESSION_USAGE_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    AGENTS_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    session_id: str
    turn_id: str
    content: str
    model: str
    lease_token: int
    runtime: str
    output_schema: _struct_pb2.Struct
    limits: TurnLimits
    cost_budget: CostBudget
    client_tools: _containers.RepeatedCompositeFieldContainer[_messages_pb2.ToolSpec]
    session_usage: SessionUsage
    deadline: _timestamp_pb2.Timestamp
    agents: _containers.RepeatedCompositeFieldContainer[PinnedAgent]
    def __init__(self, tenant_id: _Optional[str] = ..., session_id: _Optional[str] = ..., turn_id: _Optional[str] = ..., content: _Optional[str] = ..., model: _Optional[str] = ..., lease_token: _Optional[int] = ..., runtime: _Optional[str] = ..., output_schema: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., limits: _Optional[_Union[TurnLimits, _Mapping]] = ..., cost_budget: _Optional[_Union[CostBudget, _Mapping]] = ..., client_tools: _Optional[_Iterable[_Union[_messages_pb2.ToolSpec, _Mapping]]] = ..., session_usage: _Optional[_Union[SessionUsage, _Mapping]] = ..., deadline: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., agents: _Optional[_Iterable[_Union[PinnedAgent, _Mapping]]] = ...) -> None: ...

class PinnedAgent(_message.Message):
    __slots__ = ("name", "version", "definition_json")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    DEFINITION_JSON_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: int
    definition_json: str
    def __init__(self, name: _Optional[str] = ..., version: _Optional[int] = ..., definition_json: _Optional[str] = ...) -> None: ...

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

class SessionUsage(_message.Message):
    __slots__ = ("cost_usd", "input_tokens", "output_tokens")
    COST_USD_FIELD_NUMBER: _ClassVar[int]
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    cost_usd: float
    input_tokens: int
    output_tokens: int
    def __init__(self, cost_usd: _Optional[float] = ..., input_tokens: _Optional[int] = ..., output_tokens: _Optional[int] = ...) -> None: ...

class CancelTurnRequest(_message.Message):
    __slots__ = ("session_id", "turn_id")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    turn_id: str
    def __init__(self, session_id: _Optional[str] = ..., turn_id: _Optional[str] = ...) -> None: ...

class CancelTurnResponse(_message.Message):
    __slots__ = ("cancelled",)
    CANCELLED_FIELD_NUMBER: _ClassVar[int]
    cancelled: bool
    def __init__(self, cancelled: _Optional[bool] = ...) -> None: ...

class AdoptTurnRequest(_message.Message):
    __slots__ = ("session_id", "turn_id", "lease_token")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    turn_id: str
    lease_token: int
    def __init__(self, session_id: _Optional[str] = ..., turn_id: _Optional[str] = ..., lease_token: _Optional[int] = ...) -> None: ...

class AdoptTurnResponse(_message.Message):
    __slots__ = ("adopted",)
    ADOPTED_FIELD_NUMBER: _ClassVar[int]
    adopted: bool
    def __init__(self, adopted: _Optional[bool] = ...) -> None: ...

class ListRuntimesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListToolsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListToolsResponse(_message.Message):
    __slots__ = ("tools", "unlisted")
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    UNLISTED_FIELD_NUMBER: _ClassVar[int]
    tools: _containers.RepeatedCompositeFieldContainer[_messages_pb2.ToolSpec]
    unlisted: _containers.RepeatedCompositeFieldContainer[UnlistedToolServer]
    def __init__(self, tools: _Optional[_Iterable[_Union[_messages_pb2.ToolSpec, _Mapping]]] = ..., unlisted: _Optional[_Iterable[_Union[UnlistedToolServer, _Mapping]]] = ...) -> None: ...

class UnlistedToolServer(_message.Message):
    __slots__ = ("name", "prefix", "problem")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    PROBLEM_FIELD_NUMBER: _ClassVar[int]
    name: str
    prefix: str
    problem: str
    def __init__(self, name: _Optional[str] = ..., prefix: _Optional[str] = ..., problem: _Optional[str] = ...) -> None: ...

class RuntimeCapabilities(_message.Message):
    __slots__ = ("tools", "mcp", "streaming", "cancellation", "structured_output", "failover", "cost_budget", "pause_resume", "delegation")
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    MCP_FIELD_NUMBER: _ClassVar[int]
    STREAMING_FIELD_NUMBER: _ClassVar[int]
    CANCELLATION_FIELD_NUMBER: _ClassVar[int]
    STRUCTURED_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    FAILOVER_FIELD_NUMBER: _ClassVar[int]
    COST_BUDGET_FIELD_NUMBER: _ClassVar[int]
    PAUSE_RESUME_FIELD_NUMBER: _ClassVar[int]
    DELEGATION_FIELD_NUMBER: _ClassVar[int]
    tools: bool
    mcp: bool
    streaming: bool
    cancellation: bool
    structured_output: bool
    failover: bool
    cost_budget: bool
    pause_resume: bool
    delegation: bool
    def __init__(self, tools: _Optional[bool] = ..., mcp: _Optional[bool] = ..., streaming: _Optional[bool] = ..., cancellation: _Optional[bool] = ..., structured_output: _Optional[bool] = ..., failover: _Optional[bool] = ..., cost_budget: _Optional[bool] = ..., pause_resume: _Optional[bool] = ..., delegation: _Optional[bool] = ...) -> None: ...

class RuntimeEngine(_message.Message):
    __slots__ = ("name", "description", "capabilities", "is_default")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    IS_DEFAULT_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    capabilities: RuntimeCapabilities
    is_default: bool
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., capabilities: _Optional[_Union[RuntimeCapabilities, _Mapping]] = ..., is_default: _Optional[bool] = ...) -> None: ...

class ListRuntimesResponse(_message.Message):
    __slots__ = ("runtimes", "default_runtime")
    RUNTIMES_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_RUNTIME_FIELD_NUMBER: _ClassVar[int]
    runtimes: _containers.RepeatedCompositeFieldContainer[RuntimeEngine]
    default_runtime: str
    def __init__(self, runtimes: _Optional[_Iterable[_Union[RuntimeEngine, _Mapping]]] = ..., default_runtime: _Optional[str] = ...) -> None: ...

class ResumeTurnRequest(_message.Message):
    __slots__ = ("tenant_id", "session_id", "turn_id", "interrupt_id", "lease_token", "approval", "user_input", "tool_result", "abandon", "deadline", "paused")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    INTERRUPT_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_FIELD_NUMBER: _ClassVar[int]
    USER_INPUT_FIELD_NUMBER: _ClassVar[int]
    TOOL_RESULT_FIELD_NUMBER: _ClassVar[int]
    ABANDON_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    session_id: str
    turn_id: str
    interrupt_id: str
    lease_token: int
    approval: ApprovalAnswer
    user_input: str
    tool_result: ClientToolResult
    abandon: bool
    deadline: _timestamp_pb2.Timestamp
    paused: _sessions_pb2.AnswerPauseResponse
    def __init__(self, tenant_id: _Optional[str] = ..., session_id: _Optional[str] = ..., turn_id: _Optional[str] = ..., interrupt_id: _Optional[str] = ..., lease_token: _Optional[int] = ..., approval: _Optional[_Union[ApprovalAnswer, _Mapping]] = ..., user_input: _Optional[str] = ..., tool_result: _Optional[_Union[ClientToolResult, _Mapping]] = ..., abandon: _Optional[bool] = ..., deadline: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., paused: _Optional[_Union[_sessions_pb2.AnswerPauseResponse, _Mapping]] = ...) -> None: ...

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

class StartTurnRequest(_message.Message):
    __slots__ = ("turn", "start", "lease_expire_time")
    TURN_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXPIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    turn: RunTurnRequest
    start: _sessions_pb2.TurnStart
    lease_expire_time: _timestamp_pb2.Timestamp
    def __init__(self, turn: _Optional[_Union[RunTurnRequest, _Mapping]] = ..., start: _Optional[_Union[_sessions_pb2.TurnStart, _Mapping]] = ..., lease_expire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class StartTurnResponse(_message.Message):
    __slots__ = ("holder",)
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    holder: str
    def __init__(self, holder: _Optional[str] = ...) -> None: ...

class ContinueTurnRequest(_message.Message):
    __slots__ = ("resume",)
    RESUME_FIELD_NUMBER: _ClassVar[int]
    resume: ResumeTurnRequest
    def __init__(self, resume: _Optional[_Union[ResumeTurnRequest, _Mapping]] = ...) -> None: ...

class ContinueTurnResponse(_message.Message):
    __slots__ = ("holder",)
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    holder: str
    def __init__(self, holder: _Optional[str] = ...) -> None: ...
