"""A running turn whose lease lapses while its own runtime is alive (too busy to renew: a loaded
machine): the replica that claims it back is that runtime, which goes on under the new token
instead of redoing the step; nothing is voided and the answer streams once."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc

from cogmesh.gateway.v1 import gateway_pb2
from cogmesh.sessions.v1 import sessions_pb2
from tests.integration.conftest import SUITE_SETTINGS, TIMEOUT_S, new_session, payload, running_suite

# Short leases, and a turn that streams for seconds: 200 tokens 20 ms apart.
SETTINGS = SUITE_SETTINGS.model_copy(
    update={
        "turn_lease_ttl_s": 2,
        "turn_lease_renew_s": 0.5,
        "takeover_poll_s": 0.2,
        "local_reply_tokens": 200,
        "local_delay_ms": 20,
    }
)


async def test_a_runtime_that_missed_its_renewals_takes_its_own_turn_back_and_goes_on() -> None:
    async with running_suite(SETTINGS) as (suite, stubs):
        gateway = stubs["gateway"]
        runner: Any = suite.servers["runtime"].app.mounts[0].servicer.runner
        session_id = await new_session(gateway)
        call = gateway.SendMessage(gateway_pb2.SendMessageRequest(session_id=session_id, content="talk"))
        events: list[Any] = []
        async with asyncio.timeout(TIMEOUT_S):
            while not any(payload(e) == "assistant_delta" for e in events):
                events += (await call.read()).events
        (running,) = runner._running.values()
        token = running.lease_token
        # The first lease is twice the TTL (the turn could end inside it): the renewals stop after the first.
        ask = sessions_pb2.GetTurnLeaseRequest(tenant_id="default", session_id=session_id)
        granted = (await stubs["sessions"].GetTurnLease(ask)).lease.expire_time.ToNanoseconds()
        async with asyncio.timeout(TIMEOUT_S):
            while (await stubs["sessions"].GetTurnLease(ask)).lease.expire_time.ToNanoseconds() == granted:  # noqa: ASYNC110 - polled over RPC
                await asyncio.sleep(0.05)
        renewing = runner._loops[0]  # the renewals stop, as on a replica too busy to send them
        renewing.cancel()
        async with asyncio.timeout(TIMEOUT_S * 3):
            while running.lease_token == token:  # noqa: ASYNC110 - the claim runs on the runner's own task
                await asyncio.sleep(0.05)
            runner._loops[0] = asyncio.create_task(runner._keep_leases())  # renewing again, the new token
            while (message := await call.read()) is not grpc.aio.EOF:
                events += message.events
        assert payload(events[-1]) == "final", events[-1]
        kinds = [payload(e) for e in events]
        assert "native_notice" not in kinds, "no step was redone: nothing to void"
        assert "taken over" not in [e.status.text for e in events if payload(e) == "status"]
        text = "".join(e.assistant_delta.text for e in events if payload(e) == "assistant_delta")
        assert text == events[-1].final.text == " ".join(f"tok{i}" for i in range(200))
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
