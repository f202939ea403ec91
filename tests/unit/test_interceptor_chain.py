"""The interceptor chain: order, visibility of changes, stop/skip, bad results and failures."""

from __future__ import annotations

from typing import Any

import pytest

from services.lib.policy.domain import Msg, Phase, Scope, ToolInfo, TurnContext
from services.lib.policy.interceptors.base import ALLOWED_ACTIONS, Action, Chain, Interceptor, InterceptResult


def ctx(**fields: Any) -> TurnContext:
    return TurnContext(scope=Scope("default"), **fields)


class Recorder(Interceptor):
    """Records what it saw at PRE_THINK and answers with a fixed result."""

    def __init__(self, name: str, result: InterceptResult, seen: list[tuple[str, Any]]):
        self.name = name
        self.result = result
        self.seen = seen

    async def pre_think(self, c: TurnContext) -> InterceptResult:
        self.seen.append(
            (self.name, (c.system_prompt, [m.content for m in c.messages], c.model, [t.name for t in c.tools]))
        )
        return self.result


async def test_interceptors_run_in_order_and_see_earlier_changes() -> None:
    seen: list[tuple[str, Any]] = []
    chain = Chain(
        [
            Recorder("a", InterceptResult.modify_prompt("P2"), seen),
            Recorder("b", InterceptResult.modify_messages([Msg("user", "masked")]), seen),
            Recorder("c", InterceptResult.use_model("m2"), seen),
            Recorder("d", InterceptResult.modify_tools(["t1"]), seen),
            Recorder("e", InterceptResult.ok(), seen),
        ]
    )
    c = ctx(system_prompt="P1", messages=[Msg("user", "secret")], model="m1", tools=[ToolInfo("t1"), ToolInfo("t2")])
    outcome = await chain.run(Phase.PRE_THINK, c)
    assert [name for name, _ in seen] == ["a", "b", "c", "d", "e"]
    assert seen[1][1] == ("P2", ["secret"], "m1", ["t1", "t2"])
    assert seen[4][1] == ("P2", ["masked"], "m2", ["t1"])
    assert outcome.action is Action.OK
    assert outcome.prompt == "P2"
    assert [m.content for m in outcome.messages or []] == ["masked"]
    assert outcome.model == "m2"
    assert outcome.tools == ["t1"]
    # OK steps are not listed; every modification is, in order.
    assert [(s.interceptor, s.action) for s in outcome.steps] == [
        ("a", Action.MODIFY_PROMPT),
        ("b", Action.MODIFY_MESSAGES),
        ("c", Action.USE_MODEL),
        ("d", Action.MODIFY_TOOLS),
    ]


@pytest.mark.parametrize("terminal", [InterceptResult.stop("no more", "guardrail"), InterceptResult.skip("not now")])
async def test_stop_and_skip_end_the_chain(terminal: InterceptResult) -> None:
    seen: list[tuple[str, Any]] = []

    class Act(Recorder):
        async def pre_act(self, c: TurnContext) -> InterceptResult:
            seen.append((self.name, None))
            return self.result

    chain = Chain(
        [
            Act("first", InterceptResult.ok(), seen),
            Act("gate", terminal, seen),
            Act("later", InterceptResult.ok(), seen),
        ]
    )
    outcome = await chain.run(Phase.PRE_ACT, ctx(tool_name="x"))
    assert [name for name, _ in seen] == ["first", "gate"]
    assert outcome.action is terminal.action
    assert outcome.reason == terminal.reason
    assert outcome.decided_by == "gate"
    assert outcome.error_kind == terminal.error_kind


async def test_modify_args_and_tool_result_and_wait() -> None:
    class Args(Interceptor):
        async def pre_act(self, c: TurnContext) -> InterceptResult:
            return InterceptResult.modify_args({**c.tool_args, "safe": True})

    class Wait(Interceptor):
        async def pre_act(self, c: TurnContext) -> InterceptResult:
            assert c.tool_args == {"q": 1, "safe": True}
            return InterceptResult.ok(wait_s=0.25)

    class Wait2(Interceptor):
        async def pre_act(self, c: TurnContext) -> InterceptResult:
            return InterceptResult.ok(wait_s=0.1)

    class Result(Interceptor):
        async def post_act(self, c: TurnContext) -> InterceptResult:
            return InterceptResult.modify_tool_result(c.tool_result.upper())

    chain = Chain([Args(), Wait(), Wait2(), Result()])
    pre = await chain.run(Phase.PRE_ACT, ctx(tool_name="x", tool_args={"q": 1}))
    assert pre.args == {"q": 1, "safe": True}
    assert pre.wait_s == 0.25  # waits overlap: the longest one covers both reservations
    post = await chain.run(Phase.POST_ACT, ctx(tool_name="x", tool_result="ok"))
    assert post.tool_result == "OK"


