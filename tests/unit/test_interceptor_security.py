"""PIIShield (every pattern, every action) and ContentFilter."""

from __future__ import annotations

import pytest

from services.lib.policy.domain import Msg, Phase, Scope, TurnContext
from services.lib.policy.interceptors import Action, Chain, ContentFilter, PIIShield
from services.lib.policy.interceptors.security import PII_PATTERN_NAMES


def ctx(*texts: str, **fields: object) -> TurnContext:
    return TurnContext(scope=Scope("default"), messages=[Msg("user", t) for t in texts], **fields)  # type: ignore[arg-type]


# One positive example per pattern, and look-alikes that must stay untouched.
EXAMPLES = {
    "email": ("write to john.doe+x@mail.example.com today", "write to [EMAIL_REDACTED] today"),
    "phone_us": ("call (415) 555-2671 now", "call [PHONE_US_REDACTED] now"),
    "ssn": ("SSN 123-45-6789.", "SSN [SSN_REDACTED]."),
    "credit_card": ("card 4111 1111 1111 1111 ok", "card [CREDIT_CARD_REDACTED] ok"),
    "ip_address": ("host 192.168.10.254 down", "host [IP_ADDRESS_REDACTED] down"),
    "date_of_birth": ("DOB: 04/07/1986, thanks", "DOB: [DATE_OF_BIRTH_REDACTED], thanks"),
    "passport": ("passport number X1234567 expires", "passport number [PASSPORT_REDACTED] expires"),
    "api_key": ("use sk-live-abcdefghijklmnop1234 here", "use [API_KEY_REDACTED] here"),
}
NOT_PII = [
    "order 4111 1111 1111 1112 is not a valid card",  # fails the Luhn check
    "version 1.2.3.4000 and 300.1.1.1",  # not IPv4 addresses
    "the meeting is on 04/07/1986",  # a date without a birth-date label
    "the passport office opens at 9",
    "call extension 12345",
    "SSN 000-12-3456 is not a valid number",
]


def test_every_seed_pattern_exists() -> None:
    assert set(PII_PATTERN_NAMES) == {
        "email", "phone_us", "ssn", "credit_card", "ip_address", "date_of_birth", "passport", "api_key",
    }  # fmt: skip


@pytest.mark.parametrize("name", sorted(EXAMPLES))
async def test_each_pattern_is_masked_with_its_placeholder(name: str) -> None:
    text, masked = EXAMPLES[name]
    c = ctx(text)
    outcome = await Chain([PIIShield([name], "mask")]).run(Phase.PRE_THINK, c)
    assert outcome.action is Action.OK
    assert outcome.messages is not None and outcome.messages[0].content == masked
    assert c.notices[0].metadata["found"] == {name: 1}


@pytest.mark.parametrize("text", NOT_PII)
async def test_look_alikes_are_left_alone(text: str) -> None:
    outcome = await Chain([PIIShield(["all"], "mask")]).run(Phase.PRE_THINK, ctx(text))
    assert outcome.messages is None, outcome.messages


async def test_seed_example_masks_email_and_ssn() -> None:
    c = ctx("Contact john@email.com, SSN 123-45-6789")
    outcome = await Chain([PIIShield(["email", "ssn"], "mask")]).run(Phase.PRE_THINK, c)
    assert outcome.messages is not None
    assert outcome.messages[0].content == "Contact [EMAIL_REDACTED], SSN [SSN_REDACTED]"


async def test_only_the_selected_patterns_apply() -> None:
    outcome = await Chain([PIIShield(["email"], "mask")]).run(Phase.PRE_THINK, ctx("SSN 123-45-6789 a@b.io"))
    assert outcome.messages is not None and outcome.messages[0].content == "SSN 123-45-6789 [EMAIL_REDACTED]"


