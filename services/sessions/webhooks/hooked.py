"""The session store with webhooks: every outcome it logs becomes a delivery before the call answers.

`HookedSessionStore` wraps any SessionStore. After the store accepted an append
(append_events; try_acquire logs only a turn's opening, never an outcome), it finds the
outcome events (final, error, the PAUSED status) and enqueues one delivery per matching
webhook, keyed by (webhook, session, seq), and only then returns, so the RPC answers
after the enqueue. An append answered as a duplicate (its append_id was logged before)
enqueues again: the runtime resends an append whose answer it did not get, so a sessions
replica that died between logging and enqueueing is covered by the resend, and the
enqueue being idempotent makes the usual resend harmless. Every other call passes through.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from cogmesh.common.v1 import events_pb2
from services.kit.logging import log
from services.sessions.model import Appended, NewEvents
from services.sessions.store import SessionStore
from services.sessions.webhooks.model import Delivery, Kind, Queue, kind_of
from services.sessions.webhooks.store import WebhookStore


def outcomes(new: NewEvents, appended: Appended) -> list[tuple[events_pb2.RuntimeEvent, int, Kind]]:
    """The append's outcome events with their seqs (a duplicate's events were not stamped this time:
    they are the last len(events) seqs up to the recorded last_seq)."""
    first = appended.last_seq - len(new.events) + 1
    found = []
    for offset, event in enumerate(new.events):
        kind = kind_of(event)
        if kind is not None:
            found.append((event, first + offset, kind))
    return found


class HookedSessionStore:
    def __init__(
        self,
        store: SessionStore,
        hooks: WebhookStore,
        clock: Callable[[], float] = time.time,
        on_enqueued: Callable[[list[Queue]], None] | None = None,
    ):
        self._store, self._hooks, self._clock = store, hooks, clock
        self._on_enqueued = on_enqueued

    @property
    def wrapped(self) -> SessionStore:
        """The session store this one enqueues deliveries for."""
        return self._store

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def append_events(self, tenant_id: str, session_id: str, new: NewEvents) -> Appended:
        appended = await self._store.append_events(tenant_id, session_id, new)
        found = outcomes(new, appended)
        if found:
            # Shielded: a caller that hangs up must not cut the enqueue of an append that landed.
            await asyncio.shield(self._enqueue(tenant_id, session_id, new.turn_id, found))
        return appended

    async def _enqueue(
        self, tenant_id: str, session_id: str, turn_id: str, found: list[tuple[events_pb2.RuntimeEvent, int, Kind]]
    ) -> None:
        hooks = await self._hooks.matching(tenant_id, session_id)
        if not hooks:
            return
        now = self._clock()
        deliveries = [
            Delivery(
                hook.webhook_id,
                tenant_id,
                session_id,
                turn_id,
                seq,
                kind,
                _stamped(event, session_id, turn_id, seq),
                now,
                next_at=now,
                window_start=now,
            )
            for event, seq, kind in found
            for hook in hooks
            if hook.matches(session_id, turn_id, kind)
        ]
        if deliveries:
            await self._hooks.enqueue(deliveries)
            log.debug("webhook deliveries enqueued", count=len(deliveries))
            if self._on_enqueued is not None:
                self._on_enqueued(list(dict.fromkeys(d.queue for d in deliveries)))


def _stamped(event: events_pb2.RuntimeEvent, session_id: str, turn_id: str, seq: int) -> bytes:
    """The event as logged (a duplicate's copy was not stamped by the store this time)."""
    if event.seq == seq and event.session_id:
        return event.SerializeToString()
    copy = events_pb2.RuntimeEvent()
    copy.CopyFrom(event)
    copy.seq, copy.session_id, copy.turn_id = seq, session_id, turn_id
    return copy.SerializeToString()
