"""The Python SDK against a real suite: turns, typed results, errors, sync use, resume."""

from __future__ import annotations

import asyncio
import threading

import grpc
import pytest

from cogmesh.client import Client, GatewayClient, GatewayError
from gateway import main as gateway_main
from services.kit.server import start
from tests.integration.conftest import SUITE_SETTINGS, running_suite
from tests.support.redis_topologies import RedisUnderTest


async def test_run_collects_the_turn_and_errors_are_typed() -> None:
    async with running_suite() as (suite, _), GatewayClient(suite.gateway_address) as client:
        session = await client.create_session()
        result = await client.run(session.session_id, "What is 17 * 23?")
        assert result.ok and result.text == "17 * 23 = 391."
        assert [e.seq for e in result.events] == list(range(1, len(result.events) + 1))
        assert await client.cancel_turn(session.session_id) == ""
        with pytest.raises(GatewayError) as caught:
            await client.get_session("missing")
        assert (caught.value.code, caught.value.reason) == (grpc.StatusCode.NOT_FOUND, "SESSION_NOT_FOUND")
        with pytest.raises(GatewayError) as bad:
            await client.run(session.session_id, "")
        assert bad.value.violations == [("content", "is required")]
        replay = [e async for e in client.subscribe(session.session_id, 0, stop_when_idle=True)]
        assert [e.seq for e in replay] == [e.seq for e in result.events]
        assert await client.delete_session(session.session_id)


def test_blocking_client() -> None:
    async def serve(ready: asyncio.Queue[str], done: asyncio.Event) -> None:
        async with running_suite() as (suite, _):
            await ready.put(suite.gateway_address)
            await done.wait()

    loop = asyncio.new_event_loop()
    ready: asyncio.Queue[str] = asyncio.Queue()
    done = asyncio.Event()
    thread = threading.Thread(target=loop.run_until_complete, args=(serve(ready, done),), daemon=True)
    thread.start()
    address = asyncio.run_coroutine_threadsafe(ready.get(), loop).result(10)
    try:
        with Client(address) as client:
            session = client.create_session()
            events = list(client.send_message(session.session_id, "What is 6 * 7?"))
            assert events[-1].final.text == "6 * 7 = 42."
            assert client.run(session.session_id, "hello").ok
            assert len(list(client.subscribe(session.session_id, stop_when_idle=True))) > len(events)
            assert "default" in {a.name for a in client.list_agents().agents}
    finally:
        loop.call_soon_threadsafe(done.set)
        thread.join(10)


async def test_subscribe_resumes_on_another_gateway_without_gaps(any_redis: RedisUnderTest) -> None:
    settings = SUITE_SETTINGS.model_copy(update={"redis_url": any_redis.url, "redis_key_prefix": any_redis.prefix})
    async with running_suite(settings) as (suite, _):
        addresses = {f"{name}_addr": server.address for name, server in suite.servers.items() if name != "gateway"}
        second = settings.model_copy(update={**addresses, "dev_mode": True})
        other = await start(gateway_main.build, second, "127.0.0.1:0")  # a second gateway replica
        try:
            async with (
                GatewayClient([suite.gateway_address, other.address], max_resumes=10) as watcher,
                GatewayClient(other.address) as sender,
            ):
                session = await sender.create_session()
                seen: list[int] = []
                finals = 0
                first_turn_seen = asyncio.Event()

                async def watch() -> None:
                    nonlocal finals
                    async for event in watcher.subscribe(session.session_id):
                        seen.append(event.seq)
                        finals += event.HasField("final")
                        if finals == 1:
                            first_turn_seen.set()
                        if finals == 2:
                            return

                task = asyncio.create_task(watch())
                assert (await sender.run(session.session_id, "What is 1 + 1?")).ok
                await asyncio.wait_for(first_turn_seen.wait(), 10)
                await suite.servers["gateway"].stop(0)  # the watcher's gateway goes away
                assert (await sender.run(session.session_id, "w " * 300)).ok
                await asyncio.wait_for(task, 15)
                assert seen == list(range(1, len(seen) + 1))
                assert watcher.address == other.address
        finally:
            await other.stop(0)


async def test_unreachable_gateway_is_a_clear_error() -> None:
    async with GatewayClient("127.0.0.1:1", timeout_s=1) as client:
        with pytest.raises(GatewayError) as caught:
            await client.wait_ready(0.5)
        assert caught.value.code == grpc.StatusCode.UNAVAILABLE
    with pytest.raises(ValueError, match="address"):
        GatewayClient(" , ")


async def test_a_failover_for_one_stream_leaves_the_others_running() -> None:
    """A subscriber whose stream breaks moves the client to the next gateway; another turn streaming
    on the old channel at that moment goes on (closing that channel at once cancelled it)."""
    slow = SUITE_SETTINGS.model_copy(update={"local_reply_tokens": 100, "local_delay_ms": 10})
    async with running_suite(slow) as (suite, _), GatewayClient(suite.gateway_address) as client:
        session = await client.create_session()
        stream = client.send_message(session.session_id, "talk")
        first = await anext(stream)  # the turn streams on the client's first channel
        await client._failover(client._stub)  # what subscribe() does on UNAVAILABLE
        rest = [event async for event in stream]
        assert rest[-1].HasField("final"), rest[-1]
        assert rest[-1].final.text == " ".join(f"tok{i}" for i in range(100))
        assert [e.seq for e in [first, *rest]] == list(range(first.seq, first.seq + 1 + len(rest)))
