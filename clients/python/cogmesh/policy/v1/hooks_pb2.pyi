from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class HookContext(_message.Message):
    __slots__ = ("tenant_id", "session_id", "turn_id", "agent", "role_id", "session_scope")
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
    SESSION_SCOPE_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    session_id: str
    turn_id: str
    agent: str
    role_id: str
    session_scope: _containers.ScalarMap[str, str]
    def __init__(self, tenant_id: _Optional[str] = ..., session_id: _Optional[str] = ..., turn_id: _Optional[str] = ..., agent: _Optional[str] = ..., role_id: _Optional[str] = ..., session_scope: _Optional[_Mapping[str, str]] = ...) -> None: ...

class PreToolUseRequest(_message.Message):
    __slots__ = ("context", "tool_name", "tool_input", "tool_call_id")
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    TOOL_INPUT_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    context: HookContext
    tool_name: str
    tool_input: _struct_pb2.Struct
    tool_call_id: str
    def __init__(self, context: _Optional[_Union[HookContext, _Mapping]] = ..., tool_name: _Optional[str] = ..., tool_input: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., tool_call_id: _Optional[str] = ...) -> None: ...

class PreToolUseResponse(_message.Message):
    __slots__ = ("deny", "reason", "updated_input")
    DENY_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    UPDATED_INPUT_FIELD_NUMBER: _ClassVar[int]
    deny: bool
    reason: str
    updated_input: _struct_pb2.Struct
    def __init__(self, deny: _Optional[bool] = ..., reason: _Optional[str] = ..., updated_input: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class PostToolUseRequest(_message.Message):
    __slots__ = ("context", "tool_name", "tool_input", "result", "is_error", "tool_call_id")
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    TOOL_INPUT_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    IS_ERROR_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    context: HookContext
    tool_name: str
    tool_input: _struct_pb2.Struct
    result: str
    is_error: bool
    tool_call_id: str
    def __init__(self, context: _Optional[_Union[HookContext, _Mapping]] = ..., tool_name: _Optional[str] = ..., tool_input: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., result: _Optional[str] = ..., is_error: _Optional[bool] = ..., tool_call_id: _Optional[str] = ...) -> None: ...

class PostToolUseResponse(_message.Message):
    __slots__ = ("replace", "updated_result")
    REPLACE_FIELD_NUMBER: _ClassVar[int]
    UPDATED_RESULT_FIELD_NUMBER: _ClassVar[int]
    replace: bool
    updated_result: str
    def __init__(self, replace: _Optional[bool] = ..., updated_result: _Optional[str] = ...) -> None: ...

class UserPromptSubmitRequest(_message.Message):
    __slots__ = ("context", "prompt")
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    context: HookContext
    prompt: str
    def __init__(self, context: _Optional[_Union[HookContext, _Mapping]] = ..., prompt: _Optional[str] = ...) -> None: ...

class UserPromptSubmitResponse(_message.Message):
    __slots__ = ("block", "reason")
    BLOCK_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    block: bool
    reason: str
    def __init__(self, block: _Optional[bool] = ..., reason: _Optional[str] = ...) -> None: ...

class StopRequest(_message.Message):
    __slots__ = ("context", "final_text")
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    FINAL_TEXT_FIELD_NUMBER: _ClassVar[int]
    context: HookContext
    final_text: str
    def __init__(self, context: _Optional[_Union[HookContext, _Mapping]] = ..., final_text: _Optional[str] = ...) -> None: ...

class StopResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
