"""An A2A push notification's body: the task as the turn's events say at the delivered event.

The body is what the a2a-sdk's own push sender posts, a StreamResponse holding the Task
in protobuf JSON. The task is folded by the gateway's A2A mapping (plain code, no gRPC)
from the turn's events up to the delivered one, read from the session's log; when the
log no longer holds them, from the delivered event alone.
"""

from __future__ import annotations

import contextlib
import json

from a2a.types import a2a_pb2
from google.protobuf import json_format

from cogmesh.common.v1 import events_pb2
from gateway.a2a.mapping import TaskRef, TaskView
from services.sessions.model import SessionError
from services.sessions.store import SessionStore
from services.sessions.webhooks.model import Delivery


async def body(sessions: SessionStore, task_id: str, delivery: Delivery, event: events_pb2.RuntimeEvent) -> bytes:
    ref = TaskRef.parse(task_id) or TaskRef(delivery.session_id, delivery.turn_id, delivery.seq - 1)
    view = TaskView(ref)
    try:
        events = sessions.read_events(delivery.tenant_id, delivery.session_id, ref.start_seq, False, 15.0)
        async with contextlib.aclosing(events) as batches:  # type: ignore[type-var]
            async for batch in batches:
                for logged in batch or ():
                    if logged.seq > delivery.seq:
                        break
                    if logged.turn_id == delivery.turn_id:
                        view.apply(logged)
                if batch and batch[-1].seq >= delivery.seq:
                    break
    except SessionError:
        view = TaskView(ref)
    if not view.seen:
        view.apply(event)
    update = a2a_pb2.StreamResponse(task=view.task())
    return json.dumps(json_format.MessageToDict(update), separators=(",", ":")).encode()
