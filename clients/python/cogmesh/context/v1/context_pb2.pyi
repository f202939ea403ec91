from buf.validate import validate_pb2 as _validate_pb2
from cogmesh.common.v1 import events_pb2 as _events_pb2
from cogmesh.common.v1 import messages_pb2 as _messages_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PackAction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PACK_ACTION_UNSPECIFIED: _ClassVar[PackAction]
    PACK_ACTION_KEPT: _ClassVar[PackAction]
    PACK_ACTION_TRUNCATED: _ClassVar[PackAction]
    PACK_ACTION_DROPPED: _ClassVar[PackAction]
PACK_ACTION_UNSPECIFIED: PackAction
PACK_ACTION_KEPT: PackAction
PACK_ACTION_TRUNCATED: PackAction
PACK_ACTION_DROPPED: PackAction

class ContextBudget(_message.Message):
    __slots__ = ("total_tokens", "guardrails_reserved", "goal_max", "tools_max", "messages_max", "memory_max", "profile_max", "summary_max", "recalled_memories_max")
    TOTAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    GUARDRAILS_RESERVED_FIELD_NUMBER: _ClassVar[int]
    GOAL_MAX_FIELD_NUMBER: _ClassVar[int]
    TOOLS_MAX_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_MAX_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MAX_FIELD_NUMBER: _ClassVar[int]
    PROFILE_MAX_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_MAX_FIELD_NUMBER: _ClassVar[int]
    RECALLED_MEMORIES_MAX_FIELD_NUMBER: _ClassVar[int]
    total_tokens: int
    guardrails_reserved: int
    goal_max: int
    tools_max: int
    messages_max: int
    memory_max: int
    profile_max: int
    summary_max: int
    recalled_memories_max: int
    def __init__(self, total_tokens: _Optional[int] = ..., guardrails_reserved: _Optional[int] = ..., goal_max: _Optional[int] = ..., tools_max: _Optional[int] = ..., messages_max: _Optional[int] = ..., memory_max: _Optional[int] = ..., profile_max: _Optional[int] = ..., summary_max: _Optional[int] = ..., recalled_memories_max: _Optional[int] = ...) -> None: ...

class RecalledMemory(_message.Message):
    __slots__ = ("key", "text")
    KEY_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    key: str
    text: str
    def __init__(self, key: _Optional[str] = ..., text: _Optional[str] = ...) -> None: ...

class BuildContextRequest(_message.Message):
    __slots__ = ("agent", "role_id", "user_text", "goal", "phase", "skill_instructions", "last_messages", "summary", "budget", "memory", "user_profile", "tenant_id", "session_id", "rehydrate", "rehydrate_last_n", "rehydrate_without_messages", "recalled_memories", "agent_definition_json")
    class MemoryEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class UserProfileEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    AGENT_FIELD_NUMBER: _ClassVar[int]
    ROLE_ID_FIELD_NUMBER: _ClassVar[int]
    USER_TEXT_FIELD_NUMBER: _ClassVar[int]
    GOAL_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    SKILL_INSTRUCTIONS_FIELD_NUMBER: _ClassVar[int]
    LAST_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    USER_PROFILE_FIELD_NUMBER: _ClassVar[int]
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    REHYDRATE_FIELD_NUMBER: _ClassVar[int]
    REHYDRATE_LAST_N_FIELD_NUMBER: _ClassVar[int]
    REHYDRATE_WITHOUT_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    RECALLED_MEMORIES_FIELD_NUMBER: _ClassVar[int]
    AGENT_DEFINITION_JSON_FIELD_NUMBER: _ClassVar[int]
    agent: str
    role_id: str
    user_text: str
    goal: str
    phase: str
    skill_instructions: _containers.RepeatedScalarFieldContainer[str]
    last_messages: _containers.RepeatedCompositeFieldContainer[_messages_pb2.Message]
    summary: str
    budget: ContextBudget
    memory: _containers.ScalarMap[str, str]
    user_profile: _containers.ScalarMap[str, str]
    tenant_id: str
    session_id: str
    rehydrate: bool
    rehydrate_last_n: int
    rehydrate_without_messages: bool
    recalled_memories: _containers.RepeatedCompositeFieldContainer[RecalledMemory]
    agent_definition_json: str
    def __init__(self, agent: _Optional[str] = ..., role_id: _Optional[str] = ..., user_text: _Optional[str] = ..., goal: _Optional[str] = ..., phase: _Optional[str] = ..., skill_instructions: _Optional[_Iterable[str]] = ..., last_messages: _Optional[_Iterable[_Union[_messages_pb2.Message, _Mapping]]] = ..., summary: _Optional[str] = ..., budget: _Optional[_Union[ContextBudget, _Mapping]] = ..., memory: _Optional[_Mapping[str, str]] = ..., user_profile: _Optional[_Mapping[str, str]] = ..., tenant_id: _Optional[str] = ..., session_id: _Optional[str] = ..., rehydrate: _Optional[bool] = ..., rehydrate_last_n: _Optional[int] = ..., rehydrate_without_messages: _Optional[bool] = ..., recalled_memories: _Optional[_Iterable[_Union[RecalledMemory, _Mapping]]] = ..., agent_definition_json: _Optional[str] = ...) -> None: ...

