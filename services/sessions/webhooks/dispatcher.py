"""Sends deliveries: claims due queues, POSTs each head signed, records how it went.

Runs in every sessions replica. A replica sends what it enqueued itself at once, with no
look at the schedule. It looks at the schedule (a claim) when the earliest time it knows of
comes: a retry or a deferred head of its own, the schedule's earliest entry as its last
look saw it; and at least every `idle_s` (what another replica scheduled since, queues whose
dispatcher died). Between looks it sleeps until that time, woken sooner when an earlier one
is noted: an idle replica wakes, and costs the store a look, once per `idle_s`. An attempt
is a POST with the JSON body, no redirects followed, to the address the SSRF check approved;
a 2xx answer delivers it; anything else is retried after an exponential backoff with jitter
until `retry_window_s` has passed since the delivery was made (or redelivered), then it is
dead. A target the SSRF rule refuses (its DNS changed since) is dead at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import math
import random
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import httpx
from google.protobuf import json_format

from cogmesh.common.v1 import events_pb2
from services.kit.errors import CogmeshError
from services.kit.logging import log
from services.sessions.model import SessionError
from services.sessions.store import SessionStore
from services.sessions.webhooks import targets
from services.sessions.webhooks.model import Attempt, Delivery, Format, Queue, Webhook
from services.sessions.webhooks.secrets import Sealer
from services.sessions.webhooks.store import Later, Taken, WebhookStore

USER_AGENT = "cogmesh-webhooks/1"
MAX_ERROR = 300  # characters of a failure kept in the delivery log
# The longest a replica goes without a look at the schedule: how late it sees work another replica
# scheduled and then left (it died). A look at the 16 schedule slots is 16 Redis reads.
IDLE_S = 60.0


@dataclass(frozen=True)
class Policy:
    allow_private: bool = False
    timeout_s: float = 10.0
    retry_first_s: float = 1.0
    retry_max_s: float = 3600.0
    retry_window_s: float = 86_400.0
    poll_s: float = 1.0  # a failed look's retry, and the next look at a due queue another claimer raced for
    idle_s: float = IDLE_S
    concurrency: int = 64

    @property
    def lease_s(self) -> float:
        """How long a claim holds a queue: a whole attempt (connect, send, read) with room to spare."""
        return 3 * self.timeout_s + 5

    def retry_at(self, delivery: Delivery, now: float) -> float | None:
        """When to try again after a failed attempt (full jitter on a doubling delay), or None: give up."""
        delay = min(self.retry_first_s * 2**delivery.attempts, self.retry_max_s)
        at = now + delay * (0.5 + random.random() / 2)
        return at if at - delivery.window_start <= self.retry_window_s else None


def signature(secret: str, timestamp: str, body: bytes) -> str:
    """`sha256=<hex HMAC-SHA256 of "<timestamp>.<body>">` (the timestamp signed too: replays show)."""
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def cogmesh_body(delivery: Delivery, event: events_pb2.RuntimeEvent) -> bytes:
    return json.dumps(
        {
            "delivery_id": delivery.delivery_id,
            "webhook_id": delivery.webhook_id,
            "event_kind": delivery.kind.value,
            "session_id": delivery.session_id,
            "turn_id": delivery.turn_id,
            "seq": delivery.seq,
            "attempt": delivery.attempts + 1,
            "event": json_format.MessageToDict(event),
        },
        separators=(",", ":"),
    ).encode()


class Dispatcher:
    def __init__(
        self,
        hooks: WebhookStore,
        sessions: SessionStore,
        sealer: Sealer,
        policy: Policy,
        clock: Callable[[], float] = time.time,
        transport: httpx.AsyncBaseTransport | None = None,
    ):
        self._hooks, self._sessions, self._sealer, self._policy = hooks, sessions, sealer, policy
        self._clock = clock
        self._holder = uuid.uuid4().hex
        self._wake = asyncio.Event()
        self._room = asyncio.Semaphore(policy.concurrency)
        self._running: set[asyncio.Task[None]] = set()
        self._draining: set[Queue] = set()  # queues a drain of this replica is on
        self._again: set[Queue] = set()  # of those, queues asked for since their drain began
        self._task: asyncio.Task[None] | None = None
        self._next_look = -math.inf  # clock time of the next look at the schedule: at once on start
        self.looks = 0  # looks at the schedule: tests wait on it
        self._http = httpx.AsyncClient(
            follow_redirects=False,
            timeout=httpx.Timeout(policy.timeout_s),
            headers={"user-agent": USER_AGENT},
            transport=transport,
            trust_env=False,  # a proxy from the environment would bypass the address check
        )

    def wake(self, queues: Iterable[Queue] = ()) -> None:
        """Send these queues now (this replica enqueued to them: no claim round). A queue there is no
        room for yet, or a wake naming none, brings the next look forward to now."""
        queues = list(queues)
        waiting = False
        for queue in queues:
            if queue in self._draining:
                self._again.add(queue)
            elif len(self._running) < self._policy.concurrency:
                self._spawn(queue)
            else:
                waiting = True
        if waiting or not queues:
            self._look_at(self._clock())

    def _look_at(self, at: float) -> None:
        """Something is due at `at`: look at the schedule then, if not sooner."""
        if at < self._next_look:
            self._next_look = at
            self._wake.set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="webhook-dispatcher")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for task in list(self._running):
            task.cancel()
        await asyncio.gather(*self._running, return_exceptions=True)
        await self._http.aclose()

    async def _run(self) -> None:
        while True:
            # Asleep until the next look (a wall-clock time, so capped in case the clock jumps), woken by
            # `_look_at` when something comes due sooner: an idle replica's process is not woken each second.
            wait = min(self._policy.idle_s, self._next_look - self._clock())
            if wait > 0:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait):
                        await self._wake.wait()
            self._wake.clear()
            if self._clock() < self._next_look:
                continue
            try:
                await self._look()
            except (CogmeshError, SessionError, OSError) as exc:
                log.warning("webhook dispatcher cannot claim deliveries", error=str(exc))
                self._look_at(self._clock() + self._policy.poll_s)

    async def _look(self) -> None:
        """Claim the due queues there is room for and send them; note when the next is due."""
        self._next_look = math.inf  # times noted while this look runs lower it
        if len(self._running) >= self._policy.concurrency:
            await asyncio.wait(self._running, return_when=asyncio.FIRST_COMPLETED)
        free = self._policy.concurrency - len(self._running)
        now = self._clock()
        claimed = await self._hooks.claim(free, self._policy.lease_s, now)
        self.looks += 1
        for queue in claimed.queues:
            if queue in self._draining:
                self._again.add(queue)  # its drain may be past the new head: it looks once more
            else:
                self._spawn(queue)
        if len(claimed.queues) >= free:
            following = now  # there may be more due: look again before sleeping
        else:
            following = min(claimed.next_at if claimed.next_at is not None else math.inf, now + self._policy.idle_s)
            if following <= now:  # due yet not claimed (another claimer's race): a little later
                following = now + self._policy.poll_s
        self._look_at(following)

    def _spawn(self, queue: Queue) -> None:
        self._draining.add(queue)
        task = asyncio.create_task(self._drain(queue))
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    async def _drain(self, queue: Queue) -> None:
        """Drain the queue; again while someone asked for it meanwhile (leaves _draining with no await between)."""
        try:
            while True:
                await self._send_due(queue)
                if queue not in self._again:
                    return
                self._again.discard(queue)
        finally:
            self._draining.discard(queue)

    async def _send_due(self, queue: Queue) -> None:
        """Send the queue's heads one after the other while they are due."""
        # A holder of its own: two drains of this replica may claim the same queue, and only one may take it.
        holder = f"{self._holder}:{uuid.uuid4().hex[:8]}"
        try:
            while True:
                got = await self._hooks.take(queue, holder, self._policy.lease_s, self._clock())
                if isinstance(got, Later):
                    self._look_at(got.at)  # the store put the queue back in the schedule for then
                if not isinstance(got, Taken):
                    return
                attempt = await self._attempt(got.delivery)
                if not await self._hooks.settle(queue, holder, got.delivery, attempt):
                    return
                if not attempt.delivered and attempt.retry_at is not None:
                    self._look_at(attempt.retry_at)  # the store scheduled the retry: claimed then
                    return
        except (CogmeshError, SessionError, OSError) as exc:
            log.warning("webhook queue left for later", webhook_id=queue.webhook_id, error=str(exc))
            self._look_at(self._clock() + self._policy.poll_s)

    async def _attempt(self, delivery: Delivery) -> Attempt:
        try:
            hook = await self._hooks.get(delivery.tenant_id, delivery.webhook_id)
        except CogmeshError:
            return Attempt(self._clock(), error="the webhook was deleted")
        try:
            target = await targets.check(hook.url, self._policy.allow_private)
        except targets.Unresolved as exc:
            return self._failed(delivery, 0, str(exc))
        except (targets.Refused, ValueError) as exc:
            return Attempt(self._clock(), error=str(exc)[:MAX_ERROR])  # dead: retrying cannot help
        secrets = self._sealer.open(hook.webhook_id, await self._hooks.sealed(hook.tenant_id, hook.webhook_id))
        body, headers = await self._request(hook, delivery, secrets)
        timestamp = str(int(self._clock()))
        headers |= {
            "content-type": "application/json",
            "host": target.host_header,
            "x-cogmesh-delivery": delivery.delivery_id,
            "x-cogmesh-event": delivery.kind.value,
            "x-cogmesh-timestamp": timestamp,
            "x-cogmesh-signature": signature(secrets["secret"], timestamp, body),
        }
        extensions = {"sni_hostname": target.host} if target.address and target.scheme == "https" else {}
        try:
            response = await self._http.post(target.pinned_url(), content=body, headers=headers, extensions=extensions)
        except httpx.HTTPError as exc:
            return self._failed(delivery, 0, f"{type(exc).__name__}: {exc}")
        if 200 <= response.status_code < 300:
            return Attempt(self._clock(), status=response.status_code, delivered=True)
        return self._failed(delivery, response.status_code, f"answered {response.status_code}")

    def _failed(self, delivery: Delivery, status: int, error: str) -> Attempt:
        now = self._clock()
        return Attempt(now, status=status, error=error[:MAX_ERROR], retry_at=self._policy.retry_at(delivery, now))

    async def _request(
        self, hook: Webhook, delivery: Delivery, secrets: dict[str, str]
    ) -> tuple[bytes, dict[str, str]]:
        event = events_pb2.RuntimeEvent.FromString(delivery.event)
        if hook.format is not Format.A2A or hook.a2a is None:
            return cogmesh_body(delivery, event), {}
        from services.sessions.webhooks import a2a  # the A2A types load only where A2A pushes are used

        body = await a2a.body(self._sessions, hook.a2a.task_id, delivery, event)
        headers = {}
        if secrets.get("token"):
            headers["x-a2a-notification-token"] = secrets["token"]
        if hook.a2a.auth_scheme and secrets.get("credentials"):
            headers["authorization"] = f"{hook.a2a.auth_scheme} {secrets['credentials']}"
        return body, headers
