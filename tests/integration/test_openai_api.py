"""The OpenAI-compatible API on the browser edge (gateway/web/openai/), through the real `openai` SDKs.

The Python SDK (`openai.AsyncOpenAI` with base_url = the edge) and the npm `openai` package
(tests/node_openai/run.mjs) talk to the edge in front of the real suite with API keys: streaming
and whole replies over both APIs, a client tool turn, continued sessions, an approval and a question
answered by the next message, and errors as the SDKs' typed exceptions.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import openai
import pytest
import pytest_asyncio
from openai import AsyncOpenAI

from cogmesh.common.v1 import events_pb2
from cogmesh.gateway.v1 import gateway_pb2
from tests.integration.test_web_edge import (
    AUTH,
    KEY,
    Edge,
    edge_for,
    follow_until_turn_ends,
    replay,
    settings_with_keys,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")

ROOT = Path(__file__).resolve().parents[2]
NODE_OPENAI = ROOT / "tests" / "node_openai"
DEFAULTS = ROOT / "services" / "defaults" / "agents"
SESSION = "x-cogmesh-session"
TIMEOUT_S = 30.0

# `default` with one model call per turn: "What is 1 + 1?" calls the calculator, then the loop's
# limit ends the turn before the model can answer: a turn that fails after it started.
ONE_STEP_AGENT = """\
name: one-step
description: The default agent allowed a single model call per turn.
prompts_dir: default
model: local
tools: [calculator]
default_role: assistant
mode: primary
limits: {max_iterations: 1}
"""
# Only another agent's task tool can run it: no session opens with it, so /v1/models leaves it out.
SUBAGENT = """\
name: helper
description: A subagent.
prompts_dir: default
model: local
tools: [calculator]
default_role: assistant
mode: subagent
"""
WEATHER = {
    "type": "function",
    "function": {
        "name": "weather",
        "description": "The weather in a city, from the caller's own service.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def echo(text: str) -> str:
    """The built-in local model's reply to a message with no arithmetic and no tool mention."""
    return (
        f'You said: "{text}". I am cogmesh\'s built-in local model: '
        "I answer arithmetic with the calculator tool and echo everything else."
    )


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def edge(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Edge]:
    tmp = tmp_path_factory.mktemp("openai")
    agents = tmp / "agents"
    shutil.copytree(DEFAULTS, agents)
    (agents / "one-step.yaml").write_text(ONE_STEP_AGENT)
    (agents / "helper.yaml").write_text(SUBAGENT)
    async with edge_for(settings_with_keys(tmp, agents_dir=agents)) as edge:
        yield edge


@pytest_asyncio.fixture(loop_scope="module")
async def client(edge: Edge) -> AsyncIterator[AsyncOpenAI]:
    # No retries: every error must reach the test as the SDK raises it.
    async with AsyncOpenAI(base_url=f"{edge.url}/v1", api_key=KEY, max_retries=0, timeout=TIMEOUT_S) as client:
        yield client


async def usage_in_log(edge: Edge, session_id: str) -> tuple[int, int]:
    events = await replay(edge, session_id)
    return sum(e.usage.input_tokens for e in events), sum(e.usage.output_tokens for e in events)


async def message_count(edge: Edge, session_id: str) -> int:
    reply = await edge.gateway.GetSession(
        gateway_pb2.GetSessionRequest(session_id=session_id), metadata=tuple(AUTH.items())
    )
    return int(reply.session.message_count)


# --------------------------------------------------------------------------- models


async def test_models_are_the_agents_a_session_can_open(client: AsyncOpenAI) -> None:
    names = [model.id async for model in client.models.list()]
    assert {"default", "careful", "one-step"} <= set(names)
    assert "helper" not in names, "a subagent cannot answer a session"
    model = await client.models.retrieve("careful")
    assert model.id == "careful" and model.object == "model" and model.owned_by == "cogmesh"
    with pytest.raises(openai.NotFoundError) as missing:
        await client.models.retrieve("helper")
    assert missing.value.code == "model_not_found"


