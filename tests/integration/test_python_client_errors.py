"""The Python SDK's errors: bad arguments refused before any call, gateway statuses as typed
exceptions with their details, a closed client, tools described from functions, and the
blocking client on paused turns."""

from __future__ import annotations

import asyncio
import enum
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import grpc
import pytest

from cogmesh.client import (
    Client,
    ClientClosed,
    GatewayClient,
    GatewayError,
    InvalidArgument,
    NotFound,
    ResourceExhausted,
    Unauthenticated,
    client_tool,
)
from gateway.auth import hash_key
from tests.integration.conftest import SUITE_SETTINGS, TIMEOUT_S, running_suite

NOWHERE = "127.0.0.1:1"  # nothing listens: any call that went out would fail with UNAVAILABLE


# --------------------------------------------------------------------------- bad arguments, before any call


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda c: c.run("s", 42), TypeError, "content: expected str, got int"),
        (lambda c: c.run(None, "hi"), TypeError, "session_id: expected str"),
        (lambda c: c.run("s", "hi", multitask_strategy="sometimes"), ValueError, "reject, enqueue, interrupt"),
        (lambda c: c.run("s", "hi", multitask_strategy=9), ValueError, "multitask_strategy: unknown value 9"),
        (lambda c: c.run("s", "hi", limits={"max_iters": 1}), ValueError, "limits: unknown field 'max_iters'"),
        (lambda c: c.run("s", "hi", limits={"max_iterations": "1"}), TypeError, "limits.max_iterations"),
        (lambda c: c.run("s", "hi", limits=[1]), TypeError, "limits: expected a dict or TurnLimits"),
        (lambda c: c.run("s", "hi", cost_budget={"action": "explode"}), ValueError, "cost_budget.action"),
        (lambda c: c.run("s", "hi", output_schema="{}"), TypeError, "output_schema: expected a dict"),
        (lambda c: c.run("s", "hi", tools=["calculator"]), TypeError, "tools: expected a function, got str"),
        (lambda c: c.run("s", "hi", tools=print), TypeError, "tools: expected a list of functions"),
        (lambda c: c.run("s", "hi", timeout_s=0), ValueError, "timeout_s: must be positive"),
        (lambda c: c.run("s", "hi", cancel_on_disconnect="yes"), TypeError, "cancel_on_disconnect: expected bool"),
        (lambda c: c.resolve_approval("s", "i", "maybe"), ValueError, "expected one of approve, edit, reject"),
        (lambda c: c.answer_interrupt("s", "i"), ValueError, "exactly one of user_input and tool_result"),
        (lambda c: c.approve("int_1"), TypeError, "approve: expected the Pause of a paused turn"),
        (lambda c: c.subscribe("s", -1), ValueError, "after_seq: must not be negative"),
        (lambda c: c.list_sessions(page_size="10"), TypeError, "page_size: expected int"),
    ],
)
async def test_wrong_arguments_name_themselves_before_any_call(call: object, error: type, match: str) -> None:
    async with GatewayClient(NOWHERE) as client:
        with pytest.raises(error, match=match):
            result = call(client)  # type: ignore[operator]
            if hasattr(result, "__anext__"):
                await anext(result)
            else:
                await result


def test_client_options_are_checked() -> None:
    with pytest.raises(TypeError, match="address"):
        GatewayClient(50051)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="api_key"):
        GatewayClient(NOWHERE, api_key=b"k")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timeout_s"):
        Client(NOWHERE, timeout_s=-1)


# --------------------------------------------------------------------------- tools from functions


class Unit(enum.Enum):
    CM = "cm"
    INCH = "in"


def measure(length: float, unit: Unit, label: str | None = None, tags: list[str] | None = None) -> str:
    """Measure something.

    Longer explanation that is not part of the description.

    Args:
        length: how long it is,
            in the given unit.
        unit: the unit.
    """
    return f"{length} {unit}"


