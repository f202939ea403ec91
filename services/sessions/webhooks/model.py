"""Webhooks as plain data: subscriptions, deliveries, which events they carry (no gRPC).

A webhook subscribes a URL to the outcomes of a tenant's turns, optionally narrowed to
one session and one turn. Each logged event it matches becomes one delivery, keyed by
(webhook, session, seq): enqueueing the same event twice is a no-op, which is what makes
the re-enqueue of a retried append safe. Deliveries of one (webhook, session) form a
queue sent in seq order. Times are seconds since the epoch.
"""

from __future__ import annotations

import base64
import enum
from dataclasses import dataclass, field, replace
from typing import Any, Generic, TypeVar

from cogmesh.common.v1 import events_pb2
from services.kit.errors import NotFound

T = TypeVar("T")


class Kind(enum.Enum):
    """What a delivery reports; the values are WebhookEventKind's names without their prefix."""

    FINAL = "final"
    ERROR = "error"
    CANCELLED = "cancelled"
    PAUSED = "paused"


class Format(enum.Enum):
    COGMESH = "cogmesh"
    A2A = "a2a"


class State(enum.Enum):
    PENDING = "pending"
    DELIVERED = "delivered"
    DEAD = "dead"


def kind_of(event: events_pb2.RuntimeEvent) -> Kind | None:
    """The outcome an event reports, or None. A pause is its PAUSED status (one per pause), not the
    approval_required / user_input_requested / client_tool_call event before it."""
    payload = event.WhichOneof("payload")
    if payload == "final":
        return Kind.FINAL
    if payload == "error":
        return Kind.CANCELLED if event.error.kind == events_pb2.ERROR_KIND_CANCELLED else Kind.ERROR
    if payload == "status" and event.status.state == events_pb2.TURN_STATE_PAUSED:
        return Kind.PAUSED
    return None


@dataclass(frozen=True)
class A2APush:
    task_id: str
    config_id: str
    auth_scheme: str = ""


@dataclass(frozen=True)
class Webhook:
    webhook_id: str
    tenant_id: str
    url: str
    kinds: frozenset[Kind]  # empty: every kind
    session_id: str = ""
    turn_id: str = ""
    created_at: float = 0.0
    secret_hint: str = ""
    format: Format = Format.COGMESH
    a2a: A2APush | None = None

    def matches(self, session_id: str, turn_id: str, kind: Kind) -> bool:
        return (
            (not self.session_id or self.session_id == session_id)
            and (not self.turn_id or self.turn_id == turn_id)
            and (not self.kinds or kind in self.kinds)
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.webhook_id,
            "tenant": self.tenant_id,
            "url": self.url,
            "kinds": sorted(k.value for k in self.kinds),
            "session": self.session_id,
            "turn": self.turn_id,
            "created": self.created_at,
            "hint": self.secret_hint,
            "format": self.format.value,
        }
        if self.a2a is not None:
            out["a2a"] = {"task": self.a2a.task_id, "config": self.a2a.config_id, "scheme": self.a2a.auth_scheme}
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Webhook:
        a2a = data.get("a2a")
        return cls(
            webhook_id=data["id"],
            tenant_id=data["tenant"],
            url=data["url"],
            kinds=frozenset(Kind(k) for k in data["kinds"]),
            session_id=data["session"],
            turn_id=data["turn"],
            created_at=data["created"],
            secret_hint=data["hint"],
            format=Format(data["format"]),
            a2a=A2APush(a2a["task"], a2a["config"], a2a["scheme"]) if a2a else None,
        )


@dataclass(frozen=True)
class Delivery:
    """One event for one webhook. `window_start` opens the retry window (its creation, or a redelivery)."""

    webhook_id: str
    tenant_id: str
    session_id: str
    turn_id: str
    seq: int
    kind: Kind
    event: bytes  # the RuntimeEvent as logged
    created_at: float
    state: State = State.PENDING
    attempts: int = 0
    next_at: float = 0.0
    window_start: float = 0.0
    last_attempt_at: float = 0.0
    last_status: int = 0
    last_error: str = ""
    delivered_at: float = 0.0

    @property
    def delivery_id(self) -> str:
        return delivery_id(self.webhook_id, self.session_id, self.seq)

    @property
    def queue(self) -> Queue:
        return Queue(self.tenant_id, self.webhook_id, self.session_id)

    def to_json(self) -> dict[str, Any]:
        return {
            "wh": self.webhook_id,
            "tenant": self.tenant_id,
            "session": self.session_id,
            "turn": self.turn_id,
            "seq": self.seq,
            "kind": self.kind.value,
            "event": base64.b64encode(self.event).decode(),
            "created": self.created_at,
            "state": self.state.value,
            "attempts": self.attempts,
            "next_at": self.next_at,
            "window": self.window_start,
            "last_at": self.last_attempt_at,
            "status": self.last_status,
            "error": self.last_error,
            "delivered": self.delivered_at,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Delivery:
        return cls(
            webhook_id=data["wh"],
            tenant_id=data["tenant"],
            session_id=data["session"],
            turn_id=data["turn"],
            seq=int(data["seq"]),
            kind=Kind(data["kind"]),
            event=base64.b64decode(data["event"]),
            created_at=data["created"],
            state=State(data["state"]),
            attempts=int(data["attempts"]),
            next_at=data["next_at"],
            window_start=data["window"],
            last_attempt_at=data["last_at"],
            last_status=int(data["status"]),
            last_error=data["error"],
            delivered_at=data["delivered"],
        )

    def redelivered(self, now: float) -> Delivery:
        return replace(self, state=State.PENDING, attempts=0, next_at=now, window_start=now, last_error="")


@dataclass(frozen=True)
class Queue:
    """The deliveries of one webhook for one session: sent one at a time, in seq order."""

    tenant_id: str
    webhook_id: str
    session_id: str


@dataclass(frozen=True)
class Attempt:
    """How one attempt went: delivered, or failed and retried at `retry_at` (None: given up)."""

    at: float
    status: int = 0
    error: str = ""
    delivered: bool = False
    retry_at: float | None = None

    def applied(self, delivery: Delivery) -> Delivery:
        done = self.delivered or self.retry_at is None
        return replace(
            delivery,
            state=State.DELIVERED if self.delivered else State.PENDING if not done else State.DEAD,
            attempts=delivery.attempts + 1,
            last_attempt_at=self.at,
            last_status=self.status,
            last_error=self.error,
            next_at=self.retry_at or 0.0,
            delivered_at=self.at if self.delivered else delivery.delivered_at,
        )


@dataclass
class Page(Generic[T]):
    items: list[T] = field(default_factory=list)
    next_cursor: str = ""  # "" on the last page


def delivery_id(webhook_id: str, session_id: str, seq: int) -> str:
    """Deterministic, so the same event enqueued twice is one delivery; opaque to callers."""
    raw = f"{webhook_id}\n{session_id}\n{seq}".encode()
    return "dl_" + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def parse_delivery_id(value: str) -> tuple[str, str, int] | None:
    if not value.startswith("dl_"):
        return None
    body = value[3:]
    try:
        webhook_id, session_id, seq = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode().split("\n")
        return webhook_id, session_id, int(seq)
    except ValueError:
        return None


def webhook_not_found(webhook_id: str) -> NotFound:
    return NotFound(f"webhook {webhook_id!r} not found", metadata={"webhook_id": webhook_id})


def delivery_not_found(delivery_id: str) -> NotFound:
    return NotFound(f"webhook delivery {delivery_id!r} not found", metadata={"delivery_id": delivery_id})
