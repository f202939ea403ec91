import datetime

from buf.validate import validate_pb2 as _validate_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class StoredAgentVersion(_message.Message):
    __slots__ = ("tenant_id", "name", "version", "definition_json", "create_time", "created_by", "aliases")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    DEFINITION_JSON_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    CREATED_BY_FIELD_NUMBER: _ClassVar[int]
    ALIASES_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    name: str
    version: int
    definition_json: str
    create_time: _timestamp_pb2.Timestamp
    created_by: str
    aliases: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, tenant_id: _Optional[str] = ..., name: _Optional[str] = ..., version: _Optional[int] = ..., definition_json: _Optional[str] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., created_by: _Optional[str] = ..., aliases: _Optional[_Iterable[str]] = ...) -> None: ...

class PutAgentVersionRequest(_message.Message):
    __slots__ = ("tenant_id", "name", "definition_json", "created_by", "create", "expected_version")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    DEFINITION_JSON_FIELD_NUMBER: _ClassVar[int]
    CREATED_BY_FIELD_NUMBER: _ClassVar[int]
    CREATE_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_VERSION_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    name: str
    definition_json: str
    created_by: str
    create: bool
    expected_version: int
    def __init__(self, tenant_id: _Optional[str] = ..., name: _Optional[str] = ..., definition_json: _Optional[str] = ..., created_by: _Optional[str] = ..., create: _Optional[bool] = ..., expected_version: _Optional[int] = ...) -> None: ...

class PutAgentVersionResponse(_message.Message):
    __slots__ = ("agent",)
    AGENT_FIELD_NUMBER: _ClassVar[int]
    agent: StoredAgentVersion
    def __init__(self, agent: _Optional[_Union[StoredAgentVersion, _Mapping]] = ...) -> None: ...

class GetAgentVersionRequest(_message.Message):
    __slots__ = ("tenant_id", "name", "version", "alias")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    ALIAS_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    name: str
    version: int
    alias: str
    def __init__(self, tenant_id: _Optional[str] = ..., name: _Optional[str] = ..., version: _Optional[int] = ..., alias: _Optional[str] = ...) -> None: ...

class GetAgentVersionResponse(_message.Message):
    __slots__ = ("agent",)
    AGENT_FIELD_NUMBER: _ClassVar[int]
    agent: StoredAgentVersion
    def __init__(self, agent: _Optional[_Union[StoredAgentVersion, _Mapping]] = ...) -> None: ...

class ListAgentVersionsRequest(_message.Message):
    __slots__ = ("tenant_id", "name", "page_size", "page_token")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    name: str
    page_size: int
    page_token: str
    def __init__(self, tenant_id: _Optional[str] = ..., name: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

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
    versions: _containers.RepeatedCompositeFieldContainer[StoredAgentVersion]
    next_page_token: str
    aliases: _containers.ScalarMap[str, int]
    def __init__(self, versions: _Optional[_Iterable[_Union[StoredAgentVersion, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., aliases: _Optional[_Mapping[str, int]] = ...) -> None: ...

class ListAgentsRequest(_message.Message):
    __slots__ = ("tenant_id", "page_size", "page_token")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    page_size: int
    page_token: str
    def __init__(self, tenant_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListAgentsResponse(_message.Message):
    __slots__ = ("agents", "next_page_token")
    AGENTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    agents: _containers.RepeatedCompositeFieldContainer[StoredAgentVersion]
    next_page_token: str
    def __init__(self, agents: _Optional[_Iterable[_Union[StoredAgentVersion, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class DeleteAgentRequest(_message.Message):
    __slots__ = ("tenant_id", "name")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    name: str
    def __init__(self, tenant_id: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class DeleteAgentResponse(_message.Message):
    __slots__ = ("deleted_versions",)
    DELETED_VERSIONS_FIELD_NUMBER: _ClassVar[int]
    deleted_versions: int
    def __init__(self, deleted_versions: _Optional[int] = ...) -> None: ...

class SetAgentAliasRequest(_message.Message):
    __slots__ = ("tenant_id", "name", "alias", "version")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ALIAS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    name: str
    alias: str
    version: int
    def __init__(self, tenant_id: _Optional[str] = ..., name: _Optional[str] = ..., alias: _Optional[str] = ..., version: _Optional[int] = ...) -> None: ...

class SetAgentAliasResponse(_message.Message):
    __slots__ = ("agent", "previous_version")
    AGENT_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_VERSION_FIELD_NUMBER: _ClassVar[int]
    agent: StoredAgentVersion
    previous_version: int
    def __init__(self, agent: _Optional[_Union[StoredAgentVersion, _Mapping]] = ..., previous_version: _Optional[int] = ...) -> None: ...

class DeleteAgentAliasRequest(_message.Message):
    __slots__ = ("tenant_id", "name", "alias")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ALIAS_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    name: str
    alias: str
    def __init__(self, tenant_id: _Optional[str] = ..., name: _Optional[str] = ..., alias: _Optional[str] = ...) -> None: ...

class DeleteAgentAliasResponse(_message.Message):
    __slots__ = ("previous_version",)
    PREVIOUS_VERSION_FIELD_NUMBER: _ClassVar[int]
    previous_version: int
    def __init__(self, previous_version: _Optional[int] = ...) -> None: ...
