from buf.validate import validate_pb2 as _validate_pb2
from cogmesh.common.v1 import events_pb2 as _events_pb2
from cogmesh.common.v1 import messages_pb2 as _messages_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Verdict(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    VERDICT_UNSPECIFIED: _ClassVar[Verdict]
    VERDICT_ALLOW: _ClassVar[Verdict]
    VERDICT_DENY: _ClassVar[Verdict]

class Phase(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PHASE_UNSPECIFIED: _ClassVar[Phase]
    PHASE_PRE_RUN: _ClassVar[Phase]
    PHASE_PRE_THINK: _ClassVar[Phase]
    PHASE_POST_THINK: _ClassVar[Phase]
    PHASE_PRE_ACT: _ClassVar[Phase]
    PHASE_POST_ACT: _ClassVar[Phase]
    PHASE_POST_RUN: _ClassVar[Phase]
    PHASE_ON_ERROR: _ClassVar[Phase]

class InterceptAction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    INTERCEPT_ACTION_UNSPECIFIED: _ClassVar[InterceptAction]
    INTERCEPT_ACTION_OK: _ClassVar[InterceptAction]
    INTERCEPT_ACTION_STOP: _ClassVar[InterceptAction]
    INTERCEPT_ACTION_SKIP: _ClassVar[InterceptAction]
    INTERCEPT_ACTION_MODIFY_MESSAGES: _ClassVar[InterceptAction]
    INTERCEPT_ACTION_MODIFY_ARGS: _ClassVar[InterceptAction]
    INTERCEPT_ACTION_MODIFY_TOOLS: _ClassVar[InterceptAction]
    INTERCEPT_ACTION_USE_MODEL: _ClassVar[InterceptAction]
    INTERCEPT_ACTION_MODIFY_PROMPT: _ClassVar[InterceptAction]
    INTERCEPT_ACTION_MODIFY_TOOL_RESULT: _ClassVar[InterceptAction]
    INTERCEPT_ACTION_REQUIRE_APPROVAL: _ClassVar[InterceptAction]
VERDICT_UNSPECIFIED: Verdict
VERDICT_ALLOW: Verdict
VERDICT_DENY: Verdict
PHASE_UNSPECIFIED: Phase
PHASE_PRE_RUN: Phase
PHASE_PRE_THINK: Phase
PHASE_POST_THINK: Phase
PHASE_PRE_ACT: Phase
PHASE_POST_ACT: Phase
PHASE_POST_RUN: Phase
PHASE_ON_ERROR: Phase
INTERCEPT_ACTION_UNSPECIFIED: InterceptAction
INTERCEPT_ACTION_OK: InterceptAction
INTERCEPT_ACTION_STOP: InterceptAction
INTERCEPT_ACTION_SKIP: InterceptAction
INTERCEPT_ACTION_MODIFY_MESSAGES: InterceptAction
INTERCEPT_ACTION_MODIFY_ARGS: InterceptAction
INTERCEPT_ACTION_MODIFY_TOOLS: InterceptAction
INTERCEPT_ACTION_USE_MODEL: InterceptAction
INTERCEPT_ACTION_MODIFY_PROMPT: InterceptAction
INTERCEPT_ACTION_MODIFY_TOOL_RESULT: InterceptAction
INTERCEPT_ACTION_REQUIRE_APPROVAL: InterceptAction

class CheckToolCallRequest(_message.Message):
    __slots__ = ("tenant_id", "agent", "role_id", "active_skill_ids", "tool_name", "arguments", "session_id", "turn_id", "context", "tool_call_id", "session_scope", "agent_definition_json")
    class SessionScopeEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    ROLE_ID_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_SKILL_IDS_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_SCOPE_FIELD_NUMBER: _ClassVar[int]
    AGENT_DEFINITION_JSON_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    agent: str
    role_id: str
    active_skill_ids: _containers.RepeatedScalarFieldContainer[str]
    tool_name: str
    arguments: _struct_pb2.Struct
    session_id: str
    turn_id: str
    context: TurnContext
    tool_call_id: str
    session_scope: _containers.ScalarMap[str, str]
    agent_definition_json: str
    def __init__(self, tenant_id: _Optional[str] = ..., agent: _Optional[str] = ..., role_id: _Optional[str] = ..., active_skill_ids: _Optional[_Iterable[str]] = ..., tool_name: _Optional[str] = ..., arguments: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., session_id: _Optional[str] = ..., turn_id: _Optional[str] = ..., context: _Optional[_Union[TurnContext, _Mapping]] = ..., tool_call_id: _Optional[str] = ..., session_scope: _Optional[_Mapping[str, str]] = ..., agent_definition_json: _Optional[str] = ...) -> None: ...

class CheckToolCallResponse(_message.Message):
    __slots__ = ("verdict", "reason", "rule", "updated_arguments", "source", "pre_act", "events", "timeout_ms")
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RULE_FIELD_NUMBER: _ClassVar[int]
    UPDATED_ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    PRE_ACT_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    verdict: Verdict
    reason: str
    rule: str
    updated_arguments: _struct_pb2.Struct
    source: str
    pre_act: InterceptOutcome
    events: _containers.RepeatedCompositeFieldContainer[_events_pb2.RuntimeEvent]
    timeout_ms: int
    def __init__(self, verdict: _Optional[_Union[Verdict, str]] = ..., reason: _Optional[str] = ..., rule: _Optional[str] = ..., updated_arguments: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., source: _Optional[str] = ..., pre_act: _Optional[_Union[InterceptOutcome, _Mapping]] = ..., events: _Optional[_Iterable[_Union[_events_pb2.RuntimeEvent, _Mapping]]] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class CheckToolCallsRequest(_message.Message):
    __slots__ = ("calls",)
    CALLS_FIELD_NUMBER: _ClassVar[int]
    calls: _containers.RepeatedCompositeFieldContainer[CheckToolCallRequest]
    def __init__(self, calls: _Optional[_Iterable[_Union[CheckToolCallRequest, _Mapping]]] = ...) -> None: ...

class CheckToolCallsResponse(_message.Message):
    __slots__ = ("decisions", "state")
    DECISIONS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    decisions: _containers.RepeatedCompositeFieldContainer[CheckToolCallResponse]
    state: _struct_pb2.Struct
    def __init__(self, decisions: _Optional[_Iterable[_Union[CheckToolCallResponse, _Mapping]]] = ..., state: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class TurnContext(_message.Message):
    __slots__ = ("task", "messages", "message_count", "system_prompt", "tools", "model", "model_calls", "tool_calls", "mcp_calls", "run_context", "state", "is_subagent")
    TASK_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_COUNT_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_PROMPT_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    MODEL_CALLS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    MCP_CALLS_FIELD_NUMBER: _ClassVar[int]
    RUN_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    IS_SUBAGENT_FIELD_NUMBER: _ClassVar[int]
    task: str
    messages: _containers.RepeatedCompositeFieldContainer[_messages_pb2.Message]
    message_count: int
    system_prompt: str
    tools: _containers.RepeatedCompositeFieldContainer[_messages_pb2.ToolSpec]
    model: str
    model_calls: int
    tool_calls: int
    mcp_calls: int
    run_context: _struct_pb2.Struct
    state: _struct_pb2.Struct
    is_subagent: bool
    def __init__(self, task: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[_messages_pb2.Message, _Mapping]]] = ..., message_count: _Optional[int] = ..., system_prompt: _Optional[str] = ..., tools: _Optional[_Iterable[_Union[_messages_pb2.ToolSpec, _Mapping]]] = ..., model: _Optional[str] = ..., model_calls: _Optional[int] = ..., tool_calls: _Optional[int] = ..., mcp_calls: _Optional[int] = ..., run_context: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., state: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., is_subagent: _Optional[bool] = ...) -> None: ...

class Scope(_message.Message):
    __slots__ = ("tenant_id", "session_id", "turn_id", "agent", "role_id", "active_skill_ids", "session_scope", "agent_definition_json")
    class SessionScopeEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    ROLE_ID_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_SKILL_IDS_FIELD_NUMBER: _ClassVar[int]
    SESSION_SCOPE_FIELD_NUMBER: _ClassVar[int]
    AGENT_DEFINITION_JSON_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    session_id: str
    turn_id: str
    agent: str
    role_id: str
    active_skill_ids: _containers.RepeatedScalarFieldContainer[str]
    session_scope: _containers.ScalarMap[str, str]
    agent_definition_json: str
    def __init__(self, tenant_id: _Optional[str] = ..., session_id: _Optional[str] = ..., turn_id: _Optional[str] = ..., agent: _Optional[str] = ..., role_id: _Optional[str] = ..., active_skill_ids: _Optional[_Iterable[str]] = ..., session_scope: _Optional[_Mapping[str, str]] = ..., agent_definition_json: _Optional[str] = ...) -> None: ...

class InterceptStep(_message.Message):
    __slots__ = ("interceptor", "action", "detail")
    INTERCEPTOR_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    interceptor: str
    action: InterceptAction
    detail: str
    def __init__(self, interceptor: _Optional[str] = ..., action: _Optional[_Union[InterceptAction, str]] = ..., detail: _Optional[str] = ...) -> None: ...

class InterceptOutcome(_message.Message):
    __slots__ = ("action", "steps", "messages_modified", "messages", "tools_modified", "tool_names", "model", "system_prompt", "tool_args", "tool_result", "reason", "error_kind", "wait_ms", "state")
    ACTION_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_MODIFIED_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    TOOLS_MODIFIED_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAMES_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_PROMPT_FIELD_NUMBER: _ClassVar[int]
    TOOL_ARGS_FIELD_NUMBER: _ClassVar[int]
    TOOL_RESULT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    ERROR_KIND_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    action: InterceptAction
    steps: _containers.RepeatedCompositeFieldContainer[InterceptStep]
    messages_modified: bool
    messages: _containers.RepeatedCompositeFieldContainer[_messages_pb2.Message]
    tools_modified: bool
    tool_names: _containers.RepeatedScalarFieldContainer[str]
    model: str
    system_prompt: str
    tool_args: _struct_pb2.Struct
    tool_result: str
    reason: str
    error_kind: _events_pb2.ErrorKind
    wait_ms: int
    state: _struct_pb2.Struct
    def __init__(self, action: _Optional[_Union[InterceptAction, str]] = ..., steps: _Optional[_Iterable[_Union[InterceptStep, _Mapping]]] = ..., messages_modified: _Optional[bool] = ..., messages: _Optional[_Iterable[_Union[_messages_pb2.Message, _Mapping]]] = ..., tools_modified: _Optional[bool] = ..., tool_names: _Optional[_Iterable[str]] = ..., model: _Optional[str] = ..., system_prompt: _Optional[str] = ..., tool_args: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., tool_result: _Optional[str] = ..., reason: _Optional[str] = ..., error_kind: _Optional[_Union[_events_pb2.ErrorKind, str]] = ..., wait_ms: _Optional[int] = ..., state: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class CheckToolResultRequest(_message.Message):
    __slots__ = ("scope", "context", "tool_name", "tool_call_id", "arguments", "result", "is_error")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    IS_ERROR_FIELD_NUMBER: _ClassVar[int]
    scope: Scope
    context: TurnContext
    tool_name: str
    tool_call_id: str
    arguments: _struct_pb2.Struct
    result: str
    is_error: bool
    def __init__(self, scope: _Optional[_Union[Scope, _Mapping]] = ..., context: _Optional[_Union[TurnContext, _Mapping]] = ..., tool_name: _Optional[str] = ..., tool_call_id: _Optional[str] = ..., arguments: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., result: _Optional[str] = ..., is_error: _Optional[bool] = ...) -> None: ...

class CheckToolResultResponse(_message.Message):
    __slots__ = ("result", "modified", "post_act", "events")
    RESULT_FIELD_NUMBER: _ClassVar[int]
    MODIFIED_FIELD_NUMBER: _ClassVar[int]
    POST_ACT_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    result: str
    modified: bool
    post_act: InterceptOutcome
    events: _containers.RepeatedCompositeFieldContainer[_events_pb2.RuntimeEvent]
    def __init__(self, result: _Optional[str] = ..., modified: _Optional[bool] = ..., post_act: _Optional[_Union[InterceptOutcome, _Mapping]] = ..., events: _Optional[_Iterable[_Union[_events_pb2.RuntimeEvent, _Mapping]]] = ...) -> None: ...

class ModelFailure(_message.Message):
    __slots__ = ("kind", "message")
    KIND_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    kind: str
    message: str
    def __init__(self, kind: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class RunInterceptorsRequest(_message.Message):
    __slots__ = ("phase", "scope", "context", "model_response", "error", "tool_call", "tool_result", "tool_is_error", "final_text")
    PHASE_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    MODEL_RESPONSE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_FIELD_NUMBER: _ClassVar[int]
    TOOL_RESULT_FIELD_NUMBER: _ClassVar[int]
    TOOL_IS_ERROR_FIELD_NUMBER: _ClassVar[int]
    FINAL_TEXT_FIELD_NUMBER: _ClassVar[int]
    phase: Phase
    scope: Scope
    context: TurnContext
    model_response: _messages_pb2.Message
    error: ModelFailure
    tool_call: _messages_pb2.ToolCall
    tool_result: str
    tool_is_error: bool
    final_text: str
    def __init__(self, phase: _Optional[_Union[Phase, str]] = ..., scope: _Optional[_Union[Scope, _Mapping]] = ..., context: _Optional[_Union[TurnContext, _Mapping]] = ..., model_response: _Optional[_Union[_messages_pb2.Message, _Mapping]] = ..., error: _Optional[_Union[ModelFailure, _Mapping]] = ..., tool_call: _Optional[_Union[_messages_pb2.ToolCall, _Mapping]] = ..., tool_result: _Optional[str] = ..., tool_is_error: _Optional[bool] = ..., final_text: _Optional[str] = ...) -> None: ...

class RunInterceptorsResponse(_message.Message):
    __slots__ = ("outcome", "events")
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    outcome: InterceptOutcome
    events: _containers.RepeatedCompositeFieldContainer[_events_pb2.RuntimeEvent]
    def __init__(self, outcome: _Optional[_Union[InterceptOutcome, _Mapping]] = ..., events: _Optional[_Iterable[_Union[_events_pb2.RuntimeEvent, _Mapping]]] = ...) -> None: ...

class BeginTurnRequest(_message.Message):
    __slots__ = ("scope", "text", "explicit_role", "model", "tools")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    EXPLICIT_ROLE_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    scope: Scope
    text: str
    explicit_role: str
    model: str
    tools: _containers.RepeatedCompositeFieldContainer[_messages_pb2.ToolSpec]
    def __init__(self, scope: _Optional[_Union[Scope, _Mapping]] = ..., text: _Optional[str] = ..., explicit_role: _Optional[str] = ..., model: _Optional[str] = ..., tools: _Optional[_Iterable[_Union[_messages_pb2.ToolSpec, _Mapping]]] = ...) -> None: ...

class CommandEffect(_message.Message):
    __slots__ = ("set_role", "skill_ids", "set_model", "reset")
    SET_ROLE_FIELD_NUMBER: _ClassVar[int]
    SKILL_IDS_FIELD_NUMBER: _ClassVar[int]
    SET_MODEL_FIELD_NUMBER: _ClassVar[int]
    RESET_FIELD_NUMBER: _ClassVar[int]
    set_role: str
    skill_ids: _containers.RepeatedScalarFieldContainer[str]
    set_model: str
    reset: bool
    def __init__(self, set_role: _Optional[str] = ..., skill_ids: _Optional[_Iterable[str]] = ..., set_model: _Optional[str] = ..., reset: _Optional[bool] = ...) -> None: ...

class CommandReply(_message.Message):
    __slots__ = ("command", "reply", "ok", "effect")
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    REPLY_FIELD_NUMBER: _ClassVar[int]
    OK_FIELD_NUMBER: _ClassVar[int]
    EFFECT_FIELD_NUMBER: _ClassVar[int]
    command: str
    reply: str
    ok: bool
    effect: CommandEffect
    def __init__(self, command: _Optional[str] = ..., reply: _Optional[str] = ..., ok: _Optional[bool] = ..., effect: _Optional[_Union[CommandEffect, _Mapping]] = ...) -> None: ...

class RoleResolution(_message.Message):
    __slots__ = ("role_id", "matched_by", "keyword", "skill_ids")
    ROLE_ID_FIELD_NUMBER: _ClassVar[int]
    MATCHED_BY_FIELD_NUMBER: _ClassVar[int]
    KEYWORD_FIELD_NUMBER: _ClassVar[int]
    SKILL_IDS_FIELD_NUMBER: _ClassVar[int]
    role_id: str
    matched_by: str
    keyword: str
    skill_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, role_id: _Optional[str] = ..., matched_by: _Optional[str] = ..., keyword: _Optional[str] = ..., skill_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class BeginTurnResponse(_message.Message):
    __slots__ = ("command", "role", "blocked", "block_reason", "tool_names", "phases", "config_version", "events")
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    BLOCKED_FIELD_NUMBER: _ClassVar[int]
    BLOCK_REASON_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAMES_FIELD_NUMBER: _ClassVar[int]
    PHASES_FIELD_NUMBER: _ClassVar[int]
    CONFIG_VERSION_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    command: CommandReply
    role: RoleResolution
    blocked: bool
    block_reason: str
    tool_names: _containers.RepeatedScalarFieldContainer[str]
    phases: _containers.RepeatedScalarFieldContainer[Phase]
    config_version: int
    events: _containers.RepeatedCompositeFieldContainer[_events_pb2.RuntimeEvent]
    def __init__(self, command: _Optional[_Union[CommandReply, _Mapping]] = ..., role: _Optional[_Union[RoleResolution, _Mapping]] = ..., blocked: _Optional[bool] = ..., block_reason: _Optional[str] = ..., tool_names: _Optional[_Iterable[str]] = ..., phases: _Optional[_Iterable[_Union[Phase, str]]] = ..., config_version: _Optional[int] = ..., events: _Optional[_Iterable[_Union[_events_pb2.RuntimeEvent, _Mapping]]] = ...) -> None: ...

class ResolveRoleRequest(_message.Message):
    __slots__ = ("agent", "text", "explicit_role", "agent_definition_json")
    AGENT_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    EXPLICIT_ROLE_FIELD_NUMBER: _ClassVar[int]
    AGENT_DEFINITION_JSON_FIELD_NUMBER: _ClassVar[int]
    agent: str
    text: str
    explicit_role: str
    agent_definition_json: str
    def __init__(self, agent: _Optional[str] = ..., text: _Optional[str] = ..., explicit_role: _Optional[str] = ..., agent_definition_json: _Optional[str] = ...) -> None: ...

class ResolveRoleResponse(_message.Message):
    __slots__ = ("role",)
    ROLE_FIELD_NUMBER: _ClassVar[int]
    role: RoleResolution
    def __init__(self, role: _Optional[_Union[RoleResolution, _Mapping]] = ...) -> None: ...

class HandleCommandRequest(_message.Message):
    __slots__ = ("scope", "text", "model")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    scope: Scope
    text: str
    model: str
    def __init__(self, scope: _Optional[_Union[Scope, _Mapping]] = ..., text: _Optional[str] = ..., model: _Optional[str] = ...) -> None: ...

class HandleCommandResponse(_message.Message):
    __slots__ = ("is_command", "command")
    IS_COMMAND_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    is_command: bool
    command: CommandReply
    def __init__(self, is_command: _Optional[bool] = ..., command: _Optional[_Union[CommandReply, _Mapping]] = ...) -> None: ...

class SelectToolsRequest(_message.Message):
    __slots__ = ("scope", "tools")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    scope: Scope
    tools: _containers.RepeatedCompositeFieldContainer[_messages_pb2.ToolSpec]
    def __init__(self, scope: _Optional[_Union[Scope, _Mapping]] = ..., tools: _Optional[_Iterable[_Union[_messages_pb2.ToolSpec, _Mapping]]] = ...) -> None: ...

class SelectToolsResponse(_message.Message):
    __slots__ = ("tool_names", "dropped")
    TOOL_NAMES_FIELD_NUMBER: _ClassVar[int]
    DROPPED_FIELD_NUMBER: _ClassVar[int]
    tool_names: _containers.RepeatedScalarFieldContainer[str]
    dropped: _containers.RepeatedCompositeFieldContainer[DroppedTool]
    def __init__(self, tool_names: _Optional[_Iterable[str]] = ..., dropped: _Optional[_Iterable[_Union[DroppedTool, _Mapping]]] = ...) -> None: ...

class DroppedTool(_message.Message):
    __slots__ = ("name", "reason")
    NAME_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    name: str
    reason: str
    def __init__(self, name: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class GetPolicyStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ConfigError(_message.Message):
    __slots__ = ("file", "line", "field", "message")
    FILE_FIELD_NUMBER: _ClassVar[int]
    LINE_FIELD_NUMBER: _ClassVar[int]
    FIELD_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    file: str
    line: int
    field: str
    message: str
    def __init__(self, file: _Optional[str] = ..., line: _Optional[int] = ..., field: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class GetPolicyStatusResponse(_message.Message):
    __slots__ = ("config_version", "directory", "files", "errors")
    CONFIG_VERSION_FIELD_NUMBER: _ClassVar[int]
    DIRECTORY_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    ERRORS_FIELD_NUMBER: _ClassVar[int]
    config_version: int
    directory: str
    files: _containers.RepeatedScalarFieldContainer[str]
    errors: _containers.RepeatedCompositeFieldContainer[ConfigError]
    def __init__(self, config_version: _Optional[int] = ..., directory: _Optional[str] = ..., files: _Optional[_Iterable[str]] = ..., errors: _Optional[_Iterable[_Union[ConfigError, _Mapping]]] = ...) -> None: ...

class WatchPolicyRequest(_message.Message):
    __slots__ = ("known_version",)
    KNOWN_VERSION_FIELD_NUMBER: _ClassVar[int]
    known_version: str
    def __init__(self, known_version: _Optional[str] = ...) -> None: ...

class WatchPolicyResponse(_message.Message):
    __slots__ = ("snapshot",)
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    snapshot: PolicySnapshot
    def __init__(self, snapshot: _Optional[_Union[PolicySnapshot, _Mapping]] = ...) -> None: ...

class PolicySnapshot(_message.Message):
    __slots__ = ("version", "files")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    version: str
    files: _containers.RepeatedCompositeFieldContainer[PolicyFile]
    def __init__(self, version: _Optional[str] = ..., files: _Optional[_Iterable[_Union[PolicyFile, _Mapping]]] = ...) -> None: ...

class PolicyFile(_message.Message):
    __slots__ = ("path", "content")
    PATH_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    path: str
    content: str
    def __init__(self, path: _Optional[str] = ..., content: _Optional[str] = ...) -> None: ...
