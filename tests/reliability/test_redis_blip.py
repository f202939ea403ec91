"""A Redis outage shorter than COGMESH_EVENT_LOG_OUTAGE_S costs a turn nothing (issue 31).

Two runtime replicas on one Redis; a turn streams 300 tokens. Mid-stream Redis goes away
for 5 s (killed and started again on its AOF, or frozen with SIGSTOP), longer than the
turns' lease (3 s here, renewed every second), so the lease lapses while nobody can renew
it and the other replica, looking for orphans every 0.2 s, claims it as soon as Redis is
back. Before the fix it then redid the model step (a `step_retried` notice, the tokens
streamed twice); now it asks the replica that held the lease (AdoptTurn), which still runs
the turn and goes on under the new token. Every trial must end with `final`, every token
once and in order, no notice and no `taken over` status.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from cogmesh.common.v1 import events_pb2
from cogmesh.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from tests.support.redis_server import RedisServer
from tests.support.replica_processes import ReplicaProcesses

TOKENS = 300
OUTAGE_S = 5.0  # the fault itself: how long Redis is away
DEADLINE_S = 90.0  # the caller's deadline: the turn streams ~6 s plus the outage
OUTAGES = ["kill", "pause"] * 3  # in about half the trials the other replica claims the lapsed lease first


@pytest.fixture
async def stage(tmp_path: Path) -> AsyncIterator[tuple[ReplicaProcesses, RedisServer]]:
    redis = RedisServer(directory=tmp_path, appendonly=True, appendfsync="always").start()
    processes = ReplicaProcesses.on(
        redis.url,
        "cogmesh-blip:",
        tmp_path,
        local_reply_tokens=str(TOKENS),
        local_delay_ms="20",
        turn_lease_ttl_s="3",
        turn_lease_renew_s="1",
        takeover_poll_s="0.2",
        call_timeout_s="3",
        log_level="info",  # who claimed and who adopted, in a failed run's logs
    )
    try:
        await asyncio.to_thread(processes.start_all)
        yield processes, redis
    finally:
        await asyncio.to_thread(processes.stop)
        redis.close()


async def outage(redis: RedisServer, how: str) -> None:
    if how == "kill":
        redis.kill()
        await asyncio.sleep(OUTAGE_S)
        await asyncio.to_thread(redis.start)
    else:
        redis.pause()
        await asyncio.sleep(OUTAGE_S)
        redis.resume()


@pytest.mark.timeout(600)
async def test_a_short_redis_outage_mid_turn_redoes_nothing(stage: tuple[ReplicaProcesses, RedisServer]) -> None:
    processes, redis = stage
    expected = " ".join(f"tok{i}" for i in range(TOKENS))
    async with grpc.aio.insecure_channel(processes.addresses["gateway_a"]) as channel:
        gateway = gateway_pb2_grpc.GatewayServiceStub(channel)
        for trial, how in enumerate(OUTAGES):
            created = await gateway.CreateSession(gateway_pb2.CreateSessionRequest(), timeout=30)
            call = gateway.SendMessage(
                gateway_pb2.SendMessageRequest(session_id=created.session.session_id, content="tell me"),
                timeout=DEADLINE_S,
            )
            events: list[events_pb2.RuntimeEvent] = []
            fault: asyncio.Task[None] | None = None
            started = time.monotonic()
            async for response in call:
                events += response.events
                deltas = sum(e.WhichOneof("payload") == "assistant_delta" for e in events)
                if fault is None and deltas >= 20:  # well into the stream
                    fault = asyncio.create_task(outage(redis, how))
            assert fault is not None, f"trial {trial}: the turn ended before the outage"
            await fault
            kinds = [e.WhichOneof("payload") for e in events]
            notices = [e.native_notice.kind for e in events if e.WhichOneof("payload") == "native_notice"]
            statuses = [e.status.text for e in events if e.WhichOneof("payload") == "status"]
            where = f"trial {trial} ({how}, {time.monotonic() - started:.1f}s): "
            assert kinds[-1] == "final", where + f"the turn ended with {events[-1]}"
            assert notices == [] and "taken over" not in statuses, where + f"notices {notices}, statuses {statuses}"
            text = "".join(e.assistant_delta.text for e in events if e.WhichOneof("payload") == "assistant_delta")
            assert text.split() == expected.split(), where + "every token once, in order"
            assert events[-1].final.metrics.model_calls == 1, where + "the model was called once"
