"""Taking a session's turn lease with a multitask strategy, over any SessionStore.

REJECT is a single `try_acquire`. ENQUEUE and INTERRUPT (and ROLLBACK, which waits as INTERRUPT does; the
servicer rewinds the interrupted turn once the lease is granted) keep a place in the
session's queue and retry whenever the store says the lease may have changed
hands (a release on any replica) and at least every POLL_S, which also keeps the
place alive: a waiter whose replica dies stops polling and drops out of the queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from services.sessions.model import Acquired, LeaseGrant, LeaseHeld, NewEvents, Queued, SessionError, Strategy
from services.sessions.store import SessionStore

POLL_S = 0.25


async def acquire(
    store: SessionStore,
    tenant_id: str,
    session_id: str,
    turn_id: str,
    ttl_s: float,
    strategy: Strategy,
    max_wait_s: float,
    opening: NewEvents | None = None,
    resume: str = "",
    rehydrate: int = 0,
) -> LeaseGrant:
    """Take the lease, waiting up to max_wait_s unless REJECT; raises LeaseHeld when it stays busy."""
    started = time.monotonic()
    deadline = started + max_wait_s
    interrupted = ""
    queued = False
    attempt: asyncio.Future[Acquired | Queued] | None = None
    try:
        while True:
            # Its own task: a caller cancelled meanwhile still knows when (and how) this try landed.
            attempt = asyncio.ensure_future(
                store.try_acquire(tenant_id, session_id, turn_id, ttl_s, strategy, opening, resume, rehydrate)
            )
            result = await asyncio.shield(attempt)
            if isinstance(result, Acquired):
                waited = time.monotonic() - started if queued else 0.0
                return LeaseGrant(
                    result.token,
                    result.expires_at,
                    interrupted,
                    waited,
                    result.pending_interrupt_ids,
                    result.start_seq,
                    result.last_seq,
                    result.rehydration,
                )
            if not queued:
                queued = True
                if strategy.interrupts:
                    interrupted = result.holder_turn_id  # the turn asked to stop, reported to the caller
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise LeaseHeld(session_id, result.holder_turn_id, time.monotonic() - started)
            # Wake on a release (notified), when a crashed holder's lease runs out, or to poll (also while
            # an expired lease waits for a takeover: its turn is open, the lease stays held until claimed).
            now = time.time()
            expiry = result.holder_expires_at
            until_expiry = expiry - now + 0.005 if expiry > now else POLL_S
            await store.wait_for_change(session_id, max(0.001, min(remaining, POLL_S, until_expiry)))
    except BaseException:
        if attempt is not None and not attempt.done():
            # A try still on its way could queue the turn again after the place is given up (on Redis its
            # batch may reach the store after the leave's): let it land first.
            with contextlib.suppress(Exception):
                queued = not isinstance(await asyncio.shield(attempt), Acquired) or queued
        if queued:
            # Give the place up even when cancelled (the caller went away); the store being
            # down is harmless here since an abandoned place expires on its own.
            with contextlib.suppress(SessionError):
                await asyncio.shield(store.leave_queue(tenant_id, session_id, turn_id))
        raise
