"""The runtime's policy decisions made in process from the WatchPolicy snapshot (services/runtime/local_policy.py).

(a) A decision made from the snapshot is the one the policy service's RPC gives, for the shipped
policy and a configuration enabling each built-in interceptor kind; (b) a hot reload reaches the
runtime and the next turn decides with it; (c) a bad reload keeps the last good version on both
sides; (d) with the policy service down the runtime asks it (and fails as before), then decides
locally once synced, also after the service goes away; (e) a real turn through the suite makes no
PolicyService RPC but WatchPolicy, while its tool call is still denied.

Fields that legitimately differ and are cleared before comparing: `config_version` (each process
counts the configurations it loaded) and each event's `create_time` (stamped when it is made).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import typing
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
import pytest_asyncio
from prometheus_client import REGISTRY

from cogmesh.common.v1 import messages_pb2
from cogmesh.policy.v1 import policy_pb2, policy_pb2_grpc
from services.kit.clients import Clients
from services.kit.errors import CogmeshError
from services.kit.protos import dict_to_struct
from services.kit.server import RunningServer, start
from services.lib.agents import DEFAULT_AGENTS_DIR, load_agents
from services.lib.policy import config as policy_config
from services.lib.policy.api import store_of
from services.lib.policy.config import DEFAULT_POLICY_DIR, ConfigRejected, digest_of, read_texts
from services.policy import main as policy_main
from services.policy.settings import PolicySettings
from services.runtime.local_policy import TOOL_CALL_CHECKS, LocalPolicy
from services.runtime.policy_link import begin_turn, policy_version
from tests.integration.conftest import TIMEOUT_S, new_session, payload
from tests.integration.test_pause_resume import Env, agents_suite, message, stream

pytestmark = pytest.mark.asyncio(loop_scope="module")

SHIPPED = {name: (DEFAULT_POLICY_DIR / name).read_text(encoding="utf-8") for name in policy_config.FILES}
# One configuration per built-in interceptor kind (services/lib/policy/interceptors), each on top
# of the shipped policy.yaml and role_router.yaml. Rate limits are generous and each tool is
# checked once per side, so no answer depends on the clock.
KINDS: dict[str, str] = {
    "BudgetGuard": "type: BudgetGuard\n    model_calls: 2\n    tool_calls: 1",
    "PIIShield": "type: PIIShield\n    patterns: [email, phone_us]\n    action: mask",
    "ContentFilter": "type: ContentFilter\n    blocked_words: [secret]\n    action: mask",
    "TokenLimiter": "type: TokenLimiter\n    max_tokens: 5",
    "ContextCompressor": "type: ContextCompressor\n    threshold_tokens: 100000",
    "ToolGate": "type: ToolGate\n    deny: [search]",
    "PermissionGate": "type: PermissionGate\n    tools: [calculator]",
    "ConversationGate": "type: ConversationGate\n    stages: {0: [calculator], 2: [calculator, search]}",
    "SafeGate": "type: SafeGate\n    tools: [read_file]",
    "RoleGate": "type: RoleGate\n    tools: [read_file]\n    by_role: {assistant: [calculator]}",
    "LoggingInterceptor": "type: LoggingInterceptor\n    include_args: true",
    "HITLInterceptor": "type: HITLInterceptor\n    tools: [calculator]",
    "RateLimiter": "type: RateLimiter\n    calls_per_window: 100\n    window_seconds: 60",
    "ThrottleInterceptor": "type: ThrottleInterceptor\n    min_delay: 30",
    "Failover": "type: Failover\n    fallbacks: [backup-model]",
    "CircuitBreaker": "type: CircuitBreaker\n    failure_threshold: 1\n    reset_timeout: 60",
    "ContextPrompt": "type: ContextPrompt\n    template: 'Agent {agent}, turn {turn_id}'",
    "ConversationPrompt": "type: ConversationPrompt\n    stages: {0: 'first', 2: 'later'}",
    "LambdaPrompt": "type: LambdaPrompt\n    adapter: tests.integration.test_local_policy:shout",
}
CONFIGS: dict[str, dict[str, str]] = {
    "shipped": SHIPPED,
    **{kind: {**SHIPPED, "interceptors.yaml": f"interceptors:\n  - {spec}\n"} for kind, spec in KINDS.items()},
}


def shout(prompt: str, ctx: Any) -> str:
    return prompt.upper()


async def test_every_built_in_interceptor_kind_is_compared() -> None:
    # A new kind in the configuration's union fails this test until it has a configuration above.
    union = typing.get_args(typing.get_args(policy_config.InterceptorSpec)[0])
    kinds = {typing.get_args(spec.model_fields["type"].annotation)[0] for spec in union}
    assert kinds - {"custom"} == set(KINDS)  # custom interceptors are the user's code, not the engine's


def write_files(directory: Path, files: dict[str, str]) -> str:
    """Write the policy folder (files not named are removed); the digest the service will publish."""
    for name in policy_config.FILES:
        path = directory / name
        if name not in files:
            path.unlink(missing_ok=True)
            continue
        path.write_text(files[name], encoding="utf-8")
        # A distinct mtime, so the reload sees a change even within one timestamp tick.
        stamp = path.stat().st_mtime_ns + 1_000_000 * (len(files[name]) + 1)
        os.utime(path, ns=(stamp, stamp))
    return digest_of(read_texts(directory))


async def until_version(local: LocalPolicy, version: str) -> None:
    """Wait (on the watcher's own notifications, no polling) until `local` decides with `version`."""
    changed = asyncio.Event()
    listener: Callable[[Any, str], None] = lambda held, v: changed.set()  # noqa: E731
    local.watcher.listeners.append(listener)
    try:
        async with asyncio.timeout(TIMEOUT_S):
            while local.version != version:
                await changed.wait()
                changed.clear()
    finally:
        local.watcher.listeners.remove(listener)


@dataclass
class Pair:
    server: RunningServer
    stub: policy_pb2_grpc.PolicyServiceStub
    local: LocalPolicy
    directory: Path


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def pair(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Pair]:
    directory = tmp_path_factory.mktemp("policy")
    write_files(directory, SHIPPED)
    settings = PolicySettings(policy_dir=directory, policy_reload_s=0.05, call_timeout_s=2)
    server = await start(policy_main.build, settings, "127.0.0.1:0")
    clients = Clients(settings.model_copy(update={"policy_addr": server.address}))
    local = LocalPolicy(clients, load_agents(DEFAULT_AGENTS_DIR), clients.settings)
    # Each side has its own memory rate windows fed the same calls: decide PRE_ACT here too.
    local.windows_shared = True
    local.start()
    channel = grpc.aio.insecure_channel(server.address)
    try:
        yield Pair(server, policy_pb2_grpc.PolicyServiceStub(channel), local, directory)
    finally:
        await local.close()
        await clients.close()
        await channel.close()
        await server.stop(0)


SCOPE = policy_pb2.Scope(tenant_id="default", session_id="s-eq", turn_id="t-eq", agent="default")
TOOLS = ["calculator", "search", "read_file", "Bash", "mcp__docs__lookup"]


def _context(**fields: Any) -> policy_pb2.TurnContext:
    return policy_pb2.TurnContext(
        task="write to bob@example.com about the secret plan",
        messages=[
            messages_pb2.Message(role=messages_pb2.ROLE_USER, content="hi, I am bob@example.com, call 555-123-4567"),
            messages_pb2.Message(role=messages_pb2.ROLE_ASSISTANT, content="the secret is safe"),
        ],
        message_count=3,
        system_prompt="You are helpful.",
        tools=[messages_pb2.ToolSpec(name=name) for name in TOOLS],
        model="cogmesh-local",
        **fields,
    )


def requests() -> list[tuple[str, Any]]:
    """The same questions for both sides: every decision RPC, every phase."""
    asked: list[tuple[str, Any]] = [
        (
            "BeginTurn",
            policy_pb2.BeginTurnRequest(
                scope=SCOPE,
                text="what is 2+3?",
                model="cogmesh-local",
                tools=[messages_pb2.ToolSpec(name=name) for name in TOOLS],
            ),
        ),
        ("BeginTurn", policy_pb2.BeginTurnRequest(scope=SCOPE, text="/help")),
    ]
    for phase in (policy_pb2.PHASE_PRE_RUN, policy_pb2.PHASE_PRE_THINK):
        asked.append(
            ("RunInterceptors", policy_pb2.RunInterceptorsRequest(phase=phase, scope=SCOPE, context=_context()))
        )
    reply = messages_pb2.Message(role=messages_pb2.ROLE_ASSISTANT, content="mail bob@example.com the secret")
    asked += [
        ("RunInterceptors", policy_pb2.RunInterceptorsRequest(
            phase=policy_pb2.PHASE_POST_THINK, scope=SCOPE, context=_context(model_calls=1), model_response=reply
        )),
        ("RunInterceptors", policy_pb2.RunInterceptorsRequest(
            phase=policy_pb2.PHASE_ON_ERROR, scope=SCOPE, context=_context(model_calls=1),
            error=policy_pb2.ModelFailure(kind="rate_limit", message="429"),
        )),
        ("RunInterceptors", policy_pb2.RunInterceptorsRequest(
            phase=policy_pb2.PHASE_PRE_ACT, scope=SCOPE, context=_context(model_calls=1),
            tool_call=messages_pb2.ToolCall(id="c9", name="lookup", arguments=dict_to_struct({"q": "bob@example.com"})),
        )),
        ("RunInterceptors", policy_pb2.RunInterceptorsRequest(
            phase=policy_pb2.PHASE_POST_ACT, scope=SCOPE, context=_context(model_calls=1, tool_calls=1),
            tool_call=messages_pb2.ToolCall(id="c0", name="calculator"), tool_result="2", tool_is_error=True,
        )),
        ("RunInterceptors", policy_pb2.RunInterceptorsRequest(
            phase=policy_pb2.PHASE_POST_RUN, scope=SCOPE, context=_context(model_calls=2), final_text="done: secret"
        )),
    ]  # fmt: skip
    calls = [
        policy_pb2.CheckToolCallRequest(
            tenant_id="default",
            agent="default",
            session_id="s-eq",
            turn_id="t-eq",
            tool_name=name,
            tool_call_id=f"c{i}",
            arguments=dict_to_struct({"expression": "2+3", "note": "bob@example.com"}),
        )
        for i, name in enumerate(["calculator", "Bash", "search", "mcp__docs__lookup"])
    ]
    calls[0].context.CopyFrom(_context(model_calls=1))
    single = policy_pb2.CheckToolCallRequest(
        tenant_id="default", agent="default", session_id="s-eq", turn_id="t-eq", tool_name="read_file"
    )
    asked += [
        ("CheckToolCalls", policy_pb2.CheckToolCallsRequest(calls=calls)),
        ("CheckToolCall", single),
        ("CheckToolResult", policy_pb2.CheckToolResultRequest(
            scope=SCOPE, context=_context(model_calls=1, tool_calls=1), tool_name="calculator", tool_call_id="c0",
            arguments=dict_to_struct({"expression": "2+3"}), result="5, mail bob@example.com: secret",
        )),
        ("CheckToolResult", policy_pb2.CheckToolResultRequest(
            scope=SCOPE, context=_context(model_calls=1, tool_calls=2), tool_name="search", tool_call_id="c2",
            result="boom", is_error=True,
        )),
    ]  # fmt: skip
    return asked


def normalized(answer: Any) -> Any:
    """The answer without the fields that legitimately differ between processes (see the module doc)."""
    answer = type(answer).FromString(answer.SerializeToString())
    if isinstance(answer, policy_pb2.BeginTurnResponse):
        answer.ClearField("config_version")
    replies = list(answer.decisions) if isinstance(answer, policy_pb2.CheckToolCallsResponse) else [answer]
    for reply in replies:
        for event in reply.events:
            event.ClearField("create_time")
    return answer


@pytest.mark.parametrize("name", list(CONFIGS))
async def test_a_decision_from_the_snapshot_is_the_services(pair: Pair, name: str) -> None:
    version = write_files(pair.directory, CONFIGS[name])
    await until_version(pair.local, version)
    assert pair.local.mode == "local"
    for method, request in requests():
        local = await getattr(pair.local, method)(request)
        remote = await getattr(pair.stub, method)(request, timeout=TIMEOUT_S)
        assert normalized(local) == normalized(remote), f"{name}: {method} differs:\n{local}\nvs\n{remote}"
    assert pair.local.turn_version(SCOPE.turn_id) == version  # what the turn's start record names


async def test_bad_input_raises_what_the_servicer_raises(pair: Pair) -> None:
    await until_version(pair.local, write_files(pair.directory, SHIPPED))
    bad = policy_pb2.CheckToolCallsRequest(calls=[policy_pb2.CheckToolCallRequest(agent="default")])
    with pytest.raises(grpc.aio.AioRpcError) as remote:
        await pair.stub.CheckToolCalls(bad, timeout=TIMEOUT_S)
    with pytest.raises(CogmeshError) as local:
        await pair.local.CheckToolCalls(bad)
    assert local.value.code == remote.value.code()
    assert "calls[0].tool_name" in remote.value.details() and "calls[0].tool_name" in str(local.value)
    unknown = policy_pb2.BeginTurnRequest(scope=policy_pb2.Scope(agent="nobody"))
    with pytest.raises(grpc.aio.AioRpcError) as remote:
        await pair.stub.BeginTurn(unknown, timeout=TIMEOUT_S)
    with pytest.raises(CogmeshError) as local:
        await pair.local.BeginTurn(unknown)
    assert local.value.code == remote.value.code() == grpc.StatusCode.NOT_FOUND


async def test_a_bad_reload_keeps_the_last_good_version_on_both_sides(pair: Pair) -> None:
    denied = {**SHIPPED, "policy.yaml": SHIPPED["policy.yaml"] + "\ntools:\n  extra_denied: [calculator]\n"}
    good = write_files(pair.directory, denied)
    await until_version(pair.local, good)
    received = pair.local.watcher.received
    write_files(pair.directory, {**denied, "interceptors.yaml": "interceptors:\n  - type: Nope\n"})
    async with asyncio.timeout(TIMEOUT_S):
        while not (await pair.stub.GetPolicyStatus(policy_pb2.GetPolicyStatusRequest())).errors:  # noqa: ASYNC110
            await asyncio.sleep(0.02)  # the service reloads on its own clock and publishes nothing: poll its status
    assert (pair.local.version, pair.local.watcher.received) == (good, received)  # nothing was published
    check = policy_pb2.CheckToolCallRequest(agent="default", tool_name="calculator", session_id="s", turn_id="t")
    for side in (pair.local.CheckToolCall(check), pair.stub.CheckToolCall(check, timeout=TIMEOUT_S)):
        assert (await side).rule == "always_denied"  # both still decide with the last good version
    await until_version(pair.local, write_files(pair.directory, SHIPPED))  # fixed: the next good one arrives


async def test_a_torn_or_invalid_snapshot_is_refused() -> None:
    files = [policy_pb2.PolicyFile(path="policy.yaml", content=SHIPPED["policy.yaml"])]
    with pytest.raises(ConfigRejected, match="hash to"):
        store_of(policy_pb2.PolicySnapshot(version="0123456789abcdef", files=files), 1)
    bad = [policy_pb2.PolicyFile(path="interceptors.yaml", content="interceptors:\n  - type: Nope\n")]
    with pytest.raises(ConfigRejected, match="unknown type 'Nope'"):
        store_of(policy_pb2.PolicySnapshot(version=digest_of({"interceptors.yaml": bad[0].content}), files=bad), 1)
    extra = {"policy.yaml": "", "hooks.py": "x = 1"}
    with pytest.raises(ConfigRejected, match="not a policy file"):
        files = [policy_pb2.PolicyFile(path=k, content=v) for k, v in extra.items()]
        store_of(policy_pb2.PolicySnapshot(version=digest_of(extra), files=files), 1)


def _free_address() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{probe.getsockname()[1]}"


async def test_with_the_service_down_the_runtime_asks_it_then_decides_locally(tmp_path: Path) -> None:
    address = _free_address()
    write_files(tmp_path, SHIPPED)
    settings = PolicySettings(policy_dir=tmp_path, policy_reload_s=0.05, call_timeout_s=1, policy_addr=address)
    clients = Clients(settings)
    local = LocalPolicy(clients, load_agents(DEFAULT_AGENTS_DIR), settings)
    clients.policy_api = local
    local.start()
    try:
        assert local.mode == "remote"
        # Not synced and the service is down: the remote fallback, as before (no commands, no routing).
        begun = await begin_turn(clients, SCOPE, "/help", "", "cogmesh-local", ["calculator"])
        assert not begun.HasField("command")
        assert [e.native_notice.kind for e in begun.events] == ["policy_unavailable"]
        assert policy_version(clients, SCOPE.turn_id) == ""
        server = await start(policy_main.build, settings, address)
        try:
            await until_version(local, digest_of(read_texts(tmp_path)))
        finally:
            await server.stop(0)
        # Synced, and the service gone again: decided here, with the snapshot held.
        begun = await begin_turn(clients, SCOPE, "/help", "", "cogmesh-local", ["calculator"])
        assert begun.command.command == "help"
        assert policy_version(clients, SCOPE.turn_id) == local.version
    finally:
        await local.close()
        await clients.close()


async def test_rate_limits_in_memory_keep_the_tool_call_checks_with_the_service(tmp_path: Path) -> None:
    files = {**SHIPPED, "interceptors.yaml": f"interceptors:\n  - {KINDS['RateLimiter']}\n"}
    write_files(tmp_path, files)
    settings = PolicySettings(policy_dir=tmp_path, policy_reload_s=0.05, call_timeout_s=2)
    server = await start(policy_main.build, settings, "127.0.0.1:0")
    clients = Clients(settings.model_copy(update={"policy_addr": server.address}))
    local = LocalPolicy(clients, load_agents(DEFAULT_AGENTS_DIR), clients.settings)
    local.start()
    try:
        await until_version(local, digest_of(files))
        assert local.mode == "local, tool call checks remote"
        before = policy_rpcs()
        check = policy_pb2.CheckToolCallRequest(agent="default", tool_name="calculator", session_id="s", turn_id="t")
        assert (await local.CheckToolCall(check)).verdict == policy_pb2.VERDICT_ALLOW
        await local.BeginTurn(policy_pb2.BeginTurnRequest(scope=SCOPE, text="hi"))
        after = policy_rpcs()
        assert {m for m in after if after[m] != before.get(m, 0)} == {"CheckToolCall"}
        assert set(TOOL_CALL_CHECKS) == {"CheckToolCall", "CheckToolCalls"}
    finally:
        await local.close()
        await clients.close()
        await server.stop(0)


def policy_rpcs() -> dict[str, float]:
    """Finished PolicyService RPCs by method, as every in-process server's kit metrics count them."""
    counts: dict[str, float] = {}
    for family in REGISTRY.collect():
        if family.name != "grpc_server_handling_seconds":
            continue
        for sample in family.samples:
            labels = sample.labels
            if sample.name.endswith("_count") and labels.get("grpc_service") == "cogmesh.policy.v1.PolicyService":
                counts[labels["grpc_method"]] = counts.get(labels["grpc_method"], 0) + sample.value
    return counts


POLICY_WITH_HOOK = """
hooks:
  - event: PreToolUse
    matcher: calculator
    local: tests.integration.test_local_policy:deny_calculator
"""


def deny_calculator(**hook: Any) -> dict[str, str]:
    return {"decision": "deny", "reason": "no sums today"}


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def suite_env(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[Env, Path]]:
    tmp = tmp_path_factory.mktemp("suite")
    policy_dir = tmp / "policy"
    shutil.copytree(DEFAULT_POLICY_DIR, policy_dir)
    write_files(policy_dir, {**SHIPPED, "policy.yaml": SHIPPED["policy.yaml"] + POLICY_WITH_HOOK})
    async with agents_suite(tmp, policy_dir=policy_dir, policy_reload_s=0.05) as env:
        yield env, policy_dir


def runtime_policy(env: Env) -> LocalPolicy:
    api = env.suite.servers["runtime"].app.mounts[0].servicer.clients.policy_api
    assert isinstance(api, LocalPolicy)
    return api


async def test_a_turn_makes_no_policy_rpc_but_the_watch_and_is_still_decided(
    suite_env: tuple[Env, Path],
) -> None:
    env, policy_dir = suite_env
    local = runtime_policy(env)
    await until_version(local, digest_of(read_texts(policy_dir)))
    before = policy_rpcs()
    session_id = await new_session(env.gateway)
    events = await stream(env.gateway.SendMessage(message(session_id, "what is 2+3?"), timeout=TIMEOUT_S))
    finished = [e.tool_call_finished for e in events if payload(e) == "tool_call_finished"]
    assert finished and not finished[0].ok and "no sums today" in finished[0].result_summary  # denied by the hook
    assert any(payload(e) == "status" and "no sums today" in e.status.text for e in events)
    after = policy_rpcs()
    assert {m: after[m] - before.get(m, 0) for m in after if after[m] != before.get(m, 0)} == {}


async def test_a_hot_reload_reaches_the_runtime_and_the_next_turn_decides_with_it(
    suite_env: tuple[Env, Path],
) -> None:
    env, policy_dir = suite_env
    local = runtime_policy(env)
    version = write_files(policy_dir, {**SHIPPED, "policy.yaml": SHIPPED["policy.yaml"]})  # the hook is gone
    await until_version(local, version)
    session_id = await new_session(env.gateway)
    events = await stream(env.gateway.SendMessage(message(session_id, "what is 2+3?"), timeout=TIMEOUT_S))
    final = [e.final for e in events if payload(e) == "final"]
    assert final and final[0].text == "2+3 = 5."  # the calculator ran: the hook that denied it is gone
    turn_id = next(e.turn_id for e in events if e.turn_id)
    assert local.turn_version(turn_id) == version
