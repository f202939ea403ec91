"""cogmesh.sessions.v1.WebhookStoreService: thin proto <-> domain over the webhook store.

Creating a webhook checks the URL (form, then the SSRF rule on the addresses its host
resolves to) and that its session is the tenant's, seals its secret, and, for a webhook
narrowed to one turn, enqueues the turn's outcomes already in the log (a per-turn webhook
is usually made right after the turn started, and may lose the race with its end).
Field names in errors are those of the public CreateWebhookRequest: its field rules (webhooks.proto) are
checked here, not by the kit's interceptor, which would name them under `webhook.`. The other requests'
rules (ids, page sizes, known states and formats) are checked before the servicer runs.
"""

from __future__ import annotations

import contextlib
import secrets as random_secrets
import time
import uuid
from collections.abc import Callable
from typing import Any

from google.protobuf import timestamp_pb2

from cogmesh.common.v1 import errors_pb2
from cogmesh.gateway.v1 import webhooks_pb2 as public
from cogmesh.sessions.v1 import webhooks_pb2, webhooks_pb2_grpc
from services.kit import validation
from services.kit.errors import InvalidArgument, NotFound, Violations
from services.sessions.model import SessionError, SessionNotFound
from services.sessions.store import SessionStore
from services.sessions.webhooks import targets
from services.sessions.webhooks.dispatcher import Policy
from services.sessions.webhooks.hooked import _stamped
from services.sessions.webhooks.model import A2APush, Delivery, Format, Kind, Queue, State, Webhook, kind_of
from services.sessions.webhooks.secrets import Sealer
from services.sessions.webhooks.store import WebhookStore

DEFAULT_PAGE = 50

KINDS = {
    public.WEBHOOK_EVENT_KIND_FINAL: Kind.FINAL,
    public.WEBHOOK_EVENT_KIND_ERROR: Kind.ERROR,
    public.WEBHOOK_EVENT_KIND_CANCELLED: Kind.CANCELLED,
    public.WEBHOOK_EVENT_KIND_PAUSED: Kind.PAUSED,
}
KIND_VALUES = {kind: value for value, kind in KINDS.items()}
STATES = {
    public.WEBHOOK_DELIVERY_STATE_PENDING: State.PENDING,
    public.WEBHOOK_DELIVERY_STATE_DELIVERED: State.DELIVERED,
    public.WEBHOOK_DELIVERY_STATE_DEAD: State.DEAD,
}
STATE_VALUES = {state: value for value, state in STATES.items()}
FORMATS = {webhooks_pb2.WEBHOOK_FORMAT_A2A: Format.A2A, webhooks_pb2.WEBHOOK_FORMAT_COGMESH: Format.COGMESH}


def _timestamp(seconds: float) -> timestamp_pb2.Timestamp | None:
    if not seconds:
        return None
    stamp = timestamp_pb2.Timestamp()
    stamp.FromNanoseconds(int(seconds * 1e9))
    return stamp


def webhook_to_proto(hook: Webhook) -> webhooks_pb2.StoredWebhook:
    stored = webhooks_pb2.StoredWebhook(
        webhook=public.Webhook(
            webhook_id=hook.webhook_id,
            url=hook.url,
            event_kinds=sorted(KIND_VALUES[k] for k in hook.kinds),
            session_id=hook.session_id,
            turn_id=hook.turn_id,
            create_time=_timestamp(hook.created_at),
            secret_hint=hook.secret_hint,
        ),
        format=webhooks_pb2.WEBHOOK_FORMAT_A2A if hook.format is Format.A2A else webhooks_pb2.WEBHOOK_FORMAT_COGMESH,
    )
    if hook.a2a is not None:
        stored.a2a.CopyFrom(
            webhooks_pb2.A2APush(
                task_id=hook.a2a.task_id, config_id=hook.a2a.config_id, auth_scheme=hook.a2a.auth_scheme
            )
        )
    return stored


def delivery_to_proto(d: Delivery) -> public.WebhookDelivery:
    return public.WebhookDelivery(
        delivery_id=d.delivery_id,
        webhook_id=d.webhook_id,
        session_id=d.session_id,
        turn_id=d.turn_id,
        seq=d.seq,
        event_kind=KIND_VALUES[d.kind],
        state=STATE_VALUES[d.state],
        attempts=d.attempts,
        create_time=_timestamp(d.created_at),
        last_attempt_time=_timestamp(d.last_attempt_at),
        next_attempt_time=_timestamp(d.next_at if d.state is State.PENDING else 0.0),
        last_status_code=d.last_status,
        last_error=d.last_error,
        delivered_time=_timestamp(d.delivered_at),
    )


def _session_not_found(session_id: str) -> NotFound:
    return NotFound(
        f"session {session_id!r} not found",
        reason=errors_pb2.ERROR_REASON_SESSION_NOT_FOUND,
        metadata={"session_id": session_id},
    )