async def test_mask_keeps_other_message_fields_and_untouched_messages() -> None:
    messages = [Msg("user", "hi"), Msg("tool", "mail a@b.io", tool_call_id="c1", name="lookup", turn_id="t")]
    c = TurnContext(scope=Scope("default"), messages=messages)
    outcome = await Chain([PIIShield()]).run(Phase.PRE_THINK, c)
    assert outcome.messages is not None
    assert outcome.messages[0] is messages[0]
    assert outcome.messages[1] == Msg("tool", "mail [EMAIL_REDACTED]", tool_call_id="c1", name="lookup", turn_id="t")


async def test_tool_results_are_masked_after_the_call() -> None:
    c = TurnContext(scope=Scope("default"), tool_name="crm", tool_result="phone 415-555-2671")
    outcome = await Chain([PIIShield(["phone_us"])]).run(Phase.POST_ACT, c)
    assert outcome.tool_result == "phone [PHONE_US_REDACTED]"


async def test_block_stops_the_turn_naming_what_was_found() -> None:
    outcome = await Chain([PIIShield(["all"], "block")]).run(Phase.PRE_THINK, ctx("mail a@b.io", "ssn 123-45-6789"))
    assert outcome.action is Action.STOP
    assert outcome.error_kind == "guardrail"
    assert "email" in outcome.reason and "ssn" in outcome.reason
    post = TurnContext(scope=Scope("default"), tool_name="crm", tool_result="a@b.io")
    assert (await Chain([PIIShield(["all"], "block")]).run(Phase.POST_ACT, post)).action is Action.STOP


async def test_warn_notifies_and_changes_nothing() -> None:
    c = ctx("mail a@b.io")
    outcome = await Chain([PIIShield(["all"], "warn")]).run(Phase.PRE_THINK, c)
    assert outcome.action is Action.OK and outcome.messages is None
    assert c.notices and c.notices[0].metadata["kind"] == "pii_detected"
    assert c.state["PIIShield.detections"] == {"email": 1}


async def test_log_tracks_without_notice_or_change() -> None:
    c = ctx("mail a@b.io and c@d.io")
    outcome = await Chain([PIIShield(["all"], "log")]).run(Phase.PRE_THINK, c)
    assert outcome.messages is None and not c.notices
    assert c.state["PIIShield.detections"] == {"email": 2}
    assert outcome.state_changed


def test_unknown_pattern_is_rejected() -> None:
    with pytest.raises(ValueError, match="nope"):
        PIIShield(["email", "nope"])


# --------------------------------------------------------------------------- ContentFilter


async def test_content_filter_blocks_words_case_insensitively() -> None:
    f = ContentFilter(blocked_words=["password", "secret"])
    outcome = await Chain([f]).run(Phase.PRE_THINK, ctx("hello", "my PASSWORD is x"))
    assert outcome.action is Action.STOP and outcome.error_kind == "guardrail"
    assert "PASSWORD" in outcome.reason
    assert (await Chain([f]).run(Phase.PRE_THINK, ctx("passwords are words"))).action is Action.OK  # whole words only


async def test_content_filter_patterns_and_case_sensitivity() -> None:
    f = ContentFilter(blocked_patterns=[r"\b\d{4}-\d{4}\b"], case_sensitive=True, blocked_words=["Secret"])
    assert (await Chain([f]).run(Phase.PRE_THINK, ctx("code 1234-5678"))).action is Action.STOP
    assert (await Chain([f]).run(Phase.PRE_THINK, ctx("a secret"))).action is Action.OK
    assert (await Chain([f]).run(Phase.PRE_THINK, ctx("a Secret"))).action is Action.STOP


async def test_content_filter_mask_replaces_matches_but_not_the_system_prompt() -> None:
    f = ContentFilter(blocked_words=["secret"], action="mask")
    c = TurnContext(scope=Scope("default"), messages=[Msg("system", "keep secret"), Msg("user", "the Secret plan")])
    outcome = await Chain([f]).run(Phase.PRE_THINK, c)
    assert outcome.messages is not None
    assert [m.content for m in outcome.messages] == ["keep secret", "the [FILTERED] plan"]


async def test_content_filter_without_rules_does_nothing() -> None:
    assert (await Chain([ContentFilter()]).run(Phase.PRE_THINK, ctx("anything"))).action is Action.OK
