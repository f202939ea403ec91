import datetime

from buf.validate import validate_pb2 as _validate_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AgentVersion(_message.Message):
    __slots__ = ("name", "version", "definition", "create_time", "created_by", "aliases", "native")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    DEFINITION_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    CREATED_BY_FIELD_NUMBER: _ClassVar[int]
    ALIASES_FIELD_NUMBER: _ClassVar[int]
    NATIVE_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: int
    definition: _struct_pb2.Struct
    create_time: _timestamp_pb2.Timestamp
    created_by: str
    aliases: _containers.RepeatedScalarFieldContainer[str]
    native: bool
    def __init__(self, name: _Optional[str] = ..., version: _Optional[int] = ..., definition: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., created_by: _Optional[str] = ..., aliases: _Optional[_Iterable[str]] = ..., native: _Optional[bool] = ...) -> None: ...

class CreateAgentRequest(_message.Message):
    __slots__ = ("name", "definition")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DEFINITION_FIELD_NUMBER: _ClassVar[int]
    name: str
    definition: _struct_pb2.Struct
    def __init__(self, name: _Optional[str] = ..., definition: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class CreateAgentResponse(_message.Message):
    __slots__ = ("agent",)
    AGENT_FIELD_NUMBER: _ClassVar[int]
    agent: AgentVersion
    def __init__(self, agent: _Optional[_Union[AgentVersion, _Mapping]] = ...) -> None: ...

class UpdateAgentRequest(_message.Message):
    __slots__ = ("name", "definition", "expected_version")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DEFINITION_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_VERSION_FIELD_NUMBER: _ClassVar[int]
    name: str
    definition: _struct_pb2.Struct
    expected_version: int
    def __init__(self, name: _Optional[str] = ..., definition: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., expected_version: _Optional[int] = ...) -> None: ...

class UpdateAgentResponse(_message.Message):
    __slots__ = ("agent",)
    AGENT_FIELD_NUMBER: _ClassVar[int]
    agent: AgentVersion
    def __init__(self, agent: _Optional[_Union[AgentVersion, _Mapping]] = ...) -> None: ...

class GetAgentRequest(_message.Message):
    __slots__ = ("name", "version", "alias")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    ALIAS_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: int
    alias: str
    def __init__(self, name: _Optional[str] = ..., version: _Optional[int] = ..., alias: _Optional[str] = ...) -> None: ...

class GetAgentResponse(_message.Message):
    __slots__ = ("agent",)
    AGENT_FIELD_NUMBER: _ClassVar[int]
    agent: AgentVersion
    def __init__(self, agent: _Optional[_Union[AgentVersion, _Mapping]] = ...) -> None: ...

class ListAgentVersionsRequest(_message.Message):
    __slots__ = ("name", "page_size", "page_token")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    name: str
    page_size: int
    page_token: str
    def __init__(self, name: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListAgentVersionsResponse(_message.Message):
    __slots__ = ("versions", "next_page_token", "aliases")
    class AliasesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    ALIASES_FIELD_NUMBER: _ClassVar[int]
    versions: _containers.RepeatedCompositeFieldContainer[AgentVersion]
    next_page_token: str
    aliases: _containers.ScalarMap[str, int]
    def __init__(self, versions: _Optional[_Iterable[_Union[AgentVersion, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., aliases: _Optional[_Mapping[str, int]] = ...) -> None: ...

class DeleteAgentRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DeleteAgentResponse(_message.Message):
    __slots__ = ("deleted_versions",)
    DELETED_VERSIONS_FIELD_NUMBER: _ClassVar[int]
    deleted_versions: int
    def __init__(self, deleted_versions: _Optional[int] = ...) -> None: ...

class SetAgentAliasRequest(_message.Message):
    __slots__ = ("name", "alias", "version")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ALIAS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    name: str
    alias: str
    version: int
    def __init__(self, name: _Optional[str] = ..., alias: _Optional[str] = ..., version: _Optional[int] = ...) -> None: ...

class SetAgentAliasResponse(_message.Message):
    __slots__ = ("agent", "previous_version")
    AGENT_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_VERSION_FIELD_NUMBER: _ClassVar[int]
    agent: AgentVersion
    previous_version: int
    def __init__(self, agent: _Optional[_Union[AgentVersion, _Mapping]] = ..., previous_version: _Optional[int] = ...) -> None: ...

class DeleteAgentAliasRequest(_message.Message):
    __slots__ = ("name", "alias")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ALIAS_FIELD_NUMBER: _ClassVar[int]
    name: str
    alias: str
    def __init__(self, name: _Optional[str] = ..., alias: _Optional[str] = ...) -> None: ...

class DeleteAgentAliasResponse(_message.Message):
    __slots__ = ("previous_version",)
    PREVIOUS_VERSION_FIELD_NUMBER: _ClassVar[int]
    previous_version: int
    def __init__(self, previous_version: _Optional[int] = ...) -> None: ...
