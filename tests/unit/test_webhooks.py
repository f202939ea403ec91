"""Webhooks' plain parts: which events are outcomes, the SSRF rule, the signature, the retry window,
sealed secrets, and the store wrapper that enqueues what an append logged (a resent append too)."""

from __future__ import annotations

import hashlib
import hmac

import pytest
from cryptography.exceptions import InvalidTag

from cogmesh.common.v1 import events_pb2
from services.sessions.model import NewEvents, NewSession, Strategy
from services.sessions.store import MemorySessionStore
from services.sessions.webhooks import targets
from services.sessions.webhooks.dispatcher import Policy, signature
from services.sessions.webhooks.hooked import HookedSessionStore
from services.sessions.webhooks.model import Delivery, Kind, Webhook, delivery_id, kind_of, parse_delivery_id
from services.sessions.webhooks.secrets import Sealer
from services.sessions.webhooks.store import MemoryWebhookStore


def status(state: int) -> events_pb2.RuntimeEvent:
    return events_pb2.RuntimeEvent(status=events_pb2.StatusUpdate(state=state))  # type: ignore[arg-type]


def test_outcomes_are_final_error_cancelled_and_the_paused_status_only() -> None:
    E = events_pb2
    assert kind_of(E.RuntimeEvent(final=E.FinalResult(text="x"))) is Kind.FINAL
    assert kind_of(E.RuntimeEvent(error=E.TurnError(kind=E.ERROR_KIND_LOOP_LIMIT))) is Kind.ERROR
    assert kind_of(E.RuntimeEvent(error=E.TurnError(kind=E.ERROR_KIND_CANCELLED))) is Kind.CANCELLED
    assert kind_of(status(E.TURN_STATE_PAUSED)) is Kind.PAUSED
    # One trigger per pause: the approval_required before the PAUSED status is not one.
    assert kind_of(E.RuntimeEvent(approval_required=E.ApprovalRequired(interrupt_id="i"))) is None
    assert kind_of(status(E.TURN_STATE_RUNNING)) is None
    assert kind_of(E.RuntimeEvent(assistant_delta=E.AssistantDelta(text="x"))) is None


@pytest.mark.parametrize(
    ("address", "why"),
    [
        ("127.0.0.1", "loopback"),
        ("::1", "loopback"),
        ("::ffff:127.0.0.1", "loopback"),
        ("169.254.169.254", "link-local"),
        ("fe80::1", "link-local"),
        ("10.0.0.8", "private"),
        ("192.168.1.1", "private"),
        ("fd00::1", "private"),
        ("224.0.0.1", "multicast"),
        ("0.0.0.0", "private"),  # 0.0.0.0/8 is in the private ranges
        ("100.64.0.1", "not globally routable"),
    ],
)
def test_addresses_the_ssrf_rule_refuses(address: str, why: str) -> None:
    assert why in targets.refusal(address)


def test_public_addresses_pass() -> None:
    assert targets.refusal("93.184.216.34") == "" and targets.refusal("2606:4700::1111") == ""


@pytest.mark.parametrize(
    ("url", "problem"),
    [("ftp://x.example/", "http or https"), ("http:///nohost", "no host"), ("https://u:p@x.example/", "user info")],
)
def test_urls_that_are_not_webhook_urls(url: str, problem: str) -> None:
    parts, why = targets.parse(url)
    assert parts is None and problem in why


async def test_a_literal_private_address_is_refused_and_allowed_when_the_setting_says_so() -> None:
    with pytest.raises(targets.Refused, match=r"10\.1\.2\.3, a private address"):
        await targets.check("http://10.1.2.3/hook", allow_private=False)
    allowed = await targets.check("http://10.1.2.3/hook", allow_private=True)
    assert allowed.pinned_url() == "http://10.1.2.3/hook"


def test_the_attempt_connects_to_the_checked_address_with_the_name_as_host() -> None:
    target = targets.Target("https://hooks.example.com/a?b=1", "hooks.example.com", 443, "https", "203.0.113.9")
    assert target.pinned_url() == "https://203.0.113.9:443/a?b=1" and target.host_header == "hooks.example.com"
    six = targets.Target("http://h.example:8080/", "h.example", 8080, "http", "2001:db8::1")
    assert six.pinned_url() == "http://[2001:db8::1]:8080/" and six.host_header == "h.example:8080"


