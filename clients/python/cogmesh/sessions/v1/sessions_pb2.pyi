import datetime

from buf.validate import validate_pb2 as _validate_pb2
from cogmesh.common.v1 import events_pb2 as _events_pb2
from cogmesh.common.v1 import messages_pb2 as _messages_pb2
from cogmesh.common.v1 import resources_pb2 as _resources_pb2
from cogmesh.common.v1 import turns_pb2 as _turns_pb2
from google.protobuf import field_mask_pb2 as _field_mask_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class MultitaskStrategy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MULTITASK_STRATEGY_UNSPECIFIED: _ClassVar[MultitaskStrategy]
    MULTITASK_STRATEGY_REJECT: _ClassVar[MultitaskStrategy]
    MULTITASK_STRATEGY_ENQUEUE: _ClassVar[MultitaskStrategy]
    MULTITASK_STRATEGY_INTERRUPT: _ClassVar[MultitaskStrategy]
    MULTITASK_STRATEGY_ROLLBACK: _ClassVar[MultitaskStrategy]

class GoalStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    GOAL_STATUS_UNSPECIFIED: _ClassVar[GoalStatus]
    GOAL_STATUS_ACTIVE: _ClassVar[GoalStatus]
    GOAL_STATUS_COMPLETED: _ClassVar[GoalStatus]
    GOAL_STATUS_ABANDONED: _ClassVar[GoalStatus]

class JournalEntryKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOURNAL_ENTRY_KIND_UNSPECIFIED: _ClassVar[JournalEntryKind]
    JOURNAL_ENTRY_KIND_REQUEST: _ClassVar[JournalEntryKind]
    JOURNAL_ENTRY_KIND_START: _ClassVar[JournalEntryKind]
    JOURNAL_ENTRY_KIND_COMPACTION: _ClassVar[JournalEntryKind]
    JOURNAL_ENTRY_KIND_MODEL: _ClassVar[JournalEntryKind]
    JOURNAL_ENTRY_KIND_DECIDE: _ClassVar[JournalEntryKind]
    JOURNAL_ENTRY_KIND_TOOL: _ClassVar[JournalEntryKind]
    JOURNAL_ENTRY_KIND_DELEGATION: _ClassVar[JournalEntryKind]
    JOURNAL_ENTRY_KIND_STEP: _ClassVar[JournalEntryKind]
    JOURNAL_ENTRY_KIND_PAUSE: _ClassVar[JournalEntryKind]
    JOURNAL_ENTRY_KIND_ANSWER: _ClassVar[JournalEntryKind]
    JOURNAL_ENTRY_KIND_TAKEOVER: _ClassVar[JournalEntryKind]
MULTITASK_STRATEGY_UNSPECIFIED: MultitaskStrategy
MULTITASK_STRATEGY_REJECT: MultitaskStrategy
MULTITASK_STRATEGY_ENQUEUE: MultitaskStrategy
MULTITASK_STRATEGY_INTERRUPT: MultitaskStrategy
MULTITASK_STRATEGY_ROLLBACK: MultitaskStrategy
GOAL_STATUS_UNSPECIFIED: GoalStatus
GOAL_STATUS_ACTIVE: GoalStatus
GOAL_STATUS_COMPLETED: GoalStatus
GOAL_STATUS_ABANDONED: GoalStatus
JOURNAL_ENTRY_KIND_UNSPECIFIED: JournalEntryKind
JOURNAL_ENTRY_KIND_REQUEST: JournalEntryKind
JOURNAL_ENTRY_KIND_START: JournalEntryKind
JOURNAL_ENTRY_KIND_COMPACTION: JournalEntryKind
JOURNAL_ENTRY_KIND_MODEL: JournalEntryKind
JOURNAL_ENTRY_KIND_DECIDE: JournalEntryKind
JOURNAL_ENTRY_KIND_TOOL: JournalEntryKind
JOURNAL_ENTRY_KIND_DELEGATION: JournalEntryKind
JOURNAL_ENTRY_KIND_STEP: JournalEntryKind
JOURNAL_ENTRY_KIND_PAUSE: JournalEntryKind
JOURNAL_ENTRY_KIND_ANSWER: JournalEntryKind
JOURNAL_ENTRY_KIND_TAKEOVER: JournalEntryKind

class SessionState(_message.Message):
    __slots__ = ("runtime_config", "delegated_from", "delegation_turn_count", "expire_time", "pending_interrupt_ids", "plan")
    RUNTIME_CONFIG_FIELD_NUMBER: _ClassVar[int]
    DELEGATED_FROM_FIELD_NUMBER: _ClassVar[int]
    DELEGATION_TURN_COUNT_FIELD_NUMBER: _ClassVar[int]
    EXPIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    PENDING_INTERRUPT_IDS_FIELD_NUMBER: _ClassVar[int]
    PLAN_FIELD_NUMBER: _ClassVar[int]
    runtime_config: _struct_pb2.Struct
    delegated_from: str
    delegation_turn_count: int
    expire_time: _timestamp_pb2.Timestamp
    pending_interrupt_ids: _containers.RepeatedScalarFieldContainer[str]
    plan: _events_pb2.PlanUpdated
    def __init__(self, runtime_config: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., delegated_from: _Optional[str] = ..., delegation_turn_count: _Optional[int] = ..., expire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., pending_interrupt_ids: _Optional[_Iterable[str]] = ..., plan: _Optional[_Union[_events_pb2.PlanUpdated, _Mapping]] = ...) -> None: ...

