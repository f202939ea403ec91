"""A namespace's search index: BM25 snapshot plus tail, background rebuilds, filters and vectors."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from services.memory import index as index_module
from services.memory.index import NamespaceIndex, canonical, tokenize
from services.memory.model import Record, index_text, label_problem


def record(key: str, text: str, embedding: list[float] | None = None, **value: object) -> Record:
    vector = None if embedding is None else np.asarray(embedding, np.float32) / np.linalg.norm(embedding)
    return Record(key, dict(value), text, 1, 1, embedding=vector)


async def keys_for(index: NamespaceIndex, query: str, limit: int = 50, **filter: object) -> list[str]:
    hits = await index.text_scores(tokenize([query])[0], filter, limit)
    return [key for key, _ in sorted(hits, key=lambda pair: (-pair[1], pair[0]))]


async def test_large_namespaces_answer_from_snapshot_and_tail_while_rebuilding(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(index_module, "INLINE_REBUILD", 4)
    monkeypatch.setattr(index_module, "TAIL_MAX", 3)
    monkeypatch.setattr(index_module, "REBUILD_MIN", 1)
    index = NamespaceIndex()
    for i in range(10):
        index.upsert(record(f"k{i}", f"note {i} about gardening"))
    assert len(await keys_for(index, "gardening")) == 10  # first search: waits for the first snapshot
    snapshot = index._snapshot

    index.upsert(record("fresh", "a brand new note about astronomy"))
    index.upsert(record("k3", "k3 is now about astronomy too"))
    index.remove("k4")
    # Found at once: the snapshot (k3 and k4 masked out) plus the changed memories' own index.
    assert set(await keys_for(index, "astronomy")) == {"fresh", "k3"}
    gardening = await keys_for(index, "gardening")
    assert "k3" not in gardening and "k4" not in gardening and len(gardening) == 8
    rebuild = index._rebuild
    assert rebuild is not None  # started in the background by the search
    await rebuild
    assert index._snapshot is not snapshot and not index._stale
    assert set(await keys_for(index, "astronomy")) == {"fresh", "k3"}

    for i in range(5):  # past TAIL_MAX: the search waits for a rebuild instead
        index.upsert(record(f"burst{i}", "burst of cooking notes"))
    assert len(await keys_for(index, "cooking")) == 5
    assert len(index._stale) <= index_module.TAIL_MAX


async def test_the_tail_scores_as_the_snapshot_would(monkeypatch: pytest.MonkeyPatch) -> None:
    """A memory rewritten with the same words (statistics unchanged) scores in the tail exactly what bm25s gave it."""
    monkeypatch.setattr(index_module, "INLINE_REBUILD", 4)
    index = NamespaceIndex()
    texts = ["red apples and green apples", "green tea", "apples in tea", "blue sky", "red red wine", "tea time"]
    for i, text in enumerate(texts):
        index.upsert(record(f"k{i}", text))
    query = tokenize(["red apples tea apples"])[0]  # a repeated query word counts twice, as in bm25s
    before = dict(await index.text_scores(query, {}, 10))
    index.upsert(record("k0", texts[0]))
    index.upsert(record("k4", texts[4]))
    after = dict(await index.text_scores(query, {}, 10))
    assert set(index._stale) == {"k0", "k4"}  # below the rebuild threshold: served from the tail
    assert after.keys() == before.keys()
    for key, score in before.items():
        assert after[key] == pytest.approx(score, rel=1e-5), key


async def test_a_rebuild_never_installs_an_older_snapshot(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(index_module, "INLINE_REBUILD", 4)
    monkeypatch.setattr(index_module, "REBUILD_MIN", 1)
    index = NamespaceIndex()
    for i in range(6):
        index.upsert(record(f"k{i}", "old words"))
    await keys_for(index, "old")
    index.upsert(record("k0", "new words"))
    await keys_for(index, "new")  # starts a background rebuild as of now
    background = index._rebuild
    await asyncio.sleep(0)  # one loop turn: the rebuild copies the corpus and hands it to its thread
    for i in range(5):  # shrinks to an inline-rebuilt namespace, which installs a newer snapshot first
        index.remove(f"k{i}")
    assert await keys_for(index, "old") == ["k5"]
    assert background is not None
    await background
    assert await keys_for(index, "old") == ["k5"] and await keys_for(index, "new") == []


async def test_namespaces_without_any_token_have_no_hits() -> None:
    index = NamespaceIndex()
    index.upsert(record("stop", "the a of"))
    assert await keys_for(index, "the") == []
    assert await keys_for(index, "anything") == []


async def test_filters_hold_in_the_snapshot_the_tail_and_after_rebuilds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(index_module, "INLINE_REBUILD", 4)
    monkeypatch.setattr(index_module, "REBUILD_MIN", 1)
    index = NamespaceIndex()
    for i in range(10):
        index.upsert(record(f"k{i}", "shared words", kind="even" if i % 2 == 0 else "odd"))
    assert await keys_for(index, "shared", kind="even") == ["k0", "k2", "k4", "k6", "k8"]
    index.upsert(record("k1", "shared words", kind="even"))  # changed after the snapshot: served by the tail
    index.upsert(record("k2", "shared words", kind="odd"))
    assert sorted(await keys_for(index, "shared", kind="even")) == ["k0", "k1", "k4", "k6", "k8"]
    assert index._rebuild is not None
    await index._rebuild
    assert sorted(await keys_for(index, "shared", kind="even")) == ["k0", "k1", "k4", "k6", "k8"]
    assert await keys_for(index, "shared", kind="none") == []
    assert len(await keys_for(index, "shared", kind="odd", missing="x")) == 0


async def test_filters_follow_changes_and_compare_json_values() -> None:
    index = NamespaceIndex()
    index.upsert(record("a", "x", kind="pref", n=1, tags=["x", "y"]))
    index.upsert(record("b", "x", kind="fact", n=1.0))
    assert index.matching({}) is None
    assert index.matching({"kind": "pref"}) == {"a"}
    assert index.matching({"n": 1.0}) == {"a", "b"}  # JSON numbers: 1 == 1.0
    assert index.matching({"tags": ["x", "y"]}) == {"a"}
    assert index.matching({"kind": "pref", "n": 1}) == {"a"}
    index.upsert(record("a", "x", kind="fact"))
    assert index.matching({"kind": "pref"}) == set() and index.matching({"kind": "fact"}) == {"a", "b"}
    index.remove("b")
    assert index.matching({"kind": "fact"}) == {"a"}
    assert canonical(True) != canonical(1) and canonical("1") != canonical(1)


async def test_vectors_rank_by_cosine_within_the_filter() -> None:
    index = NamespaceIndex()
    index.upsert(record("east", "e", [1, 0], side="right"))
    index.upsert(record("north", "n", [0, 1], side="up"))
    index.upsert(record("northeast", "ne", [1, 1], side="right"))
    index.upsert(record("none", "no vector"))
    query = np.asarray([1, 0.1], np.float32) / np.linalg.norm([1, 0.1])
    ranked = sorted(index.vector_scores(query, {}, 3), key=lambda pair: -pair[1])
    assert [key for key, _ in ranked] == ["east", "northeast", "north"]
    assert [key for key, _ in index.vector_scores(query, {"side": "up"}, 3)] == ["north"]
    index.remove("east")
    assert "east" not in dict(index.vector_scores(query, {}, 3))
    assert [key for key, _ in index.vector_scores(query, {"side": "right"}, 3)] == ["northeast"]


def test_labels_and_index_text() -> None:
    assert label_problem("user_1@example.com") == ""
    assert label_problem("end_user=" + "v" * 256) == ""  # a scope label: 64-character key at most, "=", value
    assert label_problem("日本") == ""
    for bad in ("", "a/b", "a{b", "a}b", "tab\there", "x" * 385):
        assert label_problem(bad), bad
    assert index_text({"a": "one", "b": {"c": ["two", 3, "three"]}}, "") == "one two three"
    assert index_text({"a": "ignored"}, "given") == "given"


def test_tokens_drop_stop_words_and_case() -> None:
    assert tokenize(["The User LIKES coffee"]) == [["user", "likes", "coffee"]]


async def test_concurrent_searches_share_one_rebuild(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(index_module, "INLINE_REBUILD", 2)
    index = NamespaceIndex()
    for i in range(20):
        index.upsert(record(f"k{i}", f"shared topic {i}"))
    results = await asyncio.gather(*(keys_for(index, "topic") for _ in range(5)))
    assert all(len(found) == 20 for found in results)
