"""KeywordRoleRouter: which role answers a message.

Priority: the explicit role (pinned with /role) always wins; then the first role,
in configured order, with a keyword found in the text (case-insensitive
substring); then the default role.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True, slots=True)
class RoleChoice:
    role_id: str
    matched_by: Literal["explicit", "keyword", "default"]
    keyword: str = ""


class KeywordRoleRouter:
    def __init__(self, default_role: str, keyword_map: Mapping[str, Sequence[str]]):
        self.default_role = default_role
        # Lower-cased once; empty keywords would match everything, so they are dropped.
        self._keywords = [(role, [k.lower() for k in words if k.strip()]) for role, words in keyword_map.items()]

    def resolve(self, text: str, explicit_role: str | None = None) -> str:
        return self.choose(text, explicit_role).role_id

    def choose(self, text: str, explicit_role: str | None = None) -> RoleChoice:
        if explicit_role:
            return RoleChoice(explicit_role, "explicit")
        lowered = text.lower()
        for role, words in self._keywords:
            for word in words:
                if word in lowered:
                    return RoleChoice(role, "keyword", word)
        return RoleChoice(self.default_role, "default")
