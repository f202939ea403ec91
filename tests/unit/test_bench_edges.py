"""bench.edges without the suite: its SSE reading (over a real HTTP server), the rounds pooled into a
row, and the ratios to the gRPC baseline as the report shows them."""

from __future__ import annotations

import asyncio
import json
import math
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

from bench.edges import (
    EXPECT,
    HttpxSse,
    Part,
    agui_text,
    chat_text,
    combine,
    overheads,
    report,
    responses_text,
    shares,
    sse,
)
from bench.harness import parse_tables

WORDS = EXPECT.split(" ")[:3]  # "tok0", "tok1", "tok2"


async def lines(*items: str) -> AsyncIterator[str]:
    for item in items:
        yield item


async def test_sse_reads_events_names_multiline_data_and_an_unterminated_last_event() -> None:
    read = [
        event
        async for event in sse(
            lines(
                ": a comment",
                "event: response.created",
                'data: {"a": 1}',
                "",
                "",  # a blank line with nothing before it dispatches nothing
                "id: 7",
                "data:first",
                "data: second",
                "",
                "data: [DONE]",
            )
        )
    ]
    assert read == [("response.created", '{"a": 1}'), ("message", "first\nsecond"), ("message", "[DONE]")]


def test_each_protocol_yields_only_its_reply_text() -> None:
    assert chat_text({"choices": [{"delta": {"content": " tok1"}}]}) == " tok1"
    assert chat_text({"choices": [{"delta": {"role": "assistant"}}]}) == ""
    assert chat_text({"choices": [], "usage": {"completion_tokens": 100}}) == ""
    assert responses_text({"type": "response.output_text.delta", "delta": "tok0"}) == "tok0"
    assert responses_text({"type": "response.output_text.done", "text": EXPECT}) == ""
    assert agui_text({"type": "TEXT_MESSAGE_CONTENT", "messageId": "t:4", "delta": " tok2"}) == " tok2"
    assert agui_text({"type": "TOOL_CALL_ARGS", "delta": "{}"}) == ""


# What the edge streams on each path, cut down to three tokens (the bench reads no other field).
STREAMS: dict[str, list[tuple[str, Any]]] = {
    "/v1/chat/completions": [
        ("", {"choices": [{"delta": {"role": "assistant"}}]}),
        *(("", {"choices": [{"delta": {"content": w if i == 0 else f" {w}"}}]}) for i, w in enumerate(WORDS)),
        ("", "[DONE]"),
    ],
    "/v1/responses": [
        ("response.created", {"type": "response.created"}),
        *(
            ("response.output_text.delta", {"type": "response.output_text.delta", "delta": w if i == 0 else f" {w}"})
            for i, w in enumerate(WORDS)
        ),
        ("response.completed", {"type": "response.completed"}),
    ],
    "/agui/default": [
        ("", {"type": "RUN_STARTED"}),
        ("", {"type": "TEXT_MESSAGE_START"}),
        *(("", {"type": "TEXT_MESSAGE_CONTENT", "delta": w if i == 0 else f" {w}"}) for i, w in enumerate(WORDS)),
        ("", {"type": "RUN_FINISHED"}),
    ],
}
FAILED_RUN: list[tuple[str, Any]] = [("", {"type": "RUN_STARTED"}), ("", {"type": "RUN_ERROR", "message": "boom"})]


async def serve_sse(request: Request) -> StreamingResponse:
    body = json.loads(await request.body())
    seen.append((request.url.path, dict(request.headers), body))
    fail = body.get("messages", [{}])[-1].get("content") == "fail"

    async def frames() -> AsyncIterator[str]:
        for name, data in FAILED_RUN if fail else STREAMS[request.url.path]:
            await asyncio.sleep(0)
            body = data if isinstance(data, str) else json.dumps(data)
            yield (f"event: {name}\n" if name else "") + f"data: {body}\n\n"

    return StreamingResponse(frames(), media_type="text/event-stream")


seen: list[tuple[str, dict[str, str], dict[str, Any]]] = []


async def test_the_bare_httpx_clients_read_each_protocols_stream_from_a_real_server() -> None:
    app = Starlette(routes=[Route(path, serve_sse, methods=["POST"]) for path in STREAMS])
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, lifespan="off", log_config=None))
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    edge = f"http://127.0.0.1:{sock.getsockname()[1]}"
    try:
        while not server.started:
            assert not serving.done(), serving
            await asyncio.sleep(0.01)
        for path in ("chat-httpx", "responses-httpx", "agui"):
            client = HttpxSse({"edge": edge, "path": path})
            try:
                timing, answer = await client.turn("s-1", "Tell me something.")
            finally:
                await client.close()
            assert answer == " ".join(WORDS), path
            assert 0 < timing.first_event <= timing.first_token <= timing.full, (path, timing)
            # Every event is counted; the first token is the first with text, not the role chunk or RUN_STARTED.
            assert timing.events == len(STREAMS[seen[-1][0]]) - (1 if path == "chat-httpx" else 0), path
            assert timing.first_token > timing.first_event, path
        # Each request names the pre-made session the protocol's own way.
        (chat_path, chat_headers, chat_body), (resp_path, _, resp_body), (agui_path, _, agui_body) = seen[-3:]
        assert chat_path == "/v1/chat/completions" and chat_headers["x-cogmesh-session"] == "s-1"
        assert chat_body["stream"] is True and chat_body["messages"][-1]["content"] == "Tell me something."
        assert resp_path == "/v1/responses" and resp_body["conversation"] == "s-1" and resp_body["stream"] is True
        assert agui_path == "/agui/default" and agui_body["threadId"] == "s-1"
        assert agui_body["messages"] == [{"id": "m1", "role": "user", "content": "Tell me something."}]

        failing = HttpxSse({"edge": edge, "path": "agui"})
        try:
            with pytest.raises(RuntimeError, match=r"RUN_ERROR: .*boom"):
                await failing.turn("s-1", "fail")
        finally:
            await failing.close()
    finally:
        server.should_exit = True
        await serving
        sock.close()


