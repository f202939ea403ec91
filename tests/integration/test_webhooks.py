"""Webhooks through the gateway with the real services, sessions in memory and in Redis: a receiver
(an aiohttp server) sees every outcome once, signed; a failing receiver is retried; SSRF targets are refused."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
import pytest_asyncio
from aiohttp import web

from cogmesh.gateway.v1 import gateway_pb2, gateway_pb2_grpc, webhooks_pb2, webhooks_pb2_grpc
from services.suite.inprocess import Suite, start_suite
from tests.integration.conftest import SUITE_SETTINGS, TIMEOUT_S, new_session, status_details

pytestmark = pytest.mark.asyncio(loop_scope="module")

SECRET = "a-test-secret-of-some-length"
FAST = {"webhook_allow_private_targets": True, "webhook_retry_first_s": 0.05, "webhook_poll_s": 0.05}


@dataclass
class Receiver:
    """Records every POST; answers 500 to the first `failures[path]` POSTs of a path."""

    url: str = ""
    seen: list[tuple[str, dict[str, str], bytes]] = field(default_factory=list)
    failures: dict[str, int] = field(default_factory=dict)
    arrived: asyncio.Condition = field(default_factory=asyncio.Condition)

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        async with self.arrived:
            self.seen.append((request.path, {k.lower(): v for k, v in request.headers.items()}, body))
            self.arrived.notify_all()
        if self.failures.get(request.path, 0) > 0:
            self.failures[request.path] -= 1
            return web.Response(status=500)
        return web.Response(status=204)

    def bodies(self, path: str) -> list[dict[str, Any]]:
        return [json.loads(body) for p, _, body in self.seen if p == path]

    async def wait(self, path: str, count: int) -> list[dict[str, Any]]:
        async with asyncio.timeout(TIMEOUT_S), self.arrived:
            await self.arrived.wait_for(lambda: len(self.bodies(path)) >= count)
        return self.bodies(path)


@contextlib.asynccontextmanager
async def receiving() -> AsyncIterator[Receiver]:
    receiver = Receiver()
    app = web.Application()
    app.router.add_post("/{tail:.*}", receiver.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    receiver.url = f"http://127.0.0.1:{port}"
    try:
        yield receiver
    finally:
        await runner.cleanup()


@dataclass
class Env:
    suite: Suite
    gateway: gateway_pb2_grpc.GatewayServiceStub
    webhooks: webhooks_pb2_grpc.WebhookServiceStub
    receiver: Receiver


@contextlib.asynccontextmanager
async def webhook_suite(**settings: Any) -> AsyncIterator[Env]:
    async with receiving() as receiver:
        suite = await start_suite(SUITE_SETTINGS.model_copy(update=settings))
        channel = grpc.aio.insecure_channel(suite.servers["gateway"].address)
        try:
            yield Env(
                suite,
                gateway_pb2_grpc.GatewayServiceStub(channel),
                webhooks_pb2_grpc.WebhookServiceStub(channel),
                receiver,
            )
        finally:
            await channel.close()
            await suite.stop(0)


@pytest_asyncio.fixture(loop_scope="module", scope="module", params=["memory", "redis"])
async def env(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Env]:
    settings: dict[str, Any] = dict(FAST)
    if request.param == "redis":
        key = tmp_path_factory.mktemp("webhooks") / "key"
        key.write_text("MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=")  # 32 bytes, base64
        redis_url = request.getfixturevalue("redis_url")
        prefix = f"whtest{id(request)}:"
        settings |= {"redis_url": redis_url, "redis_key_prefix": prefix, "webhook_secrets_key_file": key}
    async with webhook_suite(**settings) as found:
        yield found


def verified(headers: dict[str, str], body: bytes, secret: str = SECRET) -> bool:
    timestamp = headers["x-cogmesh-timestamp"]
    expected = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(headers["x-cogmesh-signature"], "sha256=" + expected)


async def create(env: Env, path: str, **fields: Any) -> webhooks_pb2.CreateWebhookResponse:
    request = webhooks_pb2.CreateWebhookRequest(url=env.receiver.url + path, **fields)
    return await env.webhooks.CreateWebhook(request, timeout=TIMEOUT_S)


async def turn(env: Env, session_id: str, content: str) -> list[Any]:
    request = gateway_pb2.SendMessageRequest(session_id=session_id, content=content)
    call = env.gateway.SendMessage(request, timeout=TIMEOUT_S)
    return [e async for r in call for e in r.events]


async def test_every_outcome_arrives_once_signed_and_in_order(env: Env) -> None:
    made = await create(env, "/all", secret=SECRET)
    assert made.secret == SECRET and made.webhook.secret_hint == SECRET[-4:]
    plain = await new_session(env.gateway)
    careful = await new_session(env.gateway, agent="careful")
    final = (await turn(env, plain, "hello"))[-1]
    paused = (await turn(env, careful, "What is 2 * 21?"))[-1]
    assert paused.status.interrupt_id
    await env.gateway.CancelTurn(gateway_pb2.CancelTurnRequest(session_id=careful), timeout=TIMEOUT_S)

    bodies = await env.receiver.wait("/all", 3)
    await asyncio.sleep(0)  # nothing else is due: a duplicate would have been sent with these
    assert len({b["delivery_id"] for b in bodies}) == len(bodies) == 3, "each outcome once"
    for _, headers, body in [s for s in env.receiver.seen if s[0] == "/all"]:
        assert verified(headers, body)
        assert headers["x-cogmesh-delivery"] == json.loads(body)["delivery_id"]
    by_session = {s: [b for b in bodies if b["session_id"] == s] for s in (plain, careful)}
    (done,) = by_session[plain]
    assert done["event_kind"] == "final" and done["seq"] == final.seq and done["event"]["final"]["text"]
    assert [b["event_kind"] for b in by_session[careful]] == ["paused", "cancelled"]
    assert by_session[careful][0]["seq"] == paused.seq < by_session[careful][1]["seq"]
    assert by_session[careful][1]["event"]["error"]["kind"] == "ERROR_KIND_CANCELLED"

    log = await env.webhooks.ListWebhookDeliveries(
        webhooks_pb2.ListWebhookDeliveriesRequest(webhook_id=made.webhook.webhook_id), timeout=TIMEOUT_S
    )
    assert {d.delivery_id for d in log.deliveries} == {b["delivery_id"] for b in bodies}
    assert all(d.state == webhooks_pb2.WEBHOOK_DELIVERY_STATE_DELIVERED and d.attempts == 1 for d in log.deliveries)
    await env.webhooks.DeleteWebhook(webhooks_pb2.DeleteWebhookRequest(webhook_id=made.webhook.webhook_id))


async def test_a_failing_receiver_is_retried_until_it_answers_2xx(env: Env) -> None:
    session_id = await new_session(env.gateway)
    made = await create(env, "/flaky", session_id=session_id, event_kinds=[webhooks_pb2.WEBHOOK_EVENT_KIND_FINAL])
    env.receiver.failures["/flaky"] = 2
    await turn(env, session_id, "hello")
    bodies = await env.receiver.wait("/flaky", 3)
    assert len({b["delivery_id"] for b in bodies}) == 1 and [b["attempt"] for b in bodies] == [1, 2, 3]
    request = webhooks_pb2.ListWebhookDeliveriesRequest(webhook_id=made.webhook.webhook_id)
    async with asyncio.timeout(TIMEOUT_S):  # the third answer is recorded just after it arrived
        while True:
            (delivery,) = (await env.webhooks.ListWebhookDeliveries(request)).deliveries
            if delivery.state == webhooks_pb2.WEBHOOK_DELIVERY_STATE_DELIVERED:
                break
    assert delivery.attempts == 3 and delivery.last_status_code == 204

    redone = await env.webhooks.RedeliverWebhookDelivery(
        webhooks_pb2.RedeliverWebhookDeliveryRequest(delivery_id=delivery.delivery_id), timeout=TIMEOUT_S
    )
    assert redone.delivery.state == webhooks_pb2.WEBHOOK_DELIVERY_STATE_PENDING
    again = await env.receiver.wait("/flaky", 4)
    assert again[-1]["delivery_id"] == delivery.delivery_id and again[-1]["attempt"] == 1


async def test_a_turn_webhook_made_after_the_turn_ended_still_gets_its_outcome(env: Env) -> None:
    session_id = await new_session(env.gateway)
    final = (await turn(env, session_id, "hello"))[-1]
    made = await create(env, "/late", session_id=session_id, turn_id=final.turn_id)
    (body,) = await env.receiver.wait("/late", 1)
    assert body["seq"] == final.seq and body["webhook_id"] == made.webhook.webhook_id


async def test_bad_webhooks_are_refused_naming_the_field(env: Env) -> None:
    cases = {
        "ftp://example.com/x": "url",
        "http://user:pw@example.com/": "url",
        "": "url",
    }
    for url, name in cases.items():
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await env.webhooks.CreateWebhook(webhooks_pb2.CreateWebhookRequest(url=url), timeout=TIMEOUT_S)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert [f for f, _ in status_details(caught.value)[1]] == [name]
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await create(env, "/x", session_id="no-such-session")
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await create(env, "/x", turn_id="t1")
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "session_id" in caught.value.details()


async def test_private_targets_are_refused_unless_allowed(tmp_path: Path) -> None:
    async with webhook_suite() as env:
        for url, what in (
            (env.receiver.url + "/x", "127.0.0.1, a loopback address"),
            ("http://169.254.169.254/latest/meta-data", "169.254.169.254, a link-local address"),
            ("http://10.1.2.3:8080/", "10.1.2.3, a private address"),
            ("http://localhost/", "a loopback address"),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await env.webhooks.CreateWebhook(webhooks_pb2.CreateWebhookRequest(url=url), timeout=TIMEOUT_S)
            assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            ((name, why),) = status_details(caught.value)[1]
            assert name == "url" and what in why, why
        assert env.receiver.seen == []


@pytest.mark.parametrize("kind", ["memory", "redis"])
async def test_deliveries_and_retries_come_without_a_periodic_look(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """The dispatcher sends what its replica enqueued at once, and a retry at its time: neither waits for
    a look at the schedule (here an hour apart, far beyond the wait for the POSTs)."""
    settings: dict[str, Any] = FAST | {"webhook_poll_s": 3600.0}
    if kind == "redis":
        key = tmp_path / "key"
        key.write_text("MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=")
        settings |= {
            "redis_url": request.getfixturevalue("redis_url"),
            "redis_key_prefix": f"whidle{id(request)}:",
            "webhook_secrets_key_file": key,
        }
    async with webhook_suite(**settings) as env:
        session_id = await new_session(env.gateway)
        await create(env, "/prompt", session_id=session_id, event_kinds=[webhooks_pb2.WEBHOOK_EVENT_KIND_FINAL])
        env.receiver.failures["/prompt"] = 1
        await turn(env, session_id, "hello")
        bodies = await env.receiver.wait("/prompt", 2)
        assert [b["attempt"] for b in bodies] == [1, 2] and bodies[0]["delivery_id"] == bodies[1]["delivery_id"]
