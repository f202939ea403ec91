"""Time travel over any SessionStore: a session's turns, its conversation as it was after a turn, forks, rewinds.

Nothing here is stored of its own: a session's turns are derived at read time from what the store
holds. Messages are kept serialized, each a common.v1.Message carrying the turn that added it, so
the order of the turns is the order of their first messages (a turn holding the lease or paused, which
has stored none yet, comes last). The log says where each turn's events start (`turn_seqs`), so a
turn's range and how it ended are read from that range alone; its journal gives its steps and times.

A fork is composed of store steps (the fork and the original live in different Redis Cluster slots,
so no one script can do it): create, copy the messages under a lease of the fork's own, copy the
summary, release; when a step fails the half-made fork is deleted. A rewind is one atomic store step
(`SessionStore.rewind`) given what this module read: it applies only if the message count and the
log's head are still what was read (a compare-and-set, tried twice). Dropped turns keep their
journals, as an audit of what ran.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from google.protobuf import timestamp_pb2
from google.protobuf.message import DecodeError

from cogmesh.common.v1 import events_pb2, messages_pb2, turns_pb2
from cogmesh.runtime.v1 import runtime_pb2
from services.kit.errors import CogmeshError
from services.lib import journal_kinds
from services.sessions.model import (
    Acquired,
    HistoryChanged,
    JournalRecord,
    LeaseHeld,
    NewSession,
    Origin,
    Page,
    Rewind,
    SessionError,
    SessionRecord,
    Strategy,
    TurnNotFound,
)
from services.sessions.store import SessionStore

READ_BATCH = 1000  # messages per store read
COPY_BATCH = 500  # messages per append when a fork copies them
FORK_LEASE_S = 60.0  # the lease a fork is filled under (released at once)
MAX_TURNS_PAGE = 200
DEFAULT_TURNS_PAGE = 50
LOOKAHEAD = 8  # turns after a page whose first seqs bound the page's last turn's range
SUMMARY_CHARS = 120
REWIND, ROLLBACK = "rewind", "rollback"

_STEP_KINDS: dict[int, int] = {
    journal_kinds.REQUEST: turns_pb2.TURN_STEP_KIND_REQUEST,
    journal_kinds.START: turns_pb2.TURN_STEP_KIND_START,
    journal_kinds.COMPACTION: turns_pb2.TURN_STEP_KIND_COMPACTION,
    journal_kinds.MODEL: turns_pb2.TURN_STEP_KIND_MODEL_CALL,
    journal_kinds.DECIDE: turns_pb2.TURN_STEP_KIND_DECISION,
    journal_kinds.TOOL: turns_pb2.TURN_STEP_KIND_TOOL_CALL,
    journal_kinds.DELEGATION: turns_pb2.TURN_STEP_KIND_DELEGATION,
    journal_kinds.STEP: turns_pb2.TURN_STEP_KIND_STEP_END,
    journal_kinds.PAUSE: turns_pb2.TURN_STEP_KIND_PAUSE,
    journal_kinds.ANSWER: turns_pb2.TURN_STEP_KIND_ANSWER,
    journal_kinds.TAKEOVER: turns_pb2.TURN_STEP_KIND_TAKEOVER,
}


# --------------------------------------------------------------------------- reading the conversation


async def all_messages(store: SessionStore, tenant_id: str, session_id: str) -> list[bytes]:
    """The whole conversation, serialized, oldest first."""
    out: list[bytes] = []
    while True:
        page = await store.list_messages(tenant_id, session_id, len(out), READ_BATCH)
        out += page.items
        if page.next_cursor is None:
            return out


def parse_message(payload: bytes) -> messages_pb2.Message:
    """A stored message; one that does not parse reads as an empty message of no turn."""
    try:
        return messages_pb2.Message.FromString(payload)
    except DecodeError:
        return messages_pb2.Message()


def turn_order(messages: Sequence[messages_pb2.Message]) -> list[str]:
    """The turns in the order of their first messages."""
    seen: dict[str, None] = {}
    for message in messages:
        if message.turn_id:
            seen.setdefault(message.turn_id, None)
    return list(seen)


async def messages_through(
    store: SessionStore, tenant_id: str, session_id: str, turn_id: str, offset: int, limit: int
) -> Page[bytes]:
    """A page of the conversation as it was after `turn_id`: up to and including that turn's last message."""
    messages = await all_messages(store, tenant_id, session_id)
    ids = [parse_message(p).turn_id for p in messages]
    if turn_id not in ids:
        raise TurnNotFound(session_id, turn_id)
    end = len(ids) - ids[::-1].index(turn_id)
    stop = min(offset + limit, end)
    return Page(messages[offset:stop], stop if stop < end else None)


# --------------------------------------------------------------------------- ListTurns