def part(turns: int, ttft_ms: list[float], cpu_s: dict[str, float], errors: dict[str, int] | None = None) -> Part:
    timings = [[t / 2000, t / 1000, t / 1000 + 0.01, 103] for t in ttft_ms]
    return Part(turns, timings, errors or {}, {k: "sample" for k in errors or {}}, cpu_s, wall_s=1.0)


def test_rounds_pool_timings_and_sum_cpu_by_service() -> None:
    rounds = [
        part(2, [10, 20], {"client": 0.010, "gateway": 0.004, "runtime-1": 0.006, "runtime-2": 0.002, "web": 0.0}),
        part(
            3, [30, 40], {"client": 0.020, "gateway": 0.006, "runtime-1": 0.002, "runtime-2": 0.0, "web": 0.0}, {"X": 1}
        ),
    ]
    row = combine("grpc", rounds)
    assert (row.turns, row.ok, row.errors, row.samples) == (5, 4, {"X": 1}, {"X": "sample"})
    assert row.ms["ttft_p50"] == pytest.approx(25.0) and row.ms["ttft_p99"] == pytest.approx(40.0)
    assert row.ms["full_p50"] == pytest.approx(35.0) and row.ms["ttfe_p50"] == pytest.approx(12.5)
    # CPU per turn: seconds summed over rounds (runtime's two workers as one service), over all 5 turns.
    assert row.cpu_ms == pytest.approx({"client": 6.0, "gateway": 2.0, "runtime": 2.0, "web": 0.0})
    assert shares(200, 4) == [50] * 4 and shares(10, 4) == [3, 3, 2, 2] and shares(2, 4) == [1, 1]


def row(path: str, ttft: float, full: float, cpu_ms: dict[str, float]) -> dict[str, Any]:
    ms = {"ttfe_p50": ttft / 2, "ttfe_p99": ttft, "ttft_p50": ttft, "ttft_p99": 2 * ttft, "full_p50": full}
    ms["full_p99"] = 2 * full
    return {"path": path, "turns": 10, "ok": 10, "errors": {}, "samples": {}, "ms": ms, "cpu_ms": cpu_ms}


def test_overheads_are_against_the_grpc_row_of_the_same_run() -> None:
    rows = [
        row("grpc", 10.0, 20.0, {"client": 2.0, "gateway": 5.0, "runtime": 7.0, "web": 0.0, "sessions": 1.0}),
        row("chat-sdk", 15.0, 50.0, {"client": 30.0, "gateway": 6.0, "runtime": 7.0, "web": 8.0, "sessions": 1.0}),
        row("mcp", 12.0, 22.0, {"client": 4.0, "gateway": 7.0, "runtime": 7.0, "web": 5.0, "sessions": 2.0}),
    ]
    over = overheads(rows)
    assert over["grpc"]["ttft_p50_x"] == 1.0 and over["grpc"]["suite_cpu_added_ms"] == 0.0
    chat = over["chat-sdk"]
    assert chat["ttft_p50_x"] == pytest.approx(1.5) and chat["ttft_p50_added_ms"] == pytest.approx(5.0)
    assert chat["full_p50_x"] == pytest.approx(2.5) and chat["full_p50_added_ms"] == pytest.approx(30.0)
    # Suite = every process but the client: 13 ms against 22 ms.
    assert chat["suite_cpu_x"] == pytest.approx(22 / 13) and chat["suite_cpu_added_ms"] == pytest.approx(9.0)
    assert chat["client_cpu_x"] == pytest.approx(15.0)
    assert overheads(rows[1:]) == {}  # no baseline, no ratios

    data = {
        "rows": rows,
        "idle_ms_per_s": {"gateway": 1.5, "web": 0.4},
        "runtime_workers": 2,
        "turns": 10,
        "warmup": 2,
        "rounds": 2,
        "load_start": "1.00 1.00 1.00",
        "load_end": "2.00 1.50 1.00",
        "cores": 2,
    }
    latency, cpu = parse_tables(report(data))
    assert [r["first token p50 vs grpc"] for r in latency] == ["+0.00 (1.00x)", "+5.00 (1.50x)", "+2.00 (1.20x)"]
    assert latency[1]["path"].startswith("chat-sdk: ") and latency[1]["full turn p50 / p99"] == "50.00 / 100.00"
    assert [r["suite"] for r in cpu] == ["13.00", "22.00", "21.00"]
    assert cpu[1]["suite vs grpc"] == "+9.00 (1.69x)" and cpu[1]["client vs grpc"] == "15.00x"
    assert cpu[2]["others"] == "2.00" and cpu[2]["gateway calls per turn"] == "ListAgents, GetSession, SendMessage"
    assert "at the start: 1.00 1.00 1.00; at the end: 2.00 1.50 1.00" in report(data)


def test_a_baseline_without_cpu_ticks_gives_no_ratio_rather_than_infinity() -> None:
    rows = [row("grpc", 10.0, 20.0, {"client": 0.0, "gateway": 0.0}), row("agui", 11.0, 21.0, {"client": 1.0})]
    figures = overheads(rows)["agui"]
    assert math.isnan(figures["suite_cpu_x"]) and math.isnan(figures["client_cpu_x"])
    assert figures["suite_cpu_added_ms"] == 0.0
