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

from cogmesh.common.v1 import events_pb2
from cogmesh.gateway.v1 import agents_pb2 as api
from cogmesh.gateway.v1 import agents_pb2_grpc, gateway_pb2
from cogmesh.sessions.v1 import sessions_pb2
from gateway.auth import hash_key
from services.runtime import journal
from tests.integration.conftest import SUITE_SETTINGS, TIMEOUT_S, running_suite, status_details

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
async def stubs(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[dict[str, Any]]:
    settings = SUITE_SETTINGS.model_copy(update={"api_keys_file": keys_file(tmp_path_factory.mktemp("keys"))})
    async with running_suite(settings) as (suite, found), grpc.aio.insecure_channel(suite.gateway_address) as channel:
        yield {**found, "agents": agents_pb2_grpc.AgentServiceStub(channel)}


@pytest.fixture
def agents(stubs: dict[str, Any]) -> agents_pb2_grpc.AgentServiceStub:
    return stubs["agents"]  # type: ignore[no-any-return]


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
    info, _ = status_details(stale)
    assert info is not None and info.reason == "AGENT_VERSION_CONFLICT" and info.metadata["latest_version"] == "2"

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
        (definition(tools=["calculator", "teleport"]), "definition.tools[1]"),
        (definition(tools=["mcp__nowhere__*"]), "definition.tools[0]"),
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
    # Tools: built-ins, patterns that match one, and the agent's own memory tools pass.
    tools = ["calculator", "current_*", "search_memories"]
    mixed = await agents.CreateAgent(
        api.CreateAgentRequest(name="tooled", definition=definition(tools=tools)), metadata=admin
    )
    assert list(mixed.agent.definition["tools"]) == tools


# ---------------------------------------------------------------------- sessions that run a stored agent

ADMIN = bearer("key-admin")


def stored(prompt: str, **fields: Any) -> struct_pb2.Struct:
    """A definition the local model runs like the built-in default: the calculator, an inline prompt."""
    out = struct_pb2.Struct()
    out.update({"model": "local", "tools": ["calculator"], "system_prompt": prompt, **fields})
    return out


async def turn(gateway: Any, session_id: str, content: str) -> list[events_pb2.RuntimeEvent]:
    request = gateway_pb2.SendMessageRequest(session_id=session_id, content=content)
    return [e async for r in gateway.SendMessage(request, metadata=ADMIN, timeout=TIMEOUT_S) for e in r.events]


async def open_session(gateway: Any, agent: str) -> Any:
    return (await gateway.CreateSession(gateway_pb2.CreateSessionRequest(agent=agent), metadata=ADMIN)).session


async def move(gateway: Any, session_id: str, agent: str) -> Any:
    mask = {"paths": ["agent"]}
    request = gateway_pb2.UpdateSessionRequest(session_id=session_id, agent=agent, update_mask=mask)
    return (await gateway.UpdateSession(request, metadata=ADMIN)).session


async def started_with(sessions: Any, session_id: str, turn_id: str) -> tuple[int, str]:
    """(agent_version, system prompt) the turn's journal recorded at its start (and kept since)."""
    reply = await sessions.GetJournal(
        sessions_pb2.GetJournalRequest(tenant_id="acme", session_id=session_id, turn_id=turn_id), timeout=TIMEOUT_S
    )
    state = journal.replay(reply.entries).state
    assert state is not None, "the turn recorded no step"
    return int(state["meta"]["agent_version"]), str(state["system_prompt"])


async def test_a_session_keeps_its_version_until_moved(stubs: dict[str, Any]) -> None:
    agents, gateway, sessions = stubs["agents"], stubs["gateway"], stubs["sessions"]
    await agents.CreateAgent(
        api.CreateAgentRequest(name="tutor", definition=stored("You are tutor one.")), metadata=ADMIN
    )
    await agents.SetAgentAlias(api.SetAgentAliasRequest(name="tutor", alias="prod", version=1), metadata=ADMIN)
    on_latest = (await gateway.CreateSession(gateway_pb2.CreateSessionRequest(agent="tutor"), metadata=ADMIN)).session
    on_prod = (
        await gateway.CreateSession(gateway_pb2.CreateSessionRequest(agent="tutor@prod"), metadata=ADMIN)
    ).session
    assert (on_latest.agent, on_latest.agent_version, on_prod.agent_version) == ("tutor", 1, 1)
    await agents.UpdateAgent(
        api.UpdateAgentRequest(name="tutor", definition=stored("You are tutor two.")), metadata=ADMIN
    )

    events = await turn(gateway, on_latest.session_id, "What is 2 * 3?")
    assert events[-1].HasField("final") and "6" in events[-1].final.text
    version, prompt = await started_with(sessions, on_latest.session_id, events[-1].turn_id)
    assert version == 1 and "You are tutor one." in prompt  # a new version does not move the session

    assert (await open_session(gateway, "tutor@2")).agent_version == 2
    listed = await gateway.ListSessions(gateway_pb2.ListSessionsRequest(agent="tutor", agent_version=1), metadata=ADMIN)
    assert {s.session_id for s in listed.sessions} == {on_latest.session_id, on_prod.session_id}

    assert (await move(gateway, on_latest.session_id, "tutor@2")).agent_version == 2
    events = await turn(gateway, on_latest.session_id, "What is 4 * 5?")
    assert events[-1].HasField("final") and "20" in events[-1].final.text
    assert await started_with(sessions, on_latest.session_id, events[-1].turn_id) == (2, ANY_PROMPT_WITH("two"))

    names = {
        (a.name, a.version) for a in (await gateway.ListAgents(gateway_pb2.ListAgentsRequest(), metadata=ADMIN)).agents
    }
    assert ("tutor", 2) in names and ("default", 0) in names
    unknown = await failure(gateway.CreateSession(gateway_pb2.CreateSessionRequest(agent="tutor@9"), metadata=ADMIN))
    assert unknown.code() == grpc.StatusCode.NOT_FOUND and "no version 9" in (unknown.details() or "")
    builtin = await failure(gateway.CreateSession(gateway_pb2.CreateSessionRequest(agent="default@2"), metadata=ADMIN))
    assert builtin.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_a_new_version_mid_turn_does_not_touch_the_running_turn(stubs: dict[str, Any]) -> None:
    agents, gateway, sessions = stubs["agents"], stubs["gateway"], stubs["sessions"]
    careful = stored("You are the careful one.", interrupt_on={"calculator": True})
    await agents.CreateAgent(api.CreateAgentRequest(name="checker", definition=careful), metadata=ADMIN)
    session = await open_session(gateway, "checker")
    paused = await turn(gateway, session.session_id, "What is 6 * 7?")
    asked = next(e for e in paused if e.HasField("approval_required"))
    # While the turn waits: a new version, and the session moved to it.
    await agents.UpdateAgent(
        api.UpdateAgentRequest(name="checker", definition=stored("You are the hasty one.")), metadata=ADMIN
    )
    await gateway.UpdateSession(
        gateway_pb2.UpdateSessionRequest(
            session_id=session.session_id, agent="checker", update_mask={"paths": ["agent"]}
        ),
        metadata=ADMIN,
    )
    approve = gateway_pb2.ResolveApprovalRequest(
        session_id=session.session_id,
        interrupt_id=asked.approval_required.interrupt_id,
        decision=events_pb2.APPROVAL_DECISION_APPROVE,
    )
    rest = [e async for r in gateway.ResolveApproval(approve, metadata=ADMIN, timeout=TIMEOUT_S) for e in r.events]
    assert rest[-1].HasField("final") and "42" in rest[-1].final.text
    # The paused turn went on with the definition it started with.
    assert await started_with(sessions, session.session_id, asked.turn_id) == (1, ANY_PROMPT_WITH("careful"))
    # The next turn runs version 2: no approval asked any more.
    after = await turn(gateway, session.session_id, "What is 2 * 2?")
    assert not any(e.HasField("approval_required") for e in after) and after[-1].HasField("final")
    assert (await started_with(sessions, session.session_id, after[-1].turn_id))[0] == 2


class ANY_PROMPT_WITH:
    def __init__(self, word: str) -> None:
        self.word = word

    def __eq__(self, other: object) -> bool:
        return isinstance(other, str) and self.word in other

    def __repr__(self) -> str:
        return f"<a prompt with {self.word!r}>"
