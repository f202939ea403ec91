"""Converse: a whole conversation on one bidirectional stream — messages, approvals, user input,
client tool results and cancellation in, the session's events, acks and rejections out."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
import pytest_asyncio
from google.protobuf import struct_pb2

from cogmesh.common.v1 import events_pb2, messages_pb2, turns_pb2
from cogmesh.gateway.v1 import gateway_pb2
from tests.integration.conftest import TIMEOUT_S, new_session, payload
from tests.integration.test_pause_resume import Env, agents_suite

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def env(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Env]:
    async with agents_suite(tmp_path_factory.mktemp("converse")) as found:
        yield found


class Conversation:
    """A Converse call: send frames, read what comes back until a condition holds."""

    def __init__(self, env: Env) -> None:
        self.call = env.gateway.Converse(timeout=TIMEOUT_S * 3)
        self.events: list[events_pb2.RuntimeEvent] = []
        self.acks: dict[str, gateway_pb2.ConverseAck] = {}
        self.rejections: dict[str, gateway_pb2.ConverseRejection] = {}
        self.heartbeats = 0

    async def send(self, frame_id: str, **frame: Any) -> None:
        await self.call.write(gateway_pb2.ConverseRequest(frame_id=frame_id, **frame))

    async def read_until(self, done: Any) -> None:
        async def loop() -> None:
            while not done(self):
                response = await self.call.read()
                assert response is not grpc.aio.EOF, "Converse ended early"
                kind = response.WhichOneof("kind")
                if kind == "events":
                    self.events.extend(response.events.events)
                elif kind == "ack":
                    self.acks[response.ack.frame_id] = response.ack
                elif kind == "rejected":
                    self.rejections[response.rejected.frame_id] = response.rejected
                else:
                    self.heartbeats += 1

        await asyncio.wait_for(loop(), TIMEOUT_S)

    def of_turn(self, turn_id: str) -> list[events_pb2.RuntimeEvent]:
        return [e for e in self.events if e.turn_id == turn_id]


def ended(turn_id: str) -> Any:
    return lambda c: any(payload(e) in ("final", "error") for e in c.of_turn(turn_id))


def paused(turn_id: str) -> Any:
    return lambda c: any(e.status.state == events_pb2.TURN_STATE_PAUSED for e in c.of_turn(turn_id))


async def test_a_whole_conversation_on_one_stream(env: Env) -> None:
    session_id = await new_session(env.gateway, agent="careful")
    talk = Conversation(env)
    await talk.send("o", open=gateway_pb2.ConverseOpen(session_id=session_id))
    await talk.read_until(lambda c: "o" in c.acks)

    # A message that needs an approval: ack with the turn, events until the pause.
    await talk.send("m1", message=gateway_pb2.SendMessageRequest(content="What is 12 * 12?"))
    await talk.read_until(lambda c: "m1" in c.acks)
    turn = talk.acks["m1"].turn_id
    await talk.read_until(paused(turn))
    approval = next(e.approval_required for e in talk.of_turn(turn) if e.HasField("approval_required"))

    await talk.send(
        "a1",
        approval=gateway_pb2.ResolveApprovalRequest(
            interrupt_id=approval.interrupt_id, decision=events_pb2.APPROVAL_DECISION_APPROVE
        ),
    )
    await talk.read_until(ended(turn))
    assert talk.acks["a1"].turn_id == turn
    assert talk.of_turn(turn)[-1].final.text == "12 * 12 = 144."

    # User input, then a client tool result, on the same stream.
    await talk.send("m2", message=gateway_pb2.SendMessageRequest(content="@ask_user Which unit?"))
    await talk.read_until(lambda c: "m2" in c.acks and paused(c.acks["m2"].turn_id)(c))
    turn = talk.acks["m2"].turn_id
    asked = next(e.user_input_requested for e in talk.of_turn(turn) if e.HasField("user_input_requested"))
    await talk.send("u", answer=gateway_pb2.AnswerInterruptRequest(interrupt_id=asked.interrupt_id, user_input="cm"))
    await talk.read_until(ended(turn))
    assert talk.of_turn(turn)[-1].final.text == "The ask_user tool returned: cm"

    schema = struct_pb2.Struct()
    schema.update({"type": "object", "properties": {}})
    tool = messages_pb2.ToolSpec(name="get_location", description="The device's location", parameters=schema)
    await talk.send("m3", message=gateway_pb2.SendMessageRequest(content="@get_location", client_tools=[tool]))
    await talk.read_until(lambda c: "m3" in c.acks and paused(c.acks["m3"].turn_id)(c))
    turn = talk.acks["m3"].turn_id
    call = next(e.client_tool_call for e in talk.of_turn(turn) if e.HasField("client_tool_call"))
    await talk.send(
        "r",
        answer=gateway_pb2.AnswerInterruptRequest(
            interrupt_id=call.interrupt_id, tool_result=turns_pb2.ClientToolResult(content="Porto")
        ),
    )
    await talk.read_until(ended(turn))
    assert talk.of_turn(turn)[-1].final.text == "The get_location tool returned: Porto"

    seqs = [e.seq for e in talk.events]
    assert seqs == sorted(seqs) and len(seqs) == len(set(seqs))
    await talk.call.done_writing()
    await asyncio.wait_for(_drain(talk), TIMEOUT_S)  # nothing in flight: the server ends the stream


async def _drain(talk: Conversation) -> None:
    while await talk.call.read() is not grpc.aio.EOF:
        pass


async def test_bad_frames_are_rejected_and_the_stream_goes_on(env: Env) -> None:
    session_id = await new_session(env.gateway, agent="careful")
    talk = Conversation(env)
    await talk.send("o", open=gateway_pb2.ConverseOpen(session_id=session_id, after_seq=0))
    await talk.send("again", open=gateway_pb2.ConverseOpen(session_id=session_id))
    await talk.send("empty", message=gateway_pb2.SendMessageRequest())
    await talk.send("other", message=gateway_pb2.SendMessageRequest(session_id="someone-else", content="hi"))
    await talk.send(
        "ghost",
        approval=gateway_pb2.ResolveApprovalRequest(
            interrupt_id="int_ghost", decision=events_pb2.APPROVAL_DECISION_APPROVE
        ),
    )
    await talk.send("nothing", cancel=gateway_pb2.CancelTurnRequest())
    await talk.read_until(lambda c: len(c.rejections) == 4 and "nothing" in c.acks)
    assert talk.rejections["again"].code == "INVALID_ARGUMENT"
    assert [v.field for v in talk.rejections["empty"].violations] == ["message.content"]
    assert [v.field for v in talk.rejections["other"].violations] == ["message.session_id"]
    ghost = talk.rejections["ghost"]
    assert ghost.code == "NOT_FOUND" and ghost.metadata["interrupt_id"] == "int_ghost"
    assert talk.acks["nothing"].turn_id == ""

    # Cancel a paused turn from the stream; a busy (paused) session refuses a message meanwhile.
    await talk.send("m", message=gateway_pb2.SendMessageRequest(content="What is 2 * 21?"))
    await talk.read_until(lambda c: "m" in c.acks and paused(c.acks["m"].turn_id)(c))
    turn = talk.acks["m"].turn_id
    await talk.send("busy", message=gateway_pb2.SendMessageRequest(content="hello?"))
    await talk.read_until(lambda c: "busy" in c.rejections)
    busy = talk.rejections["busy"]
    assert busy.code == "FAILED_PRECONDITION" and busy.metadata["turn_id"] == turn
    await talk.send("c", cancel=gateway_pb2.CancelTurnRequest(turn_id=turn))
    await talk.read_until(ended(turn))
    assert talk.acks["c"].turn_id == turn
    assert talk.of_turn(turn)[-1].error.kind == events_pb2.ERROR_KIND_CANCELLED
    talk.call.cancel()


async def test_the_first_frame_must_open_a_known_session(env: Env) -> None:
    talk = Conversation(env)
    await talk.send("m", message=gateway_pb2.SendMessageRequest(content="hi"))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await asyncio.wait_for(talk.call.read(), TIMEOUT_S)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT

    talk = Conversation(env)
    await talk.send("o", open=gateway_pb2.ConverseOpen(session_id="no-such-session"))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await asyncio.wait_for(talk.call.read(), TIMEOUT_S)
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND


async def test_a_watcher_on_another_stream_sees_the_turns_of_the_session(env: Env) -> None:
    session_id = await new_session(env.gateway)
    watcher, talker = Conversation(env), Conversation(env)
    await watcher.send("w", open=gateway_pb2.ConverseOpen(session_id=session_id))
    await watcher.read_until(lambda c: "w" in c.acks)
    await talker.send("o", open=gateway_pb2.ConverseOpen(session_id=session_id))
    await talker.send("m", message=gateway_pb2.SendMessageRequest(content="What is 7 * 6?"))
    await talker.read_until(lambda c: "m" in c.acks)
    turn = talker.acks["m"].turn_id
    await watcher.read_until(ended(turn))
    assert watcher.of_turn(turn)[-1].final.text == "7 * 6 = 42."
    watcher.call.cancel()
    talker.call.cancel()
