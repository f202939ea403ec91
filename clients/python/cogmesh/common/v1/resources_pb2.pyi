import datetime

from cogmesh.common.v1 import turns_pb2 as _turns_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SessionStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SESSION_STATUS_UNSPECIFIED: _ClassVar[SessionStatus]
    SESSION_STATUS_IDLE: _ClassVar[SessionStatus]
    SESSION_STATUS_RUNNING: _ClassVar[SessionStatus]
    SESSION_STATUS_PAUSED: _ClassVar[SessionStatus]
    SESSION_STATUS_FAILED: _ClassVar[SessionStatus]

class AgentMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    AGENT_MODE_UNSPECIFIED: _ClassVar[AgentMode]
    AGENT_MODE_PRIMARY: _ClassVar[AgentMode]
    AGENT_MODE_SUBAGENT: _ClassVar[AgentMode]
    AGENT_MODE_ALL: _ClassVar[AgentMode]
SESSION_STATUS_UNSPECIFIED: SessionStatus
SESSION_STATUS_IDLE: SessionStatus
SESSION_STATUS_RUNNING: SessionStatus
SESSION_STATUS_PAUSED: SessionStatus
SESSION_STATUS_FAILED: SessionStatus
AGENT_MODE_UNSPECIFIED: AgentMode
AGENT_MODE_PRIMARY: AgentMode
AGENT_MODE_SUBAGENT: AgentMode
AGENT_MODE_ALL: AgentMode

class Session(_message.Message):
    __slots__ = ("session_id", "tenant_id", "user_id", "topic_id", "agent", "role_id", "active_skill_ids", "prompt_hash", "create_time", "update_time", "message_count", "active_turn_id", "scope", "active_agent", "delegated_turn_count", "labels", "status", "forked_from", "agent_version")
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
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    ROLE_ID_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_SKILL_IDS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_HASH_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_COUNT_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_TURN_ID_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_AGENT_FIELD_NUMBER: _ClassVar[int]
    DELEGATED_TURN_COUNT_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    FORKED_FROM_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    tenant_id: str
    user_id: str
    topic_id: str
    agent: str
    role_id: str
    active_skill_ids: _containers.RepeatedScalarFieldContainer[str]
    prompt_hash: str
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    message_count: int
    active_turn_id: str
    scope: _containers.ScalarMap[str, str]
    active_agent: str
    delegated_turn_count: int
    labels: _containers.ScalarMap[str, str]
    status: SessionStatus
    forked_from: _turns_pb2.SessionOrigin
    agent_version: int
    def __init__(self, session_id: _Optional[str] = ..., tenant_id: _Optional[str] = ..., user_id: _Optional[str] = ..., topic_id: _Optional[str] = ..., agent: _Optional[str] = ..., role_id: _Optional[str] = ..., active_skill_ids: _Optional[_Iterable[str]] = ..., prompt_hash: _Optional[str] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., message_count: _Optional[int] = ..., active_turn_id: _Optional[str] = ..., scope: _Optional[_Mapping[str, str]] = ..., active_agent: _Optional[str] = ..., delegated_turn_count: _Optional[int] = ..., labels: _Optional[_Mapping[str, str]] = ..., status: _Optional[_Union[SessionStatus, str]] = ..., forked_from: _Optional[_Union[_turns_pb2.SessionOrigin, _Mapping]] = ..., agent_version: _Optional[int] = ...) -> None: ...

class Agent(_message.Message):
    __slots__ = ("name", "description", "model", "tools", "skills", "mode", "a2a_exposed", "mcp_exposed", "output_schema", "version")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    SKILLS_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    A2A_EXPOSED_FIELD_NUMBER: _ClassVar[int]
    MCP_EXPOSED_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    model: str
    tools: _containers.RepeatedScalarFieldContainer[str]
    skills: _containers.RepeatedScalarFieldContainer[str]
    mode: AgentMode
    a2a_exposed: bool
    mcp_exposed: bool
    output_schema: _struct_pb2.Struct
    version: int
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., model: _Optional[str] = ..., tools: _Optional[_Iterable[str]] = ..., skills: _Optional[_Iterable[str]] = ..., mode: _Optional[_Union[AgentMode, str]] = ..., a2a_exposed: _Optional[bool] = ..., mcp_exposed: _Optional[bool] = ..., output_schema: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., version: _Optional[int] = ...) -> None: ...

class ModelCapabilities(_message.Message):
    __slots__ = ("tools", "streaming", "vision", "structured_output")
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    STREAMING_FIELD_NUMBER: _ClassVar[int]
    VISION_FIELD_NUMBER: _ClassVar[int]
    STRUCTURED_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    tools: bool
    streaming: bool
    vision: bool
    structured_output: bool
    def __init__(self, tools: _Optional[bool] = ..., streaming: _Optional[bool] = ..., vision: _Optional[bool] = ..., structured_output: _Optional[bool] = ...) -> None: ...

class ModelPricing(_message.Message):
    __slots__ = ("input_per_million_usd", "output_per_million_usd")
    INPUT_PER_MILLION_USD_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_PER_MILLION_USD_FIELD_NUMBER: _ClassVar[int]
    input_per_million_usd: float
    output_per_million_usd: float
    def __init__(self, input_per_million_usd: _Optional[float] = ..., output_per_million_usd: _Optional[float] = ...) -> None: ...

class Model(_message.Message):
    __slots__ = ("id", "provider", "aliases", "description", "context_window", "max_output_tokens", "capabilities", "pricing")
    ID_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    ALIASES_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_WINDOW_FIELD_NUMBER: _ClassVar[int]
    MAX_OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    PRICING_FIELD_NUMBER: _ClassVar[int]
    id: str
    provider: str
    aliases: _containers.RepeatedScalarFieldContainer[str]
    description: str
    context_window: int
    max_output_tokens: int
    capabilities: ModelCapabilities
    pricing: ModelPricing
    def __init__(self, id: _Optional[str] = ..., provider: _Optional[str] = ..., aliases: _Optional[_Iterable[str]] = ..., description: _Optional[str] = ..., context_window: _Optional[int] = ..., max_output_tokens: _Optional[int] = ..., capabilities: _Optional[_Union[ModelCapabilities, _Mapping]] = ..., pricing: _Optional[_Union[ModelPricing, _Mapping]] = ...) -> None: ...
