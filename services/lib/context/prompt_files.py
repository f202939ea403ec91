"""Cached, hot-reloaded prompt files of agents.

An agent's prompts directory holds ``identity.md``, ``guardrails.md`` and
``roles/<role>.md``. Files are re-read only when their ``mtime_ns`` or size
changes, so building a context from unchanged files costs ``stat()`` calls and
no reads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

IDENTITY_FILE = "identity.md"
GUARDRAILS_FILE = "guardrails.md"
ROLES_DIR = "roles"
ROLE_SUFFIX = ".md"

Reader = Callable[[Path], str]


def read_utf8(path: Path) -> str:
    return path.read_text(encoding="utf-8")


@dataclass(frozen=True)
class _CachedFile:
    mtime_ns: int
    size: int
    text: str


class PromptFiles:
    """Prompt files of any number of prompt directories, cached per file path.

    ``reader`` loads a file's text; it is injectable so callers (and tests) can
    observe or replace disk reads. A missing file reads as ``""``.
    """

    def __init__(self, reader: Reader = read_utf8) -> None:
        self._reader = reader
        self._cache: dict[Path, _CachedFile] = {}

    def identity(self, directory: Path) -> str:
        return self._load(directory / IDENTITY_FILE)

    def guardrails(self, directory: Path) -> str:
        return self._load(directory / GUARDRAILS_FILE)

    def role(self, directory: Path, role_id: str) -> str:
        """Instructions of ``role_id``; ``""`` when the role has no file."""
        _check_role_id(role_id)
        return self._load(directory / ROLES_DIR / f"{role_id}{ROLE_SUFFIX}")

    def roles(self, directory: Path) -> list[str]:
        """Sorted ids of the roles that have a file in ``directory``."""
        roles_dir = directory / ROLES_DIR
        if not roles_dir.is_dir():
            return []
        return sorted(
            path.name.removesuffix(ROLE_SUFFIX) for path in roles_dir.glob(f"*{ROLE_SUFFIX}") if path.is_file()
        )

    def _load(self, path: Path) -> str:
        try:
            stat = path.stat()
        except (FileNotFoundError, NotADirectoryError):
            self._cache.pop(path, None)
            return ""
        cached = self._cache.get(path)
        if cached is not None and (cached.mtime_ns, cached.size) == (stat.st_mtime_ns, stat.st_size):
            return cached.text
        # stat() comes before the read: if the file changes in between, the
        # cached stamp is older than the text and the next call re-reads it.
        text = self._reader(path)
        self._cache[path] = _CachedFile(stat.st_mtime_ns, stat.st_size, text)
        return text


def _check_role_id(role_id: str) -> None:
    # Role ids may come from requests; keep them from escaping roles/.
    if not role_id:
        raise ValueError("role_id must not be empty")
    if "/" in role_id or "\\" in role_id or ".." in role_id:
        raise ValueError(f"role_id {role_id!r} must not contain path separators or '..'")
