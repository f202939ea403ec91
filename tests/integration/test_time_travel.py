"""Time travel through the gateway with the whole suite (memory and Redis): a session's turns
(ListTurns) and conversation after a turn (ListMessages), forks (ForkSession, ListSessions'
forked_from), rewinds (RewindSession and its SessionRewound event) and the ROLLBACK strategy;
the same through the Python client and the `cogmesh sessions` commands."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
import pytest_asyncio

from cogmesh.client import GatewayClient, voided
from cogmesh.common.v1 import events_pb2, messages_pb2, turns_pb2
from cogmesh.gateway.v1 import gateway_pb2
from gateway.auth import hash_key
from services.suite import history_cli
from services.suite.inprocess import start_suite
from tests.integration.conftest import STUB_CLASSES, SUITE_SETTINGS, TIMEOUT_S, Subscription, payload, status_details
from tests.support.redis_server import delete_prefix, unique_prefix

pytestmark = pytest.mark.asyncio(loop_scope="module")

KEY, PRINCIPAL = "key-time-traveller", "alice"
PINNED_KEY = "key-pinned-elsewhere"  # same tenant, pinned to end_user=bob: alice's sessions are not its
AUTH = (("authorization", f"Bearer {KEY}"),)
PINNED = (("authorization", f"Bearer {PINNED_KEY}"),)
SCOPE = {"end_user": "alice"}
ASKED = ("What is 17 * 23?", "hello there", "What is 6 * 7?")
# The built-in model waits 1 ms before each chunk: LONG's thousands of deltas keep a turn running
# while the test acts on it (without the delay it finishes in milliseconds).
LONG = "w " * 12_000
LONG_ID = "t" * 257


@dataclass
class Env:
    gateway: Any
    address: str


@pytest_asyncio.fixture(loop_scope="module", scope="module", params=["memory", "redis"])
async def env(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Env]:
    tmp = tmp_path_factory.mktemp("time-travel")
    keys = tmp / "keys.yaml"
    keys.write_text(
        "keys:\n"
        f"  - {{sha256: {hash_key(KEY)}, tenant: acme, principal: {PRINCIPAL}}}\n"
        f"  - {{sha256: {hash_key(PINNED_KEY)}, tenant: acme, principal: bob, scope: {{pin: {{end_user: bob}}}}}}\n"
    )
    update: dict[str, Any] = {"api_keys_file": keys, "local_delay_ms": 1}
    url = request.getfixturevalue("redis_url") if request.param == "redis" else ""
    prefix = unique_prefix("time-travel") if url else ""
    if url:
        update |= {"redis_url": url, "redis_key_prefix": prefix}
    suite = await start_suite(SUITE_SETTINGS.model_copy(update=update))
    address = suite.servers["gateway"].address
    channel = grpc.aio.insecure_channel(address)
    try:
        yield Env(STUB_CLASSES["gateway"](channel), address)
    finally:
        await channel.close()
        await suite.stop(0)
        if prefix:
            delete_prefix(url, prefix)


# --------------------------------------------------------------------------- helpers


async def stream(call: Any) -> list[events_pb2.RuntimeEvent]:
    async def read() -> list[events_pb2.RuntimeEvent]:
        return [event async for response in call for event in response.events]

    return await asyncio.wait_for(read(), TIMEOUT_S)


async def turn(env: Env, session_id: str, content: str, **fields: Any) -> list[events_pb2.RuntimeEvent]:
    request = gateway_pb2.SendMessageRequest(session_id=session_id, content=content, **fields)
    return await stream(env.gateway.SendMessage(request, metadata=AUTH, timeout=TIMEOUT_S * 3))


async def session(env: Env, agent: str = "") -> str:
    request = gateway_pb2.CreateSessionRequest(agent=agent, scope=SCOPE)
    return str((await env.gateway.CreateSession(request, metadata=AUTH, timeout=TIMEOUT_S)).session.session_id)


async def three_turns(env: Env) -> tuple[str, list[list[events_pb2.RuntimeEvent]]]:
    session_id = await session(env)
    turns = [await turn(env, session_id, asked) for asked in ASKED]
    assert all(payload(events[-1]) == "final" for events in turns), [payload(t[-1]) for t in turns]
    return session_id, turns


async def whole_log(env: Env, session_id: str) -> list[events_pb2.RuntimeEvent]:
    """Every event Subscribe replays, once no turn runs."""
    request = gateway_pb2.SubscribeRequest(session_id=session_id, stop_when_idle=True)
    return await stream(env.gateway.Subscribe(request, metadata=AUTH, timeout=TIMEOUT_S))


async def log_through(env: Env, session_id: str, last_seq: int) -> list[events_pb2.RuntimeEvent]:
    """Every event Subscribe replays up to `last_seq`."""
    watcher = Subscription(env.gateway.Subscribe(gateway_pb2.SubscribeRequest(session_id=session_id), metadata=AUTH))
    try:
        events, _ = await watcher.events_until(lambda got: bool(got) and got[-1].seq >= last_seq)
    finally:
        watcher.cancel()
    return events


async def drain(call: Any) -> list[events_pb2.RuntimeEvent]:
    """The rest of a SendMessage stream read with read() (an RPC read that way cannot be iterated)."""
    events: list[events_pb2.RuntimeEvent] = []
    while True:
        message = await asyncio.wait_for(call.read(), TIMEOUT_S * 3)
        if message is grpc.aio.EOF:
            return events
        events += message.events


async def list_turns(env: Env, session_id: str, **fields: Any) -> list[turns_pb2.TurnRecord]:
    request = gateway_pb2.ListTurnsRequest(session_id=session_id, **fields)
    return list((await env.gateway.ListTurns(request, metadata=AUTH, timeout=TIMEOUT_S)).turns)


async def list_messages(env: Env, session_id: str, through: str = "") -> list[messages_pb2.Message]:
    request = gateway_pb2.ListMessagesRequest(session_id=session_id, through_turn_id=through, page_size=1000)
    return list((await env.gateway.ListMessages(request, metadata=AUTH, timeout=TIMEOUT_S)).messages)


async def fork(env: Env, session_id: str, turn_id: str = "", **fields: Any) -> gateway_pb2.ForkSessionResponse:
    request = gateway_pb2.ForkSessionRequest(session_id=session_id, turn_id=turn_id, **fields)
    return await env.gateway.ForkSession(request, metadata=AUTH, timeout=TIMEOUT_S)  # type: ignore[no-any-return]


async def rewind(env: Env, session_id: str, turn_id: str) -> gateway_pb2.RewindSessionResponse:
    request = gateway_pb2.RewindSessionRequest(session_id=session_id, turn_id=turn_id)
    return await env.gateway.RewindSession(request, metadata=AUTH, timeout=TIMEOUT_S)  # type: ignore[no-any-return]


def said(message: messages_pb2.Message) -> tuple[Any, ...]:
    """A message as the model reads it (a copy in a fork is stored anew: its time and ids of its own)."""
    return (
        message.role,
        message.content,
        [(c.id, c.name, c.arguments) for c in message.tool_calls],
        message.tool_call_id,
        message.name,
    )


async def refused(call: Awaitable[Any]) -> tuple[grpc.StatusCode, str, list[tuple[str, str]]]:
    """(code, ErrorInfo reason, BadRequest violations) of a call that must fail."""
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    info, violations = status_details(caught.value)
    return caught.value.code(), info.reason if info is not None else "", violations


def first_input_tokens(events: list[events_pb2.RuntimeEvent]) -> int:
    """Input tokens of the turn's first model call: the built-in model counts the whole conversation."""
    return int(next(e.usage.input_tokens for e in events if payload(e) == "usage"))


