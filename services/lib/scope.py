"""Session scopes: on whose behalf a session runs, beyond its tenant (end user, project...).

A scope is a small map of string keys to string values, set by the application when it
creates a session and never changed afterwards. The gateway, the sessions service and
the runtime check it with the same rules, so they live here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from services.kit.errors import Violations

MAX_ENTRIES = 16
MAX_VALUE = 256
KEY_PATTERN = re.compile(r"[a-z][a-z0-9_]{0,63}")
# Values become memory namespace labels and log fields: no control characters, and none of
# the characters a memory label may not hold.
_BAD_VALUE = re.compile(r"[\x00-\x1f\x7f/{}]")


def check(scope: Mapping[str, str], field: str, problems: Violations) -> None:
    """Every problem of a scope, each naming its entry (`scope[end_user]`)."""
    problems.check(len(scope) <= MAX_ENTRIES, field, f"must have at most {MAX_ENTRIES} entries, not {len(scope)}")
    for key, value in scope.items():
        where = f"{field}[{key}]"
        problems.check(bool(KEY_PATTERN.fullmatch(key)), where, "key must match [a-z][a-z0-9_]{0,63}")
        problems.check(0 < len(value) <= MAX_VALUE, where, f"value must be 1 to {MAX_VALUE} characters")
        problems.check(not _BAD_VALUE.search(value), where, "value must not hold control characters, '/', '{' or '}'")


def holds(scope: Mapping[str, str], required: Mapping[str, str]) -> bool:
    """Whether `scope` has every entry of `required` (an empty requirement holds for any scope)."""
    return all(scope.get(key) == value for key, value in required.items())


def label(key: str, value: str) -> str:
    """A scope entry as a memory namespace label: `end_user=alice`, never the bare value, so that
    `{end_user: 42}` and `{org: 42}` name different namespaces."""
    return f"{key}={value}"


def labels(scope: Mapping[str, str]) -> list[str]:
    """A scope's entries as namespace labels, in key order (the prefix a pinned key's memories have)."""
    return [label(key, value) for key, value in sorted(scope.items())]


def identity(scope: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """A canonical, hashable form: the same entries in any order give the same identity."""
    return tuple(sorted(scope.items()))