def test_the_signature_covers_the_timestamp_and_the_body() -> None:
    expected = hmac.new(b"s3cret", b"1700000000.{}", hashlib.sha256).hexdigest()
    assert signature("s3cret", "1700000000", b"{}") == "sha256=" + expected
    assert signature("s3cret", "1700000001", b"{}") != signature("s3cret", "1700000000", b"{}")


def test_retries_back_off_and_stop_at_the_window() -> None:
    policy = Policy(retry_first_s=1.0, retry_max_s=8.0, retry_window_s=100.0)
    made = Delivery("wh", "t", "s", "turn", 1, Kind.FINAL, b"", 0.0, window_start=0.0)
    delays = []
    for attempts in range(6):
        at = policy.retry_at(Delivery(**{**made.__dict__, "attempts": attempts}), now=0.0)
        assert at is not None
        delays.append(at)
    for attempts, delay in enumerate(delays):
        full = min(2.0**attempts, 8.0)
        assert full / 2 <= delay <= full
    assert policy.retry_at(made, now=99.9 + 1.0) is None  # past the window: dead


def test_secrets_are_sealed_to_their_webhook() -> None:
    sealer = Sealer.from_file(None, ephemeral=True)
    sealed = sealer.seal("wh_1", {"secret": "abc"})
    assert b"abc" not in sealed and sealer.open("wh_1", sealed) == {"secret": "abc"}
    with pytest.raises(InvalidTag):
        sealer.open("wh_2", sealed)  # copied onto another webhook, it does not open


def test_a_store_without_a_key_refuses_to_seal() -> None:
    with pytest.raises(Exception, match="COGMESH_WEBHOOK_SECRETS_KEY_FILE"):
        Sealer.from_file(None, ephemeral=False).seal("wh", {"secret": "x"})


def test_delivery_ids_name_webhook_session_and_seq() -> None:
    assert parse_delivery_id(delivery_id("wh_1", "abc.def", 42)) == ("wh_1", "abc.def", 42)
    assert parse_delivery_id("dl_!!") is None and parse_delivery_id("nope") is None


async def test_an_append_and_its_resend_enqueue_the_outcome_once() -> None:
    sessions = MemorySessionStore()
    hooks = MemoryWebhookStore()
    woken: list[int] = []
    store = HookedSessionStore(sessions, hooks, on_enqueued=lambda queues: woken.append(len(queues)))
    record, _ = await sessions.create("t1", NewSession("", "", "default"))
    await hooks.create(Webhook("wh_1", "t1", "https://x.example/", frozenset({Kind.FINAL})), b"")
    acquired = await sessions.try_acquire("t1", record.session_id, "turn-1", 30.0, Strategy.REJECT)
    events = [
        events_pb2.RuntimeEvent(assistant_delta=events_pb2.AssistantDelta(text="hi")),
        events_pb2.RuntimeEvent(final=events_pb2.FinalResult(text="hi")),
    ]
    append = NewEvents("turn-1", acquired.token, events, append_id="a1", release=True)  # type: ignore[union-attr]
    first = await store.append_events("t1", record.session_id, append)
    resent = NewEvents("turn-1", acquired.token, _fresh(events), append_id="a1", release=True)  # type: ignore[union-attr]
    again = await store.append_events("t1", record.session_id, resent)
    assert again.duplicate and again.last_seq == first.last_seq
    page = await hooks.deliveries("t1", "", "", None, "", 10)
    (only,) = page.items
    assert only.seq == first.last_seq and only.kind is Kind.FINAL and len(woken) == 2
    logged = events_pb2.RuntimeEvent.FromString(only.event)
    assert (logged.seq, logged.session_id, logged.turn_id) == (first.last_seq, record.session_id, "turn-1")


def _fresh(events: list[events_pb2.RuntimeEvent]) -> list[events_pb2.RuntimeEvent]:
    """The events as the runtime resends them: not stamped with seqs."""
    copies = []
    for event in events:
        copy = events_pb2.RuntimeEvent()
        copy.CopyFrom(event)
        copy.seq, copy.session_id, copy.turn_id = 0, "", ""
        copies.append(copy)
    return copies