class PackReport(_message.Message):
    __slots__ = ("name", "priority", "tokens", "action")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    name: str
    priority: str
    tokens: int
    action: PackAction
    def __init__(self, name: _Optional[str] = ..., priority: _Optional[str] = ..., tokens: _Optional[int] = ..., action: _Optional[_Union[PackAction, str]] = ...) -> None: ...

class BuildContextResponse(_message.Message):
    __slots__ = ("system_prompt", "prompt_hash", "packs", "truncated_packs", "tokens_used", "tool_budget_tokens", "rehydration")
    SYSTEM_PROMPT_FIELD_NUMBER: _ClassVar[int]
    PROMPT_HASH_FIELD_NUMBER: _ClassVar[int]
    PACKS_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_PACKS_FIELD_NUMBER: _ClassVar[int]
    TOKENS_USED_FIELD_NUMBER: _ClassVar[int]
    TOOL_BUDGET_TOKENS_FIELD_NUMBER: _ClassVar[int]
    REHYDRATION_FIELD_NUMBER: _ClassVar[int]
    system_prompt: str
    prompt_hash: str
    packs: _containers.RepeatedCompositeFieldContainer[PackReport]
    truncated_packs: _containers.RepeatedScalarFieldContainer[str]
    tokens_used: int
    tool_budget_tokens: int
    rehydration: Rehydration
    def __init__(self, system_prompt: _Optional[str] = ..., prompt_hash: _Optional[str] = ..., packs: _Optional[_Iterable[_Union[PackReport, _Mapping]]] = ..., truncated_packs: _Optional[_Iterable[str]] = ..., tokens_used: _Optional[int] = ..., tool_budget_tokens: _Optional[int] = ..., rehydration: _Optional[_Union[Rehydration, _Mapping]] = ...) -> None: ...

class Rehydration(_message.Message):
    __slots__ = ("role_id", "active_skill_ids", "previous_prompt_hash", "summary_loaded", "messages_loaded", "goal_loaded", "phase_loaded", "unavailable")
    ROLE_ID_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_SKILL_IDS_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_PROMPT_HASH_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_LOADED_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_LOADED_FIELD_NUMBER: _ClassVar[int]
    GOAL_LOADED_FIELD_NUMBER: _ClassVar[int]
    PHASE_LOADED_FIELD_NUMBER: _ClassVar[int]
    UNAVAILABLE_FIELD_NUMBER: _ClassVar[int]
    role_id: str
    active_skill_ids: _containers.RepeatedScalarFieldContainer[str]
    previous_prompt_hash: str
    summary_loaded: bool
    messages_loaded: int
    goal_loaded: bool
    phase_loaded: bool
    unavailable: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, role_id: _Optional[str] = ..., active_skill_ids: _Optional[_Iterable[str]] = ..., previous_prompt_hash: _Optional[str] = ..., summary_loaded: _Optional[bool] = ..., messages_loaded: _Optional[int] = ..., goal_loaded: _Optional[bool] = ..., phase_loaded: _Optional[bool] = ..., unavailable: _Optional[_Iterable[str]] = ...) -> None: ...

class CompactionLimits(_message.Message):
    __slots__ = ("max_tokens", "context_token_limit", "summary_token_limit", "chunk_tokens")
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_TOKEN_LIMIT_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_TOKEN_LIMIT_FIELD_NUMBER: _ClassVar[int]
    CHUNK_TOKENS_FIELD_NUMBER: _ClassVar[int]
    max_tokens: int
    context_token_limit: int
    summary_token_limit: int
    chunk_tokens: int
    def __init__(self, max_tokens: _Optional[int] = ..., context_token_limit: _Optional[int] = ..., summary_token_limit: _Optional[int] = ..., chunk_tokens: _Optional[int] = ...) -> None: ...

