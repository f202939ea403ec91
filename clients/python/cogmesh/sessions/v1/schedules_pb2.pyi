from buf.validate import validate_pb2 as _validate_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class StoredSchedule(_message.Message):
    __slots__ = ("tenant_id", "schedule_id", "spec", "paused", "next_fire_ms", "last_fire_ms", "create_ms", "session_id", "version")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    NEXT_FIRE_MS_FIELD_NUMBER: _ClassVar[int]
    LAST_FIRE_MS_FIELD_NUMBER: _ClassVar[int]
    CREATE_MS_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    schedule_id: str
    spec: bytes
    paused: bool
    next_fire_ms: int
    last_fire_ms: int
    create_ms: int
    session_id: str
    version: int
    def __init__(self, tenant_id: _Optional[str] = ..., schedule_id: _Optional[str] = ..., spec: _Optional[bytes] = ..., paused: _Optional[bool] = ..., next_fire_ms: _Optional[int] = ..., last_fire_ms: _Optional[int] = ..., create_ms: _Optional[int] = ..., session_id: _Optional[str] = ..., version: _Optional[int] = ...) -> None: ...

class StoredScheduleRun(_message.Message):
    __slots__ = ("tenant_id", "schedule_id", "run_id", "fire_ms", "run", "holder", "lease_expire_ms", "ended", "after_seq", "attempt", "version")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    FIRE_MS_FIELD_NUMBER: _ClassVar[int]
    RUN_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXPIRE_MS_FIELD_NUMBER: _ClassVar[int]
    ENDED_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQ_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    schedule_id: str
    run_id: str
    fire_ms: int
    run: bytes
    holder: str
    lease_expire_ms: int
    ended: bool
    after_seq: int
    attempt: int
    version: int
    def __init__(self, tenant_id: _Optional[str] = ..., schedule_id: _Optional[str] = ..., run_id: _Optional[str] = ..., fire_ms: _Optional[int] = ..., run: _Optional[bytes] = ..., holder: _Optional[str] = ..., lease_expire_ms: _Optional[int] = ..., ended: _Optional[bool] = ..., after_seq: _Optional[int] = ..., attempt: _Optional[int] = ..., version: _Optional[int] = ...) -> None: ...

class CreateScheduleRequest(_message.Message):
    __slots__ = ("schedule",)
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    schedule: StoredSchedule
    def __init__(self, schedule: _Optional[_Union[StoredSchedule, _Mapping]] = ...) -> None: ...

class CreateScheduleResponse(_message.Message):
    __slots__ = ("schedule",)
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    schedule: StoredSchedule
    def __init__(self, schedule: _Optional[_Union[StoredSchedule, _Mapping]] = ...) -> None: ...

class GetScheduleRequest(_message.Message):
    __slots__ = ("tenant_id", "schedule_id")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    schedule_id: str
    def __init__(self, tenant_id: _Optional[str] = ..., schedule_id: _Optional[str] = ...) -> None: ...

class GetScheduleResponse(_message.Message):
    __slots__ = ("schedule",)
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    schedule: StoredSchedule
    def __init__(self, schedule: _Optional[_Union[StoredSchedule, _Mapping]] = ...) -> None: ...

class ListSchedulesRequest(_message.Message):
    __slots__ = ("tenant_id", "page_size", "page_token")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    page_size: int
    page_token: str
    def __init__(self, tenant_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListSchedulesResponse(_message.Message):
    __slots__ = ("schedules", "next_page_token")
    SCHEDULES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    schedules: _containers.RepeatedCompositeFieldContainer[StoredSchedule]
    next_page_token: str
    def __init__(self, schedules: _Optional[_Iterable[_Union[StoredSchedule, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class UpdateScheduleRequest(_message.Message):
    __slots__ = ("schedule", "run")
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    RUN_FIELD_NUMBER: _ClassVar[int]
    schedule: StoredSchedule
    run: StoredScheduleRun
    def __init__(self, schedule: _Optional[_Union[StoredSchedule, _Mapping]] = ..., run: _Optional[_Union[StoredScheduleRun, _Mapping]] = ...) -> None: ...

class UpdateScheduleResponse(_message.Message):
    __slots__ = ("schedule", "run")
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    RUN_FIELD_NUMBER: _ClassVar[int]
    schedule: StoredSchedule
    run: StoredScheduleRun
    def __init__(self, schedule: _Optional[_Union[StoredSchedule, _Mapping]] = ..., run: _Optional[_Union[StoredScheduleRun, _Mapping]] = ...) -> None: ...

class DeleteScheduleRequest(_message.Message):
    __slots__ = ("tenant_id", "schedule_id")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    schedule_id: str
    def __init__(self, tenant_id: _Optional[str] = ..., schedule_id: _Optional[str] = ...) -> None: ...

class DeleteScheduleResponse(_message.Message):
    __slots__ = ("deleted",)
    DELETED_FIELD_NUMBER: _ClassVar[int]
    deleted: bool
    def __init__(self, deleted: _Optional[bool] = ...) -> None: ...

class ListDueSchedulesRequest(_message.Message):
    __slots__ = ("due_ms", "limit")
    DUE_MS_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    due_ms: int
    limit: int
    def __init__(self, due_ms: _Optional[int] = ..., limit: _Optional[int] = ...) -> None: ...

class ListDueSchedulesResponse(_message.Message):
    __slots__ = ("schedules",)
    SCHEDULES_FIELD_NUMBER: _ClassVar[int]
    schedules: _containers.RepeatedCompositeFieldContainer[StoredSchedule]
    def __init__(self, schedules: _Optional[_Iterable[_Union[StoredSchedule, _Mapping]]] = ...) -> None: ...

class PutScheduleRunRequest(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: StoredScheduleRun
    def __init__(self, run: _Optional[_Union[StoredScheduleRun, _Mapping]] = ...) -> None: ...

class PutScheduleRunResponse(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: StoredScheduleRun
    def __init__(self, run: _Optional[_Union[StoredScheduleRun, _Mapping]] = ...) -> None: ...

class ListScheduleRunsRequest(_message.Message):
    __slots__ = ("tenant_id", "schedule_id", "page_size", "page_token")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    schedule_id: str
    page_size: int
    page_token: str
    def __init__(self, tenant_id: _Optional[str] = ..., schedule_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListScheduleRunsResponse(_message.Message):
    __slots__ = ("runs", "next_page_token")
    RUNS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    runs: _containers.RepeatedCompositeFieldContainer[StoredScheduleRun]
    next_page_token: str
    def __init__(self, runs: _Optional[_Iterable[_Union[StoredScheduleRun, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ListStaleScheduleRunsRequest(_message.Message):
    __slots__ = ("now_ms", "limit")
    NOW_MS_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    now_ms: int
    limit: int
    def __init__(self, now_ms: _Optional[int] = ..., limit: _Optional[int] = ...) -> None: ...

class ListStaleScheduleRunsResponse(_message.Message):
    __slots__ = ("runs",)
    RUNS_FIELD_NUMBER: _ClassVar[int]
    runs: _containers.RepeatedCompositeFieldContainer[StoredScheduleRun]
    def __init__(self, runs: _Optional[_Iterable[_Union[StoredScheduleRun, _Mapping]]] = ...) -> None: ...
