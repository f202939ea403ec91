"""The baseline for fan-out: a bare grpc.aio server-streaming server, no cogmesh code.

It serves GatewayService.Subscribe only: once `--subscribers` streams are open it
sends each of them `--events` RuntimeEvents, one per message, stamped as sent: as
fast as it can, or with `--rate R` on one shared schedule of R events per second.
Run as `python -m bench.raw_stream --port P --subscribers N --events M [--rate R]`.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc

from cogmesh.common.v1 import events_pb2
from cogmesh.gateway.v1 import gateway_pb2, gateway_pb2_grpc


class RawSubscribe(gateway_pb2_grpc.GatewayServiceServicer):
    def __init__(self, subscribers: int, events: int, text: str, rate: float = 0.0):
        self.subscribers, self.events, self.text, self.rate = subscribers, events, text, rate
        self.connected = 0
        self.all_connected = asyncio.Event()
        self.started = self.started_wall = 0.0

    async def Subscribe(self, request: Any, context: Any) -> AsyncIterator[gateway_pb2.SubscribeResponse]:
        yield gateway_pb2.SubscribeResponse(heartbeat=True)  # tells the client it is connected
        self.connected += 1
        if self.connected >= self.subscribers:
            self.started, self.started_wall = time.perf_counter(), time.time()
            self.all_connected.set()
        await self.all_connected.wait()
        for seq in range(1, self.events + 1):
            event = events_pb2.RuntimeEvent(session_id=request.session_id, turn_id="t", seq=seq)
            if self.rate:
                # Stamped with its scheduled time: a stream that falls behind shows it as lag.
                offset = (seq - 1) / self.rate
                if (due := self.started + offset - time.perf_counter()) > 0:
                    await asyncio.sleep(due)
                event.create_time.FromNanoseconds(int((self.started_wall + offset) * 1e9))
            else:
                event.create_time.GetCurrentTime()
            if seq == self.events:
                event.final.text = self.text
            else:
                event.assistant_delta.text = self.text
            yield gateway_pb2.SubscribeResponse(events=[event])


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--subscribers", type=int, required=True)
    parser.add_argument("--events", type=int, required=True)
    parser.add_argument("--rate", type=float, default=0.0, help="events per second; 0: as fast as possible")
    parser.add_argument("--text", default="w w w ")
    args = parser.parse_args()
    server = grpc.aio.server()
    gateway_pb2_grpc.add_GatewayServiceServicer_to_server(  # type: ignore[no-untyped-call]
        RawSubscribe(args.subscribers, args.events, args.text, args.rate), server
    )
    server.add_insecure_port(f"127.0.0.1:{args.port}")
    await server.start()
    await server.wait_for_termination()


if __name__ == "__main__":
    asyncio.run(main())