async def start_long_turn(env: Env, session_id: str) -> tuple[Any, list[events_pb2.RuntimeEvent]]:
    """A long turn, read until it streams: it is running when this returns."""
    call = env.gateway.SendMessage(gateway_pb2.SendMessageRequest(session_id=session_id, content=LONG), metadata=AUTH)
    events: list[events_pb2.RuntimeEvent] = []
    while not any(payload(e) == "assistant_delta" for e in events):
        events += (await asyncio.wait_for(call.read(), TIMEOUT_S)).events
    return call, events


# --------------------------------------------------------------------------- ListTurns, ListMessages


async def test_turns_come_oldest_first_with_the_seq_ranges_of_their_events(env: Env) -> None:
    session_id, turns = await three_turns(env)
    listed = await list_turns(env, session_id)
    assert [t.turn_id for t in listed] == [events[0].turn_id for events in turns]
    assert [(t.index, t.user_message, t.outcome) for t in listed] == [
        (i, asked, turns_pb2.TURN_OUTCOME_COMPLETED) for i, asked in enumerate(ASKED, 1)
    ]
    log = await whole_log(env, session_id)
    for record in listed:
        seqs = [e.seq for e in log if e.turn_id == record.turn_id]
        assert (record.first_seq, record.last_seq) == (min(seqs), max(seqs)), record.turn_id
        assert record.agent == "default" and record.end_time.ToNanoseconds() >= record.start_time.ToNanoseconds()
    messages = await list_messages(env, session_id)
    for record in listed:
        assert record.message_count == sum(m.turn_id == record.turn_id for m in messages)
    assert all(not t.steps for t in listed), "steps only when asked for"


