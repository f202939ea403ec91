"""PIIShield and ContentFilter: what reaches the model and the history.

Both scan message contents before each model call (PRE_THINK); PIIShield also
scans tool results before they enter the history (POST_ACT).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from services.kit.logging import log
from services.lib.policy.domain import Msg, TurnContext
from services.lib.policy.interceptors.base import Interceptor, InterceptResult


def _luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        n = int(ch)
        if i % 2 == 1:
            n = n * 2 - 9 if n > 4 else n * 2
        total += n
    return total % 10 == 0


def _card_ok(match: re.Match[str]) -> bool:
    digits = re.sub(r"\D", "", match.group(0))
    return 13 <= len(digits) <= 19 and _luhn_ok(digits)


@dataclass(frozen=True)
class PiiPattern:
    name: str
    regex: re.Pattern[str]
    # Extra check on a match (Luhn for cards) to keep false positives down.
    accept: Callable[[re.Match[str]], bool] | None = None

    @property
    def placeholder(self) -> str:
        return f"[{self.name.upper()}_REDACTED]"

    def finditer(self, text: str) -> list[re.Match[str]]:
        return [m for m in self.regex.finditer(text) if self.accept is None or self.accept(m)]

    def sub(self, text: str) -> tuple[str, int]:
        count = 0

        def replace(match: re.Match[str]) -> str:
            nonlocal count
            if self.accept is not None and not self.accept(match):
                return match.group(0)
            count += 1
            # Patterns with a "v" group keep their label ("DOB: ") and redact only the value.
            if "v" in match.re.groupindex and match.group("v") is not None:
                start, end = match.span("v")
                whole = match.group(0)
                base = match.start(0)
                return whole[: start - base] + self.placeholder + whole[end - base :]
            return self.placeholder

        return self.regex.sub(replace, text), count


_DATE = (
    r"(?:\d{1,2}[/.-]\d{1,2}[/.-](?:19|20)\d{2}|(?:19|20)\d{2}-\d{1,2}-\d{1,2}|\d{1,2} [A-Za-z]{3,9} (?:19|20)\d{2})"
)

# Applied in this order: keys and cards before the shorter digit patterns they contain.
PII_PATTERNS: dict[str, PiiPattern] = {
    p.name: p
    for p in (
        PiiPattern(
            "api_key",
            re.compile(
                r"\b(?:sk|pk|rk)[-_](?:live[-_]|test[-_]|proj[-_])?[A-Za-z0-9]{16,}\b"
                r"|\bAKIA[0-9A-Z]{16}\b"
                r"|\bgh[pousr]_[A-Za-z0-9]{36,}\b"
                r"|\bAIza[0-9A-Za-z_-]{35}\b"
                r"|\bxox[abpr]-[A-Za-z0-9-]{10,}\b"
                r"|(?i:\b(?:api[_-]?key|access[_-]?token|secret[_-]?key)\b\s*[:=]\s*['\"]?)(?P<v>[A-Za-z0-9_\-]{16,})"
            ),
        ),
        PiiPattern("email", re.compile(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\b")),
        PiiPattern("credit_card", re.compile(r"(?<![\d-])\d(?:[ -]?\d){12,18}(?![\d-])"), _card_ok),
        PiiPattern("ssn", re.compile(r"\b(?!000|666|9\d\d)\d{3}-(?!00)\d{2}-(?!0000)\d{4}\b")),
        PiiPattern("phone_us", re.compile(r"(?<![\w+])(?:\+?1[-.\s]?)?\(?[2-9]\d{2}\)?[-.\s]?\d{3}[-.\s]?\d{4}(?!\d)")),
        PiiPattern(
            "ip_address",
            re.compile(r"\b(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\b"),
        ),
        PiiPattern(
            "date_of_birth",
            re.compile(
                r"(?i:\b(?:dob|d\.o\.b\.|date of birth|birth ?date|birthday|born(?: on)?)\b\s*[:\-]?\s*)(?P<v>"
                + _DATE
                + r")"
            ),
        ),
        PiiPattern(
            "passport",
            re.compile(r"(?i:\bpassport\b(?:\s*(?:no\.?|number|num\.?|#))?\s*[:#]?\s*)(?P<v>[A-Z0-9]{6,9})\b"),
        ),
    )
}
PII_PATTERN_NAMES = tuple(PII_PATTERNS)

PIIAction = Literal["mask", "block", "warn", "log"]


class PIIShield(Interceptor):
    def __init__(self, patterns: Sequence[str] = ("all",), action: PIIAction = "mask"):
        names = PII_PATTERN_NAMES if "all" in patterns else tuple(n for n in PII_PATTERN_NAMES if n in patterns)
        unknown = set(patterns) - set(PII_PATTERN_NAMES) - {"all"}
        if unknown:
            raise ValueError(f"unknown PII pattern(s): {', '.join(sorted(unknown))}")
        self.patterns = [PII_PATTERNS[n] for n in names]
        self.action = action

    def scan(self, text: str) -> dict[str, int]:
        """Detections per pattern name."""
        found: dict[str, int] = {}
        for pattern in self.patterns:
            n = len(pattern.finditer(text))
            if n:
                found[pattern.name] = n
        return found

    def mask(self, text: str) -> tuple[str, dict[str, int]]:
        found: dict[str, int] = {}
        for pattern in self.patterns:
            text, n = pattern.sub(text)
            if n:
                found[pattern.name] = n
        return text, found

    async def pre_think(self, ctx: TurnContext) -> InterceptResult:
        if self.action == "mask":
            masked: list[Msg] = []
            found: dict[str, int] = {}
            for message in ctx.messages:
                text, hits = self.mask(message.content)
                masked.append(message.with_content(text) if hits else message)
                for k, v in hits.items():
                    found[k] = found.get(k, 0) + v
            if not found:
                return InterceptResult.ok()
            return self._masked(ctx, found, InterceptResult.modify_messages(masked, _describe("masked", found)))
        found = {}
        for message in ctx.messages:
            for k, v in self.scan(message.content).items():
                found[k] = found.get(k, 0) + v
        return self._detected(ctx, found, "messages")

    async def post_act(self, ctx: TurnContext) -> InterceptResult:
        if self.action == "mask":
            text, found = self.mask(ctx.tool_result)
            if not found:
                return InterceptResult.ok()
            return self._masked(ctx, found, InterceptResult.modify_tool_result(text, _describe("masked", found)))
        return self._detected(ctx, self.scan(ctx.tool_result), f"the result of tool {ctx.tool_name!r}")

    def _masked(self, ctx: TurnContext, found: dict[str, int], result: InterceptResult) -> InterceptResult:
        ctx.notify(f"{self.label}: {result.detail}", interceptor=self.label, kind="pii_masked", found=found)
        return result

    def _detected(self, ctx: TurnContext, found: dict[str, int], where: str) -> InterceptResult:
        if not found:
            return InterceptResult.ok()
        what = _describe("detected", found)
        log.warning("pii detected", interceptor=self.label, found=found, where=where, action=self.action)
        if self.action == "block":
            return InterceptResult.stop(f"blocked: personal data ({', '.join(sorted(found))}) in {where}", "guardrail")
        if self.action == "warn":
            ctx.notify(f"{self.label}: {what} in {where}", interceptor=self.label, kind="pii_detected", found=found)
        # "log": detection tracked in the turn state, nothing shown or changed.
        seen = ctx.state.setdefault(f"{self.label}.detections", {})
        for k, v in found.items():
            seen[k] = seen.get(k, 0) + v
        return InterceptResult.ok(detail=what)


def _describe(verb: str, found: dict[str, int]) -> str:
    return f"{verb} " + ", ".join(f"{n} {name}" for name, n in sorted(found.items()))


class ContentFilter(Interceptor):
    """Blocks (or masks) forbidden words and regex patterns in the messages sent to the model."""

    MASK = "[FILTERED]"

    def __init__(
        self,
        blocked_words: Sequence[str] = (),
        blocked_patterns: Sequence[str] = (),
        action: Literal["block", "mask"] = "block",
        case_sensitive: bool = False,
    ):
        flags = 0 if case_sensitive else re.IGNORECASE
        parts = [rf"\b{re.escape(w)}\b" for w in blocked_words if w] + [f"(?:{p})" for p in blocked_patterns]
        # One alternation: a single scan per message however many rules there are.
        self.regex = re.compile("|".join(parts), flags) if parts else None
        self.action = action

    async def pre_think(self, ctx: TurnContext) -> InterceptResult:
        if self.regex is None:
            return InterceptResult.ok()
        regex = self.regex
        if self.action == "block":
            for message in ctx.messages:
                if message.role == "system":
                    continue
                match = regex.search(message.content)
                if match:
                    return InterceptResult.stop(
                        f"blocked: a {message.role} message contains forbidden content ({match.group(0)!r})",
                        "guardrail",
                    )
            return InterceptResult.ok()
        changed, total = False, 0
        out: list[Msg] = []
        for message in ctx.messages:
            text, n = (message.content, 0) if message.role == "system" else regex.subn(self.MASK, message.content)
            total += n
            changed = changed or n > 0
            out.append(message.with_content(text) if n else message)
        if not changed:
            return InterceptResult.ok()
        ctx.notify(f"{self.label}: masked {total} forbidden term(s)", interceptor=self.label, kind="content_masked")
        return InterceptResult.modify_messages(out, f"masked {total} forbidden term(s)")
