"""The Python SDK's agents as versioned resources, against a real in-process suite with API keys:
create, update, read by version and alias, list, delete; a session opened on "name@alias" and
moved; a key without `agents:write` refused with the SDK's PermissionDenied."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from cogmesh.client import (
    Aborted,
    AlreadyExists,
    Client,
    GatewayClient,
    InvalidArgument,
    NotFound,
    PermissionDenied,
)
from gateway.auth import hash_key
from tests.integration.conftest import SUITE_SETTINGS, running_suite

pytestmark = pytest.mark.asyncio(loop_scope="module")

KEYS = {"sdk-admin": ("acme", "release-bot", "[agents:write]"), "sdk-reader": ("acme", "web-app", "[]")}


def definition(prompt: str, **fields: Any) -> dict[str, Any]:
    """What the local model runs like the built-in default: the calculator, an inline prompt."""
    return {"model": "local", "tools": ["calculator"], "system_prompt": prompt, **fields}


def keys_file(directory: Path) -> Path:
    path = directory / "keys.yaml"
    path.write_text(
        "keys:\n"
        + "".join(
            f"  - {{sha256: {hash_key(key)}, tenant: {tenant}, principal: {who}, permissions: {perms}}}\n"
            for key, (tenant, who, perms) in KEYS.items()
        )
    )
    return path


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def address(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[str]:
    settings = SUITE_SETTINGS.model_copy(
        update={"dev_mode": False, "api_keys_file": keys_file(tmp_path_factory.mktemp("keys"))}
    )
    async with running_suite(settings) as (suite, _):
        yield suite.gateway_address


async def test_versions_aliases_and_reads(address: str) -> None:
    async with (
        GatewayClient(address, api_key="sdk-admin") as admin,
        GatewayClient(address, api_key="sdk-reader") as reader,
    ):
        first = await admin.create_agent("sdk-tutor", definition("You are tutor one.", description="v1"))
        assert (first.name, first.version, first.created_by, first.native) == ("sdk-tutor", 1, "release-bot", False)
        assert first.definition["description"] == "v1" and first.create_time.seconds > 0
        with pytest.raises(AlreadyExists):
            await admin.create_agent("sdk-tutor", definition("again"))

        second = await admin.update_agent("sdk-tutor", definition("You are tutor two."), expected_version=1)
        assert second.version == 2
        with pytest.raises(Aborted, match="at version 2, not 1"):
            await admin.update_agent("sdk-tutor", definition("late"), expected_version=1)

        moved = await admin.set_agent_alias("sdk-tutor", "prod", 1)
        assert (moved.agent.version, list(moved.agent.aliases), moved.previous_version) == (1, ["prod"], 0)

        # Reads need no permission: latest, "name@alias", alias=, "name@version", version=.
        assert (await reader.get_agent("sdk-tutor")).version == 2
        by_alias = await reader.get_agent("sdk-tutor@prod")
        assert (by_alias.version, by_alias.definition["description"]) == (1, "v1")
        assert (await reader.get_agent("sdk-tutor", alias="prod")).version == 1
        assert (await reader.get_agent("sdk-tutor@2")).definition["system_prompt"] == "You are tutor two."
        assert (await reader.get_agent("sdk-tutor", version=1)).version == 1
        with pytest.raises(NotFound, match="no version 7"):
            await reader.get_agent("sdk-tutor@7")
        builtin = await reader.get_agent("default")
        assert (builtin.native, builtin.version) == (True, 0)

        listed = [v async for v in reader.list_agent_versions("sdk-tutor", page_size=1)]  # one page a version
        assert [(v.version, list(v.aliases)) for v in listed] == [(2, []), (1, ["prod"])]
        names = {(a.name, a.version) for a in (await reader.list_agents()).agents}
        assert ("sdk-tutor", 2) in names and ("default", 0) in names

        assert await admin.delete_agent_alias("sdk-tutor", "prod") == 1
        with pytest.raises(NotFound):
            await reader.get_agent("sdk-tutor@prod")
        assert await admin.delete_agent("sdk-tutor") == 2
        with pytest.raises(NotFound):
            await reader.get_agent("sdk-tutor")


async def test_a_session_opened_on_an_alias_runs_it_until_moved(address: str) -> None:
    async with GatewayClient(address, api_key="sdk-admin") as client:
        await client.create_agent("sdk-clerk", definition("You are clerk one."))
        await client.update_agent("sdk-clerk", definition("You are clerk two."))
        await client.set_agent_alias("sdk-clerk", "prod", 1)

        session = await client.create_session(agent="sdk-clerk@prod")
        assert (session.agent, session.agent_version) == ("sdk-clerk", 1)
        result = await client.run(session.session_id, "What is 6 * 7?")
        assert "42" in result.text
        on_one = await client.list_sessions(agent="sdk-clerk", agent_version=1)
        assert [s.session_id for s in on_one.sessions] == [session.session_id]

        moved = await client.move_session(session.session_id, "sdk-clerk@2")
        assert (moved.agent, moved.agent_version) == ("sdk-clerk", 2)
        assert (await client.get_session(session.session_id)).agent_version == 2
        assert "20" in (await client.run(session.session_id, "What is 4 * 5?")).text
        assert not (await client.list_sessions(agent="sdk-clerk", agent_version=1)).sessions
        with pytest.raises(NotFound, match="no version 9"):
            await client.move_session(session.session_id, "sdk-clerk@9")


async def test_a_key_without_agents_write_is_refused(address: str) -> None:
    async with GatewayClient(address, api_key="sdk-reader") as reader:
        for call in (
            reader.create_agent("sdk-sneaky", definition("no")),
            reader.update_agent("sdk-sneaky", definition("no")),
            reader.set_agent_alias("sdk-sneaky", "prod", 1),
            reader.delete_agent_alias("sdk-sneaky", "prod"),
            reader.delete_agent("sdk-sneaky"),
        ):
            with pytest.raises(PermissionDenied, match="agents:write") as refused:
                await call
            assert refused.value.metadata.get("permission") == "agents:write"
        with pytest.raises(NotFound):
            await reader.get_agent("sdk-sneaky")


async def test_a_bad_definition_names_its_field(address: str) -> None:
    async with GatewayClient(address, api_key="sdk-admin") as admin:
        with pytest.raises(InvalidArgument) as refused:
            await admin.create_agent("sdk-bad", definition("x", mode="boss"))
        assert "definition.mode" in [field for field, _ in refused.value.violations]
        with pytest.raises(TypeError, match="definition: expected a dict"):
            await admin.create_agent("sdk-bad", "model: local")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="ref: must not be empty"):
            await admin.get_agent("")


def blocking_round_trip(address: str) -> None:
    with Client(address, api_key="sdk-admin") as client:
        assert client.create_agent("sdk-sync", definition("You are sync one.")).version == 1
        assert client.update_agent("sdk-sync", definition("You are sync two."), expected_version=1).version == 2
        assert client.set_agent_alias("sdk-sync", "prod", 1).previous_version == 0
        assert client.get_agent("sdk-sync", alias="prod").definition["system_prompt"] == "You are sync one."
        assert [v.version for v in client.list_agent_versions("sdk-sync")] == [2, 1]
        session = client.create_session(agent="sdk-sync@prod")
        assert client.move_session(session.session_id, "sdk-sync").agent_version == 2
        assert [s.session_id for s in client.list_sessions(agent="sdk-sync", agent_version=2).sessions] == [
            session.session_id
        ]
        assert client.delete_agent_alias("sdk-sync", "prod") == 1
        assert client.delete_agent("sdk-sync") == 2


async def test_the_blocking_client_has_the_same_agent_calls(address: str) -> None:
    await asyncio.to_thread(blocking_round_trip, address)  # the suite's loop serves while the thread blocks
