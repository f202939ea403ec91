from cogmesh.common.v1 import messages_pb2 as _messages_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ListToolsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListToolsResponse(_message.Message):
    __slots__ = ("tools",)
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    tools: _containers.RepeatedCompositeFieldContainer[_messages_pb2.ToolSpec]
    def __init__(self, tools: _Optional[_Iterable[_Union[_messages_pb2.ToolSpec, _Mapping]]] = ...) -> None: ...

class CallToolRequest(_message.Message):
    __slots__ = ("name", "arguments", "call_id", "session_id", "tenant_id", "turn_id", "idempotency_key", "scope")
    class ScopeEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    name: str
    arguments: _struct_pb2.Struct
    call_id: str
    session_id: str
    tenant_id: str
    turn_id: str
    idempotency_key: str
    scope: _containers.ScalarMap[str, str]
    def __init__(self, name: _Optional[str] = ..., arguments: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., call_id: _Optional[str] = ..., session_id: _Optional[str] = ..., tenant_id: _Optional[str] = ..., turn_id: _Optional[str] = ..., idempotency_key: _Optional[str] = ..., scope: _Optional[_Mapping[str, str]] = ...) -> None: ...

class CallToolResponse(_message.Message):
    __slots__ = ("content", "is_error", "structured_content")
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    IS_ERROR_FIELD_NUMBER: _ClassVar[int]
    STRUCTURED_CONTENT_FIELD_NUMBER: _ClassVar[int]
    content: str
    is_error: bool
    structured_content: _struct_pb2.Struct
    def __init__(self, content: _Optional[str] = ..., is_error: _Optional[bool] = ..., structured_content: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...
