"""Agents as versioned resources through the gateway's AgentService, with API keys.

The whole suite runs in process with a keys file: one key may write agents, one of the same
tenant may only read them, one is another tenant's.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import pytest_asyncio
from google.protobuf import struct_pb2

from cogmesh.gateway.v1 import agents_pb2 as api
from cogmesh.gateway.v1 import agents_pb2_grpc
from gateway.auth import hash_key
from tests.integration.conftest import SUITE_SETTINGS, running_suite, status_details

pytestmark = pytest.mark.asyncio(loop_scope="module")

KEYS = {  # key: (tenant, principal, permissions)
    "key-admin": ("acme", "admin", "[agents:write]"),
    "key-reader": ("acme", "reader", "[]"),
    "key-globex": ("globex", "globex-admin", "[agents:write]"),
}


def bearer(key: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {key}"),)


def definition(**fields: Any) -> struct_pb2.Struct:
    out = struct_pb2.Struct()
    out.update({"system_prompt": "You help with invoices.", "model": "gpt-4o", **fields})
    return out


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
async def agents(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[agents_pb2_grpc.AgentServiceStub]:
    settings = SUITE_SETTINGS.model_copy(update={"api_keys_file": keys_file(tmp_path_factory.mktemp("keys"))})
    async with running_suite(settings) as (suite, _), grpc.aio.insecure_channel(suite.gateway_address) as channel:
        yield agents_pb2_grpc.AgentServiceStub(channel)


async def failure(call: Any) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    return caught.value


async def test_versions_aliases_and_reads(agents: agents_pb2_grpc.AgentServiceStub) -> None:
    admin, reader = bearer("key-admin"), bearer("key-reader")
    created = await agents.CreateAgent(
        api.CreateAgentRequest(name="invoices", definition=definition(description="v1")), metadata=admin
    )
    assert (created.agent.version, created.agent.created_by, created.agent.native) == (1, "admin", False)
    assert created.agent.definition["description"] == "v1"
    assert "name" not in created.agent.definition.fields
    second = await agents.UpdateAgent(
        api.UpdateAgentRequest(name="invoices", definition=definition(description="v2"), expected_version=1),
        metadata=admin,
    )
    assert second.agent.version == 2
    stale = await failure(
        agents.UpdateAgent(
            api.UpdateAgentRequest(name="invoices", definition=definition(description="late"), expected_version=1),
            metadata=admin,
        )
    )
    assert stale.code() == grpc.StatusCode.ABORTED and "at version 2, not 1" in (stale.details() or "")

    moved = await agents.SetAgentAlias(
        api.SetAgentAliasRequest(name="invoices", alias="prod", version=1), metadata=admin
    )
    assert (moved.agent.version, list(moved.agent.aliases), moved.previous_version) == (1, ["prod"], 0)
    # Reads need no permission: by alias, by "name@version", latest.
    by_alias = await agents.GetAgent(api.GetAgentRequest(name="invoices@prod"), metadata=reader)
    assert (by_alias.agent.version, by_alias.agent.definition["description"]) == (1, "v1")
    by_number = await agents.GetAgent(api.GetAgentRequest(name="invoices", version=2), metadata=reader)
    assert by_number.agent.definition["description"] == "v2"
    latest = await agents.GetAgent(api.GetAgentRequest(name="invoices@latest"), metadata=reader)
    assert latest.agent.version == 2
    listed = await agents.ListAgentVersions(api.ListAgentVersionsRequest(name="invoices"), metadata=reader)
    assert [v.version for v in listed.versions] == [2, 1] and dict(listed.aliases) == {"prod": 1}
    missing = await failure(agents.GetAgent(api.GetAgentRequest(name="invoices@7"), metadata=reader))
    assert missing.code() == grpc.StatusCode.NOT_FOUND and "no version 7" in (missing.details() or "")

    # Another tenant sees none of it, and may use the same name.
    other = await failure(agents.GetAgent(api.GetAgentRequest(name="invoices"), metadata=bearer("key-globex")))
    assert other.code() == grpc.StatusCode.NOT_FOUND
    await agents.CreateAgent(
        api.CreateAgentRequest(name="invoices", definition=definition()), metadata=bearer("key-globex")
    )

    assert (
        await agents.DeleteAgentAlias(api.DeleteAgentAliasRequest(name="invoices", alias="prod"), metadata=admin)
    ).previous_version == 1
    deleted = await agents.DeleteAgent(api.DeleteAgentRequest(name="invoices"), metadata=admin)
    assert deleted.deleted_versions == 2
    gone = await failure(agents.GetAgent(api.GetAgentRequest(name="invoices"), metadata=reader))
    assert gone.code() == grpc.StatusCode.NOT_FOUND


async def test_a_key_without_the_permission_changes_nothing(agents: agents_pb2_grpc.AgentServiceStub) -> None:
    reader = bearer("key-reader")
    for call in (
        agents.CreateAgent(api.CreateAgentRequest(name="sneaky", definition=definition()), metadata=reader),
        agents.UpdateAgent(api.UpdateAgentRequest(name="sneaky", definition=definition()), metadata=reader),
        agents.DeleteAgent(api.DeleteAgentRequest(name="sneaky"), metadata=reader),
        agents.SetAgentAlias(api.SetAgentAliasRequest(name="sneaky", alias="prod", version=1), metadata=reader),
    ):
        refused = await failure(call)
        assert refused.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "agents:write" in (refused.details() or "")
    gone = await failure(agents.GetAgent(api.GetAgentRequest(name="sneaky"), metadata=reader))
    assert gone.code() == grpc.StatusCode.NOT_FOUND


async def test_bad_definitions_name_the_field(agents: agents_pb2_grpc.AgentServiceStub) -> None:
    admin = bearer("key-admin")
    cases = [
        (definition(mode="boss"), "definition.mode"),
        (definition(limits={"max_iterations": "many"}), "definition.limits.max_iterations"),
        (definition(name="other"), "definition.name"),
        (definition(prompts_dir="/etc"), "definition.prompts_dir"),
        (definition(model="no-such-model-anywhere"), "definition.model"),
        (definition(subagents=["ghost"]), "definition.subagents[0]"),
        (definition(unknown_field=1), "definition.unknown_field"),
    ]
    for bad, field in cases:
        refused = await failure(
            agents.CreateAgent(api.CreateAgentRequest(name="badly", definition=bad), metadata=admin)
        )
        assert refused.code() == grpc.StatusCode.INVALID_ARGUMENT, field
        _, violations = status_details(refused)
        assert field in [where for where, _ in violations], (field, refused.details())
    named = await failure(
        agents.CreateAgent(api.CreateAgentRequest(name="Bad Name", definition=definition()), metadata=admin)
    )
    assert named.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_built_in_agents_read_as_native_and_refuse_changes(agents: agents_pb2_grpc.AgentServiceStub) -> None:
    admin = bearer("key-admin")
    builtin = await agents.GetAgent(api.GetAgentRequest(name="default"), metadata=admin)
    assert (builtin.agent.native, builtin.agent.version) == (True, 0)
    taken = await failure(
        agents.CreateAgent(api.CreateAgentRequest(name="default", definition=definition()), metadata=admin)
    )
    assert taken.code() == grpc.StatusCode.ALREADY_EXISTS
    for call in (
        agents.UpdateAgent(api.UpdateAgentRequest(name="default", definition=definition()), metadata=admin),
        agents.DeleteAgent(api.DeleteAgentRequest(name="default"), metadata=admin),
    ):
        assert (await failure(call)).code() == grpc.StatusCode.FAILED_PRECONDITION
    # A stored agent may delegate to a built-in subagent and to another stored agent.
    await agents.CreateAgent(
        api.CreateAgentRequest(name="helper-two", definition=definition(mode="subagent")), metadata=admin
    )
    made = await agents.CreateAgent(
        api.CreateAgentRequest(name="lead", definition=definition(subagents=["helper-two"])), metadata=admin
    )
    assert list(made.agent.definition["subagents"]) == ["helper-two"]