async def test_steps_are_the_turns_recorded_steps_in_order(env: Env) -> None:
    session_id, _ = await three_turns(env)
    listed = await list_turns(env, session_id, include_steps=True)
    for record in listed:
        assert record.steps[0].kind == turns_pb2.TURN_STEP_KIND_REQUEST
        assert all(s.kind != turns_pb2.TURN_STEP_KIND_UNSPECIFIED and s.summary for s in record.steps)
        seqs = [s.seq for s in record.steps]
        assert seqs == sorted(seqs) and record.first_seq <= seqs[0] and seqs[-1] <= record.last_seq


async def test_turns_page_by_page(env: Env) -> None:
    session_id, turns = await three_turns(env)
    seen, token = [], ""
    while True:
        request = gateway_pb2.ListTurnsRequest(session_id=session_id, page_size=1, page_token=token)
        page = await env.gateway.ListTurns(request, metadata=AUTH, timeout=TIMEOUT_S)
        assert len(page.turns) <= 1
        seen += [t.turn_id for t in page.turns]
        token = page.next_page_token
        if not token:
            break
    assert seen == [events[0].turn_id for events in turns]


async def test_messages_through_a_middle_turn_are_the_conversation_as_it_was_then(env: Env) -> None:
    session_id, turns = await three_turns(env)
    first, second = turns[0][0].turn_id, turns[1][0].turn_id
    everything = await list_messages(env, session_id)
    then = await list_messages(env, session_id, through=second)
    assert then == everything[: len(then)]
    assert {m.turn_id for m in then} == {first, second} and then[-1].turn_id == second
    assert all(m.turn_id == turns[2][0].turn_id for m in everything[len(then) :])
    code, reason, _ = await refused(list_messages(env, session_id, through="f" * 32))
    assert code == grpc.StatusCode.NOT_FOUND, reason


# --------------------------------------------------------------------------- ForkSession


async def test_a_fork_after_turn_two_holds_the_first_two_turns_and_leaves_the_original(env: Env) -> None:
    session_id, turns = await three_turns(env)
    second = turns[1][0].turn_id
    before = (await list_messages(env, session_id), await list_turns(env, session_id))
    forked = await fork(env, session_id, second, labels={"purpose": "what-if"})
    copy = forked.session
    assert (copy.forked_from.session_id, copy.forked_from.turn_id) == (session_id, second)
    assert copy.session_id != session_id and copy.forked_from.HasField("fork_time")
    assert (copy.agent, dict(copy.scope), dict(copy.labels)) == ("default", SCOPE, {"purpose": "what-if"})
    original_then = await list_messages(env, session_id, through=second)
    held = await list_messages(env, copy.session_id)
    assert forked.message_count == len(held) == len(original_then)
    for mine, theirs in zip(held, original_then, strict=True):
        assert said(mine) == said(theirs)
    assert (await list_messages(env, session_id), await list_turns(env, session_id)) == before, "original untouched"
    listed = await env.gateway.ListSessions(
        gateway_pb2.ListSessionsRequest(forked_from=session_id), metadata=AUTH, timeout=TIMEOUT_S
    )
    assert [s.session_id for s in listed.sessions] == [copy.session_id]
    assert listed.sessions[0].forked_from.session_id == session_id


