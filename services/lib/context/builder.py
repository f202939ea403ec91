"""Context builder: assembles an agent's system prompt from prioritised packs.

Packs appear in the prompt in this order, each as a ``## Heading`` section:

========  ==================  =================================================
priority  pack                overflow action
========  ==================  =================================================
P0        identity            never dropped (identity.md + inline system_prompt)
P0        guardrails          never dropped (guardrails.md)
P0.5      role                never dropped (roles/<role_id>.md)
P1        goal                truncated to ``goal_max``
P1.5      phase               dropped whole when it does not fit
P2        skills              truncated to ``tools_max``
P2.5      messages            error messages filtered; oldest messages removed
                              to fit ``messages_max``
P3        memory              truncated to ``memory_max``
P3.5      recalled_memories   lowest ranked memories removed to fit
                              ``recalled_memories_max``
P4        profile             truncated to ``profile_max``
P5        summary             truncated to ``summary_max``; dropped first when
                              the budget is exceeded
========  ==================  =================================================

How the budget is applied, step by step:

1. P0 and P0.5 always go in. P0 is charged at least ``guardrails_reserved``
   tokens, so the room left for the other packs does not change when the
   guardrail files grow (up to the reservation) after a hot reload. The
   *available* budget is ``total_tokens - max(guardrails_reserved, P0) - P0.5``.
2. Every other pack is cut to its own cap.
3. "Dropped first": if the capped packs together exceed the available budget,
   the summary is removed entirely before anything else is touched.
4. The remaining packs are then granted budget in priority order. A pack that
   fits is kept; the first one that does not is truncated to what is left
   (the phase is never cut, so it is dropped instead), and every pack after
   the budget is used up is dropped. This is the same as truncating from the
   lowest priority upwards until the prompt fits.

Budgets are counted per pack with the ``TokenCounter``; for a subadditive
counter such as ``CharRatioCounter`` the whole prompt never counts more than
the sum of its packs. Truncation cuts on a word boundary when there is one and
appends ``TRUNCATION_MARKER``. Output is deterministic: mappings are rendered
in key order, so equal inputs give the same prompt and hash.

Builds are memoised: a build whose inputs and prompt-file texts equal a recent
one returns that result without counting a token (a warm rebuild, as every
turn of a session in a steady phase does). Prompt files are still stat()ed on
every build, so an edited file is never served stale.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Literal

from services.lib.agents import AgentDefinition
from services.lib.context.prompt_files import PromptFiles
from services.lib.tokens import CharRatioCounter, TokenCounter

TRUNCATION_MARKER = " …"
PROMPT_HASH_CHARS = 16
# Memoised builds: entries, and the largest input (in characters) worth keeping.
CACHE_ENTRIES = 256
CACHE_MAX_CHARS = 1 << 18
# CharRatioCounter is stateless, so one shared instance serves every builder.
DEFAULT_COUNTER = CharRatioCounter()

# The recalled memories' section: the model reads them as what earlier sessions saved.
RECALLED_HEADING = "Memories from earlier sessions (most relevant first)"

PackAction = Literal["kept", "truncated", "dropped"]
Fits = Callable[[str], bool]


@dataclass(frozen=True)
class ContextBudget:
    """Token allocation of the system prompt; every field must be >= 0."""

    total_tokens: int = 8000
    guardrails_reserved: int = 1500
    goal_max: int = 1000
    tools_max: int = 2000
    messages_max: int = 2000
    memory_max: int = 1500
    profile_max: int = 1000
    summary_max: int = 1000
    recalled_memories_max: int = 500

    def __post_init__(self) -> None:
        for budget_field in fields(self):
            value = getattr(self, budget_field.name)
            if value < 0:
                raise ValueError(f"ContextBudget.{budget_field.name} must be >= 0, got {value}")


@dataclass(frozen=True)
class ContextInput:
    """Everything one build needs.

    ``role_id`` falls back to ``agent.default_role``. ``user_text`` is carried
    for callers that route on it (role or skill selection); it is not rendered,
    because the runtime sends it as the user turn. ``last_messages`` are
    ``(role, text)`` pairs, oldest first. ``recalled_memories`` are
    ``(key, text)`` pairs recalled from the memory service, best first.
    """

    agent: AgentDefinition
    role_id: str = ""
    user_text: str = ""
    goal: str = ""
    phase: str = ""
    skill_instructions: Sequence[str] = ()
    last_messages: Sequence[tuple[str, str]] = ()
    memory: Mapping[str, str] = field(default_factory=dict)
    user_profile: Mapping[str, str] = field(default_factory=dict)
    summary: str = ""
    recalled_memories: Sequence[tuple[str, str]] = ()
    budget: ContextBudget = field(default_factory=ContextBudget)


@dataclass(frozen=True)
class PackReport:
    """What happened to one non-empty pack; ``tokens`` is its size in the prompt."""

    name: str
    priority: str
    tokens: int
    action: PackAction


@dataclass(frozen=True)
class BuiltContext:
    """The assembled prompt and how the budget was spent.

    ``prompt_hash`` is the first 16 hex digits of the prompt's SHA-256, for
    cache keys and logs. ``tokens_used`` counts the whole prompt; ``tool_budget``
    is what ``total_tokens`` leaves after it (never negative).
    """

    system_prompt: str
    prompt_hash: str
    packs: tuple[PackReport, ...]
    truncated_packs: tuple[str, ...]
    tokens_used: int
    tool_budget: int


@dataclass(frozen=True)
class _Pack:
    name: str
    priority: str
    heading: str
    body: str
    # Returns the largest variant of ``body`` accepted by a predicate ("" if
    # none); it encodes how the pack shrinks: cut text, drop old messages, or
    # all-or-nothing for the phase.
    shrink: Callable[[Fits], str]
    cap: int | None = None


class ContextBuilder:
    def __init__(
        self, prompt_files: PromptFiles, counter: TokenCounter = DEFAULT_COUNTER, cache_entries: int = CACHE_ENTRIES
    ) -> None:
        self._prompt_files = prompt_files
        self._counter = counter
        self._cache: OrderedDict[Hashable, BuiltContext] = OrderedDict()
        self._cache_entries = cache_entries

    @property
    def counter(self) -> TokenCounter:
        return self._counter

    def build(self, inp: ContextInput) -> BuiltContext:
        fixed = self._fixed_packs(inp)
        key = _cache_key(inp, fixed)
        if key is not None and (hit := self._cache.get(key)) is not None:
            self._cache.move_to_end(key)
            return hit
        built = self._build(inp, fixed)
        if key is not None and self._cache_entries > 0:
            self._cache[key] = built
            if len(self._cache) > self._cache_entries:
                self._cache.popitem(last=False)
        return built

    def _build(self, inp: ContextInput, fixed: list[tuple[str, str, str, str]]) -> BuiltContext:
        budget = inp.budget
        sections: list[str] = []
        reports: list[PackReport] = []

        fixed_tokens = {"P0": 0, "P0.5": 0}
        for name, priority, heading, body in fixed:
            if not body:
                continue
            section = _render(heading, body)
            tokens = self._counter.count(section)
            fixed_tokens[priority] += tokens
            sections.append(section)
            reports.append(PackReport(name, priority, tokens, "kept"))

        available = budget.total_tokens - max(budget.guardrails_reserved, fixed_tokens["P0"])
        available = max(0, available - fixed_tokens["P0.5"])

        packs = [pack for pack in self._optional_packs(inp) if pack.body]
        capped = [pack.shrink(self._cap_check(pack)) for pack in packs]
        capped_cost = sum(self._cost(pack, body) for pack, body in zip(packs, capped, strict=True))
        drop_summary = capped_cost > available

        remaining = available
        for pack, body in zip(packs, capped, strict=True):
            if pack.name == "summary" and drop_summary:
                body = ""
            elif self._cost(pack, body) > remaining:
                body = pack.shrink(self._fit_check(pack, remaining))
            tokens = self._cost(pack, body)
            remaining -= tokens
            if body:
                sections.append(_render(pack.heading, body))
            action: PackAction = "kept" if body == pack.body else "truncated" if body else "dropped"
            reports.append(PackReport(pack.name, pack.priority, tokens, action))

        system_prompt = "".join(sections).rstrip()
        tokens_used = self._counter.count(system_prompt)
        return BuiltContext(
            system_prompt=system_prompt,
            prompt_hash=hashlib.sha256(system_prompt.encode()).hexdigest()[:PROMPT_HASH_CHARS],
            packs=tuple(reports),
            truncated_packs=tuple(r.name for r in reports if r.action != "kept"),
            tokens_used=tokens_used,
            tool_budget=max(0, budget.total_tokens - tokens_used),
        )

    def _fixed_packs(self, inp: ContextInput) -> list[tuple[str, str, str, str]]:
        agent = inp.agent
        role_id = inp.role_id or agent.default_role
        identity = guardrails = role = ""
        if agent.prompts_dir is not None:
            identity = self._prompt_files.identity(agent.prompts_dir)
            guardrails = self._prompt_files.guardrails(agent.prompts_dir)
            if role_id:
                role = self._prompt_files.role(agent.prompts_dir, role_id)
        identity = _join_paragraphs([identity, agent.system_prompt or ""])
        return [
            ("identity", "P0", "Identity", identity),
            ("guardrails", "P0", "Guardrails", guardrails.strip()),
            ("role", "P0.5", f"Role: {role_id}", role.strip()),
        ]

    def _optional_packs(self, inp: ContextInput) -> list[_Pack]:
        budget = inp.budget
        goal = inp.goal.strip()
        phase = inp.phase.strip()
        skills = _join_paragraphs(inp.skill_instructions)
        messages = [f"{role}: {text.strip()}" for role, text in inp.last_messages if not _is_error_message(role, text)]
        memory = _render_mapping(inp.memory)
        recalled = [_recalled_line(key, text) for key, text in inp.recalled_memories if text.strip()]
        profile = _render_mapping(inp.user_profile)
        summary = inp.summary.strip()
        return [
            _text_pack("goal", "P1", "Goal", goal, budget.goal_max),
            _Pack("phase", "P1.5", "Phase", phase, _all_or_nothing(phase)),
            _text_pack("skills", "P2", "Skills", skills, budget.tools_max),
            _Pack(
                "messages",
                "P2.5",
                "Recent messages",
                "\n".join(messages),
                lambda fits: _keep_recent(messages, fits),
                budget.messages_max,
            ),
            _text_pack("memory", "P3", "Memory", memory, budget.memory_max),
            _Pack(
                "recalled_memories",
                "P3.5",
                RECALLED_HEADING,
                "\n".join(recalled),
                lambda fits: _keep_first(recalled, fits),
                budget.recalled_memories_max,
            ),
            _text_pack("profile", "P4", "User profile", profile, budget.profile_max),
            _text_pack("summary", "P5", "Summary", summary, budget.summary_max),
        ]

    def _cost(self, pack: _Pack, body: str) -> int:
        return self._counter.count(_render(pack.heading, body)) if body else 0

    def _cap_check(self, pack: _Pack) -> Fits:
        cap = pack.cap
        if cap is None:
            return lambda body: True
        return lambda body: self._counter.count(body) <= cap

    def _fit_check(self, pack: _Pack, remaining: int) -> Fits:
        # Shrink from the original body under both limits, so a pack that was
        # already capped is not cut twice (which would stack markers).
        within_cap = self._cap_check(pack)
        return lambda body: within_cap(body) and self._cost(pack, body) <= remaining


def _cache_key(inp: ContextInput, fixed: list[tuple[str, str, str, str]]) -> Hashable | None:
    """Everything the prompt depends on besides the counter; None when the input is too large to keep."""
    size = sum(len(body) for *_, body in fixed) + len(inp.goal) + len(inp.phase) + len(inp.summary)
    size += sum(len(text) for text in inp.skill_instructions) + sum(len(text) for _, text in inp.last_messages)
    size += sum(len(k) + len(v) for k, v in inp.recalled_memories)
    size += sum(len(k) + len(v) for k, v in inp.memory.items()) + sum(
        len(k) + len(v) for k, v in inp.user_profile.items()
    )
    if size > CACHE_MAX_CHARS:
        return None
    return (
        tuple(fixed),
        inp.goal,
        inp.phase,
        tuple(inp.skill_instructions),
        tuple(inp.last_messages),
        tuple(sorted(inp.memory.items())),
        tuple(inp.recalled_memories),
        tuple(sorted(inp.user_profile.items())),
        inp.summary,
        inp.budget,
    )


def _render(heading: str, body: str) -> str:
    # The trailing blank line separates sections; it is charged to the pack so
    # that the packs' token counts bound the whole prompt.
    return f"## {heading}\n{body}\n\n"


def _join_paragraphs(parts: Sequence[str]) -> str:
    return "\n\n".join(part.strip() for part in parts if part.strip())


def _render_mapping(items: Mapping[str, str]) -> str:
    return "\n".join(f"- {key}: {items[key].strip()}" for key in sorted(items))


def _recalled_line(key: str, text: str) -> str:
    flat = " ".join(text.split())
    return f"- [{key}] {flat}" if key else f"- {flat}"


def _is_error_message(role: str, text: str) -> bool:
    return role.strip().lower() == "error" or text.lstrip().lower().startswith("error:")


def _text_pack(name: str, priority: str, heading: str, body: str, cap: int) -> _Pack:
    return _Pack(name, priority, heading, body, lambda fits: truncate(body, fits), cap)


def _all_or_nothing(body: str) -> Callable[[Fits], str]:
    return lambda fits: body if fits(body) else ""


def _keep_recent(lines: Sequence[str], fits: Fits) -> str:
    """The most recent lines that fit; the newest line alone is truncated if needed.

    Galloping search on how many of the newest lines to keep (more lines never
    count fewer tokens): try 1, 2, 4, ... lines, then bisect the last step. The
    texts counted stay close to the size of the answer, not of the whole
    history, so a long session costs little more than a short one.
    """

    def newest(count: int) -> str:
        return "\n".join(lines[len(lines) - count :])

    low, probe = 0, 1  # invariant: the newest `low` lines fit
    while probe <= len(lines) and fits(newest(probe)):
        low, probe = probe, probe * 2
    high = min(probe, len(lines) + 1) - 1  # the newest `high + 1` lines do not fit (or do not exist)
    while low < high:
        middle = (low + high + 1) // 2
        if fits(newest(middle)):
            low = middle
        else:
            high = middle - 1
    if low:
        return newest(low)
    return truncate(lines[-1], fits) if lines else ""


def _keep_first(lines: Sequence[str], fits: Fits) -> str:
    """The best ranked (first) lines that fit; the first line alone is truncated if needed.

    The same galloping search as `_keep_recent`, from the other end.
    """

    def best(count: int) -> str:
        return "\n".join(lines[:count])

    low, probe = 0, 1
    while probe <= len(lines) and fits(best(probe)):
        low, probe = probe, probe * 2
    high = min(probe, len(lines) + 1) - 1
    while low < high:
        middle = (low + high + 1) // 2
        if fits(best(middle)):
            low = middle
        else:
            high = middle - 1
    if low:
        return best(low)
    return truncate(lines[0], fits) if lines else ""


def truncate(text: str, fits: Fits) -> str:
    """Longest prefix of ``text`` (plus marker) accepted by ``fits``; ``""`` if none.

    Binary search over the cut position; ``fits`` is assumed monotonic in the
    length of its argument, which holds for token counters.
    """
    if fits(text):
        return text
    best = ""
    low, high = 1, len(text) - 1
    while low <= high:
        middle = (low + high) // 2
        candidate = _cut(text, middle)
        if candidate and not fits(candidate):
            high = middle - 1
        else:
            best = candidate or best
            low = middle + 1
    return best


def _cut(text: str, length: int) -> str:
    head = text[:length]
    if not text[length].isspace():
        # Back up to the previous word boundary; a single over-long word is
        # cut mid-word rather than dropped.
        boundary = max(head.rfind(" "), head.rfind("\n"), head.rfind("\t"))
        if boundary > 0:
            head = head[:boundary]
    head = head.rstrip()
    return f"{head}{TRUNCATION_MARKER}" if head else ""
