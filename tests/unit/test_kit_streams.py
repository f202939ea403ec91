"""A kit channel's bidirectional stream: a write goes on the wire when it is made.

The suite's bidirectional streams are long-lived and shared (a runtime's AppendEventsStream carries
every append of its turns). A write that waited for the caller's event loop to turn, as an intercepted
stream's does (grpc hands it to a queue that a task empties), was held while that loop was busy, e.g.
streaming a model's buffered chunks: 2.6-4 ms per append in bench.hotpath's timeline. The server runs
in threads here; the client's loop does not turn until the server has the message (or gives up).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc

from cogmesh.sessions.v1 import sessions_pb2, sessions_pb2_grpc
from services.kit.clients import Clients
from services.kit.config import Settings

GIVE_UP_S = 30.0


class Receiving(sessions_pb2_grpc.SessionsServiceServicer):
    def __init__(self) -> None:
        self.got = threading.Event()

    def AppendEventsStream(self, request_iterator: Any, context: Any) -> Iterator[Any]:
        for _ in request_iterator:
            self.got.set()
        return iter(())


async def test_a_write_on_a_bidirectional_stream_reaches_the_server_while_the_callers_loop_is_busy() -> None:
    servicer = Receiving()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    sessions_pb2_grpc.add_SessionsServiceServicer_to_server(servicer, server)  # type: ignore[no-untyped-call]
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    clients = Clients(Settings(sessions_addr=f"127.0.0.1:{port}"))
    try:
        call = clients.sessions.AppendEventsStream()
        await call.write(sessions_pb2.AppendEventsStreamRequest(call_id=1))  # opens the stream
        await call.write(sessions_pb2.AppendEventsStreamRequest(call_id=2))
        servicer.got.clear()
        # A turn's log writer makes the write; the loop gives it one turn, then is busy, as a runner handling
        # a burst of chunks is: no await until the server has it.
        writing = asyncio.create_task(call.write(sessions_pb2.AppendEventsStreamRequest(call_id=3)))
        await asyncio.sleep(0)
        give_up = time.monotonic() + GIVE_UP_S
        while not servicer.got.is_set() and time.monotonic() < give_up:
            sum(range(1000))
        assert servicer.got.is_set(), "the write reached the server only once the caller's loop turned"
        await writing
        call.cancel()
    finally:
        await clients.close()
        server.stop(None)