async def test_modify_tools_only_narrows() -> None:
    class Invent(Interceptor):
        async def pre_run(self, c: TurnContext) -> InterceptResult:
            return InterceptResult.modify_tools(["a", "invented"])

    outcome = await Chain([Invent()]).run(Phase.PRE_RUN, ctx(tools=[ToolInfo("a"), ToolInfo("b")]))
    assert outcome.tools == ["a"]


async def test_an_action_not_allowed_in_the_phase_is_ignored_with_a_notice() -> None:
    class Wrong(Interceptor):
        async def post_act(self, c: TurnContext) -> InterceptResult:
            return InterceptResult.use_model("other")

    c = ctx(tool_name="x", tool_result="r")
    outcome = await Chain([Wrong()]).run(Phase.POST_ACT, c)
    assert outcome.action is Action.OK and outcome.model is None
    assert "not allowed at post_act" in c.notices[0].text


def test_allowed_actions_follow_the_phases() -> None:
    assert Action.SKIP in ALLOWED_ACTIONS[Phase.PRE_ACT]
    assert Action.MODIFY_ARGS in ALLOWED_ACTIONS[Phase.PRE_ACT]
    assert Action.MODIFY_TOOL_RESULT in ALLOWED_ACTIONS[Phase.POST_ACT]
    assert Action.USE_MODEL in ALLOWED_ACTIONS[Phase.ON_ERROR]
    assert {Action.MODIFY_PROMPT, Action.MODIFY_TOOLS, Action.MODIFY_MESSAGES} <= ALLOWED_ACTIONS[Phase.PRE_THINK]
    assert Action.SKIP not in ALLOWED_ACTIONS[Phase.PRE_THINK]


class Boom(Interceptor):
    async def pre_think(self, c: TurnContext) -> InterceptResult:
        raise RuntimeError("kaput")


class After(Interceptor):
    async def pre_think(self, c: TurnContext) -> InterceptResult:
        return InterceptResult.modify_prompt("after ran")


async def test_a_failing_interceptor_stops_the_turn_by_default() -> None:
    outcome = await Chain([Boom(), After()]).run(Phase.PRE_THINK, ctx())
    assert outcome.action is Action.STOP
    assert outcome.error_kind == "internal"
    assert "Boom failed at pre_think: RuntimeError: kaput" in outcome.reason
    assert outcome.prompt is None


async def test_a_failing_interceptor_with_on_error_continue_is_skipped() -> None:
    boom = Boom()
    boom.fail = "continue"
    c = ctx()
    outcome = await Chain([boom, After()]).run(Phase.PRE_THINK, c)
    assert outcome.action is Action.OK
    assert outcome.prompt == "after ran"
    assert "kaput" in c.notices[0].text and "continuing" in c.notices[0].text


async def test_phases_lists_only_overridden_methods() -> None:
    assert Chain([Boom(), After()]).phases() == {Phase.PRE_THINK}
    assert Chain([]).phases() == set()


async def test_state_change_is_reported() -> None:
    class Counter(Interceptor):
        async def post_think(self, c: TurnContext) -> InterceptResult:
            c.state["n"] = c.state.get("n", 0) + 1
            return InterceptResult.ok()

    class Reader(Interceptor):
        async def post_think(self, c: TurnContext) -> InterceptResult:
            return InterceptResult.ok()

    c = ctx(state={"n": 1})
    assert (await Chain([Counter()]).run(Phase.POST_THINK, c)).state_changed
    assert c.state == {"n": 2}
    assert not (await Chain([Reader()]).run(Phase.POST_THINK, ctx(state={"n": 1}))).state_changed
