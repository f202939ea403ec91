"""The Python SDK against a gateway with a tiny tenant rate (2 requests/s, burst 1): refusals
name the setting that raises the limit, and the SDK waits out the RetryInfo delay instead
of failing, for reads, CreateSession and SendMessage alike."""

from __future__ import annotations

import asyncio

import pytest

from cogmesh.client import GatewayClient, ResourceExhausted
from cogmesh.client import retry as retry_module
from cogmesh.client.errors import GatewayError
from tests.integration.conftest import SUITE_SETTINGS, TIMEOUT_S, running_suite

TINY = SUITE_SETTINGS.model_copy(update={"tenant_rate_per_s": 2.0, "tenant_burst": 1})


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Every delay the SDK decided to wait out, to show that a call went through after a refusal."""
    waited: list[float] = []
    decide = retry_module.Waiter.delay

    def recording(self: retry_module.Waiter, error: BaseException, *, idempotent: bool) -> float | None:
        delay = decide(self, error, idempotent=idempotent)
        if delay is not None:
            waited.append(delay)
        return delay

    monkeypatch.setattr(retry_module.Waiter, "delay", recording)
    return waited


async def test_a_refusal_names_the_settings_that_raise_the_limit() -> None:
    async with (
        running_suite(TINY) as (suite, _),
        GatewayClient(suite.gateway_address, timeout_s=TIMEOUT_S, rate_limit_attempts=1) as client,
    ):
        for call in (client.list_agents, client.create_session):
            # Ten at once against a burst of 1 at 2 per second: all but one or two are refused.
            outcomes = await asyncio.gather(*(call() for _ in range(10)), return_exceptions=True)
            refused = [o for o in outcomes if isinstance(o, BaseException)]
            assert refused and all(isinstance(o, ResourceExhausted) for o in refused), refused
            error = refused[0]
            assert isinstance(error, ResourceExhausted)
            assert error.reason == "RATE_LIMITED"
            assert "exceeded 2 requests/s (burst 1)" in error.message
            assert "COGMESH_TENANT_RATE_PER_S" in error.message and "COGMESH_TENANT_BURST" in error.message
            assert error.metadata["setting"] == "COGMESH_TENANT_RATE_PER_S"
            assert error.metadata["burst_setting"] == "COGMESH_TENANT_BURST"
            assert (error.metadata["value"], error.metadata["burst"]) == ("2", "1")
            assert error.retry_after_s is not None and 0 < error.retry_after_s <= 5


async def test_the_stream_cap_refusal_names_its_setting() -> None:
    settings = SUITE_SETTINGS.model_copy(update={"tenant_max_streams": 1})
    async with (
        running_suite(settings) as (suite, _),
        GatewayClient(suite.gateway_address, timeout_s=TIMEOUT_S, rate_limit_attempts=1) as client,
    ):
        session = await client.create_session()
        assert (await client.run(session.session_id, "What is 1 + 1?")).ok
        first = client.subscribe(session.session_id)
        await anext(first)  # a replayed event: this subscription is open and holds the one stream slot
        try:
            with pytest.raises(ResourceExhausted) as caught:
                await anext(client.subscribe(session.session_id, stop_when_idle=True))
        finally:
            await first.aclose()  # type: ignore[attr-defined]
        assert caught.value.metadata["setting"] == "COGMESH_TENANT_MAX_STREAMS"
        assert "COGMESH_TENANT_MAX_STREAMS" in caught.value.message
        assert caught.value.retry_after_s is not None and caught.value.retry_after_s > 0


async def test_calls_over_the_rate_wait_and_succeed(waits: list[float]) -> None:
    async with running_suite(TINY) as (suite, _), GatewayClient(suite.gateway_address, timeout_s=TIMEOUT_S) as client:
        # Back to back at 2 per second with a burst of 1: nearly every call is refused once, waits, goes through.
        session = await client.create_session()
        sid = session.session_id
        assert (await client.get_session(sid)).session_id == sid
        assert sid in {s.session_id for s in (await client.list_sessions()).sessions}
        assert (await client.list_agents()).agents
        result = await client.run(sid, "What is 17 * 23?")  # SendMessage refused at admission, then sent once
        assert result.ok and result.text == "17 * 23 = 391."
        events = [e async for e in client.subscribe(sid, stop_when_idle=True)]
        assert [e.seq for e in events] == [e.seq for e in result.events]
        assert {e.turn_id for e in events} == {result.turn_id}  # the turn ran exactly once
        assert await client.delete_session(sid)
    assert waits and all(0 < w <= 5 for w in waits)  # refused, waited, went through


async def test_a_burst_of_creates_from_one_client_all_get_through(waits: list[float]) -> None:
    async with (
        running_suite(TINY) as (suite, _),
        GatewayClient(suite.gateway_address, timeout_s=TIMEOUT_S, rate_limit_attempts=10) as client,
    ):
        sessions = await asyncio.gather(*(client.create_session() for _ in range(5)))
        assert len({s.session_id for s in sessions}) == 5
        listed = await client.list_sessions()
        assert {s.session_id for s in sessions} <= {s.session_id for s in listed.sessions}
    assert waits  # refused, waited, went through


async def test_the_wait_is_bounded() -> None:
    async with (
        running_suite(TINY) as (suite, _),
        GatewayClient(
            suite.gateway_address, timeout_s=TIMEOUT_S, rate_limit_attempts=2, rate_limit_wait_s=0.01
        ) as client,
    ):
        # Ten at once: those told to wait 0.5 s or more (more than the 0.01 s allowed) fail at once.
        outcomes = await asyncio.gather(*(client.list_agents() for _ in range(10)), return_exceptions=True)
        refused = [o for o in outcomes if isinstance(o, BaseException)]
        assert refused and all(isinstance(o, ResourceExhausted) for o in refused), refused
        assert any(isinstance(o, GatewayError) and (o.retry_after_s or 0) > 0.01 for o in refused)
