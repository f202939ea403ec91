"""Answering a paused turn (ResolveApproval, AnswerInterrupt and their Converse frames): the answer
recorded by sessions and the turn resumed on any runtime replica.

What an answer is, and how sessions' refusal of one reads to the caller, is gateway/answers.py's
(shared with the A2A binding and gateway/turns.py); this module does the answering, which needs
the turns, so answers.py stays free of them (gateway/turns.py imports it).
"""

from __future__ import annotations

import asyncio

from cogmesh.sessions.v1 import sessions_pb2
from gateway import auth
from gateway.turns import Turns


async def answer(
    turns: Turns,
    tenant: str,
    session_id: str,
    interrupt_id: str,
    given: str,
    decision: sessions_pb2.CheckpointDecision,
    deadline_s: float | None,
) -> tuple[str, int]:
    """Record the answer and resume the paused turn (sessions judges it against the pause; `given`
    names the caller's field that carried it); returns (turn_id, seq before its next event)."""
    principal = auth.current.get(None)
    decision.decided_by = principal.name if principal is not None else ""
    # A caller that hangs up once its answer is on its way must not leave the turn decided but paused.
    answering = asyncio.ensure_future(turns.resume(tenant, session_id, interrupt_id, decision, deadline_s, given=given))
    answering.add_done_callback(lambda done: done.cancelled() or done.exception())  # retrieved, if we left
    return await asyncio.shield(answering)
