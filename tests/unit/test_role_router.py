"""KeywordRoleRouter: explicit role, then keyword, then default."""

from __future__ import annotations

from services.lib.policy.routing import KeywordRoleRouter

ROUTER = KeywordRoleRouter(
    default_role="coach",
    keyword_map={
        "deposit_advisor": ["deposit", "savings account", "interest rate"],
        "credit_advisor": ["credit", "loan", "mortgage", "refinance"],
    },
)


def test_seed_examples() -> None:
    assert ROUTER.resolve("I want to open a savings account") == "deposit_advisor"
    assert ROUTER.resolve("Hello") == "coach"
    assert ROUTER.resolve("I need a loan", explicit_role="coach") == "coach"


def test_matching_is_case_insensitive_substring() -> None:
    choice = ROUTER.choose("What INTEREST RATES do you offer?")
    assert (choice.role_id, choice.matched_by, choice.keyword) == ("deposit_advisor", "keyword", "interest rate")
    assert ROUTER.resolve("I refinanced my house") == "credit_advisor"


def test_first_configured_role_wins_when_several_match() -> None:
    assert ROUTER.resolve("a loan against my deposit") == "deposit_advisor"
    flipped = KeywordRoleRouter("coach", {"credit_advisor": ["loan"], "deposit_advisor": ["deposit"]})
    assert flipped.resolve("a loan against my deposit") == "credit_advisor"


def test_explicit_role_wins_even_without_keywords_and_default_is_reported() -> None:
    assert ROUTER.choose("mortgage", explicit_role="deposit_advisor").matched_by == "explicit"
    assert ROUTER.choose("nothing relevant").matched_by == "default"


def test_empty_keywords_never_match() -> None:
    router = KeywordRoleRouter("coach", {"x": ["", "  "]})
    assert router.resolve("anything") == "coach"