def test_a_function_becomes_a_tool_schema() -> None:
    tool = client_tool(measure)
    assert (tool.name, tool.description) == ("measure", "Measure something.")
    assert tool.parameters == {
        "type": "object",
        "properties": {
            "length": {"type": "number", "description": "how long it is, in the given unit."},
            "unit": {"enum": ["cm", "in"], "description": "the unit."},
            "label": {"type": "string"},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["length", "unit"],
    }
    mode = client_tool(lambda mode: mode, name="pick")
    assert mode.parameters == {"type": "object", "properties": {"mode": {}}, "required": ["mode"]}

    def choose(color: Literal["red", "blue"], count: int = 1) -> None: ...

    assert client_tool(choose).parameters["properties"] == {
        "color": {"enum": ["red", "blue"]},
        "count": {"type": "integer"},
    }

    def takes_anything(*args: int) -> None: ...

    with pytest.raises(TypeError, match=r"takes_anything\(args\): only named parameters"):
        client_tool(takes_anything)

    def takes_a_path(where: Path) -> None: ...

    with pytest.raises(TypeError, match=r"takes_a_path\(where\): cannot describe"):
        client_tool(takes_a_path)
    with pytest.raises(ValueError, match="not a valid tool name"):
        client_tool(measure, name="no spaces allowed")


async def test_a_failing_or_odd_tool_is_reported_not_raised() -> None:
    def boom(n: int) -> int:
        raise RuntimeError(f"no {n}")

    assert await client_tool(boom).call({"n": 2.0}) == ("RuntimeError: no 2", True)
    assert await client_tool(boom).call({"m": 1}) == (
        "TypeError: test_a_failing_or_odd_tool_is_reported_not_raised.<locals>.boom() got an unexpected keyword "
        "argument 'm'",
        True,
    )
    assert await client_tool(lambda: {"a": [1]}, name="j").call({}) == ('{"a": [1]}', False)
    assert await client_tool(lambda: object, name="o").call({}) == ("<class 'object'>", False)


# --------------------------------------------------------------------------- gateway statuses as exceptions


async def test_statuses_become_typed_errors_with_their_details(tmp_path: Path) -> None:
    keys = tmp_path / "keys.yaml"
    keys.write_text(f"keys:\n  - {{sha256: {hash_key('k-acme')}, tenant: acme, principal: acme-app}}\n")
    settings = SUITE_SETTINGS.model_copy(
        update={"api_keys_file": keys, "dev_mode": False, "tenant_rate_per_s": 1.0, "tenant_burst": 3}
    )
    async with running_suite(settings) as (suite, _):
        async with GatewayClient(suite.gateway_address, api_key="wrong") as stranger:
            with pytest.raises(Unauthenticated) as denied:
                await stranger.list_agents()
            assert denied.value.code == grpc.StatusCode.UNAUTHENTICATED and isinstance(denied.value, GatewayError)

        # rate_limit_attempts=1: raise the refusal instead of waiting it out
        async with GatewayClient(
            suite.gateway_address, api_key="k-acme", timeout_s=TIMEOUT_S, rate_limit_attempts=1
        ) as client:
            with pytest.raises(NotFound) as missing:
                await client.get_session("missing")
            assert missing.value.reason == "SESSION_NOT_FOUND"
            with pytest.raises(InvalidArgument) as bad:
                await client.list_sessions(page_size=5000)
            assert bad.value.violations and bad.value.violations[0][0] == "page_size"
            with pytest.raises(ResourceExhausted) as limited:
                for _ in range(10):  # a burst of 3 at 1 per second: the rest are refused
                    await client.list_agents()
            assert limited.value.reason == "RATE_LIMITED"
            assert limited.value.retry_after_s is not None and 0 < limited.value.retry_after_s <= 1.5


async def test_a_closed_client_says_so() -> None:
    async with running_suite() as (suite, _):
        client = GatewayClient(suite.gateway_address)
        session = await client.create_session()
        watching = client.subscribe(session.session_id)
        reader = asyncio.ensure_future(anext(watching))
        await asyncio.sleep(0.3)  # the subscription is open and idle
        await client.close()
        with pytest.raises(ClientClosed):
            await asyncio.wait_for(reader, TIMEOUT_S)
        with pytest.raises(ClientClosed, match="closed"):
            await client.get_session(session.session_id)
        with pytest.raises(ClientClosed):
            await anext(client.send_message(session.session_id, "hi"))


# --------------------------------------------------------------------------- the blocking client


@pytest.fixture
def suite_address() -> Iterator[str]:
    """A suite on a loop of its own, for the blocking client (which runs its own loop)."""

    async def serve(ready: asyncio.Queue[str], done: asyncio.Event) -> None:
        async with running_suite() as (suite, _):
            await ready.put(suite.gateway_address)
            await done.wait()

    loop = asyncio.new_event_loop()
    ready: asyncio.Queue[str] = asyncio.Queue()
    done = asyncio.Event()
    thread = threading.Thread(target=loop.run_until_complete, args=(serve(ready, done),), daemon=True)
    thread.start()
    try:
        yield asyncio.run_coroutine_threadsafe(ready.get(), loop).result(TIMEOUT_S * 3)
    finally:
        loop.call_soon_threadsafe(done.set)
        thread.join(TIMEOUT_S)


def test_blocking_client_on_paused_turns_and_tools(suite_address: str) -> None:
    seen: list[str] = []

    def lookup(word: str) -> str:
        """Look a word up in the user's dictionary."""
        seen.append(threading.current_thread().name)
        return word.upper()

    with Client(suite_address, timeout_s=TIMEOUT_S) as client:
        session = client.create_session(agent="careful")
        paused = client.run(session.session_id, "What is 6 * 7?")
        assert paused.pause is not None and paused.pause.kind == "approval"
        assert client.approve(paused.pause).text == "6 * 7 = 42."
        asked = client.run(session.session_id, "@ask_user Your name?")
        assert asked.pause is not None and client.answer(asked.pause, "Ada").text == "The ask_user tool returned: Ada"
        looked = client.run(session.session_id, '@lookup {"word": "cog"}', tools=[lookup])
        assert looked.text == "The lookup tool returned: COG" and len(seen) == 1
        with pytest.raises(TypeError, match="content"):
            client.run(session.session_id, b"bytes")  # type: ignore[arg-type]
        with pytest.raises(NotFound):
            client.get_session("missing")
    with pytest.raises(ClientClosed):
        client.get_session(session.session_id)
