"""The one reader of a lease holder's old text form (services/lib/lease_holders.py)."""

from __future__ import annotations

from services.lib.lease_holders import Holder, parse_holder


def test_a_resume_holders_text_reads_as_the_turn_and_its_attempt() -> None:
    assert parse_holder("t1:resume:a1b2") == Holder("t1", "a1b2")


def test_a_plain_turn_id_reads_as_itself() -> None:
    assert parse_holder("5b82b6ede62e4440bfd6f78c1a6f8c56") == Holder("5b82b6ede62e4440bfd6f78c1a6f8c56")
    assert parse_holder("") == Holder("")


def test_only_the_first_mark_splits() -> None:
    assert parse_holder("t1:resume:a:resume:b") == Holder("t1", "a:resume:b")
