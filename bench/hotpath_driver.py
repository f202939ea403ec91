"""One system's client side of bench.hotpath, in a process of its own so its CPU can be read from /proc.

    python -m bench.hotpath_driver CONFIG_JSON

CONFIG_JSON: {"system": "sdk" | "langgraph" | "cogmesh", ...} with, for `sdk` and `langgraph`,
`base_url`, `model`, `prefix` (the messages before the user's, as cogmesh sends them) and
`tools` (the same tool schemas), and for `cogmesh` the `gateway` address and the `agent`.
`sdk` and `cogmesh` run in cogmesh's virtualenv, `langgraph` in the peer's (bench/peer), so
this module imports nothing at the top that either lacks.

One JSON object a line on stdin and stdout:

    -> {"ready": pid}
    <- {"text": ..., "expect": ..., "turns": N, "concurrency": C}   a measurement
    -> {"armed": true}                                                its sessions exist
    <- "go"                                                           (the bench reads CPU first)
    -> {"timings": [[first event, first token, full, events], ...], "errors": {...}, "samples": {...}}

The turns run in rounds of C at once; every turn must answer exactly `expect`.
"""

from __future__ import annotations

import ast
import asyncio
import collections
import json
import operator
import os
import sys
from collections.abc import AsyncIterator
from typing import Any

from bench.peer.timing import Timing, time_stream

TURN_TIMEOUT_S = 120.0
CHANNELS = 16  # cogmesh's callers are many clients, not one connection
OPERATORS: dict[type, Any] = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}


def evaluate(expression: str) -> str:
    """The calculator of the SDK and LangGraph sides (+ - * on integers is all the turns ask)."""

    def value(node: ast.AST) -> int:
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in OPERATORS:
            return int(OPERATORS[type(node.op)](value(node.left), value(node.right)))
        raise ValueError(f"unsupported expression {expression!r}")

    return str(value(ast.parse(expression, mode="eval").body))


class Sdk:
    """The floor: the bare `openai` SDK streaming the request cogmesh's runtime sends, tool loop by hand."""

    def __init__(self, config: dict[str, Any]) -> None:
        import openai

        self.client = openai.AsyncOpenAI(
            base_url=config["base_url"], api_key="not-needed", max_retries=0, timeout=TURN_TIMEOUT_S
        )
        self.model, self.prefix, self.tools = config["model"], config["prefix"], config["tools"]

    async def prepare(self, count: int) -> list[Any]:
        return [None] * count

    async def cleanup(self, prepared: list[Any]) -> None:
        return None

    async def turn(self, text: str, _: Any) -> tuple[Timing, str]:
        answer: list[str] = []

        async def events() -> AsyncIterator[Any]:
            messages = [*self.prefix, {"role": "user", "content": text}]
            while True:
                calls: dict[int, dict[str, str]] = {}
                stream = await self.client.chat.completions.create(
                    model=self.model,
                    messages=messages,
                    tools=self.tools,
                    stream=True,
                    stream_options={"include_usage": True},
                )
                async with stream:
                    async for chunk in stream:
                        yield chunk
                        if not chunk.choices:
                            continue
                        delta = chunk.choices[0].delta
                        if delta.content:
                            answer.append(delta.content)
                        for part in delta.tool_calls or ():
                            call = calls.setdefault(part.index, {"id": "", "name": "", "arguments": ""})
                            call["id"] = part.id or call["id"]
                            if part.function is not None:
                                call["name"] = part.function.name or call["name"]
                                call["arguments"] += part.function.arguments or ""
                if not calls:
                    return
                messages = [
                    *messages,
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": c["id"],
                                "type": "function",
                                "function": {"name": c["name"], "arguments": c["arguments"]},
                            }
                            for c in calls.values()
                        ],
                    },
                    *(
                        {
                            "role": "tool",
                            "tool_call_id": c["id"],
                            "content": evaluate(json.loads(c["arguments"])["expression"]),
                        }
                        for c in calls.values()
                    ),
                ]

        def is_token(chunk: Any) -> bool:
            return bool(chunk.choices and chunk.choices[0].delta.content)

        return await time_stream(events, is_token), "".join(answer)


class LangGraph:
    """LangGraph in-process: a prebuilt-style agent graph (model node, ToolNode) with ChatOpenAI."""

    def __init__(self, config: dict[str, Any]) -> None:
        from langchain_core.messages import AIMessageChunk, HumanMessage, SystemMessage
        from langchain_core.tools import tool
        from langchain_openai import ChatOpenAI
        from langgraph.graph import START, MessagesState, StateGraph
        from langgraph.prebuilt import ToolNode, tools_condition

        @tool  # type: ignore[untyped-decorator]
        def calculator(expression: str) -> str:
            """Evaluate an arithmetic expression."""
            return evaluate(expression)

        model = ChatOpenAI(
            model=config["model"],
            base_url=config["base_url"],
            api_key="not-needed",
            streaming=True,
            stream_usage=True,
            max_retries=0,
            timeout=TURN_TIMEOUT_S,
        ).bind_tools(config["tools"])

        async def agent(state: MessagesState) -> dict[str, Any]:
            return {"messages": [await model.ainvoke(state["messages"])]}

        builder = StateGraph(MessagesState)
        builder.add_node("agent", agent)
        builder.add_node("tools", ToolNode([calculator]))
        builder.add_edge(START, "agent")
        builder.add_conditional_edges("agent", tools_condition)
        builder.add_edge("tools", "agent")
        self.graph = builder.compile()
        self.prefix = [SystemMessage(m["content"]) for m in config["prefix"]]
        self.human, self.chunk_type = HumanMessage, AIMessageChunk

    async def prepare(self, count: int) -> list[Any]:
        return [None] * count

    async def cleanup(self, prepared: list[Any]) -> None:
        return None

    async def turn(self, text: str, _: Any) -> tuple[Timing, str]:
        answer: list[str] = []

        def is_token(event: Any) -> bool:
            return isinstance(event[0], self.chunk_type) and bool(event[0].content)

        async def events() -> AsyncIterator[Any]:
            state = {"messages": [*self.prefix, self.human(text)]}
            async for event in self.graph.astream(state, stream_mode="messages"):
                if is_token(event):
                    answer.append(str(event[0].content))
                yield event

        return await time_stream(events, is_token), "".join(answer)