class CompactHistoryRequest(_message.Message):
    __slots__ = ("tenant_id", "session_id", "agent", "model", "messages", "summary", "limits", "force", "store_summary", "covered_message_count", "lease_token")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    STORE_SUMMARY_FIELD_NUMBER: _ClassVar[int]
    COVERED_MESSAGE_COUNT_FIELD_NUMBER: _ClassVar[int]
    LEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    session_id: str
    agent: str
    model: str
    messages: _containers.RepeatedCompositeFieldContainer[_messages_pb2.Message]
    summary: str
    limits: CompactionLimits
    force: bool
    store_summary: bool
    covered_message_count: int
    lease_token: int
    def __init__(self, tenant_id: _Optional[str] = ..., session_id: _Optional[str] = ..., agent: _Optional[str] = ..., model: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[_messages_pb2.Message, _Mapping]]] = ..., summary: _Optional[str] = ..., limits: _Optional[_Union[CompactionLimits, _Mapping]] = ..., force: _Optional[bool] = ..., store_summary: _Optional[bool] = ..., covered_message_count: _Optional[int] = ..., lease_token: _Optional[int] = ...) -> None: ...

class ArchivedToolResult(_message.Message):
    __slots__ = ("execution_id", "tool_name", "tool_call_id", "tokens", "marker")
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    MARKER_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    tool_name: str
    tool_call_id: str
    tokens: int
    marker: str
    def __init__(self, execution_id: _Optional[str] = ..., tool_name: _Optional[str] = ..., tool_call_id: _Optional[str] = ..., tokens: _Optional[int] = ..., marker: _Optional[str] = ...) -> None: ...

class CompactHistoryResponse(_message.Message):
    __slots__ = ("compacted", "summary", "messages", "archived", "summarized_messages", "tokens_before", "tokens_after", "chunks", "summarizer", "event", "summary_stored", "summary_tokens", "covered_message_count")
    COMPACTED_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    ARCHIVED_FIELD_NUMBER: _ClassVar[int]
    SUMMARIZED_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    TOKENS_BEFORE_FIELD_NUMBER: _ClassVar[int]
    TOKENS_AFTER_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    SUMMARIZER_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_STORED_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COVERED_MESSAGE_COUNT_FIELD_NUMBER: _ClassVar[int]
    compacted: bool
    summary: str
    messages: _containers.RepeatedCompositeFieldContainer[_messages_pb2.Message]
    archived: _containers.RepeatedCompositeFieldContainer[ArchivedToolResult]
    summarized_messages: int
    tokens_before: int
    tokens_after: int
    chunks: int
    summarizer: str
    event: _events_pb2.ContextCompacted
    summary_stored: bool
    summary_tokens: int
    covered_message_count: int
    def __init__(self, compacted: _Optional[bool] = ..., summary: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[_messages_pb2.Message, _Mapping]]] = ..., archived: _Optional[_Iterable[_Union[ArchivedToolResult, _Mapping]]] = ..., summarized_messages: _Optional[int] = ..., tokens_before: _Optional[int] = ..., tokens_after: _Optional[int] = ..., chunks: _Optional[int] = ..., summarizer: _Optional[str] = ..., event: _Optional[_Union[_events_pb2.ContextCompacted, _Mapping]] = ..., summary_stored: _Optional[bool] = ..., summary_tokens: _Optional[int] = ..., covered_message_count: _Optional[int] = ...) -> None: ...

class GetToolResponseRequest(_message.Message):
    __slots__ = ("tenant_id", "session_id", "execution_id", "offset", "max_chars")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_CHARS_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    session_id: str
    execution_id: str
    offset: int
    max_chars: int
    def __init__(self, tenant_id: _Optional[str] = ..., session_id: _Optional[str] = ..., execution_id: _Optional[str] = ..., offset: _Optional[int] = ..., max_chars: _Optional[int] = ...) -> None: ...

class GetToolResponseResponse(_message.Message):
    __slots__ = ("execution_id", "tool_name", "tool_call_id", "content", "total_chars", "next_offset")
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    TOTAL_CHARS_FIELD_NUMBER: _ClassVar[int]
    NEXT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    tool_name: str
    tool_call_id: str
    content: str
    total_chars: int
    next_offset: int
    def __init__(self, execution_id: _Optional[str] = ..., tool_name: _Optional[str] = ..., tool_call_id: _Optional[str] = ..., content: _Optional[str] = ..., total_chars: _Optional[int] = ..., next_offset: _Optional[int] = ...) -> None: ...

class ArchiveToolResultRequest(_message.Message):
    __slots__ = ("tenant_id", "session_id", "tool_name", "tool_call_id", "content")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    session_id: str
    tool_name: str
    tool_call_id: str
    content: str
    def __init__(self, tenant_id: _Optional[str] = ..., session_id: _Optional[str] = ..., tool_name: _Optional[str] = ..., tool_call_id: _Optional[str] = ..., content: _Optional[str] = ...) -> None: ...

class ArchiveToolResultResponse(_message.Message):
    __slots__ = ("execution_id",)
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    execution_id: str
    def __init__(self, execution_id: _Optional[str] = ...) -> None: ...
