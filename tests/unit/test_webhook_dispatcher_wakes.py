"""The webhook dispatcher looks at the schedule when something is due, not on a clock: an idle
dispatcher looks once; what its replica enqueues is sent with no look; a retry is claimed at its time."""

from __future__ import annotations

import asyncio
import json
import time

import httpx

from cogmesh.common.v1 import events_pb2
from services.sessions.store import MemorySessionStore
from services.sessions.webhooks.dispatcher import Dispatcher, Policy
from services.sessions.webhooks.model import Delivery, Kind, Webhook
from services.sessions.webhooks.secrets import Sealer
from services.sessions.webhooks.store import MemoryWebhookStore
from tests.support.waiting import until

HOUR_S = 3600.0


async def test_an_enqueue_is_sent_and_its_retry_claimed_with_no_periodic_look() -> None:
    hooks = MemoryWebhookStore()
    sealer = Sealer.from_file(None, ephemeral=True)
    await hooks.create(
        Webhook("wh_1", "t1", "http://127.0.0.1:9/h", frozenset()), sealer.seal("wh_1", {"secret": "s" * 20})
    )
    answers = [500, 204]
    seen: list[tuple[int, int]] = []  # (attempt, the dispatcher's looks when it arrived)

    def receive(request: httpx.Request) -> httpx.Response:
        seen.append((json.loads(request.content)["attempt"], dispatcher.looks))
        return httpx.Response(answers.pop(0))

    # Clock checks and periodic looks an hour apart: only wakes can send within the test's wait.
    policy = Policy(allow_private=True, retry_first_s=0.05, poll_s=HOUR_S, idle_s=HOUR_S)
    dispatcher = Dispatcher(hooks, MemorySessionStore(), sealer, policy, transport=httpx.MockTransport(receive))
    dispatcher.start()
    try:
        await until(lambda: dispatcher.looks == 1, "the look at start")
        event = events_pb2.RuntimeEvent(final=events_pb2.FinalResult(text="hi")).SerializeToString()
        now = time.time()  # the dispatcher's clock: the retry window runs from here
        delivery = Delivery("wh_1", "t1", "s1", "turn", 7, Kind.FINAL, event, now, next_at=now, window_start=now)
        await hooks.enqueue([delivery])
        dispatcher.wake([delivery.queue])  # as the store wrapper does after the enqueue
        await until(lambda: len(seen) == 2, "the attempt and its retry")
        # The first attempt came with no look; the retry with the one look its retry time called for.
        assert seen == [(1, 1), (2, 2)]
    finally:
        await dispatcher.close()


async def test_an_idle_dispatcher_sleeps_until_its_next_look() -> None:
    """Between looks nothing wakes it: no clock check per `poll_s` (each was a wakeup of an idle process)."""
    reads = 0

    def clock() -> float:
        nonlocal reads
        reads += 1
        return time.time()

    # A short poll_s, as a failed look's retry; the next look is an hour away.
    policy = Policy(allow_private=True, poll_s=0.01, idle_s=HOUR_S)
    dispatcher = Dispatcher(
        MemoryWebhookStore(), MemorySessionStore(), Sealer.from_file(None, ephemeral=True), policy, clock=clock
    )
    dispatcher.start()
    try:
        await until(lambda: dispatcher.looks == 1, "the look at start")
        settled = reads
        await asyncio.sleep(0.3)  # thirty poll_s: the old loop read its clock at each
        assert reads - settled <= 1 and dispatcher.looks == 1
        dispatcher.wake()  # a wake naming no queue still brings the next look to now
        await until(lambda: dispatcher.looks == 2, "the look the wake asked for")
    finally:
        await dispatcher.close()
