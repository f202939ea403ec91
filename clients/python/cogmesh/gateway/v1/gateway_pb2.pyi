import datetime

from buf.validate import validate_pb2 as _validate_pb2
from cogmesh.common.v1 import errors_pb2 as _errors_pb2
from cogmesh.common.v1 import events_pb2 as _events_pb2
from cogmesh.common.v1 import messages_pb2 as _messages_pb2
from cogmesh.common.v1 import resources_pb2 as _resources_pb2
from cogmesh.common.v1 import turns_pb2 as _turns_pb2
from google.protobuf import field_mask_pb2 as _field_mask_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CreateSessionRequest(_message.Message):
    __slots__ = ("agent", "user_id", "topic_id", "scope", "labels")
    class ScopeEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    AGENT_FIELD_NUMBER: _ClassVar[int]
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    agent: str
    user_id: str
    topic_id: str
    scope: _containers.ScalarMap[str, str]
    labels: _containers.ScalarMap[str, str]
    def __init__(self, agent: _Optional[str] = ..., user_id: _Optional[str] = ..., topic_id: _Optional[str] = ..., scope: _Optional[_Mapping[str, str]] = ..., labels: _Optional[_Mapping[str, str]] = ...) -> None: ...

class CreateSessionResponse(_message.Message):
    __slots__ = ("session",)
    SESSION_FIELD_NUMBER: _ClassVar[int]
    session: _resources_pb2.Session
    def __init__(self, session: _Optional[_Union[_resources_pb2.Session, _Mapping]] = ...) -> None: ...

class GetSessionRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class GetSessionResponse(_message.Message):
    __slots__ = ("session",)
    SESSION_FIELD_NUMBER: _ClassVar[int]
    session: _resources_pb2.Session
    def __init__(self, session: _Optional[_Union[_resources_pb2.Session, _Mapping]] = ...) -> None: ...

class ListSessionsRequest(_message.Message):
    __slots__ = ("page_size", "page_token", "scope_filter", "label_filter", "statuses", "agent", "created_after", "created_before", "active_after", "active_before", "forked_from", "agent_version")
    class ScopeFilterEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class LabelFilterEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FILTER_FIELD_NUMBER: _ClassVar[int]
    LABEL_FILTER_FIELD_NUMBER: _ClassVar[int]
    STATUSES_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    CREATED_AFTER_FIELD_NUMBER: _ClassVar[int]
    CREATED_BEFORE_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_AFTER_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_BEFORE_FIELD_NUMBER: _ClassVar[int]
    FORKED_FROM_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    scope_filter: _containers.ScalarMap[str, str]
    label_filter: _containers.ScalarMap[str, str]
    statuses: _containers.RepeatedScalarFieldContainer[_resources_pb2.SessionStatus]
    agent: str
    created_after: _timestamp_pb2.Timestamp
    created_before: _timestamp_pb2.Timestamp
    active_after: _timestamp_pb2.Timestamp
    active_before: _timestamp_pb2.Timestamp
    forked_from: str
    agent_version: int
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., scope_filter: _Optional[_Mapping[str, str]] = ..., label_filter: _Optional[_Mapping[str, str]] = ..., statuses: _Optional[_Iterable[_Union[_resources_pb2.SessionStatus, str]]] = ..., agent: _Optional[str] = ..., created_after: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., created_before: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., active_after: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., active_before: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., forked_from: _Optional[str] = ..., agent_version: _Optional[int] = ...) -> None: ...