class CreateSessionRequest(_message.Message):
    __slots__ = ("tenant_id", "user_id", "topic_id", "agent", "role_id", "active_skill_ids", "runtime_config", "delegated_from", "reuse_existing", "scope", "labels", "agent_version")
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
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    ROLE_ID_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_SKILL_IDS_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_CONFIG_FIELD_NUMBER: _ClassVar[int]
    DELEGATED_FROM_FIELD_NUMBER: _ClassVar[int]
    REUSE_EXISTING_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    user_id: str
    topic_id: str
    agent: str
    role_id: str
    active_skill_ids: _containers.RepeatedScalarFieldContainer[str]
    runtime_config: _struct_pb2.Struct
    delegated_from: str
    reuse_existing: bool
    scope: _containers.ScalarMap[str, str]
    labels: _containers.ScalarMap[str, str]
    agent_version: int
    def __init__(self, tenant_id: _Optional[str] = ..., user_id: _Optional[str] = ..., topic_id: _Optional[str] = ..., agent: _Optional[str] = ..., role_id: _Optional[str] = ..., active_skill_ids: _Optional[_Iterable[str]] = ..., runtime_config: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., delegated_from: _Optional[str] = ..., reuse_existing: _Optional[bool] = ..., scope: _Optional[_Mapping[str, str]] = ..., labels: _Optional[_Mapping[str, str]] = ..., agent_version: _Optional[int] = ...) -> None: ...

class CreateSessionResponse(_message.Message):
    __slots__ = ("session", "state", "reused")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    REUSED_FIELD_NUMBER: _ClassVar[int]
    session: _resources_pb2.Session
    state: SessionState
    reused: bool
    def __init__(self, session: _Optional[_Union[_resources_pb2.Session, _Mapping]] = ..., state: _Optional[_Union[SessionState, _Mapping]] = ..., reused: _Optional[bool] = ...) -> None: ...

class GetSessionRequest(_message.Message):
    __slots__ = ("tenant_id", "session_id")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    session_id: str
    def __init__(self, tenant_id: _Optional[str] = ..., session_id: _Optional[str] = ...) -> None: ...

class GetSessionResponse(_message.Message):
    __slots__ = ("session", "state")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    session: _resources_pb2.Session
    state: SessionState
    def __init__(self, session: _Optional[_Union[_resources_pb2.Session, _Mapping]] = ..., state: _Optional[_Union[SessionState, _Mapping]] = ...) -> None: ...

class LookupSessionRequest(_message.Message):
    __slots__ = ("tenant_id", "user_id", "topic_id", "scope")
    class ScopeEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    user_id: str
    topic_id: str
    scope: _containers.ScalarMap[str, str]
    def __init__(self, tenant_id: _Optional[str] = ..., user_id: _Optional[str] = ..., topic_id: _Optional[str] = ..., scope: _Optional[_Mapping[str, str]] = ...) -> None: ...

class LookupSessionResponse(_message.Message):
    __slots__ = ("session", "state")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    session: _resources_pb2.Session
    state: SessionState
    def __init__(self, session: _Optional[_Union[_resources_pb2.Session, _Mapping]] = ..., state: _Optional[_Union[SessionState, _Mapping]] = ...) -> None: ...

class ListSessionsRequest(_message.Message):
    __slots__ = ("tenant_id", "page_size", "page_token", "scope_filter", "label_filter", "statuses", "agent", "created_after", "created_before", "active_after", "active_before", "forked_from", "agent_version")
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
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
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
    tenant_id: str
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
    def __init__(self, tenant_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., scope_filter: _Optional[_Mapping[str, str]] = ..., label_filter: _Optional[_Mapping[str, str]] = ..., statuses: _Optional[_Iterable[_Union[_resources_pb2.SessionStatus, str]]] = ..., agent: _Optional[str] = ..., created_after: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., created_before: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., active_after: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., active_before: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., forked_from: _Optional[str] = ..., agent_version: _Optional[int] = ...) -> None: ...

