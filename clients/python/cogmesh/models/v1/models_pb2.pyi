from buf.validate import validate_pb2 as _validate_pb2
from cogmesh.common.v1 import resources_pb2 as _resources_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class MatchKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MATCH_KIND_UNSPECIFIED: _ClassVar[MatchKind]
    MATCH_KIND_ALIAS: _ClassVar[MatchKind]
    MATCH_KIND_FULL_NAME: _ClassVar[MatchKind]
    MATCH_KIND_PREFIX: _ClassVar[MatchKind]
    MATCH_KIND_DEFAULT: _ClassVar[MatchKind]
MATCH_KIND_UNSPECIFIED: MatchKind
MATCH_KIND_ALIAS: MatchKind
MATCH_KIND_FULL_NAME: MatchKind
MATCH_KIND_PREFIX: MatchKind
MATCH_KIND_DEFAULT: MatchKind

class ResolveModelRequest(_message.Message):
    __slots__ = ("name", "strict")
    NAME_FIELD_NUMBER: _ClassVar[int]
    STRICT_FIELD_NUMBER: _ClassVar[int]
    name: str
    strict: bool
    def __init__(self, name: _Optional[str] = ..., strict: _Optional[bool] = ...) -> None: ...

class ResolveModelResponse(_message.Message):
    __slots__ = ("model", "matched_by", "fallback_reason")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    MATCHED_BY_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_REASON_FIELD_NUMBER: _ClassVar[int]
    model: _resources_pb2.Model
    matched_by: MatchKind
    fallback_reason: str
    def __init__(self, model: _Optional[_Union[_resources_pb2.Model, _Mapping]] = ..., matched_by: _Optional[_Union[MatchKind, str]] = ..., fallback_reason: _Optional[str] = ...) -> None: ...

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

class ListProvidersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListProvidersResponse(_message.Message):
    __slots__ = ("providers",)
    PROVIDERS_FIELD_NUMBER: _ClassVar[int]
    providers: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, providers: _Optional[_Iterable[str]] = ...) -> None: ...

class ListAliasesRequest(_message.Message):
    __slots__ = ("provider",)
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    provider: str
    def __init__(self, provider: _Optional[str] = ...) -> None: ...

class Alias(_message.Message):
    __slots__ = ("alias", "model_id")
    ALIAS_FIELD_NUMBER: _ClassVar[int]
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    alias: str
    model_id: str
    def __init__(self, alias: _Optional[str] = ..., model_id: _Optional[str] = ...) -> None: ...

class ListAliasesResponse(_message.Message):
    __slots__ = ("aliases",)
    ALIASES_FIELD_NUMBER: _ClassVar[int]
    aliases: _containers.RepeatedCompositeFieldContainer[Alias]
    def __init__(self, aliases: _Optional[_Iterable[_Union[Alias, _Mapping]]] = ...) -> None: ...

class AddModelRequest(_message.Message):
    __slots__ = ("model", "replace")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    REPLACE_FIELD_NUMBER: _ClassVar[int]
    model: _resources_pb2.Model
    replace: bool
    def __init__(self, model: _Optional[_Union[_resources_pb2.Model, _Mapping]] = ..., replace: _Optional[bool] = ...) -> None: ...

class AddModelResponse(_message.Message):
    __slots__ = ("model", "replaced", "persisted")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    REPLACED_FIELD_NUMBER: _ClassVar[int]
    PERSISTED_FIELD_NUMBER: _ClassVar[int]
    model: _resources_pb2.Model
    replaced: bool
    persisted: bool
    def __init__(self, model: _Optional[_Union[_resources_pb2.Model, _Mapping]] = ..., replaced: _Optional[bool] = ..., persisted: _Optional[bool] = ...) -> None: ...

class RemoveModelRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class RemoveModelResponse(_message.Message):
    __slots__ = ("removed",)
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    removed: bool
    def __init__(self, removed: _Optional[bool] = ...) -> None: ...

class WatchCatalogRequest(_message.Message):
    __slots__ = ("known_version",)
    KNOWN_VERSION_FIELD_NUMBER: _ClassVar[int]
    known_version: str
    def __init__(self, known_version: _Optional[str] = ...) -> None: ...

class WatchCatalogResponse(_message.Message):
    __slots__ = ("snapshot",)
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    snapshot: CatalogSnapshot
    def __init__(self, snapshot: _Optional[_Union[CatalogSnapshot, _Mapping]] = ...) -> None: ...

class CatalogSnapshot(_message.Message):
    __slots__ = ("version", "models", "default_model", "strict", "agents", "agent_problems")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_MODEL_FIELD_NUMBER: _ClassVar[int]
    STRICT_FIELD_NUMBER: _ClassVar[int]
    AGENTS_FIELD_NUMBER: _ClassVar[int]
    AGENT_PROBLEMS_FIELD_NUMBER: _ClassVar[int]
    version: str
    models: _containers.RepeatedCompositeFieldContainer[_resources_pb2.Model]
    default_model: str
    strict: bool
    agents: _containers.RepeatedCompositeFieldContainer[AgentSnapshot]
    agent_problems: _containers.RepeatedCompositeFieldContainer[AgentLoadProblem]
    def __init__(self, version: _Optional[str] = ..., models: _Optional[_Iterable[_Union[_resources_pb2.Model, _Mapping]]] = ..., default_model: _Optional[str] = ..., strict: _Optional[bool] = ..., agents: _Optional[_Iterable[_Union[AgentSnapshot, _Mapping]]] = ..., agent_problems: _Optional[_Iterable[_Union[AgentLoadProblem, _Mapping]]] = ...) -> None: ...

class AgentSnapshot(_message.Message):
    __slots__ = ("name", "definition_json")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DEFINITION_JSON_FIELD_NUMBER: _ClassVar[int]
    name: str
    definition_json: str
    def __init__(self, name: _Optional[str] = ..., definition_json: _Optional[str] = ...) -> None: ...

class AgentLoadProblem(_message.Message):
    __slots__ = ("file", "problem")
    FILE_FIELD_NUMBER: _ClassVar[int]
    PROBLEM_FIELD_NUMBER: _ClassVar[int]
    file: str
    problem: str
    def __init__(self, file: _Optional[str] = ..., problem: _Optional[str] = ...) -> None: ...