# --------------------------------------------------------------------------- chat completions


async def test_chat_completion_whole(edge: Edge, client: AsyncOpenAI) -> None:
    raw = await client.chat.completions.with_raw_response.create(
        model="default", messages=[{"role": "user", "content": "What is 17 * 23?"}]
    )
    completion = raw.parse()
    choice = completion.choices[0]
    # The calculator is the agent's own tool: it runs inside cogmesh and is not the caller's tool call.
    assert choice.message.content == "17 * 23 = 391." and not choice.message.tool_calls
    assert choice.finish_reason == "stop" and choice.message.role == "assistant"
    assert completion.object == "chat.completion" and completion.model == "default"
    session_id = raw.headers[SESSION]
    extension = completion.model_extra["cogmesh"]
    assert extension["session_id"] == session_id and extension["status"] == "completed"
    assert extension["interrupt"] is None
    assert completion.usage is not None
    prompt, output = await usage_in_log(edge, session_id)
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (prompt, output)
    assert completion.usage.total_tokens == prompt + output and prompt > 0 and output > 0


async def test_chat_completion_streams_text_and_usage(client: AsyncOpenAI) -> None:
    stream = await client.chat.completions.create(
        model="default",
        messages=[{"role": "user", "content": "Tell me about the sea"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [chunk async for chunk in stream]
    with_choices = [c for c in chunks if c.choices]
    deltas = [c.choices[0].delta.content for c in with_choices if c.choices[0].delta.content]
    assert "".join(deltas) == echo("Tell me about the sea")
    assert len(deltas) > 1, "the reply streams in several deltas"
    assert with_choices[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in with_choices if c.choices[0].finish_reason] == ["stop"]
    assert all(c.object == "chat.completion.chunk" and c.id == chunks[0].id for c in chunks)
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None and last.usage.completion_tokens > 0
    assert all(c.usage is None for c in chunks[:-1])


async def test_the_sdks_stream_helper_accumulates_the_reply(client: AsyncOpenAI) -> None:
    async with client.chat.completions.stream(
        model="default", messages=[{"role": "user", "content": "What is 6 * 7?"}]
    ) as stream:
        final = await stream.get_final_completion()
    assert final.choices[0].message.content == "6 * 7 = 42." and final.choices[0].finish_reason == "stop"


async def test_a_chat_session_continues_through_the_header(edge: Edge, client: AsyncOpenAI) -> None:
    first = await client.chat.completions.with_raw_response.create(
        model="default", messages=[{"role": "user", "content": "hello"}]
    )
    session_id = first.headers[SESSION]
    fresh = first.parse()
    # Earlier messages in `messages` are the caller's copy: the session has them already.
    again = await client.chat.completions.with_raw_response.create(
        model="default",
        messages=[
            {"role": "user", "content": "hello"},
            {"role": "assistant", "content": fresh.choices[0].message.content},
            {"role": "user", "content": "hello"},
        ],
        extra_headers={SESSION: session_id},
    )
    assert again.headers[SESSION] == session_id
    continued = again.parse()
    assert continued.choices[0].message.content == echo("hello")
    assert await message_count(edge, session_id) == 4, "two turns of one session: two users, two replies"
    # The second turn's model call saw the first turn: more prompt tokens than the first's.
    assert fresh.usage is not None and continued.usage is not None
    assert continued.usage.prompt_tokens > fresh.usage.prompt_tokens


async def test_a_new_session_gets_the_earlier_messages_as_a_transcript(edge: Edge, client: AsyncOpenAI) -> None:
    raw = await client.chat.completions.with_raw_response.create(
        model="default",
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "Hello!"},
            {"role": "user", "content": "bye"},
        ],
    )
    transcript = "<conversation so far>\nsystem: Be brief.\nuser: hi\nassistant: Hello!\n</conversation so far>\n\nbye"
    assert raw.parse().choices[0].message.content == echo(" ".join(transcript.split()))
    assert await message_count(edge, raw.headers[SESSION]) == 2


async def test_a_client_tool_call_and_its_answer(edge: Edge, client: AsyncOpenAI) -> None:
    asked = await client.chat.completions.with_raw_response.create(
        model="default", messages=[{"role": "user", "content": '@weather {"city": "Paris"}'}], tools=[WEATHER]
    )
    session_id, completion = asked.headers[SESSION], asked.parse()
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    assert choice.message.tool_calls is not None and len(choice.message.tool_calls) == 1
    call = choice.message.tool_calls[0]
    assert call.type == "function" and call.function.name == "weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    assert completion.model_extra["cogmesh"]["status"] == "paused"

    # The standard tool loop: the assistant's message and a tool message, no header needed (the
    # call's id names its session and interrupt).
    answered = await client.chat.completions.with_raw_response.create(
        model="default",
        messages=[
            {"role": "user", "content": '@weather {"city": "Paris"}'},
            choice.message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": "18°C and sunny"},
        ],
        tools=[WEATHER],
    )
    assert answered.headers[SESSION] == session_id
    reply = answered.parse().choices[0]
    assert reply.message.content == "The weather tool returned: 18°C and sunny" and reply.finish_reason == "stop"

    # Streamed, the call comes as a tool_calls delta.
    stream = await client.chat.completions.create(
        model="default",
        messages=[{"role": "user", "content": '@weather {"city": "Oslo"}'}],
        tools=[WEATHER],
        stream=True,
    )
    chunks = [c async for c in stream]
    calls = [t for c in chunks if c.choices for t in c.choices[0].delta.tool_calls or []]
    assert [(t.index, t.function.name, json.loads(t.function.arguments or "")) for t in calls if t.function] == [
        (0, "weather", {"city": "Oslo"})
    ]
    assert chunks[-1].choices[0].finish_reason == "tool_calls"

    # While the turn waits for the tool's result, a user message cannot answer it.
    with pytest.raises(openai.ConflictError) as paused:
        await client.chat.completions.create(
            model="default",
            messages=[{"role": "user", "content": "hi"}],
            extra_headers={SESSION: chunks[-1].model_extra["cogmesh"]["session_id"]},
        )
    assert paused.value.code == "session_paused" and 'role "tool" message' in paused.value.message


async def test_an_approval_and_a_question_are_answered_by_the_next_message(client: AsyncOpenAI) -> None:
    raw = await client.chat.completions.with_raw_response.create(
        model="careful", messages=[{"role": "user", "content": "What is 6 * 7?"}]
    )
    session_id, asked = raw.headers[SESSION], raw.parse()
    choice = asked.choices[0]
    interrupt = asked.model_extra["cogmesh"]["interrupt"]
    assert choice.finish_reason == "stop" and not choice.message.tool_calls
    assert interrupt["type"] == "approval" and interrupt["tool"] == "calculator"
    assert interrupt["arguments"] == {"expression": "6 * 7"} and interrupt["id"].startswith("int_")
    assert choice.message.content is not None and choice.message.content.startswith("Approval needed:")
    assert asked.model_extra["cogmesh"]["status"] == "paused"

    session = {SESSION: session_id}
    approved = await client.chat.completions.create(
        model="careful", messages=[{"role": "user", "content": "approve"}], extra_headers=session
    )
    assert approved.choices[0].message.content == "6 * 7 = 42."

    # A question, streamed: its prompt is the reply's text; the answer is the next user message.
    stream = await client.chat.completions.create(
        model="careful",
        messages=[{"role": "user", "content": "@ask_user Which city?"}],
        extra_headers=session,
        stream=True,
    )
    chunks = [c async for c in stream]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Which city?"
    question = chunks[-1].model_extra["cogmesh"]["interrupt"]
    assert question["type"] == "question" and question["prompt"] == "Which city?"
    answered = await client.chat.completions.create(
        model="careful", messages=[{"role": "user", "content": "Lisbon"}], extra_headers=session
    )
    assert answered.choices[0].message.content == "The ask_user tool returned: Lisbon"

    # Rejected, with a reason the model reads.
    await client.chat.completions.create(
        model="careful", messages=[{"role": "user", "content": "What is 1 + 1?"}], extra_headers=session
    )
    rejected = await client.chat.completions.create(
        model="careful", messages=[{"role": "user", "content": "reject: not now"}], extra_headers=session
    )
    assert "not now" in (rejected.choices[0].message.content or "")

    # Edited: the call runs with the arguments given instead.
    await client.chat.completions.create(
        model="careful", messages=[{"role": "user", "content": "What is 2 + 2?"}], extra_headers=session
    )
    edited = await client.chat.completions.create(
        model="careful", messages=[{"role": "user", "content": 'edit: {"expression": "2 + 5"}'}], extra_headers=session
    )
    # The calculator ran 2 + 5; the built-in model labels the result with the expression it proposed.
    assert edited.choices[0].message.content == "2 + 2 = 7."


# --------------------------------------------------------------------------- errors


async def test_a_bad_key_is_an_authentication_error(edge: Edge) -> None:
    async with AsyncOpenAI(base_url=f"{edge.url}/v1", api_key="wrong", max_retries=0) as stranger:
        with pytest.raises(openai.AuthenticationError) as chat:
            await stranger.chat.completions.create(model="default", messages=[{"role": "user", "content": "hi"}])
        with pytest.raises(openai.AuthenticationError):
            await stranger.chat.completions.create(
                model="default", messages=[{"role": "user", "content": "hi"}], stream=True
            )
        with pytest.raises(openai.AuthenticationError):
            await stranger.responses.create(model="default", input="hi")
        with pytest.raises(openai.AuthenticationError):
            await stranger.models.list()
    assert chat.value.status_code == 401 and chat.value.code == "invalid_api_key"
    assert chat.value.type == "invalid_request_error" and chat.value.message


async def test_an_unknown_agent_is_model_not_found(client: AsyncOpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as chat:
        await client.chat.completions.create(model="nobody", messages=[{"role": "user", "content": "hi"}])
    assert chat.value.status_code == 404 and chat.value.code == "model_not_found" and chat.value.param == "model"
    assert "nobody" in chat.value.message
    with pytest.raises(openai.NotFoundError) as responses:
        await client.responses.create(model="nobody", input="hi", stream=True)
    assert responses.value.code == "model_not_found"


async def test_bad_requests_name_the_parameter(client: AsyncOpenAI) -> None:
    cases: list[tuple[dict[str, Any], str, str]] = [
        ({"model": "default@2"}, "model", "version or alias"),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
            "messages[0].content[0]",
            "text only",
        ),
        ({"messages": [{"role": "assistant", "content": "hi"}]}, "messages[0].role", "last message"),
        ({"n": 2}, "n", "one answer"),
        ({"tools": [{"type": "custom", "custom": {"name": "x"}}]}, "tools[0]", "function tools"),
        ({"tool_choice": "required"}, "tool_choice", "auto"),
    ]
    for change, param, words in cases:
        request = {"model": "default", "messages": [{"role": "user", "content": "hi"}], **change}
        with pytest.raises(openai.BadRequestError) as caught:
            await client.chat.completions.create(**request)
        assert (caught.value.status_code, caught.value.param) == (400, param), (change, caught.value.body)
        assert words in caught.value.message, caught.value.message


async def test_a_session_of_another_key_or_none_is_not_found(client: AsyncOpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        await client.chat.completions.create(
            model="default", messages=[{"role": "user", "content": "hi"}], extra_headers={SESSION: "nope"}
        )
    assert caught.value.code == "session_not_found"


async def test_a_failed_turn_is_an_error_with_what_it_left(edge: Edge, client: AsyncOpenAI) -> None:
    with pytest.raises(openai.InternalServerError) as caught:
        await client.chat.completions.create(model="one-step", messages=[{"role": "user", "content": "What is 1 + 1?"}])
    error = caught.value
    assert error.status_code == 500 and error.code == "loop_limit" and "loop_limit" in error.message
    assert error.response.headers["x-should-retry"] == "false"
    extension = error.body["cogmesh"]
    assert extension["kind"] == "loop_limit" and extension["session_id"] == error.response.headers[SESSION]
    # Streamed, the error comes after the stream began: the SDK raises it from the stream.
    stream = await client.chat.completions.create(
        model="one-step", messages=[{"role": "user", "content": "What is 1 + 1?"}], stream=True
    )
    with pytest.raises(openai.APIError) as streamed:
        async for _ in stream:
            pass
    assert streamed.value.code == "loop_limit"
    # The Responses API: an error whole, a `response.failed` event streamed.
    with pytest.raises(openai.InternalServerError) as whole:
        await client.responses.create(model="one-step", input="What is 1 + 1?")
    assert whole.value.code == "loop_limit"
    events = [
        event async for event in await client.responses.create(model="one-step", input="What is 1 + 1?", stream=True)
    ]
    assert events[-1].type == "response.failed" and events[-1].response.status == "failed"
    assert events[-1].response.error is not None and events[-1].response.error.code == "loop_limit"


async def test_rate_limits_are_429_with_retry_after(tmp_path: Path) -> None:
    settings = settings_with_keys(tmp_path, tenant_burst=1, tenant_rate_per_s=0.05)
    async with (
        edge_for(settings) as edge,
        AsyncOpenAI(base_url=f"{edge.url}/v1", api_key=KEY, max_retries=0) as limited,
    ):
        await limited.models.list()
        with pytest.raises(openai.RateLimitError) as caught:
            await limited.models.list()
    error = caught.value
    assert error.status_code == 429 and error.code == "rate_limit_exceeded"
    assert int(error.response.headers["retry-after"]) >= 1 and error.response.headers["x-should-retry"] == "true"
    assert "COGMESH_TENANT_RATE_PER_S" in error.message


async def test_closing_a_stream_cancels_its_turn(tmp_path: Path) -> None:
    # A slow model: 200 deltas 20 ms apart, so the turn is still streaming when the caller hangs up.
    settings = settings_with_keys(tmp_path, local_reply_tokens=200, local_delay_ms=20)
    async with edge_for(settings) as edge, AsyncOpenAI(base_url=f"{edge.url}/v1", api_key=KEY, max_retries=0) as slow:
        stream = await slow.chat.completions.create(
            model="default", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        session_id = stream.response.headers[SESSION]
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                break
        await stream.close()
        log = await follow_until_turn_ends(edge, session_id)
    assert log[-1].HasField("error") and log[-1].error.kind == events_pb2.ERROR_KIND_CANCELLED
    assert sum(e.HasField("assistant_delta") for e in log) < 200


# --------------------------------------------------------------------------- responses


async def test_a_response_whole_then_continued_and_retrieved(edge: Edge, client: AsyncOpenAI) -> None:
    first = await client.responses.create(model="default", input="What is 17 * 23?")
    assert first.status == "completed" and first.output_text == "17 * 23 = 391."
    assert first.object == "response" and first.model == "default" and first.id.startswith("resp_")
    assert first.conversation is not None
    session_id = first.conversation.id
    assert first.usage is not None and (first.usage.input_tokens, first.usage.output_tokens) == await usage_in_log(
        edge, session_id
    )

    second = await client.responses.create(model="default", input="hello", previous_response_id=first.id)
    assert second.output_text == echo("hello") and second.conversation is not None
    assert second.conversation.id == session_id and await message_count(edge, session_id) == 6
    third = await client.responses.create(model="default", input="hello", conversation=session_id)
    assert third.usage is not None and second.usage is not None
    assert third.usage.input_tokens > second.usage.input_tokens, "the third turn's model call saw the second"

    again = await client.responses.retrieve(second.id)
    assert again.id == second.id and again.output_text == second.output_text and again.status == "completed"
    assert again.usage is not None and again.usage.total_tokens == second.usage.total_tokens
    with pytest.raises(openai.NotFoundError) as missing:
        await client.responses.retrieve("resp_nope")
    assert missing.value.code == "response_not_found"
    with pytest.raises(openai.NotFoundError):
        await client.responses.create(model="default", input="hi", previous_response_id="resp_nope")


async def test_a_response_streams_its_events(client: AsyncOpenAI) -> None:
    async with client.responses.stream(model="default", input="Tell me about the sea") as stream:
        kinds = [event.type async for event in stream]
        final = await stream.get_final_response()
    assert final.output_text == echo("Tell me about the sea") and final.status == "completed"
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds.count("response.output_text.delta") > 1
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]


async def test_a_response_function_call_and_its_output(client: AsyncOpenAI) -> None:
    tool = {"type": "function", **WEATHER["function"]}
    asked = await client.responses.create(model="default", input='@weather {"city": "Rome"}', tools=[tool])
    calls = [item for item in asked.output if item.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "weather" and json.loads(calls[0].arguments) == {"city": "Rome"}
    answered = await client.responses.create(
        model="default",
        previous_response_id=asked.id,
        input=[{"type": "function_call_output", "call_id": calls[0].call_id, "output": "21°C"}],
        tools=[tool],
    )
    assert answered.output_text == "The weather tool returned: 21°C"


async def test_a_response_question_streamed_then_answered(client: AsyncOpenAI) -> None:
    stream = await client.responses.create(model="careful", input="@ask_user Which colour?", stream=True)
    events = [event async for event in stream]
    done = events[-1]
    assert done.type == "response.completed" and done.response.output_text == "Which colour?"
    interrupt = done.response.model_extra["cogmesh"]["interrupt"]
    assert interrupt["type"] == "question" and interrupt["prompt"] == "Which colour?"
    answered = await client.responses.create(model="careful", input="Blue", previous_response_id=done.response.id)
    assert answered.output_text == "The ask_user tool returned: Blue"


# --------------------------------------------------------------------------- the npm package


async def test_the_openai_npm_package(edge: Edge) -> None:
    node = shutil.which("node")
    if node is None or not (NODE_OPENAI / "node_modules" / "openai").is_dir():
        pytest.fail("the npm openai client needs node and `npm ci --prefix tests/node_openai`")
    process = await asyncio.create_subprocess_exec(
        node,
        str(NODE_OPENAI / "run.mjs"),
        f"{edge.url}/v1",
        KEY,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(60):
        out, err = await process.communicate()
    assert process.returncode == 0, err.decode()
    results = json.loads(out)
    assert results["streamed"] == echo("Hi from Node") and results["streamedChunks"] > 2
    assert results["whole"] == "17 * 23 = 391."
    assert results["toolCall"] == {"name": "weather", "arguments": {"city": "Paris"}}
    assert results["toolAnswer"] == "The weather tool returned: 12°C"
    assert results["sessionEchoed"] is True and results["continuedPromptTokensGrew"] is True
    assert results["badKey"] == {"status": 401, "name": "AuthenticationError", "code": "invalid_api_key"}
    assert results["unknownAgent"] == {"status": 404, "name": "NotFoundError", "code": "model_not_found"}
    assert results["response"] == "6 * 7 = 42."
    assert results["responseStreamed"] == echo("Streaming response")
    assert results["responseContinued"] == echo("again")


async def test_plain_http_bodies_that_are_not_requests(edge: Edge) -> None:
    for body, words in ((b"{", "not JSON"), (b"[]", "JSON object")):
        for path in ("/v1/chat/completions", "/v1/responses"):
            reply = await edge.http.post(path, content=body, headers={**AUTH, "content-type": "application/json"})
            assert reply.status_code == 400, reply.text
            error = reply.json()["error"]
            assert words in error["message"] and error["type"] == "invalid_request_error"
            assert set(error) == {"message", "type", "param", "code"}
    both = {"model": "default", "input": "hi", "previous_response_id": "resp_x", "conversation": "x"}
    reply = await edge.http.post("/v1/responses", json=both, headers=AUTH)
    assert reply.status_code == 400 and reply.json()["error"]["param"] == "conversation"
