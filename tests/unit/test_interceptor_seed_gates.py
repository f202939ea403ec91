"""SafeGate, RoleGate, LoggingInterceptor and HITLInterceptor: through the chain, from YAML, through the engine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import structlog

from services.lib.agents import AgentDefinition, AgentRegistry
from services.lib.policy.assembly import Shared, build_bundle
from services.lib.policy.config import ConfigRejected, ConfigStore, HITLSpec, RoleGateSpec, load_config
from services.lib.policy.domain import ModelFailure, Msg, Phase, Scope, ToolCallRef, ToolInfo, TurnContext
from services.lib.policy.engine import PolicyEngine
from services.lib.policy.hooks import HookEvent, HookHandler, HookPayload, HookReply
from services.lib.policy.interceptors import (
    Action,
    Chain,
    HITLInterceptor,
    LoggingInterceptor,
    PIIShield,
    RoleGate,
    SafeGate,
)
from services.lib.policy.interceptors.hitl import needs_approval
from services.lib.policy.ratelimit import MemoryWindowStore

TOOLS = [ToolInfo("search"), ToolInfo("read_file"), ToolInfo("write_file"), ToolInfo("delete_file")]


def ctx(role: str | None = None, tools: list[ToolInfo] | None = None, **fields: Any) -> TurnContext:
    run_context = fields.pop("run_context", {} if role is None else {"role": role})
    return TurnContext(
        scope=Scope("default", session_id="s1", turn_id="t1"),
        tools=list(TOOLS if tools is None else tools),
        run_context=run_context,
        **fields,
    )


# --------------------------------------------------------------------------- SafeGate


async def test_safe_gate_keeps_the_read_only_tools_by_default() -> None:
    outcome = await Chain([SafeGate()]).run(Phase.PRE_THINK, ctx())
    assert outcome.tools == ["search", "read_file"]
    assert outcome.steps[0].interceptor == "SafeGate" and "delete_file" in outcome.steps[0].detail
    assert (await Chain([SafeGate()]).run(Phase.PRE_RUN, ctx())).tools == ["search", "read_file"]


async def test_safe_gate_skips_calls_to_tools_it_hides() -> None:
    # A model may call a tool it was not offered: the gate refuses it at PRE_ACT.
    skipped = await Chain([SafeGate()]).run(Phase.PRE_ACT, ctx(tool_name="delete_file"))
    assert skipped.action is Action.SKIP and "delete_file" in skipped.reason and skipped.decided_by == "SafeGate"
    assert (await Chain([SafeGate()]).run(Phase.PRE_ACT, ctx(tool_name="search"))).action is Action.OK


async def test_safe_gate_with_its_own_list_and_globs() -> None:
    gate = SafeGate(tools=["read_*"])
    assert (await Chain([gate]).run(Phase.PRE_THINK, ctx())).tools == ["read_file"]
    everything = await Chain([SafeGate(tools=["*"])]).run(Phase.PRE_THINK, ctx())
    assert everything.tools is None and everything.steps == []


# --------------------------------------------------------------------------- RoleGate


async def test_role_gate_gives_admins_every_tool_and_others_the_safe_ones() -> None:
    gate = RoleGate()
    admin = await Chain([gate]).run(Phase.PRE_THINK, ctx("admin"))
    assert admin.tools is None  # all kept
    assert (await Chain([gate]).run(Phase.PRE_THINK, ctx("guest"))).tools == ["search", "read_file"]
    assert (await Chain([gate]).run(Phase.PRE_THINK, ctx())).tools == ["search", "read_file"]  # no role: guest
    assert (await Chain([gate]).run(Phase.PRE_ACT, ctx("guest", tool_name="write_file"))).action is Action.SKIP
    assert (await Chain([gate]).run(Phase.PRE_ACT, ctx("admin", tool_name="write_file"))).action is Action.OK


async def test_role_gate_reads_the_callers_role_not_the_agent_role() -> None:
    gate = RoleGate(by_role={"editor": ["search", "read_file", "write_file"]}, admin_roles=["owner"])
    editor = await Chain([gate]).run(Phase.PRE_THINK, ctx("editor"))
    assert editor.tools == ["search", "read_file", "write_file"]
    assert (await Chain([gate]).run(Phase.PRE_THINK, ctx("owner"))).tools is None
    assert (await Chain([gate]).run(Phase.PRE_THINK, ctx("admin"))).tools == ["search", "read_file"]
    # The router's agent role (scope.role_id) is not the caller's role.
    routed = TurnContext(scope=Scope("default", role_id="admin"), tools=list(TOOLS))
    assert (await Chain([gate]).run(Phase.PRE_THINK, routed)).tools == ["search", "read_file"]
    # A non-string role is no role; another key can carry it.
    assert (await Chain([gate]).run(Phase.PRE_THINK, ctx(None, run_context={"role": ["admin"]}))).tools == [
        "search",
        "read_file",
    ]
    keyed = RoleGate(role_key="tier")
    assert (await Chain([keyed]).run(Phase.PRE_THINK, ctx(None, run_context={"tier": "admin"}))).tools is None


async def test_role_gate_trusts_the_session_scope_over_the_run_context() -> None:
    gate = RoleGate()

    def scoped(role: str, run_context: dict[str, Any]) -> TurnContext:
        scope = Scope("default", session_id="s1", session_scope={"role": role})
        return TurnContext(scope=scope, tools=list(TOOLS), run_context=run_context)

    # A key that pins role=guest: a message claiming admin in its run context stays a guest.
    claimed = await Chain([gate]).run(Phase.PRE_THINK, scoped("guest", {"role": "admin"}))
    assert claimed.tools == ["search", "read_file"]
    assert (await Chain([gate]).run(Phase.PRE_THINK, scoped("admin", {}))).tools is None


# --------------------------------------------------------------------------- LoggingInterceptor


async def test_logging_interceptor_logs_every_phase_and_changes_nothing() -> None:
    chain = Chain([LoggingInterceptor()])
    assert chain.phases() == set(Phase)
    c = ctx(
        tool_name="search",
        tool_args={"q": "x"},
        tool_result="found",
        model_calls=2,
        tool_calls=1,
        messages=[Msg("user", "hi")],
        model_response=Msg("assistant", "", (ToolCallRef("c1", "search", {}),)),
        error=ModelFailure("timeout"),
    )
    with structlog.testing.capture_logs() as logs:
        for phase in Phase:
            outcome = await chain.run(phase, c)
            assert outcome.action is Action.OK and outcome.steps == [] and not outcome.state_changed
    assert [entry["phase"] for entry in logs] == [p.value for p in Phase]
    by_phase = {entry["phase"]: entry for entry in logs}
    assert by_phase["pre_think"]["call"] == 3 and by_phase["pre_think"]["messages"] == 1
    assert by_phase["post_think"]["tool_calls"] == 1
    assert by_phase["pre_act"]["tool"] == "search" and "arguments" not in by_phase["pre_act"]
    assert by_phase["post_act"]["status"] == "ok" and "result" not in by_phase["post_act"]
    assert by_phase["on_error"]["kind"] == "timeout"
    assert all(e["log_level"] == "info" and e["session_id"] == "s1" and e["turn_id"] == "t1" for e in logs)


async def test_logging_interceptor_phases_level_and_arguments() -> None:
    chain = Chain([LoggingInterceptor(phases=["pre_act", "post_act"], level="debug", include_args=True)])
    assert chain.phases() == {Phase.PRE_ACT, Phase.POST_ACT}
    with structlog.testing.capture_logs() as logs:
        await chain.run(Phase.PRE_THINK, ctx())
        await chain.run(Phase.PRE_ACT, ctx(tool_name="search", tool_args={"q": "x"}))
        await chain.run(Phase.POST_ACT, ctx(tool_name="search", tool_result="boom", tool_error="boom"))
    assert [(e["phase"], e["log_level"]) for e in logs] == [("pre_act", "debug"), ("post_act", "debug")]
    assert logs[0]["arguments"] == {"q": "x"}
    assert logs[1]["status"] == "error" and logs[1]["result"] == "boom"


async def test_logging_interceptor_sees_what_earlier_interceptors_changed() -> None:
    chain = Chain([PIIShield(patterns=["email"]), LoggingInterceptor(phases=["post_act"], include_args=True)])
    with structlog.testing.capture_logs() as logs:
        await chain.run(Phase.POST_ACT, ctx(tool_name="search", tool_result="mail a@b.example.com"))
    assert logs[-1]["result"] == "mail [EMAIL_REDACTED]"


# --------------------------------------------------------------------------- HITLInterceptor


async def test_hitl_asks_for_approval_of_matching_calls() -> None:
    chain = Chain([HITLInterceptor(tools=["write_*", "delete_file"])])
    assert chain.phases() == {Phase.PRE_ACT}
    c = ctx(tool_name="delete_file", tool_call_id="call-7", tool_args={"path": "/tmp/x"})
    outcome = await chain.run(Phase.PRE_ACT, c)
    assert outcome.action is Action.REQUIRE_APPROVAL and outcome.decided_by == "HITLInterceptor"
    assert outcome.reason == "delete_file needs a human's approval before it runs"
    assert needs_approval(outcome.steps[0]) and c.notices == []
    ok = await chain.run(Phase.PRE_ACT, ctx(tool_name="search"))
    assert ok.action is Action.OK and ok.steps == []


async def test_hitl_defaults_to_every_tool_with_exceptions_and_a_description() -> None:
    gate = HITLInterceptor(except_tools=["search", "read_*"], description="ask ops before {tool}")
    outcome = await Chain([gate]).run(Phase.PRE_ACT, ctx(tool_name="write_file"))
    assert outcome.action is Action.REQUIRE_APPROVAL and outcome.reason == "ask ops before write_file"
    for name in ("search", "read_file"):
        assert (await Chain([gate]).run(Phase.PRE_ACT, ctx(tool_name=name))).action is Action.OK


async def test_hitl_after_a_gate_asks_only_for_calls_the_gate_let_through() -> None:
    chain = Chain([SafeGate(tools=["search", "write_file"]), HITLInterceptor(tools=["write_file"])])
    hidden = await chain.run(Phase.PRE_ACT, ctx(tool_name="delete_file"))
    assert hidden.decided_by == "SafeGate" and not needs_approval(hidden.steps[0])
    asked = await chain.run(Phase.PRE_ACT, ctx(tool_name="write_file"))
    assert asked.decided_by == "HITLInterceptor" and needs_approval(asked.steps[0])


# --------------------------------------------------------------------------- YAML


EVERY_NEW_TYPE = """
interceptors:
  - {type: SafeGate}
  - {type: safe_gate, name: reads, tools: ["read_*"]}
  - {type: RoleGate, admin_roles: [owner], by_role: {editor: [write_file]}, role_key: tier}
  - {type: role_gate, name: roles2}
  - {type: LoggingInterceptor, phases: [pre_act, post_act], level: debug, include_args: true}
  - {type: logging, name: audit}
  - {type: HITLInterceptor, tools: [delete_file], description: "ops must approve {tool}"}
  - {type: hitl, name: hitl-all, except_tools: [search], on_error: continue}