async def test_a_fork_before_turn_two_sends_it_again_edited(env: Env) -> None:
    session_id, turns = await three_turns(env)
    first, second = turns[0][0].turn_id, turns[1][0].turn_id
    forked = await fork(env, session_id, second, before_turn=True)
    fork_id = forked.session.session_id
    assert [said(m) for m in await list_messages(env, fork_id)] == [
        said(m) for m in await list_messages(env, session_id, through=first)
    ]
    events = await turn(env, fork_id, "What is 6 * 8?")
    assert events[-1].final.text == "6 * 8 = 48."
    held = await list_messages(env, fork_id)
    assert held[forked.message_count].content == "What is 6 * 8?"
    assert all(m.content != ASKED[1] for m in held), "the edited turn replaced the original one"
    assert (await list_turns(env, fork_id))[-1].user_message == "What is 6 * 8?"


# --------------------------------------------------------------------------- RewindSession


async def test_a_rewind_drops_turn_two_on_and_every_watcher_hears_it(env: Env) -> None:
    session_id, turns = await three_turns(env)
    first, second, third = (events[0].turn_id for events in turns)
    listed = await list_turns(env, session_id)
    as_of_turn_one = await fork(env, session_id, second, before_turn=True)  # the conversation a rewind leaves
    as_of_turn_three = await fork(env, session_id)
    watcher = Subscription(
        env.gateway.Subscribe(
            gateway_pb2.SubscribeRequest(session_id=session_id, after_seq=listed[-1].last_seq), metadata=AUTH
        )
    )
    try:
        reply = await rewind(env, session_id, second)
        heard, _ = await watcher.events_until(lambda got: any(payload(e) == "rewound" for e in got))
    finally:
        watcher.cancel()
    rewound = reply.event.rewound
    assert (rewound.turn_id, list(rewound.dropped_turn_ids)) == (second, [second, third])
    assert (rewound.void_after_seq, rewound.void_through_seq) == (listed[1].first_seq - 1, listed[2].last_seq)
    assert rewound.dropped_message_count == listed[1].message_count + listed[2].message_count
    assert (rewound.reason, rewound.requested_by) == ("rewind", PRINCIPAL)
    assert reply.event.seq > listed[2].last_seq
    assert [e for e in heard if payload(e) == "rewound"] == [reply.event]

    kept = await list_messages(env, session_id)
    assert kept == await list_messages(env, session_id, through=first)
    assert {m.turn_id for m in kept} == {first}
    assert [t.turn_id for t in await list_turns(env, session_id)] == [first]
    # (Subscribe's stop_when_idle would wait on: the log ends with no turn's end. Read up to the event.)
    log = await log_through(env, session_id, reply.event.seq)
    void = voided(log)
    assert all(e.seq in void for e in log if e.turn_id in (second, third))
    assert not any(e.seq in void for e in log if e.turn_id == first)

    # The next turn sees turn one only: the built-in model counts the conversation it is given.
    after_rewind = await turn(env, session_id, "What is 2 + 2?")
    on_turn_one = await turn(env, as_of_turn_one.session.session_id, "What is 2 + 2?")
    on_turn_three = await turn(env, as_of_turn_three.session.session_id, "What is 2 + 2?")
    assert first_input_tokens(after_rewind) == first_input_tokens(on_turn_one) < first_input_tokens(on_turn_three)


