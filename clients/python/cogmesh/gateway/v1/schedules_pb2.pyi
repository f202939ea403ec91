import datetime

from buf.validate import validate_pb2 as _validate_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ScheduleSessionMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SCHEDULE_SESSION_MODE_UNSPECIFIED: _ClassVar[ScheduleSessionMode]
    SCHEDULE_SESSION_MODE_NEW: _ClassVar[ScheduleSessionMode]
    SCHEDULE_SESSION_MODE_CONTINUE: _ClassVar[ScheduleSessionMode]

class ScheduleCatchUp(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SCHEDULE_CATCH_UP_UNSPECIFIED: _ClassVar[ScheduleCatchUp]
    SCHEDULE_CATCH_UP_RUN_ONCE: _ClassVar[ScheduleCatchUp]
    SCHEDULE_CATCH_UP_SKIP: _ClassVar[ScheduleCatchUp]

class ScheduleState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SCHEDULE_STATE_UNSPECIFIED: _ClassVar[ScheduleState]
    SCHEDULE_STATE_ACTIVE: _ClassVar[ScheduleState]
    SCHEDULE_STATE_PAUSED: _ClassVar[ScheduleState]
    SCHEDULE_STATE_DONE: _ClassVar[ScheduleState]

class ScheduleRunTrigger(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SCHEDULE_RUN_TRIGGER_UNSPECIFIED: _ClassVar[ScheduleRunTrigger]
    SCHEDULE_RUN_TRIGGER_CLOCK: _ClassVar[ScheduleRunTrigger]
    SCHEDULE_RUN_TRIGGER_CATCH_UP: _ClassVar[ScheduleRunTrigger]
    SCHEDULE_RUN_TRIGGER_MANUAL: _ClassVar[ScheduleRunTrigger]

class ScheduleRunOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SCHEDULE_RUN_OUTCOME_UNSPECIFIED: _ClassVar[ScheduleRunOutcome]
    SCHEDULE_RUN_OUTCOME_STARTING: _ClassVar[ScheduleRunOutcome]
    SCHEDULE_RUN_OUTCOME_RUNNING: _ClassVar[ScheduleRunOutcome]
    SCHEDULE_RUN_OUTCOME_COMPLETED: _ClassVar[ScheduleRunOutcome]
    SCHEDULE_RUN_OUTCOME_FAILED: _ClassVar[ScheduleRunOutcome]
    SCHEDULE_RUN_OUTCOME_CANCELLED: _ClassVar[ScheduleRunOutcome]
    SCHEDULE_RUN_OUTCOME_PAUSED: _ClassVar[ScheduleRunOutcome]
    SCHEDULE_RUN_OUTCOME_SKIPPED: _ClassVar[ScheduleRunOutcome]
SCHEDULE_SESSION_MODE_UNSPECIFIED: ScheduleSessionMode
SCHEDULE_SESSION_MODE_NEW: ScheduleSessionMode
SCHEDULE_SESSION_MODE_CONTINUE: ScheduleSessionMode
SCHEDULE_CATCH_UP_UNSPECIFIED: ScheduleCatchUp
SCHEDULE_CATCH_UP_RUN_ONCE: ScheduleCatchUp
SCHEDULE_CATCH_UP_SKIP: ScheduleCatchUp
SCHEDULE_STATE_UNSPECIFIED: ScheduleState
SCHEDULE_STATE_ACTIVE: ScheduleState
SCHEDULE_STATE_PAUSED: ScheduleState
SCHEDULE_STATE_DONE: ScheduleState
SCHEDULE_RUN_TRIGGER_UNSPECIFIED: ScheduleRunTrigger
SCHEDULE_RUN_TRIGGER_CLOCK: ScheduleRunTrigger
SCHEDULE_RUN_TRIGGER_CATCH_UP: ScheduleRunTrigger
SCHEDULE_RUN_TRIGGER_MANUAL: ScheduleRunTrigger
SCHEDULE_RUN_OUTCOME_UNSPECIFIED: ScheduleRunOutcome
SCHEDULE_RUN_OUTCOME_STARTING: ScheduleRunOutcome
SCHEDULE_RUN_OUTCOME_RUNNING: ScheduleRunOutcome
SCHEDULE_RUN_OUTCOME_COMPLETED: ScheduleRunOutcome
SCHEDULE_RUN_OUTCOME_FAILED: ScheduleRunOutcome
SCHEDULE_RUN_OUTCOME_CANCELLED: ScheduleRunOutcome
SCHEDULE_RUN_OUTCOME_PAUSED: ScheduleRunOutcome
SCHEDULE_RUN_OUTCOME_SKIPPED: ScheduleRunOutcome

class Cron(_message.Message):
    __slots__ = ("expression", "time_zone")
    EXPRESSION_FIELD_NUMBER: _ClassVar[int]
    TIME_ZONE_FIELD_NUMBER: _ClassVar[int]
    expression: str
    time_zone: str
    def __init__(self, expression: _Optional[str] = ..., time_zone: _Optional[str] = ...) -> None: ...

class ScheduleSpec(_message.Message):
    __slots__ = ("cron", "interval_seconds", "at", "agent", "agent_version", "message", "scope", "user_id", "session_mode", "session_id", "catch_up", "description")
    class ScopeEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CRON_FIELD_NUMBER: _ClassVar[int]
    INTERVAL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_MODE_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    CATCH_UP_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    cron: Cron
    interval_seconds: int
    at: _timestamp_pb2.Timestamp
    agent: str
    agent_version: str
    message: str
    scope: _containers.ScalarMap[str, str]
    user_id: str
    session_mode: ScheduleSessionMode
    session_id: str
    catch_up: ScheduleCatchUp
    description: str
    def __init__(self, cron: _Optional[_Union[Cron, _Mapping]] = ..., interval_seconds: _Optional[int] = ..., at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., agent: _Optional[str] = ..., agent_version: _Optional[str] = ..., message: _Optional[str] = ..., scope: _Optional[_Mapping[str, str]] = ..., user_id: _Optional[str] = ..., session_mode: _Optional[_Union[ScheduleSessionMode, str]] = ..., session_id: _Optional[str] = ..., catch_up: _Optional[_Union[ScheduleCatchUp, str]] = ..., description: _Optional[str] = ...) -> None: ...

class Schedule(_message.Message):
    __slots__ = ("schedule_id", "spec", "state", "next_fire_time", "last_fire_time", "create_time", "session_id")
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    NEXT_FIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    LAST_FIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    schedule_id: str
    spec: ScheduleSpec
    state: ScheduleState
    next_fire_time: _timestamp_pb2.Timestamp
    last_fire_time: _timestamp_pb2.Timestamp
    create_time: _timestamp_pb2.Timestamp
    session_id: str
    def __init__(self, schedule_id: _Optional[str] = ..., spec: _Optional[_Union[ScheduleSpec, _Mapping]] = ..., state: _Optional[_Union[ScheduleState, str]] = ..., next_fire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_fire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., session_id: _Optional[str] = ...) -> None: ...

class ScheduleRun(_message.Message):
    __slots__ = ("run_id", "schedule_id", "fire_time", "trigger", "outcome", "session_id", "turn_id", "start_time", "end_time", "cost_usd", "input_tokens", "output_tokens", "error")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    FIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    TRIGGER_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    COST_USD_FIELD_NUMBER: _ClassVar[int]
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    schedule_id: str
    fire_time: _timestamp_pb2.Timestamp
    trigger: ScheduleRunTrigger
    outcome: ScheduleRunOutcome
    session_id: str
    turn_id: str
    start_time: _timestamp_pb2.Timestamp
    end_time: _timestamp_pb2.Timestamp
    cost_usd: float
    input_tokens: int
    output_tokens: int
    error: str
    def __init__(self, run_id: _Optional[str] = ..., schedule_id: _Optional[str] = ..., fire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., trigger: _Optional[_Union[ScheduleRunTrigger, str]] = ..., outcome: _Optional[_Union[ScheduleRunOutcome, str]] = ..., session_id: _Optional[str] = ..., turn_id: _Optional[str] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., cost_usd: _Optional[float] = ..., input_tokens: _Optional[int] = ..., output_tokens: _Optional[int] = ..., error: _Optional[str] = ...) -> None: ...

class CreateScheduleRequest(_message.Message):
    __slots__ = ("spec",)
    SPEC_FIELD_NUMBER: _ClassVar[int]
    spec: ScheduleSpec
    def __init__(self, spec: _Optional[_Union[ScheduleSpec, _Mapping]] = ...) -> None: ...

class CreateScheduleResponse(_message.Message):
    __slots__ = ("schedule",)
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    schedule: Schedule
    def __init__(self, schedule: _Optional[_Union[Schedule, _Mapping]] = ...) -> None: ...

class GetScheduleRequest(_message.Message):
    __slots__ = ("schedule_id",)
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    schedule_id: str
    def __init__(self, schedule_id: _Optional[str] = ...) -> None: ...

class GetScheduleResponse(_message.Message):
    __slots__ = ("schedule",)
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    schedule: Schedule
    def __init__(self, schedule: _Optional[_Union[Schedule, _Mapping]] = ...) -> None: ...

class ListSchedulesRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListSchedulesResponse(_message.Message):
    __slots__ = ("schedules", "next_page_token")
    SCHEDULES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    schedules: _containers.RepeatedCompositeFieldContainer[Schedule]
    next_page_token: str
    def __init__(self, schedules: _Optional[_Iterable[_Union[Schedule, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class PauseScheduleRequest(_message.Message):
    __slots__ = ("schedule_id",)
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    schedule_id: str
    def __init__(self, schedule_id: _Optional[str] = ...) -> None: ...

class PauseScheduleResponse(_message.Message):
    __slots__ = ("schedule",)
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    schedule: Schedule
    def __init__(self, schedule: _Optional[_Union[Schedule, _Mapping]] = ...) -> None: ...

class ResumeScheduleRequest(_message.Message):
    __slots__ = ("schedule_id",)
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    schedule_id: str
    def __init__(self, schedule_id: _Optional[str] = ...) -> None: ...

class ResumeScheduleResponse(_message.Message):
    __slots__ = ("schedule",)
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    schedule: Schedule
    def __init__(self, schedule: _Optional[_Union[Schedule, _Mapping]] = ...) -> None: ...

class DeleteScheduleRequest(_message.Message):
    __slots__ = ("schedule_id",)
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    schedule_id: str
    def __init__(self, schedule_id: _Optional[str] = ...) -> None: ...

class DeleteScheduleResponse(_message.Message):
    __slots__ = ("deleted",)
    DELETED_FIELD_NUMBER: _ClassVar[int]
    deleted: bool
    def __init__(self, deleted: _Optional[bool] = ...) -> None: ...

class TriggerScheduleRequest(_message.Message):
    __slots__ = ("schedule_id",)
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    schedule_id: str
    def __init__(self, schedule_id: _Optional[str] = ...) -> None: ...

class TriggerScheduleResponse(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: ScheduleRun
    def __init__(self, run: _Optional[_Union[ScheduleRun, _Mapping]] = ...) -> None: ...

class ListScheduleRunsRequest(_message.Message):
    __slots__ = ("schedule_id", "page_size", "page_token")
    SCHEDULE_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    schedule_id: str
    page_size: int
    page_token: str
    def __init__(self, schedule_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListScheduleRunsResponse(_message.Message):
    __slots__ = ("runs", "next_page_token")
    RUNS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    runs: _containers.RepeatedCompositeFieldContainer[ScheduleRun]
    next_page_token: str
    def __init__(self, runs: _Optional[_Iterable[_Union[ScheduleRun, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...