def _stamp(seconds: float) -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.FromNanoseconds(int(seconds * 1e9))
    return stamp


def _json(state: bytes) -> dict[str, Any]:
    value = json.loads(state.decode())
    return value if isinstance(value, dict) else {}


def _names(items: Any, wanted: Callable[[dict[str, Any]], bool], show: Callable[[dict[str, Any]], str]) -> str:
    return ", ".join(show(i) for i in items or () if isinstance(i, dict) and wanted(i))


def step_summary(kind: int, state: bytes) -> str:
    """A short description of a journal entry; "" for a state this version cannot read (never an error)."""
    try:
        if kind == journal_kinds.REQUEST:
            request = runtime_pb2.RunTurnRequest.FromString(state)
            model = f" (model {request.model})" if request.model else ""
            return f"asked: {request.content}"[:SUMMARY_CHARS] + model
        data = _json(state)
        if kind == journal_kinds.TAKEOVER:
            return f"taken over by {data.get('holder', '')} from seq {data.get('from_seq', 0)}"
        if kind == journal_kinds.START:
            return f"model {data.get('model', '')}"
        if kind == journal_kinds.MODEL:
            calls = _names(data.get("calls"), lambda c: True, lambda c: str(c.get("name", "")))
            text = str(data.get("step_text") or "")
            said = f": {text}"[: SUMMARY_CHARS // 2] if text else ""
            return f"model {data.get('model', '')}{said}" + (f"; calls {calls}" if calls else "")
        if kind == journal_kinds.DECIDE:
            return "decided " + _names(
                data.get("items"), lambda i: True, lambda i: f"{i.get('name')} -> {i.get('state')}"
            )
        if kind in (journal_kinds.TOOL, journal_kinds.DELEGATION):
            done = _names(
                data.get("items"),
                lambda i: i.get("state") == "done",
                lambda i: f"{i.get('name')} {'ok' if i.get('ok') else 'failed'}",
            )
            return ("delegated: " if kind == journal_kinds.DELEGATION else "ran ") + done
        if kind == journal_kinds.STEP:
            return f"step {data.get('iteration', '')} done"
        if kind == journal_kinds.COMPACTION:
            return f"summarized {data.get('covered', 0)} messages"
        if kind == journal_kinds.PAUSE:
            return f"waiting for {data.get('waiting') or 'an answer'}"
        if kind == journal_kinds.ANSWER:
            return "answered"
    except (ValueError, DecodeError, TypeError, AttributeError):
        return ""
    return ""


def _step(record: JournalRecord) -> turns_pb2.TurnStep:
    kind = journal_kinds.kind_named(record.kind)
    return turns_pb2.TurnStep(
        kind=_STEP_KINDS.get(kind, turns_pb2.TURN_STEP_KIND_UNSPECIFIED),  # type: ignore[arg-type]
        seq=record.seq,
        record_time=_stamp(record.recorded_at),
        summary=step_summary(kind, record.state),
    )


def _agent_of(journal: Sequence[JournalRecord]) -> str:
    for record in journal:
        if journal_kinds.kind_named(record.kind) == journal_kinds.START:
            with contextlib.suppress(ValueError, TypeError, AttributeError):
                return str(_json(record.state).get("agent") or "")
    return ""


def _outcome_of(event: events_pb2.RuntimeEvent) -> int | None:
    kind = event.WhichOneof("payload")
    if kind == "final":
        return turns_pb2.TURN_OUTCOME_COMPLETED
    if kind == "error":
        cancelled = event.error.kind == events_pb2.ERROR_KIND_CANCELLED
        return turns_pb2.TURN_OUTCOME_CANCELLED if cancelled else turns_pb2.TURN_OUTCOME_FAILED
    if kind == "status":
        return turns_pb2.TURN_OUTCOME_PAUSED if event.status.state == events_pb2.TURN_STATE_PAUSED else None
    return None


async def _read_range(
    store: SessionStore, tenant_id: str, session_id: str, turn_id: str, first: int, end: int
) -> tuple[int, int | None, events_pb2.RuntimeEvent | None]:
    """The seq of the turn's last event in [first, end], how its events say it ended, and its final event."""
    last, outcome, final = 0, None, None
    stream = store.read_events(tenant_id, session_id, first - 1, False, 60.0)
    async with contextlib.aclosing(stream):  # type: ignore[type-var]
        async for batch in stream:
            for event in batch or ():
                if event.seq > end:
                    return last, outcome, final
                if event.turn_id == turn_id:
                    last = event.seq
                    outcome = _outcome_of(event) or outcome
                    if event.HasField("final") and not event.agent:  # the turn's, not a subagent's
                        final = event
    return last, outcome, final


def _answer_step(final: events_pb2.RuntimeEvent) -> turns_pb2.TurnStep:
    """The model call that gave the turn's answer: the journal records what recovery needs, and an answer needs
    nothing recovered (it ends the turn in the same write), so this step is read from the final event."""
    model = final.final.model
    step = turns_pb2.TurnStep(
        kind=turns_pb2.TURN_STEP_KIND_MODEL_CALL,
        seq=final.seq,
        summary=f"model {model}: the answer" if model else "the answer",
    )
    step.record_time.CopyFrom(final.create_time)
    return step


@dataclass(frozen=True)
class TurnsPage:
    turns: list[turns_pb2.TurnRecord]
    next_offset: int | None


async def list_turns(
    store: SessionStore, tenant_id: str, session_id: str, offset: int, limit: int, include_steps: bool
) -> TurnsPage:
    """One page of the session's turns, oldest first; only the listed turns' journals and log ranges are read."""
    session = await store.get(tenant_id, session_id)
    messages = [parse_message(p) for p in await all_messages(store, tenant_id, session_id)]
    order = turn_order(messages)
    lease = (await store.lease_state(tenant_id, session_id)).lease
    paused = {c.turn_id for c in await store.list_checkpoints(tenant_id, session_id)}
    for waiting in [*sorted(paused), lease.turn_id if lease else ""]:
        if waiting and waiting not in order:  # a turn stores its messages as it ends
            order.append(waiting)
    page = order[offset : offset + limit]
    later = order[offset + limit : offset + limit + LOOKAHEAD]
    firsts = await store.turn_seqs(tenant_id, session_id, page + later)
    log = await store.log_state(tenant_id, session_id)
    journals = await asyncio.gather(*(store.journal(tenant_id, session_id, t) for t in page))
    turns = []
    for i, turn_id in enumerate(page):
        own = [m for m in messages if m.turn_id == turn_id]
        journal = journals[i]
        first = firsts.get(turn_id, 0)
        bounds = [firsts[t] for t in (page + later)[i + 1 :] if t in firsts and firsts[t] > first]
        end = min(bounds) - 1 if bounds else log.last_seq
        last, outcome, final = 0, None, None
        if first and first >= log.first_seq:
            try:
                last, outcome, final = await _read_range(store, tenant_id, session_id, turn_id, first, end)
            except CogmeshError:  # trimmed meanwhile
                last = 0
        if not last:
            first = 0
        if lease is not None and lease.turn_id == turn_id:
            outcome = turns_pb2.TURN_OUTCOME_RUNNING
        elif turn_id in paused:
            outcome = turns_pb2.TURN_OUTCOME_PAUSED
        elif outcome is None and own:
            outcome = turns_pb2.TURN_OUTCOME_COMPLETED  # stored its messages, which a turn does as it ends
        record = turns_pb2.TurnRecord(
            turn_id=turn_id,
            index=offset + i + 1,
            user_message=next((m.content for m in own if m.role == messages_pb2.ROLE_USER), ""),
            outcome=outcome or turns_pb2.TURN_OUTCOME_UNSPECIFIED,  # type: ignore[arg-type]
            first_seq=first,
            last_seq=last,
            message_count=len(own),
            agent=_agent_of(journal) or session.active_agent or session.agent,
        )
        if journal:
            record.start_time.CopyFrom(_stamp(journal[0].recorded_at))
            record.end_time.CopyFrom(_stamp(journal[-1].recorded_at))
        elif own:
            record.start_time.CopyFrom(own[0].create_time)
            record.end_time.CopyFrom(own[-1].create_time)
        if include_steps:
            record.steps.extend(_step(r) for r in journal)
            if final is not None:
                record.steps.append(_answer_step(final))
        turns.append(record)
    return TurnsPage(turns, offset + limit if offset + limit < len(order) else None)


# --------------------------------------------------------------------------- ForkSession


@dataclass(frozen=True)
class ForkRequest:
    turn_id: str = ""  # "": after the last turn
    before_turn: bool = False
    agent: str = ""
    labels: dict[str, str] | None = None
    user_id: str = ""
    topic_id: str = ""
    agent_version: int = 0  # with `agent`: its version when it is a stored agent


async def fork(
    store: SessionStore, tenant_id: str, session_id: str, asked: ForkRequest, clock: Callable[[], float] = time.time
) -> tuple[SessionRecord, int]:
    """A new session holding the conversation up to the turn (or before it); returns it and the messages copied.

    Same tenant and scope; role, skills and runtime config copied; the summary copied only when it covers no
    more than the copied messages; goals, phase and plan are not copied. The original is only read."""
    original = await store.get(tenant_id, session_id)
    messages = await all_messages(store, tenant_id, session_id)
    ids = [parse_message(p).turn_id for p in messages]
    end = len(ids)
    if asked.turn_id:
        if asked.turn_id not in ids:
            raise TurnNotFound(session_id, asked.turn_id)
        end = ids.index(asked.turn_id) if asked.before_turn else len(ids) - ids[::-1].index(asked.turn_id)
    copied = messages[:end]
    held = [t for t in ids[:end] if t]
    summary = (await store.rehydrate(tenant_id, session_id, 0)).summary
    if summary is not None and summary.covered_message_count > end:
        summary = None
    new = NewSession(
        user_id=asked.user_id or original.user_id,
        topic_id=asked.topic_id,
        agent=asked.agent or original.agent,
        # Another agent starts in its own default role (the runtime reads an empty role so).
        role_id=original.role_id if not asked.agent or asked.agent == original.agent else "",
        active_skill_ids=original.active_skill_ids,
        runtime_config=dict(original.runtime_config),
        scope=dict(original.scope),
        labels=dict(asked.labels or original.labels),
        forked_from=Origin(session_id, held[-1] if held else "", clock()),
        agent_version=asked.agent_version if asked.agent else original.agent_version,
    )
    made, _ = await store.create(tenant_id, new)
    fork_id = made.session_id
    try:
        if copied or summary is not None:
            granted = await store.try_acquire(
                tenant_id, fork_id, f"fork-{uuid.uuid4().hex}", FORK_LEASE_S, Strategy.REJECT
            )
            assert isinstance(granted, Acquired)  # nobody else knows the fork yet
            for at in range(0, len(copied), COPY_BATCH):
                chunk = copied[at : at + COPY_BATCH]
                await store.append_messages(tenant_id, fork_id, chunk, granted.token, f"fork-copy-{at}")
            if summary is not None:
                await store.update_summary(
                    tenant_id, fork_id, summary.text, summary.covered_message_count, granted.token
                )
            await store.release_lease(tenant_id, fork_id, granted.token)
        return await store.get(tenant_id, fork_id), len(copied)
    except BaseException:
        with contextlib.suppress(SessionError):  # the half-made fork goes; the caller gets the first failure
            await store.delete(tenant_id, fork_id)
        raise


# --------------------------------------------------------------------------- RewindSession and ROLLBACK


async def _in_progress(store: SessionStore, tenant_id: str, session_id: str, turn_id: str) -> bool:
    """Whether the turn holds the lease, waits for it or is paused."""
    state = await store.lease_state(tenant_id, session_id)
    if (state.lease is not None and state.lease.turn_id == turn_id) or turn_id in state.queued_turn_ids:
        return True
    return any(c.turn_id == turn_id for c in await store.list_checkpoints(tenant_id, session_id))


async def rewind(
    store: SessionStore,
    tenant_id: str,
    session_id: str,
    turn_id: str,
    requested_by: str,
    *,
    reason: str = REWIND,
    token: int = 0,
    logged_under: str = "",
    void_through: int | None = None,
    missing_ok: bool = False,
) -> tuple[SessionRecord, events_pb2.RuntimeEvent]:
    """Drop `turn_id` and every later turn from the conversation and log a SessionRewound (with its seq).

    `token`: the lease holder's (a ROLLBACK turn), which logs the event under its turn `logged_under`;
    `void_through`: the void range's end when it is not the log's head (a ROLLBACK turn's own opening events
    stay). `missing_ok`: a turn with no message drops no message, its events are still voided."""
    for attempt in (1, 2):
        messages = await all_messages(store, tenant_id, session_id)
        ids = [parse_message(p).turn_id for p in messages]
        if turn_id in ids:
            keep = ids.index(turn_id)
        elif missing_ok:
            keep = len(ids)
        elif await _in_progress(store, tenant_id, session_id, turn_id):
            raise LeaseHeld(session_id, turn_id)  # a turn that runs, waits or is paused has no messages yet
        else:
            raise TurnNotFound(session_id, turn_id)
        dropped = [turn_id, *(t for t in dict.fromkeys(ids[keep:]) if t and t != turn_id)]
        head = (await store.log_state(tenant_id, session_id)).last_seq
        firsts = await store.turn_seqs(tenant_id, session_id, dropped)
        through = head if void_through is None else void_through
        void_after = min([through, *(seq - 1 for seq in firsts.values())])
        event = events_pb2.RuntimeEvent(
            rewound=events_pb2.SessionRewound(
                turn_id=turn_id,
                dropped_turn_ids=dropped,
                void_after_seq=void_after,
                void_through_seq=through,
                dropped_message_count=len(ids) - keep,
                reason=reason,
                requested_by=requested_by,
            )
        )
        try:
            record, _ = await store.rewind(
                tenant_id, session_id, Rewind(keep, len(ids), head, dropped, event, token, logged_under)
            )
        except HistoryChanged:
            if attempt == 2:
                raise
            continue
        return record, event
    raise AssertionError("unreachable")