async def test_a_rewind_is_refused_while_a_turn_runs_or_is_paused(env: Env) -> None:
    session_id = await session(env)
    done = await turn(env, session_id, "hello")
    call, events = await start_long_turn(env, session_id)
    code, reason, _ = await refused(rewind(env, session_id, done[0].turn_id))
    assert (code, reason) == (grpc.StatusCode.FAILED_PRECONDITION, "TURN_IN_PROGRESS")
    cancel = gateway_pb2.CancelTurnRequest(session_id=session_id)
    await env.gateway.CancelTurn(cancel, metadata=AUTH, timeout=TIMEOUT_S)
    events += await drain(call)
    assert payload(events[-1]) == "error"
    assert {m.turn_id for m in await list_messages(env, session_id)} >= {done[0].turn_id}, "nothing dropped"

    careful = await session(env, agent="careful")
    done = await turn(env, careful, "hello")
    paused = await turn(env, careful, "What is 12 * 12?")
    assert any(payload(e) == "approval_required" for e in paused)
    code, reason, _ = await refused(rewind(env, careful, done[0].turn_id))
    assert (code, reason) == (grpc.StatusCode.FAILED_PRECONDITION, "TURN_IN_PROGRESS")
    assert [m.content for m in await list_messages(env, careful)][:1] == ["hello"], "nothing dropped"


async def test_rollback_drops_the_interrupted_turns_messages(env: Env) -> None:
    session_id = await session(env)
    kept = await turn(env, session_id, ASKED[0])
    call, interrupted = await start_long_turn(env, session_id)
    after = await turn(env, session_id, "What is 6 * 7?", multitask_strategy=turns_pb2.MULTITASK_STRATEGY_ROLLBACK)
    interrupted += await drain(call)
    assert after[-1].final.text == "6 * 7 = 42."
    assert payload(interrupted[-1]) == "error" and interrupted[-1].error.kind == events_pb2.ERROR_KIND_CANCELLED
    dropped = interrupted[0].turn_id
    messages = await list_messages(env, session_id)
    assert {m.turn_id for m in messages} == {kept[0].turn_id, after[0].turn_id}
    assert all(m.content != LONG for m in messages)
    log = await whole_log(env, session_id)
    [rolled] = [e.rewound for e in log if payload(e) == "rewound"]
    assert (list(rolled.dropped_turn_ids), rolled.reason) == ([dropped], "rollback")
    void = voided(log)
    assert all(e.seq in void for e in log if e.turn_id == dropped and payload(e) != "rewound")
    assert [t.turn_id for t in await list_turns(env, session_id)] == [kept[0].turn_id, after[0].turn_id]


# --------------------------------------------------------------------------- who may, and bad input


async def test_a_key_pinned_to_another_scope_finds_nothing(env: Env) -> None:
    session_id, turns = await three_turns(env)
    second = turns[1][0].turn_id
    calls: list[Callable[[], Awaitable[Any]]] = [
        lambda: env.gateway.ListTurns(gateway_pb2.ListTurnsRequest(session_id=session_id), metadata=PINNED),
        lambda: env.gateway.ListMessages(gateway_pb2.ListMessagesRequest(session_id=session_id), metadata=PINNED),
        lambda: env.gateway.ForkSession(gateway_pb2.ForkSessionRequest(session_id=session_id), metadata=PINNED),
        lambda: env.gateway.RewindSession(
            gateway_pb2.RewindSessionRequest(session_id=session_id, turn_id=second), metadata=PINNED
        ),
    ]
    for make in calls:
        code, reason, _ = await refused(make())
        assert (code, reason) == (grpc.StatusCode.NOT_FOUND, "SESSION_NOT_FOUND")
    await fork(env, session_id)
    listed = await env.gateway.ListSessions(
        gateway_pb2.ListSessionsRequest(forked_from=session_id), metadata=PINNED, timeout=TIMEOUT_S
    )
    assert not listed.sessions
    assert len(await list_turns(env, session_id)) == 3, "nothing was rewound"


