"""The provider fakes speak HTTP/1.1 as a production server does, read here with h11 (a strict parser):
event streams in chunked transfer, and the connection kept alive for the next request."""

from __future__ import annotations

import asyncio
import json
from urllib.parse import urlsplit

import h11

from tests.fakes.providers import FakeOpenAI, Reply


async def exchange(
    connection: h11.Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str, body: bytes
) -> tuple[h11.Response, bytes]:
    """One request and its whole response over an open connection."""
    host = [("host", "fake"), ("content-type", "application/json"), ("content-length", str(len(body)))]
    writer.write(connection.send(h11.Request(method="POST", target=path, headers=host)))
    writer.write(connection.send(h11.Data(data=body)) + connection.send(h11.EndOfMessage()))
    await writer.drain()
    response: h11.Response | None = None
    received = b""
    while True:
        event = connection.next_event()
        if event is h11.NEED_DATA:
            connection.receive_data(await reader.read(65536))
        elif isinstance(event, h11.Response):
            response = event
        elif isinstance(event, h11.Data):
            received += event.data
        elif isinstance(event, h11.EndOfMessage):
            assert response is not None
            connection.start_next_cycle()
            return response, received
        else:
            raise AssertionError(f"unexpected {event!r}")


async def test_an_event_stream_is_chunked_and_the_connection_serves_the_next_request() -> None:
    async with FakeOpenAI() as fake:
        fake.then(Reply(text=["hello ", "there"]))
        address = urlsplit(fake.url)
        reader, writer = await asyncio.open_connection(address.hostname, address.port)
        connection = h11.Connection(our_role=h11.CLIENT)
        request = json.dumps({"model": "fake", "stream": True, "messages": []}).encode()
        try:
            stream, events = await exchange(connection, reader, writer, "/v1/chat/completions", request)
            missing, missing_body = await exchange(connection, reader, writer, "/v1/nothing-here", b"{}")
        finally:
            writer.close()
    headers = dict(stream.headers)
    assert stream.status_code == 200 and stream.http_version == b"1.1"
    assert headers[b"transfer-encoding"] == b"chunked" and b"content-length" not in headers
    assert headers[b"content-type"] == b"text/event-stream"
    assert events.startswith(b"data: {") and events.endswith(b"data: [DONE]\n\n") and b'"content": "there"' in events
    assert (missing.status_code, json.loads(missing_body)) == (404, {"error": "not found"})  # same connection
    assert [r.path for r in fake.model_requests] == ["/v1/chat/completions"]