class WebhookStoreServicer(webhooks_pb2_grpc.WebhookStoreServiceServicer):
    def __init__(
        self,
        hooks: WebhookStore,
        sessions: SessionStore,
        sealer: Sealer,
        policy: Policy,
        clock: Callable[[], float] = time.time,
        on_enqueued: Callable[[list[Queue]], None] | None = None,
    ):
        self.hooks, self.sessions, self.sealer, self.policy, self.clock = hooks, sessions, sealer, policy, clock
        self.on_enqueued = on_enqueued

    async def CreateWebhook(self, request: webhooks_pb2.CreateWebhookRequest, context: Any) -> Any:
        r = request.webhook
        problems = Violations()
        for broken in validation.violations(r):  # the public request's rules, under its own names
            problems.check(False, broken.field, broken.description)
        problems.raise_if_any()
        _, why = targets.parse(r.url)  # its form (the rules said its length)
        problems.check(not why, "url", why)
        kinds = {KINDS[value] for value in r.event_kinds}  # known kinds, by the rules
        problems.check(not r.turn_id or bool(r.session_id), "turn_id", "needs session_id (a turn is in a session)")
        fmt = FORMATS.get(request.format, Format.COGMESH)
        problems.check(fmt is not Format.A2A or bool(request.a2a.task_id), "a2a.task_id", "is required for A2A")
        problems.raise_if_any()
        try:
            await targets.check(r.url, self.policy.allow_private)
        except targets.Refused as exc:
            raise InvalidArgument([("url", str(exc))]) from exc
        if r.session_id:
            try:
                await self.sessions.get(request.tenant_id, r.session_id)
            except SessionNotFound as exc:
                raise _session_not_found(r.session_id) from exc
        secret = r.secret or "whsec_" + random_secrets.token_urlsafe(32)
        webhook_id = "wh_" + uuid.uuid4().hex
        a2a = request.a2a
        hook = Webhook(
            webhook_id=webhook_id,
            tenant_id=request.tenant_id,
            url=r.url,
            kinds=frozenset(kinds),
            session_id=r.session_id,
            turn_id=r.turn_id,
            created_at=self.clock(),
            secret_hint=secret[-4:],
            format=fmt,
            a2a=A2APush(a2a.task_id, a2a.config_id or webhook_id, a2a.auth_scheme) if fmt is Format.A2A else None,
        )
        sealed = self.sealer.seal(
            webhook_id, {"secret": secret, "token": a2a.token, "credentials": a2a.auth_credentials}
        )
        await self.hooks.create(hook, sealed)
        if hook.turn_id:
            await self._backfill(hook, a2a.task_id)
        return webhooks_pb2.CreateWebhookResponse(webhook=webhook_to_proto(hook), secret=secret)

    async def _backfill(self, hook: Webhook, task_id: str) -> None:
        """The turn's outcomes already logged (those logged from now on the append enqueues itself)."""
        from_seq = 0
        if task_id:
            from_seq = int(task_id.rsplit(":", 1)[-1]) if task_id.rsplit(":", 1)[-1].isdigit() else 0
        found: list[Delivery] = []
        now = self.clock()
        with contextlib.suppress(SessionError):
            state = await self.sessions.log_state(hook.tenant_id, hook.session_id)
            after = max(from_seq, state.first_seq - 1)
            events = self.sessions.read_events(hook.tenant_id, hook.session_id, after, False, 15.0)
            async for batch in events:
                for event in batch or ():
                    kind = kind_of(event)
                    if kind is None or not hook.matches(hook.session_id, event.turn_id, kind):
                        continue
                    data = _stamped(event, hook.session_id, event.turn_id, event.seq)
                    found.append(
                        Delivery(
                            hook.webhook_id,
                            hook.tenant_id,
                            hook.session_id,
                            event.turn_id,
                            event.seq,
                            kind,
                            data,
                            now,
                            next_at=now,
                            window_start=now,
                        )
                    )
        if found:
            await self.hooks.enqueue(found)
            if self.on_enqueued is not None:
                self.on_enqueued(list(dict.fromkeys(d.queue for d in found)))

    async def GetWebhook(self, request: webhooks_pb2.GetWebhookRequest, context: Any) -> Any:
        hook = await self.hooks.get(request.tenant_id, request.webhook_id)
        return webhooks_pb2.GetWebhookResponse(webhook=webhook_to_proto(hook))

    async def ListWebhooks(self, request: webhooks_pb2.ListWebhooksRequest, context: Any) -> Any:
        page = await self.hooks.list_hooks(
            request.tenant_id,
            request.page_token,
            request.page_size or DEFAULT_PAGE,
            request.session_id,
            request.turn_id,
            FORMATS.get(request.format),
        )
        return webhooks_pb2.ListWebhooksResponse(
            webhooks=[webhook_to_proto(h) for h in page.items], next_page_token=page.next_cursor
        )

    async def DeleteWebhook(self, request: webhooks_pb2.DeleteWebhookRequest, context: Any) -> Any:
        return webhooks_pb2.DeleteWebhookResponse(
            deleted=await self.hooks.delete(request.tenant_id, request.webhook_id)
        )

    async def ListWebhookDeliveries(self, request: webhooks_pb2.ListWebhookDeliveriesRequest, context: Any) -> Any:
        q = request.query  # its page size and state are known ones, by the rules
        page = await self.hooks.deliveries(
            request.tenant_id,
            q.webhook_id,
            q.session_id,
            STATES.get(q.state),
            q.page_token,
            q.page_size or DEFAULT_PAGE,
        )
        return webhooks_pb2.ListWebhookDeliveriesResponse(
            page=public.ListWebhookDeliveriesResponse(
                deliveries=[delivery_to_proto(d) for d in page.items], next_page_token=page.next_cursor
            )
        )

    async def RedeliverWebhookDelivery(
        self, request: webhooks_pb2.RedeliverWebhookDeliveryRequest, context: Any
    ) -> Any:
        delivery = await self.hooks.redeliver(request.tenant_id, request.delivery_id, self.clock())
        if self.on_enqueued is not None:
            self.on_enqueued([delivery.queue])
        return webhooks_pb2.RedeliverWebhookDeliveryResponse(delivery=delivery_to_proto(delivery))
