"""The policy service wired into the runtime's loop, through the whole suite: slash commands and their
effects, role routing, a prompt refused by a hook, hooks around tools, interceptor notices and masking."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from cogmesh.common.v1 import events_pb2
from cogmesh.sessions.v1 import sessions_pb2
from services.kit.protos import struct_to_dict
from services.lib.agents import DEFAULT_AGENTS_DIR
from tests.integration.conftest import SUITE_SETTINGS, TIMEOUT_S, new_session, payload
from tests.integration.test_pause_resume import Env, agents_suite, message, session_of, stream

pytestmark = pytest.mark.asyncio(loop_scope="module")

POLICY = """
hooks:
  - event: UserPromptSubmit
    local: tests.integration.test_runtime_policy:refuse_forbidden
  - event: PostToolUse
    local: tests.integration.test_runtime_policy:audit_result
  - event: Stop
    local: tests.integration.test_runtime_policy:record_stop
"""
INTERCEPTORS = """
agents:
  default:
    interceptors:
      - type: PIIShield
        patterns: [email]
"""
ROUTER = """
agents:
  default:
    default_role: assistant
    roles:
      assistant: {}
      accountant:
        keywords: [invoice]
"""
STOPS: list[dict[str, Any]] = []


def refuse_forbidden(**hook: Any) -> dict[str, str] | None:
    if "forbidden" in hook["prompt"]:
        return {"decision": "block", "reason": "no forbidden topics here"}
    return None


def audit_result(**hook: Any) -> dict[str, str]:
    return {"result": f"{hook['result']} (audited)"}


def record_stop(**hook: Any) -> None:
    STOPS.append({"role_id": hook["role_id"], "final_text": hook["final_text"], "turn_id": hook["turn_id"]})


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def env(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Env]:
    tmp = tmp_path_factory.mktemp("policy")
    policy_dir = tmp / "policy"
    shutil.copytree(Path(DEFAULT_AGENTS_DIR).parent / "policy", policy_dir)
    (policy_dir / "policy.yaml").write_text(POLICY)
    (policy_dir / "interceptors.yaml").write_text(INTERCEPTORS)
    (policy_dir / "role_router.yaml").write_text(ROUTER)
    async with agents_suite(
        tmp, policy_dir=policy_dir, agent_files={"default/roles/accountant.md": "Books.\n"}
    ) as found:
        yield found


async def test_slash_commands_answer_without_the_model_and_apply_their_effect(env: Env) -> None:
    session_id = await new_session(env.gateway)
    events = await stream(env.gateway.SendMessage(message(session_id, "/help"), timeout=TIMEOUT_S))
    final = events[-1].final
    assert "/role" in final.text and final.metrics.runtime == "command" and final.metrics.model_calls == 0
    assert "usage" not in [payload(e) for e in events]
    assert (await session_of(env, session_id)).message_count == 2

    events = await stream(env.gateway.SendMessage(message(session_id, "/role accountant"), timeout=TIMEOUT_S))
    assert events[-1].HasField("final")
    assert (await session_of(env, session_id)).role_id == "accountant"  # a /role choice is stored
    events = await stream(env.gateway.SendMessage(message(session_id, "hello"), timeout=TIMEOUT_S))
    assert STOPS[-1] == {"role_id": "accountant", "final_text": events[-1].final.text, "turn_id": events[0].turn_id}

    await stream(env.gateway.SendMessage(message(session_id, "/model cogmesh"), timeout=TIMEOUT_S))
    stored = await env.stubs["sessions"].GetSession(
        sessions_pb2.GetSessionRequest(tenant_id=SUITE_SETTINGS.tenant_id, session_id=session_id), timeout=TIMEOUT_S
    )
    assert struct_to_dict(stored.state.runtime_config)["model"] == "cogmesh-local"

    events = await stream(env.gateway.SendMessage(message(session_id, "/reset"), timeout=TIMEOUT_S))
    count = (await session_of(env, session_id)).message_count
    payload_ = await env.stubs["sessions"].GetRehydrationPayload(
        sessions_pb2.GetRehydrationPayloadRequest(tenant_id=SUITE_SETTINGS.tenant_id, session_id=session_id),
        timeout=TIMEOUT_S,
    )
    assert payload_.summary.covered_message_count == count and payload_.summary.text == ""


async def test_keyword_routing_picks_the_role_for_one_turn_only(env: Env) -> None:
    session_id = await new_session(env.gateway)
    events = await stream(env.gateway.SendMessage(message(session_id, "about my invoice"), timeout=TIMEOUT_S))
    assert STOPS[-1]["role_id"] == "accountant" and STOPS[-1]["turn_id"] == events[0].turn_id
    assert (await session_of(env, session_id)).role_id == "assistant"  # routing does not pin the role
    await stream(env.gateway.SendMessage(message(session_id, "and now?"), timeout=TIMEOUT_S))
    assert STOPS[-1]["role_id"] == "assistant"


async def test_a_refused_prompt_ends_the_turn_as_a_guardrail_error(env: Env) -> None:
    session_id = await new_session(env.gateway)
    events = await stream(env.gateway.SendMessage(message(session_id, "tell me forbidden things"), timeout=TIMEOUT_S))
    error = events[-1].error
    assert error.kind == events_pb2.ERROR_KIND_GUARDRAIL and error.message.endswith(": no forbidden topics here")
    assert (await session_of(env, session_id)).message_count == 0
    assert "usage" not in [payload(e) for e in events]


async def test_hooks_and_interceptors_act_on_the_turn_and_say_so(env: Env) -> None:
    session_id = await new_session(env.gateway)
    events = await stream(env.gateway.SendMessage(message(session_id, "What is 6 * 7?"), timeout=TIMEOUT_S))
    finished = next(e.tool_call_finished for e in events if e.HasField("tool_call_finished"))
    assert finished.result_summary == "42 (audited)"  # PostToolUse rewrote the result
    assert events[-1].final.text == "6 * 7 = 42 (audited)."

    events = await stream(
        env.gateway.SendMessage(message(session_id, "write to ana@example.com please"), timeout=TIMEOUT_S)
    )
    masked = [e.native_notice for e in events if e.HasField("native_notice") and "masked" in e.native_notice.text]
    assert masked, [payload(e) for e in events]
    final = events[-1].final
    assert "ana@example.com" not in final.text and "write to" in final.text  # the model saw the masked message
    assert final.new_messages[0].content == "write to ana@example.com please"  # what the user said is stored
