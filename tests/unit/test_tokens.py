"""Token counters: the real tokenizer works offline, and the estimators' documented accuracy holds."""

from __future__ import annotations

import itertools

import pytest

from services.lib import tokens
from services.lib.token_corpus import CORPUS, samples
from services.lib.tokens import (
    COUNTERS,
    CharRatioCounter,
    ScriptAwareCounter,
    TiktokenCounter,
    make_counter,
    measure,
    measure_by_category,
)


@pytest.fixture(scope="module")
def real() -> TiktokenCounter:
    return TiktokenCounter()


def test_tiktoken_counts_match_cl100k_reference_values(real: TiktokenCounter) -> None:
    # Reference counts of OpenAI's cl100k_base (tiktoken's own README example: 2 tokens).
    assert real.count("hello world") == 2
    assert real.count("") == 0
    assert real.count("tiktoken is great!") == 6
    # Special-token text in user content is counted as ordinary text, never rejected.
    assert real.count("<|endoftext|>") > 1


def test_tiktoken_vocabulary_comes_from_the_wheel_not_the_network(monkeypatch: pytest.MonkeyPatch) -> None:
    import tiktoken.load

    def no_download(*args: object, **kwargs: object) -> bytes:
        raise AssertionError("the tokenizer tried to fetch its vocabulary")

    monkeypatch.setattr(tiktoken.load, "read_file", no_download)
    monkeypatch.setattr(tiktoken.load, "read_file_cached", no_download)
    tokens._cl100k.cache_clear()
    try:
        assert TiktokenCounter().count("offline") == 1
    finally:
        tokens._cl100k.cache_clear()


def test_a_corrupt_vocabulary_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tokens, "CL100K_SHA256", "0" * 64)
    tokens._cl100k.cache_clear()
    try:
        with pytest.raises(tokens.TokenizerUnavailable, match="SHA-256"):
            TiktokenCounter().count("x")
    finally:
        monkeypatch.undo()
        tokens._cl100k.cache_clear()


def test_make_counter_by_name_and_unknown_name() -> None:
    assert isinstance(make_counter("chars"), CharRatioCounter)
    assert isinstance(make_counter("script"), ScriptAwareCounter)
    assert isinstance(make_counter("tiktoken"), TiktokenCounter)
    with pytest.raises(ValueError, match="unknown token counter 'bpe'"):
        make_counter("bpe")


def test_corpus_covers_scripts_code_and_data() -> None:
    assert {"english_prose", "russian", "chinese", "japanese", "arabic", "python_code", "json"} <= set(CORPUS)
    assert len(samples()) >= 20


# The figures documented in services/lib/tokens.py, with a little slack for rounding.
def test_char_ratio_accuracy_is_as_documented(real: TiktokenCounter) -> None:
    m = measure(CharRatioCounter(), real)
    assert m["mean_abs_error"] == pytest.approx(0.332, abs=0.005)
    assert m["worst_under"] == pytest.approx(-0.766, abs=0.005)
    assert m["worst_over"] == pytest.approx(0.367, abs=0.005)
    by_category = measure_by_category(CharRatioCounter(), real)
    assert by_category["japanese"] < 0.3 and by_category["chinese"] < 0.3  # under-counts CJK 3-4x


def test_script_aware_accuracy_is_as_documented(real: TiktokenCounter) -> None:
    m = measure(ScriptAwareCounter(), real)
    assert m["mean_abs_error"] == pytest.approx(0.093, abs=0.005)
    assert m["worst_under"] == pytest.approx(-0.184, abs=0.005)
    assert m["worst_over"] == pytest.approx(0.25, abs=0.005)
    assert m["total_ratio"] == pytest.approx(1.0, abs=0.02)
    assert all(0.8 <= ratio <= 1.3 for ratio in measure_by_category(ScriptAwareCounter(), real).values())


def test_script_aware_is_much_closer_than_chars_on_every_non_latin_script(real: TiktokenCounter) -> None:
    chars = measure_by_category(CharRatioCounter(), real)
    script = measure_by_category(ScriptAwareCounter(), real)
    for category in ("russian", "chinese", "japanese", "arabic", "json"):
        assert abs(script[category] - 1) < abs(chars[category] - 1) / 2, category


@pytest.mark.parametrize("name", ["chars", "script"])
def test_estimators_are_subadditive(name: str) -> None:
    counter = COUNTERS[name]()
    texts = [*[text for _, text in samples()][:8], "", "a", "é", "中", "😀", " "]
    for left, right in itertools.product(texts, repeat=2):
        assert counter.count(left + right) <= counter.count(left) + counter.count(right)


def test_script_aware_charges_multibyte_characters_once() -> None:
    counter = ScriptAwareCounter()
    assert counter.count("中文中文") == 4  # one token per CJK character
    assert counter.count("😀") == 2
    assert counter.count("привет") == 4  # 6 * 0.55 = 3.3, rounded up
    assert counter.count("hello") == 2  # 5 * 0.22 = 1.1, rounded up
