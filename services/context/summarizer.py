"""Summarizers: the model-calling seam of compaction.

Compaction asks a ``Summarizer`` for two things: condense one chunk of
transcript, and merge two summaries into one. Both must come back within a
token limit. Two implementations:

``ModelSummarizer``
    Any chat model of the runtime's ``ChatModel`` protocol (the provider
    adapters): it sends an instruction and the text, collects the streamed
    reply and cuts it to the limit if the model overshoots.
``ExtractiveSummarizer``
    Deterministic, no model call: keeps the opening sentence of every line,
    shortening all lines evenly until the result fits, and the newest lines
    first when even one word per line is too much. It is what the built-in
    local model summarizes with (that model echoes, it cannot condense), and
    the fallback for a provider that has no adapter in this build.

``summarizer_for`` picks one for a resolved model.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Protocol

from services.lib.context.builder import truncate
from services.lib.llm import ChatMessage, ChatModel, ModelError, TextDelta
from services.lib.tokens import TokenCounter

CHUNK_INSTRUCTION = (
    "Summarize this part of a conversation between a user and an assistant for the assistant's own "
    "memory. Keep facts, names, numbers, decisions, open questions and every executionId marker of "
    "archived tool results. Write plain sentences, at most {max_tokens} tokens."
)
MERGE_INSTRUCTION = (
    "Merge these two summaries of consecutive parts of one conversation into one summary, older "
    "facts first. Keep every fact, decision and executionId marker; drop repetition. At most "
    "{max_tokens} tokens."
)

ELIDED = "(… earlier conversation left out)"
MAX_WORD_CHARS = 40
_SENTENCE_END = re.compile(r"(?<=[.!?。！？])\s")


class Summarizer(Protocol):
    name: str

    async def summarize(self, text: str, max_tokens: int) -> str:
        """A summary of transcript ``text`` in at most ``max_tokens`` tokens."""
        ...

    async def merge(self, older: str, newer: str, max_tokens: int) -> str:
        """One summary of two consecutive summaries, in at most ``max_tokens`` tokens."""
        ...


class SummarizerError(RuntimeError):
    """The summarizing model failed; ``retryable`` mirrors the model error."""

    def __init__(self, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable


class ExtractiveSummarizer:
    """Deterministic summaries built from the text itself (see the module docstring).

    Every line becomes its first sentence, at most ``MAX_WORDS`` words, and
    repeated lines are kept once. Over the limit, all lines are shortened
    evenly down to ``MIN_WORDS`` words; below that, the first line (usually
    what the conversation is about) and the newest lines are kept and the
    lines in between are replaced by a count.
    """

    MAX_WORDS = 40
    MIN_WORDS = 8

    def __init__(self, counter: TokenCounter, name: str = "extractive") -> None:
        self._counter = counter
        self.name = name

    async def summarize(self, text: str, max_tokens: int) -> str:
        return self._fit(text.splitlines(), max_tokens)

    async def merge(self, older: str, newer: str, max_tokens: int) -> str:
        return self._fit([*older.splitlines(), *newer.splitlines()], max_tokens)

    def _fit(self, raw_lines: list[str], max_tokens: int) -> str:
        lines = list(dict.fromkeys(_first_sentence(line, self.MAX_WORDS) for line in raw_lines if line.strip()))
        if max_tokens <= 0 or not lines:
            return ""

        def fits(candidate: str) -> bool:
            return self._counter.count(candidate) <= max_tokens

        whole = "\n".join(lines)
        if fits(whole):
            return whole
        # Shorten every line to its first n words, for the largest n >= MIN_WORDS that fits.
        low, high = self.MIN_WORDS - 1, max(len(line.split()) for line in lines)
        while low < high:
            middle = (low + high + 1) // 2
            if fits(_shorten(lines, middle)):
                low = middle
            else:
                high = middle - 1
        if low >= self.MIN_WORDS:
            return _shorten(lines, low)
        # Still too long: the first line, a count of what is left out, and the newest lines that fit.
        short = [_shorten([line], self.MIN_WORDS) for line in lines if line != ELIDED] or [ELIDED]
        head, tail = short[0], short[1:]
        kept = len(tail)
        while kept > 0 and not fits(_elided(head, tail, kept)):
            kept -= 1
        candidate = _elided(head, tail, kept)
        return candidate if fits(candidate) else truncate(candidate, fits)


class ModelSummarizer:
    """Summaries written by a chat model (the agent's model, through its provider adapter)."""

    def __init__(self, model: ChatModel, counter: TokenCounter) -> None:
        self._model = model
        self._counter = counter
        self.name = f"model:{model.name}"

    async def summarize(self, text: str, max_tokens: int) -> str:
        return await self._ask(CHUNK_INSTRUCTION.format(max_tokens=max_tokens), text, max_tokens)

    async def merge(self, older: str, newer: str, max_tokens: int) -> str:
        text = f"Older summary:\n{older}\n\nNewer summary:\n{newer}"
        return await self._ask(MERGE_INSTRUCTION.format(max_tokens=max_tokens), text, max_tokens)

    async def _ask(self, instruction: str, text: str, max_tokens: int) -> str:
        messages = [ChatMessage("system", instruction), ChatMessage("user", text)]
        parts: list[str] = []
        try:
            async for chunk in self._model.stream(messages, ()):
                if isinstance(chunk, TextDelta):
                    parts.append(chunk.text)
        except ModelError as exc:
            raise SummarizerError(f"{self.name} failed to summarize: {exc}", retryable=exc.retryable) from exc
        reply = "".join(parts).strip()
        # Models overshoot length instructions; the caller's limit is a hard one.
        return truncate(reply, lambda candidate: self._counter.count(candidate) <= max_tokens)


def _first_sentence(line: str, max_words: int) -> str:
    sentence = _SENTENCE_END.split(" ".join(line.split()), maxsplit=1)[0]
    return _shorten([sentence], max_words)


def _elided(head: str, tail: list[str], kept: int) -> str:
    # No count: after several merges the lines left out before are not known any more.
    middle = [ELIDED] if kept < len(tail) else []
    return "\n".join([head, *middle, *tail[len(tail) - kept :]])


def _shorten(lines: Sequence[str], words: int) -> str:
    out = []
    for line in lines:
        parts = line.split()
        # One blob (a base64 payload, a long id) must not take a whole summary.
        kept = [part if len(part) <= MAX_WORD_CHARS else part[:MAX_WORD_CHARS] + "…" for part in parts[:words]]
        out.append(" ".join(kept) + (" …" if len(parts) > words else ""))
    return "\n".join(out)


# Builds a ChatModel for a (provider, model id); None when this build has no adapter for it.
ModelFactory = Callable[[str, str], ChatModel | None]


def summarizer_for(
    provider: str, model_id: str, counter: TokenCounter, factory: ModelFactory | None = None
) -> Summarizer:
    """The summarizer of a resolved model.

    The local model gets the extractive summarizer. A hosted model is called
    through ``factory``; without an adapter for its provider the extractive
    summarizer stands in, and its name says so, so a long session keeps going
    either way.
    """
    if provider == "local":
        return ExtractiveSummarizer(counter, f"extractive:{model_id}")
    model = factory(provider, model_id) if factory is not None else None
    if model is None:
        return ExtractiveSummarizer(counter, f"extractive:fallback(no {provider} adapter for {model_id})")
    return ModelSummarizer(model, counter)