"""


def _shared() -> Shared:
    return Shared(MemoryWindowStore(), lambda address, timeout: None, None, {})  # type: ignore[arg-type,return-value]


def test_every_new_type_builds_from_yaml(tmp_path: Path) -> None:
    (tmp_path / "interceptors.yaml").write_text(EVERY_NEW_TYPE)
    config = load_config(tmp_path, 1)
    bundle = build_bundle(config, AgentDefinition(name="a"), "", _shared())
    chain = bundle.chain.interceptors
    assert [i.label for i in chain] == [
        "SafeGate", "reads", "RoleGate", "roles2", "LoggingInterceptor", "audit", "HITLInterceptor", "hitl-all",
    ]  # fmt: skip
    assert isinstance(chain[0], SafeGate) and chain[0].tools == ("search", "read_file")
    assert isinstance(chain[1], SafeGate) and chain[1].tools == ("read_*",)
    role_gate = chain[2]
    assert isinstance(role_gate, RoleGate)
    assert (role_gate.admin_roles, role_gate.role_key, role_gate.by_role) == (
        frozenset({"owner"}),
        "tier",
        {"editor": ("write_file",)},
    )
    assert isinstance(chain[3], RoleGate) and chain[3].admin_roles == frozenset({"admin"})
    logger = chain[4]
    assert isinstance(logger, LoggingInterceptor)
    assert (logger.phases, logger.level, logger.include_args) == (
        frozenset({Phase.PRE_ACT, Phase.POST_ACT}),
        "debug",
        True,
    )
    assert isinstance(chain[5], LoggingInterceptor) and chain[5].phases == frozenset(Phase)
    hitl = chain[6]
    assert isinstance(hitl, HITLInterceptor) and hitl.tools == ("delete_file",) and hitl.fail == "stop"
    assert hitl.description == "ops must approve {tool}"
    assert isinstance(chain[7], HITLInterceptor) and chain[7].except_tools == ("search",)
    assert chain[7].fail == "continue"
    assert bundle.phases == frozenset(Phase)


def test_spec_defaults_match_the_interceptors() -> None:
    role = RoleGateSpec(type="RoleGate")
    assert (tuple(role.tools), tuple(role.admin_roles), role.role_key) == (
        RoleGate().tools,
        tuple(RoleGate().admin_roles),
        RoleGate().role_key,
    )
    hitl = HITLSpec(type="hitl")
    assert (tuple(hitl.tools), hitl.description) == (HITLInterceptor().tools, HITLInterceptor().description)


@pytest.mark.parametrize(
    ("kind", "field", "expected"),
    [
        ("SafeGate", "tools: search", "tools: Input should be a valid list"),
        ("SafeGate", "allow: [x]", "allow: Extra inputs are not permitted"),
        ("RoleGate", "role_key: ''", "role_key: String should have at least 1 character"),
        ("role_gate", "by_role: [admin]", "by_role: Input should be a valid dictionary"),
        ("LoggingInterceptor", "phases: [pre_sleep]", "phases[0]: Input should be"),
        ("logging", "level: loud", "level: Input should be"),
        ("HITLInterceptor", "tools: []", "tools: List should have at least 1 item"),
        ("hitl", "description: ''", "description: String should have at least 1 character"),
        ("hitl", "approve: always", "approve: Extra inputs are not permitted"),
    ],
)
def test_config_errors_name_the_field(tmp_path: Path, kind: str, field: str, expected: str) -> None:
    (tmp_path / "interceptors.yaml").write_text(f"interceptors:\n  - type: {kind}\n    {field}\n")
    with pytest.raises(ConfigRejected) as caught:
        load_config(tmp_path, 1)
    errors = [str(e) for e in caught.value.errors]
    assert any(f"interceptors.yaml:3: interceptors[0].{expected}" in e for e in errors), errors


# --------------------------------------------------------------------------- through the engine


def unreachable(address: str, timeout_s: float) -> HookHandler:
    async def handler(event: HookEvent, payload: HookPayload) -> HookReply | None:
        raise AssertionError("no remote hooks here")

    return handler


async def test_engine_returns_the_approval_decision_and_the_role_gate_verdicts(tmp_path: Path) -> None:
    (tmp_path / "interceptors.yaml").write_text(
        "interceptors:\n"
        "  - {type: RoleGate, tools: [calculator, thinking]}\n"
        "  - {type: HITLInterceptor, tools: [thinking]}\n"
    )
    agents = AgentRegistry.from_definitions([AgentDefinition(name="a", tools=["calculator", "thinking", "wipe"])])
    engine = PolicyEngine(agents, ConfigStore(tmp_path), Shared(MemoryWindowStore(), unreachable, None, {}))
    scope = Scope("a", "t", "s", "turn")
    guest, admin = TurnContext(scope, run_context={"role": "guest"}), TurnContext(scope, run_context={"role": "admin"})
    assert (await engine.check_tool_call(scope, "calculator", {"expression": "1+1"}, guest)).allowed
    hidden = await engine.check_tool_call(scope, "wipe", {}, guest)
    assert (hidden.allowed, hidden.rule, hidden.source) == (False, "interceptor_skip", "interceptor:RoleGate")
    assert (await engine.check_tool_call(scope, "wipe", {}, admin)).allowed
    asked = await engine.check_tool_call(scope, "thinking", {"x": 1}, guest, tool_call_id="c9")
    # Allowed on condition: the runtime pauses the call for a human, as for interrupt_on.
    assert (asked.allowed, asked.rule, asked.source) == (True, "interceptor_approval", "interceptor:HITLInterceptor")
    assert asked.arguments == {"x": 1} and "asks a human to approve" in asked.reason
    assert asked.pre_act is not None and needs_approval(asked.pre_act.steps[-1])


async def test_the_approval_request_reaches_the_wire_as_its_own_action() -> None:
    from cogmesh.policy.v1 import policy_pb2
    from services.lib.policy.wire import outcome_to

    c = ctx(tool_name="write_file", tool_call_id="c1", tool_args={"path": "a", "lines": [1, 2]})
    outcome = await Chain([HITLInterceptor()]).run(Phase.PRE_ACT, c)
    wire = outcome_to(outcome, None)
    assert wire.action == policy_pb2.INTERCEPT_ACTION_REQUIRE_APPROVAL
    assert wire.steps[0].action == policy_pb2.INTERCEPT_ACTION_REQUIRE_APPROVAL
    assert wire.reason == "write_file needs a human's approval before it runs"
