import datetime

from cogmesh.common.v1 import messages_pb2 as _messages_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TurnState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TURN_STATE_UNSPECIFIED: _ClassVar[TurnState]
    TURN_STATE_QUEUED: _ClassVar[TurnState]
    TURN_STATE_RUNNING: _ClassVar[TurnState]
    TURN_STATE_PAUSED: _ClassVar[TurnState]
    TURN_STATE_COMPLETED: _ClassVar[TurnState]
    TURN_STATE_FAILED: _ClassVar[TurnState]
    TURN_STATE_CANCELLED: _ClassVar[TurnState]

class ApprovalDecision(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    APPROVAL_DECISION_UNSPECIFIED: _ClassVar[ApprovalDecision]
    APPROVAL_DECISION_APPROVE: _ClassVar[ApprovalDecision]
    APPROVAL_DECISION_EDIT: _ClassVar[ApprovalDecision]
    APPROVAL_DECISION_REJECT: _ClassVar[ApprovalDecision]

class TodoStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TODO_STATUS_UNSPECIFIED: _ClassVar[TodoStatus]
    TODO_STATUS_PENDING: _ClassVar[TodoStatus]
    TODO_STATUS_IN_PROGRESS: _ClassVar[TodoStatus]
    TODO_STATUS_COMPLETED: _ClassVar[TodoStatus]

class ErrorKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ERROR_KIND_UNSPECIFIED: _ClassVar[ErrorKind]
    ERROR_KIND_CANCELLED: _ClassVar[ErrorKind]
    ERROR_KIND_BUDGET_EXCEEDED: _ClassVar[ErrorKind]
    ERROR_KIND_LOOP_LIMIT: _ClassVar[ErrorKind]
    ERROR_KIND_TOOL_TIMEOUT: _ClassVar[ErrorKind]
    ERROR_KIND_PROVIDER_ERROR: _ClassVar[ErrorKind]
    ERROR_KIND_RATE_LIMITED: _ClassVar[ErrorKind]
    ERROR_KIND_GUARDRAIL: _ClassVar[ErrorKind]
    ERROR_KIND_INVALID_REQUEST: _ClassVar[ErrorKind]
    ERROR_KIND_UNAVAILABLE: _ClassVar[ErrorKind]
    ERROR_KIND_INTERNAL: _ClassVar[ErrorKind]
    ERROR_KIND_DEADLINE_EXCEEDED: _ClassVar[ErrorKind]
    ERROR_KIND_OUTPUT_INVALID: _ClassVar[ErrorKind]
    ERROR_KIND_CONTEXT_LENGTH: _ClassVar[ErrorKind]
    ERROR_KIND_AUTHENTICATION: _ClassVar[ErrorKind]
TURN_STATE_UNSPECIFIED: TurnState
TURN_STATE_QUEUED: TurnState
TURN_STATE_RUNNING: TurnState
TURN_STATE_PAUSED: TurnState
TURN_STATE_COMPLETED: TurnState
TURN_STATE_FAILED: TurnState
TURN_STATE_CANCELLED: TurnState
APPROVAL_DECISION_UNSPECIFIED: ApprovalDecision
APPROVAL_DECISION_APPROVE: ApprovalDecision
APPROVAL_DECISION_EDIT: ApprovalDecision
APPROVAL_DECISION_REJECT: ApprovalDecision
TODO_STATUS_UNSPECIFIED: TodoStatus
TODO_STATUS_PENDING: TodoStatus
TODO_STATUS_IN_PROGRESS: TodoStatus
TODO_STATUS_COMPLETED: TodoStatus
ERROR_KIND_UNSPECIFIED: ErrorKind
ERROR_KIND_CANCELLED: ErrorKind
ERROR_KIND_BUDGET_EXCEEDED: ErrorKind
ERROR_KIND_LOOP_LIMIT: ErrorKind
ERROR_KIND_TOOL_TIMEOUT: ErrorKind
ERROR_KIND_PROVIDER_ERROR: ErrorKind
ERROR_KIND_RATE_LIMITED: ErrorKind
ERROR_KIND_GUARDRAIL: ErrorKind
ERROR_KIND_INVALID_REQUEST: ErrorKind
ERROR_KIND_UNAVAILABLE: ErrorKind
ERROR_KIND_INTERNAL: ErrorKind
ERROR_KIND_DEADLINE_EXCEEDED: ErrorKind
ERROR_KIND_OUTPUT_INVALID: ErrorKind
ERROR_KIND_CONTEXT_LENGTH: ErrorKind
ERROR_KIND_AUTHENTICATION: ErrorKind

class RuntimeEvent(_message.Message):
    __slots__ = ("session_id", "turn_id", "seq", "create_time", "agent", "assistant_delta", "status", "tool_call_started", "tool_call_finished", "approval_required", "user_input_requested", "client_tool_call", "usage", "native_notice", "context_compacted", "delegation", "final", "error", "handoff", "plan", "step_complete", "approval_decided", "rewound")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    ASSISTANT_DELTA_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_STARTED_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_FINISHED_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_REQUIRED_FIELD_NUMBER: _ClassVar[int]
    USER_INPUT_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    CLIENT_TOOL_CALL_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    NATIVE_NOTICE_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_COMPACTED_FIELD_NUMBER: _ClassVar[int]
    DELEGATION_FIELD_NUMBER: _ClassVar[int]
    FINAL_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    HANDOFF_FIELD_NUMBER: _ClassVar[int]
    PLAN_FIELD_NUMBER: _ClassVar[int]
    STEP_COMPLETE_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_DECIDED_FIELD_NUMBER: _ClassVar[int]
    REWOUND_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    turn_id: str
    seq: int
    create_time: _timestamp_pb2.Timestamp
    agent: str
    assistant_delta: AssistantDelta
    status: StatusUpdate
    tool_call_started: ToolCallStarted
    tool_call_finished: ToolCallFinished
    approval_required: ApprovalRequired
    user_input_requested: UserInputRequested
    client_tool_call: ClientToolCall
    usage: UsageReport
    native_notice: NativeNotice
    context_compacted: ContextCompacted
    delegation: Delegation
    final: FinalResult
    error: TurnError
    handoff: Handoff
    plan: PlanUpdated
    step_complete: StepCompleted
    approval_decided: ApprovalDecided
    rewound: SessionRewound
    def __init__(self, session_id: _Optional[str] = ..., turn_id: _Optional[str] = ..., seq: _Optional[int] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., agent: _Optional[str] = ..., assistant_delta: _Optional[_Union[AssistantDelta, _Mapping]] = ..., status: _Optional[_Union[StatusUpdate, _Mapping]] = ..., tool_call_started: _Optional[_Union[ToolCallStarted, _Mapping]] = ..., tool_call_finished: _Optional[_Union[ToolCallFinished, _Mapping]] = ..., approval_required: _Optional[_Union[ApprovalRequired, _Mapping]] = ..., user_input_requested: _Optional[_Union[UserInputRequested, _Mapping]] = ..., client_tool_call: _Optional[_Union[ClientToolCall, _Mapping]] = ..., usage: _Optional[_Union[UsageReport, _Mapping]] = ..., native_notice: _Optional[_Union[NativeNotice, _Mapping]] = ..., context_compacted: _Optional[_Union[ContextCompacted, _Mapping]] = ..., delegation: _Optional[_Union[Delegation, _Mapping]] = ..., final: _Optional[_Union[FinalResult, _Mapping]] = ..., error: _Optional[_Union[TurnError, _Mapping]] = ..., handoff: _Optional[_Union[Handoff, _Mapping]] = ..., plan: _Optional[_Union[PlanUpdated, _Mapping]] = ..., step_complete: _Optional[_Union[StepCompleted, _Mapping]] = ..., approval_decided: _Optional[_Union[ApprovalDecided, _Mapping]] = ..., rewound: _Optional[_Union[SessionRewound, _Mapping]] = ...) -> None: ...

class AssistantDelta(_message.Message):
    __slots__ = ("text",)
    TEXT_FIELD_NUMBER: _ClassVar[int]
    text: str
    def __init__(self, text: _Optional[str] = ...) -> None: ...

class StatusUpdate(_message.Message):
    __slots__ = ("state", "text", "interrupt_id", "content")
    STATE_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    INTERRUPT_ID_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    state: TurnState
    text: str
    interrupt_id: str
    content: str
    def __init__(self, state: _Optional[_Union[TurnState, str]] = ..., text: _Optional[str] = ..., interrupt_id: _Optional[str] = ..., content: _Optional[str] = ...) -> None: ...

class ToolCallStarted(_message.Message):
    __slots__ = ("name", "arguments", "correlation_id", "source", "server")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    CORRELATION_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    SERVER_FIELD_NUMBER: _ClassVar[int]
    name: str
    arguments: _struct_pb2.Struct
    correlation_id: str
    source: str
    server: str
    def __init__(self, name: _Optional[str] = ..., arguments: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., correlation_id: _Optional[str] = ..., source: _Optional[str] = ..., server: _Optional[str] = ...) -> None: ...

class ToolCallFinished(_message.Message):
    __slots__ = ("name", "correlation_id", "ok", "result_summary", "duration_ms", "attempts")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CORRELATION_ID_FIELD_NUMBER: _ClassVar[int]
    OK_FIELD_NUMBER: _ClassVar[int]
    RESULT_SUMMARY_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    name: str
    correlation_id: str
    ok: bool
    result_summary: str
    duration_ms: float
    attempts: int
    def __init__(self, name: _Optional[str] = ..., correlation_id: _Optional[str] = ..., ok: _Optional[bool] = ..., result_summary: _Optional[str] = ..., duration_ms: _Optional[float] = ..., attempts: _Optional[int] = ...) -> None: ...

class ApprovalRequired(_message.Message):
    __slots__ = ("action_name", "arguments", "allowed_decisions", "interrupt_id", "description", "correlation_id", "prompt", "defaults")
    ACTION_NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    ALLOWED_DECISIONS_FIELD_NUMBER: _ClassVar[int]
    INTERRUPT_ID_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    CORRELATION_ID_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    DEFAULTS_FIELD_NUMBER: _ClassVar[int]
    action_name: str
    arguments: _struct_pb2.Struct
    allowed_decisions: _containers.RepeatedScalarFieldContainer[ApprovalDecision]
    interrupt_id: str
    description: str
    correlation_id: str
    prompt: str
    defaults: _struct_pb2.Struct
    def __init__(self, action_name: _Optional[str] = ..., arguments: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., allowed_decisions: _Optional[_Iterable[_Union[ApprovalDecision, str]]] = ..., interrupt_id: _Optional[str] = ..., description: _Optional[str] = ..., correlation_id: _Optional[str] = ..., prompt: _Optional[str] = ..., defaults: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class ApprovalDecided(_message.Message):
    __slots__ = ("interrupt_id", "correlation_id", "action_name", "decision", "principal", "comment", "edited_arguments")
    INTERRUPT_ID_FIELD_NUMBER: _ClassVar[int]
    CORRELATION_ID_FIELD_NUMBER: _ClassVar[int]
    ACTION_NAME_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    COMMENT_FIELD_NUMBER: _ClassVar[int]
    EDITED_ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    interrupt_id: str
    correlation_id: str
    action_name: str
    decision: ApprovalDecision
    principal: str
    comment: str
    edited_arguments: _struct_pb2.Struct
    def __init__(self, interrupt_id: _Optional[str] = ..., correlation_id: _Optional[str] = ..., action_name: _Optional[str] = ..., decision: _Optional[_Union[ApprovalDecision, str]] = ..., principal: _Optional[str] = ..., comment: _Optional[str] = ..., edited_arguments: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class UserInputRequested(_message.Message):
    __slots__ = ("prompt", "interrupt_id", "correlation_id")
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    INTERRUPT_ID_FIELD_NUMBER: _ClassVar[int]
    CORRELATION_ID_FIELD_NUMBER: _ClassVar[int]
    prompt: str
    interrupt_id: str
    correlation_id: str
    def __init__(self, prompt: _Optional[str] = ..., interrupt_id: _Optional[str] = ..., correlation_id: _Optional[str] = ...) -> None: ...

class ClientToolCall(_message.Message):
    __slots__ = ("call", "interrupt_id", "idempotency_key", "scope")
    class ScopeEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CALL_FIELD_NUMBER: _ClassVar[int]
    INTERRUPT_ID_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    call: _messages_pb2.ToolCall
    interrupt_id: str
    idempotency_key: str
    scope: _containers.ScalarMap[str, str]
    def __init__(self, call: _Optional[_Union[_messages_pb2.ToolCall, _Mapping]] = ..., interrupt_id: _Optional[str] = ..., idempotency_key: _Optional[str] = ..., scope: _Optional[_Mapping[str, str]] = ...) -> None: ...

class UsageReport(_message.Message):
    __slots__ = ("model", "provider", "input_tokens", "output_tokens", "cost_usd", "turn_cost_usd")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COST_USD_FIELD_NUMBER: _ClassVar[int]
    TURN_COST_USD_FIELD_NUMBER: _ClassVar[int]
    model: str
    provider: str
    input_tokens: int
    output_tokens: int
    cost_usd: float
    turn_cost_usd: float
    def __init__(self, model: _Optional[str] = ..., provider: _Optional[str] = ..., input_tokens: _Optional[int] = ..., output_tokens: _Optional[int] = ..., cost_usd: _Optional[float] = ..., turn_cost_usd: _Optional[float] = ...) -> None: ...

class NativeNotice(_message.Message):
    __slots__ = ("text", "metadata", "kind")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    text: str
    metadata: _struct_pb2.Struct
    kind: str
    def __init__(self, text: _Optional[str] = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., kind: _Optional[str] = ...) -> None: ...

class ContextCompacted(_message.Message):
    __slots__ = ("summary_tokens", "archived_count")
    SUMMARY_TOKENS_FIELD_NUMBER: _ClassVar[int]
    ARCHIVED_COUNT_FIELD_NUMBER: _ClassVar[int]
    summary_tokens: int
    archived_count: int
    def __init__(self, summary_tokens: _Optional[int] = ..., archived_count: _Optional[int] = ...) -> None: ...

class Delegation(_message.Message):
    __slots__ = ("from_agent", "to_agent", "task", "correlation_id")
    FROM_AGENT_FIELD_NUMBER: _ClassVar[int]
    TO_AGENT_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    CORRELATION_ID_FIELD_NUMBER: _ClassVar[int]
    from_agent: str
    to_agent: str
    task: str
    correlation_id: str
    def __init__(self, from_agent: _Optional[str] = ..., to_agent: _Optional[str] = ..., task: _Optional[str] = ..., correlation_id: _Optional[str] = ...) -> None: ...

class Handoff(_message.Message):
    __slots__ = ("from_agent", "to_agent", "reason", "correlation_id")
    FROM_AGENT_FIELD_NUMBER: _ClassVar[int]
    TO_AGENT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    CORRELATION_ID_FIELD_NUMBER: _ClassVar[int]
    from_agent: str
    to_agent: str
    reason: str
    correlation_id: str
    def __init__(self, from_agent: _Optional[str] = ..., to_agent: _Optional[str] = ..., reason: _Optional[str] = ..., correlation_id: _Optional[str] = ...) -> None: ...

class TodoItem(_message.Message):
    __slots__ = ("id", "content", "status")
    ID_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    id: str
    content: str
    status: TodoStatus
    def __init__(self, id: _Optional[str] = ..., content: _Optional[str] = ..., status: _Optional[_Union[TodoStatus, str]] = ...) -> None: ...

class PlanUpdated(_message.Message):
    __slots__ = ("items", "version")
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[TodoItem]
    version: int
    def __init__(self, items: _Optional[_Iterable[_Union[TodoItem, _Mapping]]] = ..., version: _Optional[int] = ...) -> None: ...

class StepCompleted(_message.Message):
    __slots__ = ("step_number", "total_steps", "description", "version")
    STEP_NUMBER_FIELD_NUMBER: _ClassVar[int]
    TOTAL_STEPS_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    step_number: int
    total_steps: int
    description: str
    version: int
    def __init__(self, step_number: _Optional[int] = ..., total_steps: _Optional[int] = ..., description: _Optional[str] = ..., version: _Optional[int] = ...) -> None: ...

class TurnMetrics(_message.Message):
    __slots__ = ("duration_ms", "model_calls", "tool_calls", "input_tokens", "output_tokens", "cost_usd", "session_cost_usd", "session_total_tokens", "runtime", "failed_models")
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    MODEL_CALLS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COST_USD_FIELD_NUMBER: _ClassVar[int]
    SESSION_COST_USD_FIELD_NUMBER: _ClassVar[int]
    SESSION_TOTAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_FIELD_NUMBER: _ClassVar[int]
    FAILED_MODELS_FIELD_NUMBER: _ClassVar[int]
    duration_ms: float
    model_calls: int
    tool_calls: int
    input_tokens: int
    output_tokens: int
    cost_usd: float
    session_cost_usd: float
    session_total_tokens: int
    runtime: str
    failed_models: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, duration_ms: _Optional[float] = ..., model_calls: _Optional[int] = ..., tool_calls: _Optional[int] = ..., input_tokens: _Optional[int] = ..., output_tokens: _Optional[int] = ..., cost_usd: _Optional[float] = ..., session_cost_usd: _Optional[float] = ..., session_total_tokens: _Optional[int] = ..., runtime: _Optional[str] = ..., failed_models: _Optional[_Iterable[str]] = ...) -> None: ...

class FinalResult(_message.Message):
    __slots__ = ("text", "new_messages", "metrics", "structured_output", "model", "text_omitted", "messages_omitted")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    NEW_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    STRUCTURED_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TEXT_OMITTED_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_OMITTED_FIELD_NUMBER: _ClassVar[int]
    text: str
    new_messages: _containers.RepeatedCompositeFieldContainer[_messages_pb2.Message]
    metrics: TurnMetrics
    structured_output: _struct_pb2.Value
    model: str
    text_omitted: bool
    messages_omitted: bool
    def __init__(self, text: _Optional[str] = ..., new_messages: _Optional[_Iterable[_Union[_messages_pb2.Message, _Mapping]]] = ..., metrics: _Optional[_Union[TurnMetrics, _Mapping]] = ..., structured_output: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., model: _Optional[str] = ..., text_omitted: _Optional[bool] = ..., messages_omitted: _Optional[bool] = ...) -> None: ...

class TurnError(_message.Message):
    __slots__ = ("kind", "message", "retryable", "partial_text")
    KIND_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_TEXT_FIELD_NUMBER: _ClassVar[int]
    kind: ErrorKind
    message: str
    retryable: bool
    partial_text: str
    def __init__(self, kind: _Optional[_Union[ErrorKind, str]] = ..., message: _Optional[str] = ..., retryable: _Optional[bool] = ..., partial_text: _Optional[str] = ...) -> None: ...

class SessionRewound(_message.Message):
    __slots__ = ("turn_id", "dropped_turn_ids", "void_after_seq", "void_through_seq", "dropped_message_count", "reason", "requested_by")
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    DROPPED_TURN_IDS_FIELD_NUMBER: _ClassVar[int]
    VOID_AFTER_SEQ_FIELD_NUMBER: _ClassVar[int]
    VOID_THROUGH_SEQ_FIELD_NUMBER: _ClassVar[int]
    DROPPED_MESSAGE_COUNT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_BY_FIELD_NUMBER: _ClassVar[int]
    turn_id: str
    dropped_turn_ids: _containers.RepeatedScalarFieldContainer[str]
    void_after_seq: int
    void_through_seq: int
    dropped_message_count: int
    reason: str
    requested_by: str
    def __init__(self, turn_id: _Optional[str] = ..., dropped_turn_ids: _Optional[_Iterable[str]] = ..., void_after_seq: _Optional[int] = ..., void_through_seq: _Optional[int] = ..., dropped_message_count: _Optional[int] = ..., reason: _Optional[str] = ..., requested_by: _Optional[str] = ...) -> None: ...