class ListSessionsResponse(_message.Message):
    __slots__ = ("sessions", "next_page_token")
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    sessions: _containers.RepeatedCompositeFieldContainer[_resources_pb2.Session]
    next_page_token: str
    def __init__(self, sessions: _Optional[_Iterable[_Union[_resources_pb2.Session, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class UpdateSessionRequest(_message.Message):
    __slots__ = ("tenant_id", "session_id", "role_id", "active_skill_ids", "prompt_hash", "runtime_config", "delegated_from", "delegation_turn_count", "update_mask", "lease_token", "active_agent", "plan", "labels", "agent", "agent_version")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_ID_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_SKILL_IDS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_HASH_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_CONFIG_FIELD_NUMBER: _ClassVar[int]
    DELEGATED_FROM_FIELD_NUMBER: _ClassVar[int]
    DELEGATION_TURN_COUNT_FIELD_NUMBER: _ClassVar[int]
    UPDATE_MASK_FIELD_NUMBER: _ClassVar[int]
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_AGENT_FIELD_NUMBER: _ClassVar[int]
    PLAN_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    session_id: str
    role_id: str
    active_skill_ids: _containers.RepeatedScalarFieldContainer[str]
    prompt_hash: str
    runtime_config: _struct_pb2.Struct
    delegated_from: str
    delegation_turn_count: int
    update_mask: _field_mask_pb2.FieldMask
    lease_token: int
    active_agent: str
    plan: _events_pb2.PlanUpdated
    labels: _containers.ScalarMap[str, str]
    agent: str
    agent_version: int
    def __init__(self, tenant_id: _Optional[str] = ..., session_id: _Optional[str] = ..., role_id: _Optional[str] = ..., active_skill_ids: _Optional[_Iterable[str]] = ..., prompt_hash: _Optional[str] = ..., runtime_config: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., delegated_from: _Optional[str] = ..., delegation_turn_count: _Optional[int] = ..., update_mask: _Optional[_Union[_field_mask_pb2.FieldMask, _Mapping]] = ..., lease_token: _Optional[int] = ..., active_agent: _Optional[str] = ..., plan: _Optional[_Union[_events_pb2.PlanUpdated, _Mapping]] = ..., labels: _Optional[_Mapping[str, str]] = ..., agent: _Optional[str] = ..., agent_version: _Optional[int] = ...) -> None: ...

class UpdateSessionResponse(_message.Message):
    __slots__ = ("session", "state")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    session: _resources_pb2.Session
    state: SessionState
    def __init__(self, session: _Optional[_Union[_resources_pb2.Session, _Mapping]] = ..., state: _Optional[_Union[SessionState, _Mapping]] = ...) -> None: ...

class DeleteSessionRequest(_message.Message):
    __slots__ = ("tenant_id", "session_id")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    session_id: str
    def __init__(self, tenant_id: _Optional[str] = ..., session_id: _Optional[str] = ...) -> None: ...

class DeleteSessionResponse(_message.Message):
    __slots__ = ("deleted",)
    DELETED_FIELD_NUMBER: _ClassVar[int]
    deleted: bool
    def __init__(self, deleted: _Optional[bool] = ...) -> None: ...

class CloseAllSessionsRequest(_message.Message):
    __slots__ = ("tenant_id", "user_id")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    user_id: str
    def __init__(self, tenant_id: _Optional[str] = ..., user_id: _Optional[str] = ...) -> None: ...

class CloseAllSessionsResponse(_message.Message):
    __slots__ = ("closed_count",)
    CLOSED_COUNT_FIELD_NUMBER: _ClassVar[int]
    closed_count: int
    def __init__(self, closed_count: _Optional[int] = ...) -> None: ...

class AppendMessagesRequest(_message.Message):
    __slots__ = ("tenant_id", "session_id", "messages", "lease_token", "request_id")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    session_id: str
    messages: _containers.RepeatedCompositeFieldContainer[_messages_pb2.Message]
    lease_token: int
    request_id: str
    def __init__(self, tenant_id: _Optional[str] = ..., session_id: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[_messages_pb2.Message, _Mapping]]] = ..., lease_token: _Optional[int] = ..., request_id: _Optional[str] = ...) -> None: ...

class AppendMessagesResponse(_message.Message):
    __slots__ = ("message_count", "deduplicated")
    MESSAGE_COUNT_FIELD_NUMBER: _ClassVar[int]
    DEDUPLICATED_FIELD_NUMBER: _ClassVar[int]
    message_count: int
    deduplicated: bool
    def __init__(self, message_count: _Optional[int] = ..., deduplicated: _Optional[bool] = ...) -> None: ...

class ListMessagesRequest(_message.Message):
    __slots__ = ("tenant_id", "session_id", "page_size", "page_token", "last_n", "through_turn_id")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    LAST_N_FIELD_NUMBER: _ClassVar[int]
    THROUGH_TURN_ID_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    session_id: str
    page_size: int
    page_token: str
    last_n: int
    through_turn_id: str
    def __init__(self, tenant_id: _Optional[str] = ..., session_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., last_n: _Optional[int] = ..., through_turn_id: _Optional[str] = ...) -> None: ...

class ListMessagesResponse(_message.Message):
    __slots__ = ("messages", "next_page_token")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[_messages_pb2.Message]
    next_page_token: str
    def __init__(self, messages: _Optional[_Iterable[_Union[_messages_pb2.Message, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class AcquireTurnLeaseRequest(_message.Message):
    __slots__ = ("tenant_id", "session_id", "turn_id", "ttl_seconds", "strategy", "events", "entries", "start_messages", "resume")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    TTL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    STRATEGY_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    START_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    RESUME_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    session_id: str
    turn_id: str
    ttl_seconds: int
    strategy: MultitaskStrategy
    events: _containers.RepeatedCompositeFieldContainer[_events_pb2.RuntimeEvent]
    entries: _containers.RepeatedCompositeFieldContainer[JournalEntry]
    start_messages: int
    resume: LeaseResume
    def __init__(self, tenant_id: _Optional[str] = ..., session_id: _Optional[str] = ..., turn_id: _Optional[str] = ..., ttl_seconds: _Optional[int] = ..., strategy: _Optional[_Union[MultitaskStrategy, str]] = ..., events: _Optional[_Iterable[_Union[_events_pb2.RuntimeEvent, _Mapping]]] = ..., entries: _Optional[_Iterable[_Union[JournalEntry, _Mapping]]] = ..., start_messages: _Optional[int] = ..., resume: _Optional[_Union[LeaseResume, _Mapping]] = ...) -> None: ...

class LeaseResume(_message.Message):
    __slots__ = ("attempt_id",)
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    attempt_id: str
    def __init__(self, attempt_id: _Optional[str] = ...) -> None: ...

class AcquireTurnLeaseResponse(_message.Message):
    __slots__ = ("lease_token", "interrupted_turn_id", "expire_time", "waited_seconds", "pending_interrupt_ids", "start_seq", "last_seq", "start")
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    INTERRUPTED_TURN_ID_FIELD_NUMBER: _ClassVar[int]
    EXPIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    WAITED_SECONDS_FIELD_NUMBER: _ClassVar[int]
    PENDING_INTERRUPT_IDS_FIELD_NUMBER: _ClassVar[int]
    START_SEQ_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQ_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    lease_token: int
    interrupted_turn_id: str
    expire_time: _timestamp_pb2.Timestamp
    waited_seconds: float
    pending_interrupt_ids: _containers.RepeatedScalarFieldContainer[str]
    start_seq: int
    last_seq: int
    start: TurnStart
    def __init__(self, lease_token: _Optional[int] = ..., interrupted_turn_id: _Optional[str] = ..., expire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., waited_seconds: _Optional[float] = ..., pending_interrupt_ids: _Optional[_Iterable[str]] = ..., start_seq: _Optional[int] = ..., last_seq: _Optional[int] = ..., start: _Optional[_Union[TurnStart, _Mapping]] = ...) -> None: ...

class TurnStart(_message.Message):
    __slots__ = ("session", "state", "summary", "messages")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    session: _resources_pb2.Session
    state: SessionState
    summary: Summary
    messages: _containers.RepeatedCompositeFieldContainer[_messages_pb2.Message]
    def __init__(self, session: _Optional[_Union[_resources_pb2.Session, _Mapping]] = ..., state: _Optional[_Union[SessionState, _Mapping]] = ..., summary: _Optional[_Union[Summary, _Mapping]] = ..., messages: _Optional[_Iterable[_Union[_messages_pb2.Message, _Mapping]]] = ...) -> None: ...

class ReleaseTurnLeaseRequest(_message.Message):
    __slots__ = ("tenant_id", "session_id", "lease_token")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    session_id: str
    lease_token: int
    def __init__(self, tenant_id: _Optional[str] = ..., session_id: _Optional[str] = ..., lease_token: _Optional[int] = ...) -> None: ...

class ReleaseTurnLeaseResponse(_message.Message):
    __slots__ = ("released",)
    RELEASED_FIELD_NUMBER: _ClassVar[int]
    released: bool
    def __init__(self, released: _Optional[bool] = ...) -> None: ...

class RenewTurnLeaseRequest(_message.Message):
    __slots__ = ("tenant_id", "session_id", "lease_token", "ttl_seconds", "holder", "hand_over")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    TTL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    HAND_OVER_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    session_id: str
    lease_token: int
    ttl_seconds: int
    holder: str
    hand_over: bool
    def __init__(self, tenant_id: _Optional[str] = ..., session_id: _Optional[str] = ..., lease_token: _Optional[int] = ..., ttl_seconds: _Optional[int] = ..., holder: _Optional[str] = ..., hand_over: _Optional[bool] = ...) -> None: ...

class RenewTurnLeaseResponse(_message.Message):
    __slots__ = ("expire_time", "interrupt_requested_by")
    EXPIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    INTERRUPT_REQUESTED_BY_FIELD_NUMBER: _ClassVar[int]
    expire_time: _timestamp_pb2.Timestamp
    interrupt_requested_by: str
    def __init__(self, expire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., interrupt_requested_by: _Optional[str] = ...) -> None: ...

class GetTurnLeaseRequest(_message.Message):
    __slots__ = ("tenant_id", "session_id")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    session_id: str
    def __init__(self, tenant_id: _Optional[str] = ..., session_id: _Optional[str] = ...) -> None: ...

class TurnLease(_message.Message):
    __slots__ = ("turn_id", "lease_token", "expire_time", "interrupt_requested_by", "holder", "takeovers", "resume")
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    EXPIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    INTERRUPT_REQUESTED_BY_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    TAKEOVERS_FIELD_NUMBER: _ClassVar[int]
    RESUME_FIELD_NUMBER: _ClassVar[int]
    turn_id: str
    lease_token: int
    expire_time: _timestamp_pb2.Timestamp
    interrupt_requested_by: str
    holder: str
    takeovers: int
    resume: LeaseResume
    def __init__(self, turn_id: _Optional[str] = ..., lease_token: _Optional[int] = ..., expire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., interrupt_requested_by: _Optional[str] = ..., holder: _Optional[str] = ..., takeovers: _Optional[int] = ..., resume: _Optional[_Union[LeaseResume, _Mapping]] = ...) -> None: ...

class GetTurnLeaseResponse(_message.Message):
    __slots__ = ("lease", "queued_turn_ids")
    LEASE_FIELD_NUMBER: _ClassVar[int]
    QUEUED_TURN_IDS_FIELD_NUMBER: _ClassVar[int]
    lease: TurnLease
    queued_turn_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, lease: _Optional[_Union[TurnLease, _Mapping]] = ..., queued_turn_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class Summary(_message.Message):
    __slots__ = ("text", "covered_message_count", "update_time")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    COVERED_MESSAGE_COUNT_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    text: str
    covered_message_count: int
    update_time: _timestamp_pb2.Timestamp
    def __init__(self, text: _Optional[str] = ..., covered_message_count: _Optional[int] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class UpdateSummaryRequest(_message.Message):
    __slots__ = ("tenant_id", "session_id", "text", "covered_message_count", "lease_token")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    COVERED_MESSAGE_COUNT_FIELD_NUMBER: _ClassVar[int]
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    session_id: str
    text: str
    covered_message_count: int
    lease_token: int
    def __init__(self, tenant_id: _Optional[str] = ..., session_id: _Optional[str] = ..., text: _Optional[str] = ..., covered_message_count: _Optional[int] = ..., lease_token: _Optional[int] = ...) -> None: ...

class UpdateSummaryResponse(_message.Message):
    __slots__ = ("summary",)
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    summary: Summary
    def __init__(self, summary: _Optional[_Union[Summary, _Mapping]] = ...) -> None: ...

class Goal(_message.Message):
    __slots__ = ("goal_id", "text", "status", "data", "create_time", "update_time")
    GOAL_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    goal_id: str
    text: str
    status: GoalStatus
    data: _struct_pb2.Struct
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    def __init__(self, goal_id: _Optional[str] = ..., text: _Optional[str] = ..., status: _Optional[_Union[GoalStatus, str]] = ..., data: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class SaveGoalRequest(_message.Message):
    __slots__ = ("tenant_id", "session_id", "goal", "lease_token")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    GOAL_FIELD_NUMBER: _ClassVar[int]
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    session_id: str
    goal: Goal
    lease_token: int
    def __init__(self, tenant_id: _Optional[str] = ..., session_id: _Optional[str] = ..., goal: _Optional[_Union[Goal, _Mapping]] = ..., lease_token: _Optional[int] = ...) -> None: ...

class SaveGoalResponse(_message.Message):
    __slots__ = ("goal",)
    GOAL_FIELD_NUMBER: _ClassVar[int]
    goal: Goal
    def __init__(self, goal: _Optional[_Union[Goal, _Mapping]] = ...) -> None: ...

class ListGoalsRequest(_message.Message):
    __slots__ = ("tenant_id", "session_id")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    session_id: str
    def __init__(self, tenant_id: _Optional[str] = ..., session_id: _Optional[str] = ...) -> None: ...

class ListGoalsResponse(_message.Message):
    __slots__ = ("goals",)
    GOALS_FIELD_NUMBER: _ClassVar[int]
    goals: _containers.RepeatedCompositeFieldContainer[Goal]
    def __init__(self, goals: _Optional[_Iterable[_Union[Goal, _Mapping]]] = ...) -> None: ...

class PhaseState(_message.Message):
    __slots__ = ("phase", "data", "update_time")
    PHASE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    phase: str
    data: _struct_pb2.Struct
    update_time: _timestamp_pb2.Timestamp
    def __init__(self, phase: _Optional[str] = ..., data: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class SetPhaseRequest(_message.Message):
    __slots__ = ("tenant_id", "session_id", "phase", "lease_token")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    session_id: str
    phase: PhaseState
    lease_token: int
    def __init__(self, tenant_id: _Optional[str] = ..., session_id: _Optional[str] = ..., phase: _Optional[_Union[PhaseState, _Mapping]] = ..., lease_token: _Optional[int] = ...) -> None: ...

class SetPhaseResponse(_message.Message):
    __slots__ = ("phase",)
    PHASE_FIELD_NUMBER: _ClassVar[int]
    phase: PhaseState
    def __init__(self, phase: _Optional[_Union[PhaseState, _Mapping]] = ...) -> None: ...

class CheckpointDecision(_message.Message):
    __slots__ = ("approval", "edited_arguments", "text", "tool_result", "decided_by", "decide_time")
    APPROVAL_FIELD_NUMBER: _ClassVar[int]
    EDITED_ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TOOL_RESULT_FIELD_NUMBER: _ClassVar[int]
    DECIDED_BY_FIELD_NUMBER: _ClassVar[int]
    DECIDE_TIME_FIELD_NUMBER: _ClassVar[int]
    approval: _events_pb2.ApprovalDecision
    edited_arguments: _struct_pb2.Struct
    text: str
    tool_result: _messages_pb2.Message
    decided_by: str
    decide_time: _timestamp_pb2.Timestamp
    def __init__(self, approval: _Optional[_Union[_events_pb2.ApprovalDecision, str]] = ..., edited_arguments: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., text: _Optional[str] = ..., tool_result: _Optional[_Union[_messages_pb2.Message, _Mapping]] = ..., decided_by: _Optional[str] = ..., decide_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class Checkpoint(_message.Message):
    __slots__ = ("interrupt_id", "turn_id", "approval", "user_input", "client_tool", "payload", "decision", "create_time", "lease_token")
    INTERRUPT_ID_FIELD_NUMBER: _ClassVar[int]
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_FIELD_NUMBER: _ClassVar[int]
    USER_INPUT_FIELD_NUMBER: _ClassVar[int]
    CLIENT_TOOL_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    interrupt_id: str
    turn_id: str
    approval: _events_pb2.ApprovalRequired
    user_input: _events_pb2.UserInputRequested
    client_tool: _events_pb2.ClientToolCall
    payload: bytes
    decision: CheckpointDecision
    create_time: _timestamp_pb2.Timestamp
    lease_token: int
    def __init__(self, interrupt_id: _Optional[str] = ..., turn_id: _Optional[str] = ..., approval: _Optional[_Union[_events_pb2.ApprovalRequired, _Mapping]] = ..., user_input: _Optional[_Union[_events_pb2.UserInputRequested, _Mapping]] = ..., client_tool: _Optional[_Union[_events_pb2.ClientToolCall, _Mapping]] = ..., payload: _Optional[bytes] = ..., decision: _Optional[_Union[CheckpointDecision, _Mapping]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., lease_token: _Optional[int] = ...) -> None: ...

class WriteCheckpointRequest(_message.Message):
    __slots__ = ("tenant_id", "session_id", "checkpoint", "lease_token")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    session_id: str
    checkpoint: Checkpoint
    lease_token: int
    def __init__(self, tenant_id: _Optional[str] = ..., session_id: _Optional[str] = ..., checkpoint: _Optional[_Union[Checkpoint, _Mapping]] = ..., lease_token: _Optional[int] = ...) -> None: ...

class WriteCheckpointResponse(_message.Message):
    __slots__ = ("checkpoint",)
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    checkpoint: Checkpoint
    def __init__(self, checkpoint: _Optional[_Union[Checkpoint, _Mapping]] = ...) -> None: ...

class GetCheckpointRequest(_message.Message):
    __slots__ = ("tenant_id", "session_id", "interrupt_id")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    INTERRUPT_ID_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    session_id: str
    interrupt_id: str
    def __init__(self, tenant_id: _Optional[str] = ..., session_id: _Optional[str] = ..., interrupt_id: _Optional[str] = ...) -> None: ...

class GetCheckpointResponse(_message.Message):
    __slots__ = ("checkpoint",)
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    checkpoint: Checkpoint
    def __init__(self, checkpoint: _Optional[_Union[Checkpoint, _Mapping]] = ...) -> None: ...

class ListCheckpointsRequest(_message.Message):
    __slots__ = ("tenant_id", "session_id")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    session_id: str
    def __init__(self, tenant_id: _Optional[str] = ..., session_id: _Optional[str] = ...) -> None: ...

class ListCheckpointsResponse(_message.Message):
    __slots__ = ("checkpoints",)
    CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    checkpoints: _containers.RepeatedCompositeFieldContainer[Checkpoint]
    def __init__(self, checkpoints: _Optional[_Iterable[_Union[Checkpoint, _Mapping]]] = ...) -> None: ...

class DecideCheckpointRequest(_message.Message):
    __slots__ = ("tenant_id", "session_id", "interrupt_id", "decision")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    INTERRUPT_ID_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    session_id: str
    interrupt_id: str
    decision: CheckpointDecision
    def __init__(self, tenant_id: _Optional[str] = ..., session_id: _Optional[str] = ..., interrupt_id: _Optional[str] = ..., decision: _Optional[_Union[CheckpointDecision, _Mapping]] = ...) -> None: ...

class DecideCheckpointResponse(_message.Message):
    __slots__ = ("checkpoint",)
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    checkpoint: Checkpoint
    def __init__(self, checkpoint: _Optional[_Union[Checkpoint, _Mapping]] = ...) -> None: ...

class ConsumeCheckpointRequest(_message.Message):
    __slots__ = ("tenant_id", "session_id", "interrupt_id", "lease_token", "allow_undecided")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    INTERRUPT_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    ALLOW_UNDECIDED_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    session_id: str
    interrupt_id: str
    lease_token: int
    allow_undecided: bool
    def __init__(self, tenant_id: _Optional[str] = ..., session_id: _Optional[str] = ..., interrupt_id: _Optional[str] = ..., lease_token: _Optional[int] = ..., allow_undecided: _Optional[bool] = ...) -> None: ...

class ConsumeCheckpointResponse(_message.Message):
    __slots__ = ("checkpoint",)
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    checkpoint: Checkpoint
    def __init__(self, checkpoint: _Optional[_Union[Checkpoint, _Mapping]] = ...) -> None: ...

class GetRehydrationPayloadRequest(_message.Message):
    __slots__ = ("tenant_id", "session_id", "last_n")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_N_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    session_id: str
    last_n: int
    def __init__(self, tenant_id: _Optional[str] = ..., session_id: _Optional[str] = ..., last_n: _Optional[int] = ...) -> None: ...

class GetRehydrationPayloadResponse(_message.Message):
    __slots__ = ("session", "state", "summary", "last_messages", "goal", "phase")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    LAST_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    GOAL_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    session: _resources_pb2.Session
    state: SessionState
    summary: Summary
    last_messages: _containers.RepeatedCompositeFieldContainer[_messages_pb2.Message]
    goal: Goal
    phase: PhaseState
    def __init__(self, session: _Optional[_Union[_resources_pb2.Session, _Mapping]] = ..., state: _Optional[_Union[SessionState, _Mapping]] = ..., summary: _Optional[_Union[Summary, _Mapping]] = ..., last_messages: _Optional[_Iterable[_Union[_messages_pb2.Message, _Mapping]]] = ..., goal: _Optional[_Union[Goal, _Mapping]] = ..., phase: _Optional[_Union[PhaseState, _Mapping]] = ...) -> None: ...

class JournalEntry(_message.Message):
    __slots__ = ("kind", "entry_kind", "state", "seq", "record_time", "position")
    KIND_FIELD_NUMBER: _ClassVar[int]
    ENTRY_KIND_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    RECORD_TIME_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    kind: str
    entry_kind: JournalEntryKind
    state: bytes
    seq: int
    record_time: _timestamp_pb2.Timestamp
    position: int
    def __init__(self, kind: _Optional[str] = ..., entry_kind: _Optional[_Union[JournalEntryKind, str]] = ..., state: _Optional[bytes] = ..., seq: _Optional[int] = ..., record_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., position: _Optional[int] = ...) -> None: ...

class AppendEventsRequest(_message.Message):
    __slots__ = ("tenant_id", "session_id", "turn_id", "lease_token", "events", "entries", "append_id", "release_lease", "pause", "messages", "holder", "consume_interrupt_id")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    APPEND_ID_FIELD_NUMBER: _ClassVar[int]
    RELEASE_LEASE_FIELD_NUMBER: _ClassVar[int]
    PAUSE_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    CONSUME_INTERRUPT_ID_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    session_id: str
    turn_id: str
    lease_token: int
    events: _containers.RepeatedCompositeFieldContainer[_events_pb2.RuntimeEvent]
    entries: _containers.RepeatedCompositeFieldContainer[JournalEntry]
    append_id: str
    release_lease: bool
    pause: Checkpoint
    messages: _containers.RepeatedCompositeFieldContainer[_messages_pb2.Message]
    holder: str
    consume_interrupt_id: str
    def __init__(self, tenant_id: _Optional[str] = ..., session_id: _Optional[str] = ..., turn_id: _Optional[str] = ..., lease_token: _Optional[int] = ..., events: _Optional[_Iterable[_Union[_events_pb2.RuntimeEvent, _Mapping]]] = ..., entries: _Optional[_Iterable[_Union[JournalEntry, _Mapping]]] = ..., append_id: _Optional[str] = ..., release_lease: _Optional[bool] = ..., pause: _Optional[_Union[Checkpoint, _Mapping]] = ..., messages: _Optional[_Iterable[_Union[_messages_pb2.Message, _Mapping]]] = ..., holder: _Optional[str] = ..., consume_interrupt_id: _Optional[str] = ...) -> None: ...

class AppendEventsResponse(_message.Message):
    __slots__ = ("last_seq", "duplicate", "message_count")
    LAST_SEQ_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_COUNT_FIELD_NUMBER: _ClassVar[int]
    last_seq: int
    duplicate: bool
    message_count: int
    def __init__(self, last_seq: _Optional[int] = ..., duplicate: _Optional[bool] = ..., message_count: _Optional[int] = ...) -> None: ...

class ReadEventsRequest(_message.Message):
    __slots__ = ("tenant_id", "session_id", "after_seq", "follow", "heartbeat_ms")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQ_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_MS_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    session_id: str
    after_seq: int
    follow: bool
    heartbeat_ms: int
    def __init__(self, tenant_id: _Optional[str] = ..., session_id: _Optional[str] = ..., after_seq: _Optional[int] = ..., follow: _Optional[bool] = ..., heartbeat_ms: _Optional[int] = ...) -> None: ...

class ReadEventsResponse(_message.Message):
    __slots__ = ("events",)
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[_events_pb2.RuntimeEvent]
    def __init__(self, events: _Optional[_Iterable[_Union[_events_pb2.RuntimeEvent, _Mapping]]] = ...) -> None: ...

class GetEventLogStateRequest(_message.Message):
    __slots__ = ("tenant_id", "session_id")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    session_id: str
    def __init__(self, tenant_id: _Optional[str] = ..., session_id: _Optional[str] = ...) -> None: ...

class GetEventLogStateResponse(_message.Message):
    __slots__ = ("first_seq", "last_seq", "ends_with_turn_end")
    FIRST_SEQ_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQ_FIELD_NUMBER: _ClassVar[int]
    ENDS_WITH_TURN_END_FIELD_NUMBER: _ClassVar[int]
    first_seq: int
    last_seq: int
    ends_with_turn_end: bool
    def __init__(self, first_seq: _Optional[int] = ..., last_seq: _Optional[int] = ..., ends_with_turn_end: _Optional[bool] = ...) -> None: ...

class GetJournalRequest(_message.Message):
    __slots__ = ("tenant_id", "session_id", "turn_id")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    session_id: str
    turn_id: str
    def __init__(self, tenant_id: _Optional[str] = ..., session_id: _Optional[str] = ..., turn_id: _Optional[str] = ...) -> None: ...

class GetJournalResponse(_message.Message):
    __slots__ = ("entries",)
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[JournalEntry]
    def __init__(self, entries: _Optional[_Iterable[_Union[JournalEntry, _Mapping]]] = ...) -> None: ...

class RenewTurnLeasesRequest(_message.Message):
    __slots__ = ("leases",)
    LEASES_FIELD_NUMBER: _ClassVar[int]
    leases: _containers.RepeatedCompositeFieldContainer[RenewTurnLeaseRequest]
    def __init__(self, leases: _Optional[_Iterable[_Union[RenewTurnLeaseRequest, _Mapping]]] = ...) -> None: ...

class RenewedTurnLease(_message.Message):
    __slots__ = ("session_id", "lease_token", "held", "interrupt_requested_by", "expire_time")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    HELD_FIELD_NUMBER: _ClassVar[int]
    INTERRUPT_REQUESTED_BY_FIELD_NUMBER: _ClassVar[int]
    EXPIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    lease_token: int
    held: bool
    interrupt_requested_by: str
    expire_time: _timestamp_pb2.Timestamp
    def __init__(self, session_id: _Optional[str] = ..., lease_token: _Optional[int] = ..., held: _Optional[bool] = ..., interrupt_requested_by: _Optional[str] = ..., expire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class RenewTurnLeasesResponse(_message.Message):
    __slots__ = ("leases",)
    LEASES_FIELD_NUMBER: _ClassVar[int]
    leases: _containers.RepeatedCompositeFieldContainer[RenewedTurnLease]
    def __init__(self, leases: _Optional[_Iterable[_Union[RenewedTurnLease, _Mapping]]] = ...) -> None: ...

class ClaimOrphanedTurnsRequest(_message.Message):
    __slots__ = ("holder", "max_turns", "ttl_seconds", "wait_seconds")
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    MAX_TURNS_FIELD_NUMBER: _ClassVar[int]
    TTL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    WAIT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    holder: str
    max_turns: int
    ttl_seconds: int
    wait_seconds: int
    def __init__(self, holder: _Optional[str] = ..., max_turns: _Optional[int] = ..., ttl_seconds: _Optional[int] = ..., wait_seconds: _Optional[int] = ...) -> None: ...

class ClaimedTurn(_message.Message):
    __slots__ = ("tenant_id", "session_id", "turn_id", "lease_token", "takeovers", "last_seq", "previous_holder", "interrupt_requested_by", "resume")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    TAKEOVERS_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQ_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_HOLDER_FIELD_NUMBER: _ClassVar[int]
    INTERRUPT_REQUESTED_BY_FIELD_NUMBER: _ClassVar[int]
    RESUME_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    session_id: str
    turn_id: str
    lease_token: int
    takeovers: int
    last_seq: int
    previous_holder: str
    interrupt_requested_by: str
    resume: LeaseResume
    def __init__(self, tenant_id: _Optional[str] = ..., session_id: _Optional[str] = ..., turn_id: _Optional[str] = ..., lease_token: _Optional[int] = ..., takeovers: _Optional[int] = ..., last_seq: _Optional[int] = ..., previous_holder: _Optional[str] = ..., interrupt_requested_by: _Optional[str] = ..., resume: _Optional[_Union[LeaseResume, _Mapping]] = ...) -> None: ...

class ClaimOrphanedTurnsResponse(_message.Message):
    __slots__ = ("turns", "none_open")
    TURNS_FIELD_NUMBER: _ClassVar[int]
    NONE_OPEN_FIELD_NUMBER: _ClassVar[int]
    turns: _containers.RepeatedCompositeFieldContainer[ClaimedTurn]
    none_open: bool
    def __init__(self, turns: _Optional[_Iterable[_Union[ClaimedTurn, _Mapping]]] = ..., none_open: _Optional[bool] = ...) -> None: ...

class InterruptTurnRequest(_message.Message):
    __slots__ = ("tenant_id", "session_id", "turn_id", "requested_by")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_BY_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    session_id: str
    turn_id: str
    requested_by: str
    def __init__(self, tenant_id: _Optional[str] = ..., session_id: _Optional[str] = ..., turn_id: _Optional[str] = ..., requested_by: _Optional[str] = ...) -> None: ...

class InterruptTurnResponse(_message.Message):
    __slots__ = ("turn_id", "holder")
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    turn_id: str
    holder: str
    def __init__(self, turn_id: _Optional[str] = ..., holder: _Optional[str] = ...) -> None: ...

class AppendEventsStreamRequest(_message.Message):
    __slots__ = ("call_id", "append")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    APPEND_FIELD_NUMBER: _ClassVar[int]
    call_id: int
    append: AppendEventsRequest
    def __init__(self, call_id: _Optional[int] = ..., append: _Optional[_Union[AppendEventsRequest, _Mapping]] = ...) -> None: ...

class AppendEventsStreamResponse(_message.Message):
    __slots__ = ("call_id", "appended", "error")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    APPENDED_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    call_id: int
    appended: AppendEventsResponse
    error: bytes
    def __init__(self, call_id: _Optional[int] = ..., appended: _Optional[_Union[AppendEventsResponse, _Mapping]] = ..., error: _Optional[bytes] = ...) -> None: ...

class WatchEventsRequest(_message.Message):
    __slots__ = ("add", "remove", "heartbeat_ms")
    ADD_FIELD_NUMBER: _ClassVar[int]
    REMOVE_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_MS_FIELD_NUMBER: _ClassVar[int]
    add: WatchedSession
    remove: WatchedSession
    heartbeat_ms: int
    def __init__(self, add: _Optional[_Union[WatchedSession, _Mapping]] = ..., remove: _Optional[_Union[WatchedSession, _Mapping]] = ..., heartbeat_ms: _Optional[int] = ...) -> None: ...

class WatchedSession(_message.Message):
    __slots__ = ("tenant_id", "session_id", "after_seq")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQ_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    session_id: str
    after_seq: int
    def __init__(self, tenant_id: _Optional[str] = ..., session_id: _Optional[str] = ..., after_seq: _Optional[int] = ...) -> None: ...

class WatchEventsResponse(_message.Message):
    __slots__ = ("events", "tenant_id", "session_id", "error")
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[_events_pb2.RuntimeEvent]
    tenant_id: str
    session_id: str
    error: bytes
    def __init__(self, events: _Optional[_Iterable[_Union[_events_pb2.RuntimeEvent, _Mapping]]] = ..., tenant_id: _Optional[str] = ..., session_id: _Optional[str] = ..., error: _Optional[bytes] = ...) -> None: ...

class AnswerPauseRequest(_message.Message):
    __slots__ = ("tenant_id", "session_id", "interrupt_id", "decision", "abandon", "resume", "ttl_seconds")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    INTERRUPT_ID_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    ABANDON_FIELD_NUMBER: _ClassVar[int]
    RESUME_FIELD_NUMBER: _ClassVar[int]
    TTL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    session_id: str
    interrupt_id: str
    decision: CheckpointDecision
    abandon: bool
    resume: LeaseResume
    ttl_seconds: int
    def __init__(self, tenant_id: _Optional[str] = ..., session_id: _Optional[str] = ..., interrupt_id: _Optional[str] = ..., decision: _Optional[_Union[CheckpointDecision, _Mapping]] = ..., abandon: _Optional[bool] = ..., resume: _Optional[_Union[LeaseResume, _Mapping]] = ..., ttl_seconds: _Optional[int] = ...) -> None: ...

class AnswerPauseResponse(_message.Message):
    __slots__ = ("checkpoint", "lease_token", "start_seq", "entries")
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    START_SEQ_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    checkpoint: Checkpoint
    lease_token: int
    start_seq: int
    entries: _containers.RepeatedCompositeFieldContainer[JournalEntry]
    def __init__(self, checkpoint: _Optional[_Union[Checkpoint, _Mapping]] = ..., lease_token: _Optional[int] = ..., start_seq: _Optional[int] = ..., entries: _Optional[_Iterable[_Union[JournalEntry, _Mapping]]] = ...) -> None: ...

class StoredEvents(_message.Message):
    __slots__ = ("events",)
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[_events_pb2.RuntimeEvent]
    def __init__(self, events: _Optional[_Iterable[_Union[_events_pb2.RuntimeEvent, _Mapping]]] = ...) -> None: ...

class ListTurnsRequest(_message.Message):
    __slots__ = ("tenant_id", "session_id", "page_size", "page_token", "include_steps")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_STEPS_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    session_id: str
    page_size: int
    page_token: str
    include_steps: bool
    def __init__(self, tenant_id: _Optional[str] = ..., session_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., include_steps: _Optional[bool] = ...) -> None: ...

class ListTurnsResponse(_message.Message):
    __slots__ = ("turns", "next_page_token")
    TURNS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    turns: _containers.RepeatedCompositeFieldContainer[_turns_pb2.TurnRecord]
    next_page_token: str
    def __init__(self, turns: _Optional[_Iterable[_Union[_turns_pb2.TurnRecord, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ForkSessionRequest(_message.Message):
    __slots__ = ("tenant_id", "session_id", "turn_id", "before_turn", "agent", "labels", "user_id", "topic_id", "requested_by", "agent_version")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    BEFORE_TURN_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_BY_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    session_id: str
    turn_id: str
    before_turn: bool
    agent: str
    labels: _containers.ScalarMap[str, str]
    user_id: str
    topic_id: str
    requested_by: str
    agent_version: int
    def __init__(self, tenant_id: _Optional[str] = ..., session_id: _Optional[str] = ..., turn_id: _Optional[str] = ..., before_turn: _Optional[bool] = ..., agent: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., user_id: _Optional[str] = ..., topic_id: _Optional[str] = ..., requested_by: _Optional[str] = ..., agent_version: _Optional[int] = ...) -> None: ...

class ForkSessionResponse(_message.Message):
    __slots__ = ("session", "message_count")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_COUNT_FIELD_NUMBER: _ClassVar[int]
    session: _resources_pb2.Session
    message_count: int
    def __init__(self, session: _Optional[_Union[_resources_pb2.Session, _Mapping]] = ..., message_count: _Optional[int] = ...) -> None: ...

class RewindSessionRequest(_message.Message):
    __slots__ = ("tenant_id", "session_id", "turn_id", "requested_by")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_BY_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    session_id: str
    turn_id: str
    requested_by: str
    def __init__(self, tenant_id: _Optional[str] = ..., session_id: _Optional[str] = ..., turn_id: _Optional[str] = ..., requested_by: _Optional[str] = ...) -> None: ...

class RewindSessionResponse(_message.Message):
    __slots__ = ("session", "event")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    session: _resources_pb2.Session
    event: _events_pb2.RuntimeEvent
    def __init__(self, session: _Optional[_Union[_resources_pb2.Session, _Mapping]] = ..., event: _Optional[_Union[_events_pb2.RuntimeEvent, _Mapping]] = ...) -> None: ...