async def test_bad_requests_name_the_field(env: Env) -> None:
    session_id = await session(env)
    G = gateway_pb2
    cases: list[tuple[Callable[[], Awaitable[Any]], str]] = [
        (lambda: env.gateway.ListTurns(G.ListTurnsRequest(), metadata=AUTH), "session_id"),
        (lambda: env.gateway.ListTurns(G.ListTurnsRequest(session_id=LONG_ID), metadata=AUTH), "session_id"),
        (
            lambda: env.gateway.ListTurns(G.ListTurnsRequest(session_id=session_id, page_size=201), metadata=AUTH),
            "page_size",
        ),
        (
            lambda: env.gateway.ListMessages(G.ListMessagesRequest(session_id=session_id, page_size=-1), metadata=AUTH),
            "page_size",
        ),
        (
            lambda: env.gateway.ListMessages(
                G.ListMessagesRequest(session_id=session_id, through_turn_id=LONG_ID), metadata=AUTH
            ),
            "through_turn_id",
        ),
        (
            lambda: env.gateway.ForkSession(
                G.ForkSessionRequest(session_id=session_id, turn_id=LONG_ID), metadata=AUTH
            ),
            "turn_id",
        ),
        (
            lambda: env.gateway.ForkSession(
                G.ForkSessionRequest(session_id=session_id, before_turn=True), metadata=AUTH
            ),
            "turn_id",
        ),
        (
            lambda: env.gateway.ForkSession(
                G.ForkSessionRequest(session_id=session_id, labels={"Bad Key": "x"}), metadata=AUTH
            ),
            'labels["Bad Key"]',
        ),
        (lambda: env.gateway.RewindSession(G.RewindSessionRequest(session_id=session_id), metadata=AUTH), "turn_id"),
        (lambda: env.gateway.RewindSession(G.RewindSessionRequest(turn_id="t"), metadata=AUTH), "session_id"),
        (
            lambda: env.gateway.ListSessions(G.ListSessionsRequest(forked_from=LONG_ID), metadata=AUTH),
            "forked_from",
        ),
    ]
    for make, field in cases:
        code, reason, violations = await refused(make())
        assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT"), field
        assert field in [where for where, _ in violations], (field, violations)
    code, reason, _ = await refused(
        env.gateway.ForkSession(G.ForkSessionRequest(session_id=session_id, agent="no-such-agent"), metadata=AUTH)
    )
    assert (code, reason) == (grpc.StatusCode.NOT_FOUND, "AGENT_NOT_FOUND")
    code, reason, _ = await refused(rewind(env, session_id, "f" * 32))
    assert code == grpc.StatusCode.NOT_FOUND, reason


# --------------------------------------------------------------------------- the Python client and the CLI


async def test_the_python_client_travels_in_time(env: Env) -> None:
    session_id, turns = await three_turns(env)
    first, second = turns[0][0].turn_id, turns[1][0].turn_id
    async with GatewayClient(env.address, api_key=KEY) as client:
        listed = [t async for t in client.list_turns(session_id, page_size=1, include_steps=True)]
        assert [t.turn_id for t in listed] == [events[0].turn_id for events in turns] and listed[0].steps
        then = [m async for m in client.list_messages(session_id, through_turn_id=second, page_size=2)]
        assert then == await list_messages(env, session_id, through=second)
        forked = await client.fork_session(session_id, second, before=True, labels={"try": "again"})
        # forked_from names the last turn the fork holds: the one before `second`.
        assert forked.session.forked_from.turn_id == first and dict(forked.session.labels) == {"try": "again"}
        page = await client.list_sessions(forked_from=session_id)
        assert [s.session_id for s in page.sessions] == [forked.session.session_id]
        reply = await client.rewind_session(session_id, second)
        assert reply.event.rewound.dropped_turn_ids == [second, turns[2][0].turn_id]
        assert {m.turn_id async for m in client.list_messages(session_id)} == {first}


def cli_parser() -> argparse.ArgumentParser:
    """`cogmesh sessions` as services/suite/cli.py builds it, with only what history_cli registers."""
    root = argparse.ArgumentParser(prog="cogmesh")
    root.add_argument("--json", action="store_true")
    root.add_argument("--gateway", default="")
    root.add_argument("--api-key", default="")
    sub = root.add_subparsers(dest="command", required=True)

    def command(name: str, help_text: str, run: Callable[[argparse.Namespace], Awaitable[int]], parent: Any) -> Any:
        p = parent.add_parser(name, help=help_text)
        p.add_argument("--json", action="store_true", default=argparse.SUPPRESS)
        p.set_defaults(run=run)
        return p

    def with_gateway(p: Any) -> Any:
        p.add_argument("--gateway", default=argparse.SUPPRESS)
        p.add_argument("--api-key", default=argparse.SUPPRESS)
        return p

    sessions = sub.add_parser("sessions").add_subparsers(dest="action", required=True)
    history_cli.register(sessions, command, with_gateway)
    return root


