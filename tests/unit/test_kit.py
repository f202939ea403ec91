from __future__ import annotations

import asyncio
import contextlib
import json

import grpc
import pytest
from google.protobuf import json_format, struct_pb2
from google.rpc import error_details_pb2
from structlog.testing import capture_logs

from cogmesh.common.v1 import messages_pb2
from cogmesh.gateway.v1 import gateway_pb2
from services.kit import tasks, validation
from services.kit.config import Settings, load_settings
from services.kit.errors import InvalidArgument, NotFound, Violations
from services.kit.redis_pool import next_message
from services.lib import turn_options


def test_flags_override_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COGMESH_LOG_LEVEL", "debug")
    monkeypatch.setenv("COGMESH_CALL_TIMEOUT_S", "2.5")
    settings = load_settings(Settings, ["--call-timeout-s", "7", "--listen", "0.0.0.0:9000"])
    assert settings.log_level == "debug"
    assert settings.call_timeout_s == 7.0
    assert settings.listen_address("models") == "0.0.0.0:9000"
    assert Settings().listen_address("models") == "127.0.0.1:50056"


def test_invalid_setting_names_the_field() -> None:
    with pytest.raises(ValueError, match="call_timeout_s"):
        load_settings(Settings, ["--call-timeout-s", "-1"])


def test_violations_become_bad_request_details() -> None:
    problems = Violations()
    problems.require(" ", "session_id")
    problems.check(False, "page_size", "must be between 0 and 1000")
    with pytest.raises(InvalidArgument) as caught:
        problems.raise_if_any()
    status = caught.value.to_status()
    assert status.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    info, bad = error_details_pb2.ErrorInfo(), error_details_pb2.BadRequest()
    assert status.details[0].Unpack(info) and status.details[1].Unpack(bad)
    assert (info.reason, info.domain) == ("INVALID_ARGUMENT", "cogmesh.dev")
    assert [(v.field, v.description) for v in bad.field_violations] == [
        ("session_id", "is required"),
        ("page_size", "must be between 0 and 1000"),
    ]


def test_error_info_carries_reason_and_metadata() -> None:
    from cogmesh.common.v1 import errors_pb2

    err = NotFound("gone", reason=errors_pb2.ERROR_REASON_SESSION_NOT_FOUND, metadata={"session_id": "x"})
    info = error_details_pb2.ErrorInfo()
    err.to_status().details[0].Unpack(info)
    assert info.reason == "SESSION_NOT_FOUND" and dict(info.metadata) == {"session_id": "x"}


def test_turn_options_name_each_field_with_the_callers_prefix() -> None:
    request = gateway_pb2.SendMessageRequest(
        runtime="r" * 65,
        limits={"max_parallel_tools": -1},
        cost_budget={"max_cost_usd": float("inf"), "max_total_tokens": -2},
        output_schema=json_format.ParseDict({"type": "banana"}, struct_pb2.Struct()),
        client_tools=[messages_pb2.ToolSpec(name="ok"), messages_pb2.ToolSpec(name="ok")],
    )
    # The fields' own bounds are the request's rules (gateway.proto, common turns.proto), the rest turn_options'.
    assert [v.field for v in validation.violations(request)] == [
        "session_id",
        "content",
        "runtime",
        "limits.max_parallel_tools",
        "cost_budget.max_cost_usd",
        "cost_budget.max_total_tokens",
    ]
    problems = Violations()
    turn_options.check(request, problems, "message.")
    assert [field for field, _ in problems.items] == ["message.client_tools[1].name", "message.output_schema"]
    fine = Violations()
    turn_options.check(gateway_pb2.SendMessageRequest(runtime="single-shot"), fine)
    assert fine.items == []


def test_a_valid_schema_is_checked_once_by_content() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    first = turn_options.schema_validator(schema)
    assert turn_options.schema_validator({"properties": {"n": {"type": "integer"}}, "type": "object"}) is first
    assert json.dumps(schema, sort_keys=True, separators=(",", ":")) in turn_options._validators
    with pytest.raises(turn_options.InvalidSchema, match="not a valid JSON Schema at properties/n/type"):
        turn_options.schema_validator({"type": "object", "properties": {"n": {"type": 7}}})


async def test_a_cancel_swallowed_by_the_pubsub_read_still_ends_the_reader() -> None:
    """redis-py can return from a pub/sub read as if its wait ran out when the reader was cancelled
    in it; next_message ends the reader anyway (a loop reading until cancelled would go round)."""
    entered = asyncio.Event()

    class SwallowingPubSub:
        async def get_message(self, **_: object) -> None:  # the signature of PubSub.get_message is not used
            entered.set()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.Event().wait()
            return None

    async def reader() -> None:
        while True:
            await next_message(SwallowingPubSub(), 30.0)  # type: ignore[arg-type]

    task = asyncio.create_task(reader())
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_stopping_tasks_leaves_one_that_ignores_its_cancel_behind_and_says_where() -> None:
    stubborn_started, released = asyncio.Event(), asyncio.Event()

    async def stubborn() -> None:
        while not released.is_set():
            stubborn_started.set()
            with contextlib.suppress(asyncio.CancelledError):
                await released.wait()

    obedient = asyncio.create_task(asyncio.Event().wait())
    stuck = asyncio.create_task(stubborn())
    await stubborn_started.wait()
    with capture_logs() as logs:
        await tasks.stop([obedient, stuck], "the test", timeout_s=0.05)
    assert obedient.cancelled() and not stuck.done()
    (warning,) = [entry for entry in logs if entry["log_level"] == "warning"]
    assert warning["event"].startswith("the test: a task did not end")
    assert "stubborn" in warning["at"]
    released.set()
    await stuck