class Cogmesh:
    """A client of the gateway: a new session per turn (created before the measured window)."""

    def __init__(self, config: dict[str, Any]) -> None:
        import grpc

        from cogmesh.gateway.v1 import gateway_pb2, gateway_pb2_grpc

        self.pb = gateway_pb2
        self.channels = [grpc.aio.insecure_channel(config["gateway"]) for _ in range(CHANNELS)]
        self.stubs = [gateway_pb2_grpc.GatewayServiceStub(c) for c in self.channels]  # type: ignore[no-untyped-call]
        self.agent = config["agent"]
        self.taken_over = 0  # turns another runtime worker took over (their first one fell behind on its lease)

    async def prepare(self, count: int) -> list[Any]:
        request = self.pb.CreateSessionRequest(agent=self.agent)
        stubs = [self.stubs[i % CHANNELS] for i in range(count)]
        created = await asyncio.gather(*(stub.CreateSession(request, timeout=TURN_TIMEOUT_S) for stub in stubs))
        return [(stub, c.session.session_id) for stub, c in zip(stubs, created, strict=True)]

    async def cleanup(self, prepared: list[Any]) -> None:
        await asyncio.gather(
            *(stub.DeleteSession(self.pb.DeleteSessionRequest(session_id=sid)) for stub, sid in prepared),
            return_exceptions=True,
        )

    async def turn(self, text: str, prepared: Any) -> tuple[Timing, str]:
        stub, session_id = prepared
        deltas: list[tuple[int, str]] = []
        void: set[int] = set()  # a step redone by another runtime replica voids what it had streamed

        async def events() -> AsyncIterator[Any]:
            request = self.pb.SendMessageRequest(session_id=session_id, content=text)
            async for response in stub.SendMessage(request, timeout=TURN_TIMEOUT_S):
                for event in response.events:
                    kind = event.WhichOneof("payload")
                    if kind == "error":
                        raise RuntimeError(f"error event: {event.error.message}")
                    if kind == "assistant_delta":
                        deltas.append((event.seq, event.assistant_delta.text))
                    if kind == "native_notice" and event.native_notice.kind == "step_retried":
                        fields = event.native_notice.metadata.fields
                        after, through = fields["void_after_seq"].number_value, fields["void_through_seq"].number_value
                        void.update(range(int(after) + 1, int(through) + 1))
                        self.taken_over += 1
                    yield event

        timing = await time_stream(events, lambda event: event.WhichOneof("payload") == "assistant_delta")
        return timing, "".join(text for seq, text in deltas if seq not in void)


SYSTEMS = {"sdk": Sdk, "langgraph": LangGraph, "cogmesh": Cogmesh}


async def measure(system: Any, command: dict[str, Any], prepared: list[Any], lines: Any) -> dict[str, Any]:
    timings: list[Timing] = []
    errors: collections.Counter[str] = collections.Counter()
    samples: dict[str, str] = {}

    async def one(slot: Any) -> None:
        try:
            timing, answer = await asyncio.wait_for(system.turn(command["text"], slot), TURN_TIMEOUT_S)
        except TimeoutError:
            errors["TimeoutError"] += 1
            samples.setdefault("TimeoutError", f"the turn did not end within {TURN_TIMEOUT_S:.0f} s")
            return
        except Exception as exc:  # noqa: BLE001 - every failure is counted by kind, with one message each
            kind = type(exc).__name__
            errors[kind] += 1
            samples.setdefault(kind, str(exc)[:300])
            return
        if answer != command["expect"]:
            errors["wrong answer"] += 1
            samples.setdefault("wrong answer", f"{answer[:120]!r} (expected {command['expect'][:120]!r})")
            return
        timings.append(timing)

    emit({"armed": True})
    if (await lines.readline()).strip() != b"go":
        raise SystemExit("expected go")
    step = command["concurrency"]
    before = getattr(system, "taken_over", 0)
    for start in range(0, len(prepared), step):
        await asyncio.gather(*(one(slot) for slot in prepared[start : start + step]))
    if taken := getattr(system, "taken_over", 0) - before:
        samples["taken over"] = f"{taken} turn(s) finished by another runtime worker (a step redone, its deltas voided)"
    return {
        "timings": [[t.first_event, t.first_token, t.full, t.events] for t in timings],
        "errors": dict(errors),
        "samples": samples,
        "taken_over": taken,
    }


def emit(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


async def main(config: dict[str, Any]) -> None:
    system: Any = SYSTEMS[config["system"]](config)
    loop = asyncio.get_running_loop()
    lines = asyncio.StreamReader(limit=1 << 20)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(lines), sys.stdin)
    emit({"ready": os.getpid()})
    prepared: list[Any] = []
    while line := await lines.readline():  # the bench closing our stdin ends us
        await system.cleanup(prepared)  # the last measurement's sessions, outside any window
        command = json.loads(line)
        prepared = await system.prepare(command["turns"])
        emit(await measure(system, command, prepared, lines))
    await system.cleanup(prepared)


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