async def cli(env: Env, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[dict[str, Any]]]:
    """Run `cogmesh --json sessions ...`; returns its exit code and its JSON lines (the in-process suite's
    log lines share stdout: only lines that are the command's replies are kept)."""
    args = cli_parser().parse_args(["--json", "--gateway", env.address, "--api-key", KEY, "sessions", *argv])
    capsys.readouterr()
    code = await args.run(args)
    lines = []
    for line in capsys.readouterr().out.splitlines():
        with contextlib.suppress(ValueError):
            parsed = json.loads(line)
            if isinstance(parsed, dict) and "level" not in parsed and "service" not in parsed:
                lines.append(parsed)
    return code, lines


async def test_the_cli_lists_forks_edits_and_rewinds(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    session_id, turns = await three_turns(env)
    first, second = turns[0][0].turn_id, turns[1][0].turn_id
    code, [listed] = await cli(env, capsys, "turns", session_id, "--steps")
    assert code == 0 and [t["turn_id"] for t in listed["turns"]] == [events[0].turn_id for events in turns]
    assert listed["turns"][0]["steps"]
    code, [messages] = await cli(env, capsys, "messages", session_id, "--through", first)
    assert code == 0 and {m["turn_id"] for m in messages["messages"]} == {first}

    code, [forked, *events] = await cli(env, capsys, "fork", session_id, "--turn", second, "--edit", "What is 6 * 8?")
    assert code == 0 and forked["session"]["forked_from"]["turn_id"] == first  # the last turn it holds
    assert events[-1]["final"]["text"] == "6 * 8 = 48."
    fork_messages = await list_messages(env, forked["session"]["session_id"])
    assert [m.content for m in fork_messages][forked.get("message_count", 0)] == "What is 6 * 8?"

    # --replay: the turn's own message, sent again on a fork made before it.
    code, [replayed, *events] = await cli(env, capsys, "fork", session_id, "--turn", second, "--replay")
    assert code == 0 and replayed["session"]["forked_from"]["turn_id"] == first
    replay_messages = await list_messages(env, replayed["session"]["session_id"])
    original = await list_messages(env, session_id)
    asked = next(m.content for m in original if m.turn_id == second and m.role == messages_pb2.ROLE_USER)
    assert events[-1].get("final") and replay_messages[replayed.get("message_count", 0)].content == asked

    code, [rewound] = await cli(env, capsys, "rewind", session_id, "--turn", second)
    assert code == 0 and rewound["event"]["rewound"]["turn_id"] == second
    assert {m.turn_id for m in await list_messages(env, session_id)} == {first}


async def test_the_cli_prints_turns_and_messages_for_people(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    session_id, turns = await three_turns(env)
    for argv in (["turns", session_id, "--steps"], ["messages", session_id]):
        args = cli_parser().parse_args(["--gateway", env.address, "--api-key", KEY, "sessions", *argv])
        capsys.readouterr()
        assert await args.run(args) == 0
        printed = capsys.readouterr().out
        if argv[0] == "turns":
            assert all(f"#{i} {events[0].turn_id}  completed" in printed for i, events in enumerate(turns, 1))
        else:
            assert "user: What is 17 * 23?" in printed and "assistant: 6 * 7 = 42." in printed


async def test_the_cli_parses_the_history_commands() -> None:
    args = cli_parser().parse_args(
        ["sessions", "fork", "S", "--turn", "T", "--before", "--agent", "careful", "--label", "a=b", "--label", "c="]
    )
    assert (args.session, args.turn, args.before, args.agent, args.label, args.edit) == (
        "S",
        "T",
        True,
        "careful",
        [("a", "b"), ("c", "")],
        None,
    )
    assert args.run is history_cli.cmd_fork
    with pytest.raises(SystemExit):
        cli_parser().parse_args(["sessions", "rewind", "S"])  # --turn is required
    args = cli_parser().parse_args(["sessions", "turns", "S", "--steps"])
    assert (args.run, args.steps) == (history_cli.cmd_turns, True)