class ListSessionsResponse(_message.Message):
    __slots__ = ("sessions", "next_page_token")
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    sessions: _containers.RepeatedCompositeFieldContainer[_resources_pb2.Session]
    next_page_token: str
    def __init__(self, sessions: _Optional[_Iterable[_Union[_resources_pb2.Session, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class UpdateSessionRequest(_message.Message):
    __slots__ = ("session_id", "labels", "update_mask", "agent")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    UPDATE_MASK_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    labels: _containers.ScalarMap[str, str]
    update_mask: _field_mask_pb2.FieldMask
    agent: str
    def __init__(self, session_id: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., update_mask: _Optional[_Union[_field_mask_pb2.FieldMask, _Mapping]] = ..., agent: _Optional[str] = ...) -> None: ...

class UpdateSessionResponse(_message.Message):
    __slots__ = ("session",)
    SESSION_FIELD_NUMBER: _ClassVar[int]
    session: _resources_pb2.Session
    def __init__(self, session: _Optional[_Union[_resources_pb2.Session, _Mapping]] = ...) -> None: ...

class DeleteSessionRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class DeleteSessionResponse(_message.Message):
    __slots__ = ("deleted",)
    DELETED_FIELD_NUMBER: _ClassVar[int]
    deleted: bool
    def __init__(self, deleted: _Optional[bool] = ...) -> None: ...

class SendMessageRequest(_message.Message):
    __slots__ = ("session_id", "content", "model", "cancel_on_disconnect", "runtime", "output_schema", "limits", "cost_budget", "client_tools", "multitask_strategy")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    CANCEL_ON_DISCONNECT_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    COST_BUDGET_FIELD_NUMBER: _ClassVar[int]
    CLIENT_TOOLS_FIELD_NUMBER: _ClassVar[int]
    MULTITASK_STRATEGY_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    content: str
    model: str
    cancel_on_disconnect: bool
    runtime: str
    output_schema: _struct_pb2.Struct
    limits: _turns_pb2.TurnLimits
    cost_budget: _turns_pb2.CostBudget
    client_tools: _containers.RepeatedCompositeFieldContainer[_messages_pb2.ToolSpec]
    multitask_strategy: _turns_pb2.MultitaskStrategy
    def __init__(self, session_id: _Optional[str] = ..., content: _Optional[str] = ..., model: _Optional[str] = ..., cancel_on_disconnect: _Optional[bool] = ..., runtime: _Optional[str] = ..., output_schema: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., limits: _Optional[_Union[_turns_pb2.TurnLimits, _Mapping]] = ..., cost_budget: _Optional[_Union[_turns_pb2.CostBudget, _Mapping]] = ..., client_tools: _Optional[_Iterable[_Union[_messages_pb2.ToolSpec, _Mapping]]] = ..., multitask_strategy: _Optional[_Union[_turns_pb2.MultitaskStrategy, str]] = ...) -> None: ...

class SendMessageResponse(_message.Message):
    __slots__ = ("events",)
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[_events_pb2.RuntimeEvent]
    def __init__(self, events: _Optional[_Iterable[_Union[_events_pb2.RuntimeEvent, _Mapping]]] = ...) -> None: ...

class SubscribeRequest(_message.Message):
    __slots__ = ("session_id", "after_seq", "stop_when_idle")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQ_FIELD_NUMBER: _ClassVar[int]
    STOP_WHEN_IDLE_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    after_seq: int
    stop_when_idle: bool
    def __init__(self, session_id: _Optional[str] = ..., after_seq: _Optional[int] = ..., stop_when_idle: _Optional[bool] = ...) -> None: ...

class SubscribeResponse(_message.Message):
    __slots__ = ("events", "heartbeat")
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[_events_pb2.RuntimeEvent]
    heartbeat: bool
    def __init__(self, events: _Optional[_Iterable[_Union[_events_pb2.RuntimeEvent, _Mapping]]] = ..., heartbeat: _Optional[bool] = ...) -> None: ...

class CancelTurnRequest(_message.Message):
    __slots__ = ("session_id", "turn_id")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    turn_id: str
    def __init__(self, session_id: _Optional[str] = ..., turn_id: _Optional[str] = ...) -> None: ...

class CancelTurnResponse(_message.Message):
    __slots__ = ("cancelled", "turn_id")
    CANCELLED_FIELD_NUMBER: _ClassVar[int]
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    cancelled: bool
    turn_id: str
    def __init__(self, cancelled: _Optional[bool] = ..., turn_id: _Optional[str] = ...) -> None: ...

class ListAgentsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListAgentsResponse(_message.Message):
    __slots__ = ("agents",)
    AGENTS_FIELD_NUMBER: _ClassVar[int]
    agents: _containers.RepeatedCompositeFieldContainer[_resources_pb2.Agent]
    def __init__(self, agents: _Optional[_Iterable[_Union[_resources_pb2.Agent, _Mapping]]] = ...) -> None: ...

class ListModelsRequest(_message.Message):
    __slots__ = ("provider",)
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    provider: str
    def __init__(self, provider: _Optional[str] = ...) -> None: ...

class ListModelsResponse(_message.Message):
    __slots__ = ("models", "default_model")
    MODELS_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_MODEL_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedCompositeFieldContainer[_resources_pb2.Model]
    default_model: str
    def __init__(self, models: _Optional[_Iterable[_Union[_resources_pb2.Model, _Mapping]]] = ..., default_model: _Optional[str] = ...) -> None: ...

class GetCapabilitiesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RuntimeCapability(_message.Message):
    __slots__ = ("name", "capabilities")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    name: str
    capabilities: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., capabilities: _Optional[_Iterable[str]] = ...) -> None: ...

class GetCapabilitiesResponse(_message.Message):
    __slots__ = ("version", "api_versions", "protocols", "features", "runtimes", "interceptors")
    class FeaturesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: bool
        def __init__(self, key: _Optional[str] = ..., value: _Optional[bool] = ...) -> None: ...
    VERSION_FIELD_NUMBER: _ClassVar[int]
    API_VERSIONS_FIELD_NUMBER: _ClassVar[int]
    PROTOCOLS_FIELD_NUMBER: _ClassVar[int]
    FEATURES_FIELD_NUMBER: _ClassVar[int]
    RUNTIMES_FIELD_NUMBER: _ClassVar[int]
    INTERCEPTORS_FIELD_NUMBER: _ClassVar[int]
    version: str
    api_versions: _containers.RepeatedScalarFieldContainer[str]
    protocols: _containers.RepeatedScalarFieldContainer[str]
    features: _containers.ScalarMap[str, bool]
    runtimes: _containers.RepeatedCompositeFieldContainer[RuntimeCapability]
    interceptors: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, version: _Optional[str] = ..., api_versions: _Optional[_Iterable[str]] = ..., protocols: _Optional[_Iterable[str]] = ..., features: _Optional[_Mapping[str, bool]] = ..., runtimes: _Optional[_Iterable[_Union[RuntimeCapability, _Mapping]]] = ..., interceptors: _Optional[_Iterable[str]] = ...) -> None: ...

class ResolveApprovalRequest(_message.Message):
    __slots__ = ("session_id", "interrupt_id", "decision", "edited_arguments", "reason")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    INTERRUPT_ID_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    EDITED_ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    interrupt_id: str
    decision: _events_pb2.ApprovalDecision
    edited_arguments: _struct_pb2.Struct
    reason: str
    def __init__(self, session_id: _Optional[str] = ..., interrupt_id: _Optional[str] = ..., decision: _Optional[_Union[_events_pb2.ApprovalDecision, str]] = ..., edited_arguments: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., reason: _Optional[str] = ...) -> None: ...

class ResolveApprovalResponse(_message.Message):
    __slots__ = ("events",)
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[_events_pb2.RuntimeEvent]
    def __init__(self, events: _Optional[_Iterable[_Union[_events_pb2.RuntimeEvent, _Mapping]]] = ...) -> None: ...

class AnswerInterruptRequest(_message.Message):
    __slots__ = ("session_id", "interrupt_id", "approval", "user_input", "tool_result")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    INTERRUPT_ID_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_FIELD_NUMBER: _ClassVar[int]
    USER_INPUT_FIELD_NUMBER: _ClassVar[int]
    TOOL_RESULT_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    interrupt_id: str
    approval: _turns_pb2.ApprovalAnswer
    user_input: str
    tool_result: _turns_pb2.ClientToolResult
    def __init__(self, session_id: _Optional[str] = ..., interrupt_id: _Optional[str] = ..., approval: _Optional[_Union[_turns_pb2.ApprovalAnswer, _Mapping]] = ..., user_input: _Optional[str] = ..., tool_result: _Optional[_Union[_turns_pb2.ClientToolResult, _Mapping]] = ...) -> None: ...

class AnswerInterruptResponse(_message.Message):
    __slots__ = ("events",)
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[_events_pb2.RuntimeEvent]
    def __init__(self, events: _Optional[_Iterable[_Union[_events_pb2.RuntimeEvent, _Mapping]]] = ...) -> None: ...

class ConverseOpen(_message.Message):
    __slots__ = ("session_id", "after_seq")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQ_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    after_seq: int
    def __init__(self, session_id: _Optional[str] = ..., after_seq: _Optional[int] = ...) -> None: ...

class ConverseRequest(_message.Message):
    __slots__ = ("frame_id", "open", "message", "approval", "answer", "cancel")
    FRAME_ID_FIELD_NUMBER: _ClassVar[int]
    OPEN_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_FIELD_NUMBER: _ClassVar[int]
    ANSWER_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    frame_id: str
    open: ConverseOpen
    message: SendMessageRequest
    approval: ResolveApprovalRequest
    answer: AnswerInterruptRequest
    cancel: CancelTurnRequest
    def __init__(self, frame_id: _Optional[str] = ..., open: _Optional[_Union[ConverseOpen, _Mapping]] = ..., message: _Optional[_Union[SendMessageRequest, _Mapping]] = ..., approval: _Optional[_Union[ResolveApprovalRequest, _Mapping]] = ..., answer: _Optional[_Union[AnswerInterruptRequest, _Mapping]] = ..., cancel: _Optional[_Union[CancelTurnRequest, _Mapping]] = ...) -> None: ...

class EventBatch(_message.Message):
    __slots__ = ("events",)
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[_events_pb2.RuntimeEvent]
    def __init__(self, events: _Optional[_Iterable[_Union[_events_pb2.RuntimeEvent, _Mapping]]] = ...) -> None: ...

class ConverseAck(_message.Message):
    __slots__ = ("frame_id", "turn_id", "after_seq")
    FRAME_ID_FIELD_NUMBER: _ClassVar[int]
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQ_FIELD_NUMBER: _ClassVar[int]
    frame_id: str
    turn_id: str
    after_seq: int
    def __init__(self, frame_id: _Optional[str] = ..., turn_id: _Optional[str] = ..., after_seq: _Optional[int] = ...) -> None: ...

class FieldViolation(_message.Message):
    __slots__ = ("field", "description")
    FIELD_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    field: str
    description: str
    def __init__(self, field: _Optional[str] = ..., description: _Optional[str] = ...) -> None: ...

class ConverseRejection(_message.Message):
    __slots__ = ("frame_id", "code", "message", "reason", "violations", "metadata")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    FRAME_ID_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    VIOLATIONS_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    frame_id: str
    code: str
    message: str
    reason: _errors_pb2.ErrorReason
    violations: _containers.RepeatedCompositeFieldContainer[FieldViolation]
    metadata: _containers.ScalarMap[str, str]
    def __init__(self, frame_id: _Optional[str] = ..., code: _Optional[str] = ..., message: _Optional[str] = ..., reason: _Optional[_Union[_errors_pb2.ErrorReason, str]] = ..., violations: _Optional[_Iterable[_Union[FieldViolation, _Mapping]]] = ..., metadata: _Optional[_Mapping[str, str]] = ...) -> None: ...

class ConverseResponse(_message.Message):
    __slots__ = ("events", "heartbeat", "ack", "rejected")
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    ACK_FIELD_NUMBER: _ClassVar[int]
    REJECTED_FIELD_NUMBER: _ClassVar[int]
    events: EventBatch
    heartbeat: bool
    ack: ConverseAck
    rejected: ConverseRejection
    def __init__(self, events: _Optional[_Union[EventBatch, _Mapping]] = ..., heartbeat: _Optional[bool] = ..., ack: _Optional[_Union[ConverseAck, _Mapping]] = ..., rejected: _Optional[_Union[ConverseRejection, _Mapping]] = ...) -> None: ...

class ListTurnsRequest(_message.Message):
    __slots__ = ("session_id", "page_size", "page_token", "include_steps")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_STEPS_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    page_size: int
    page_token: str
    include_steps: bool
    def __init__(self, session_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., include_steps: _Optional[bool] = ...) -> None: ...

class ListTurnsResponse(_message.Message):
    __slots__ = ("turns", "next_page_token")
    TURNS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    turns: _containers.RepeatedCompositeFieldContainer[_turns_pb2.TurnRecord]
    next_page_token: str
    def __init__(self, turns: _Optional[_Iterable[_Union[_turns_pb2.TurnRecord, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ListMessagesRequest(_message.Message):
    __slots__ = ("session_id", "page_size", "page_token", "through_turn_id")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    THROUGH_TURN_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    page_size: int
    page_token: str
    through_turn_id: str
    def __init__(self, session_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., through_turn_id: _Optional[str] = ...) -> None: ...

class ListMessagesResponse(_message.Message):
    __slots__ = ("messages", "next_page_token")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[_messages_pb2.Message]
    next_page_token: str
    def __init__(self, messages: _Optional[_Iterable[_Union[_messages_pb2.Message, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ForkSessionRequest(_message.Message):
    __slots__ = ("session_id", "turn_id", "before_turn", "agent", "labels")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    BEFORE_TURN_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    turn_id: str
    before_turn: bool
    agent: str
    labels: _containers.ScalarMap[str, str]
    def __init__(self, session_id: _Optional[str] = ..., turn_id: _Optional[str] = ..., before_turn: _Optional[bool] = ..., agent: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ...) -> None: ...

class ForkSessionResponse(_message.Message):
    __slots__ = ("session", "message_count")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_COUNT_FIELD_NUMBER: _ClassVar[int]
    session: _resources_pb2.Session
    message_count: int
    def __init__(self, session: _Optional[_Union[_resources_pb2.Session, _Mapping]] = ..., message_count: _Optional[int] = ...) -> None: ...

class RewindSessionRequest(_message.Message):
    __slots__ = ("session_id", "turn_id")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    turn_id: str
    def __init__(self, session_id: _Optional[str] = ..., turn_id: _Optional[str] = ...) -> None: ...

class RewindSessionResponse(_message.Message):
    __slots__ = ("session", "event")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    session: _resources_pb2.Session
    event: _events_pb2.RuntimeEvent
    def __init__(self, session: _Optional[_Union[_resources_pb2.Session, _Mapping]] = ..., event: _Optional[_Union[_events_pb2.RuntimeEvent, _Mapping]] = ...) -> None: ...
