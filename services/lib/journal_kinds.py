"""Journal entry kinds, as the gateway, the runtime and the sessions service agree on them.

`sessions.v1.JournalEntryKind` says what an entry records. Stores keep a kind by its name
("request", "decide", ...: the enum value's name without its prefix, in lower case), which is
what every record written before the enum carries in `JournalEntry.kind`, so old journals
replay unchanged. `entry` builds an entry with both fields set (an older version reads the
string); `kind_of` reads either; `stored_name` is what a store keeps.
"""

from __future__ import annotations

from typing import cast

from cogmesh.sessions.v1 import sessions_pb2

Kind = sessions_pb2.JournalEntryKind
REQUEST = sessions_pb2.JOURNAL_ENTRY_KIND_REQUEST
START = sessions_pb2.JOURNAL_ENTRY_KIND_START
COMPACTION = sessions_pb2.JOURNAL_ENTRY_KIND_COMPACTION
MODEL = sessions_pb2.JOURNAL_ENTRY_KIND_MODEL
DECIDE = sessions_pb2.JOURNAL_ENTRY_KIND_DECIDE
TOOL = sessions_pb2.JOURNAL_ENTRY_KIND_TOOL
DELEGATION = sessions_pb2.JOURNAL_ENTRY_KIND_DELEGATION
STEP = sessions_pb2.JOURNAL_ENTRY_KIND_STEP
PAUSE = sessions_pb2.JOURNAL_ENTRY_KIND_PAUSE
ANSWER = sessions_pb2.JOURNAL_ENTRY_KIND_ANSWER
TAKEOVER = sessions_pb2.JOURNAL_ENTRY_KIND_TAKEOVER

_PREFIX = "JOURNAL_ENTRY_KIND_"
_NAMES: dict[int, str] = {
    value: name.removeprefix(_PREFIX).lower()
    for name, value in sessions_pb2.JournalEntryKind.items()
    if value != sessions_pb2.JOURNAL_ENTRY_KIND_UNSPECIFIED
}
_KINDS: dict[str, Kind] = {name: cast(Kind, value) for value, name in _NAMES.items()}


def kind_name(kind: int) -> str:
    """The stored name of a kind ("request", "decide", ...)."""
    try:
        return _NAMES[kind]
    except KeyError:
        raise ValueError(f"unknown journal entry kind {kind}") from None


def kind_of(entry: sessions_pb2.JournalEntry) -> Kind:
    """An entry's kind: its enum, else (a record or writer from before it) its name; UNSPECIFIED if neither."""
    if entry.entry_kind:
        return entry.entry_kind
    return _KINDS.get(entry.kind, sessions_pb2.JOURNAL_ENTRY_KIND_UNSPECIFIED)


def kind_named(name: str) -> Kind:
    """The kind a stored name stands for; UNSPECIFIED for a name this version does not know."""
    return _KINDS.get(name, sessions_pb2.JOURNAL_ENTRY_KIND_UNSPECIFIED)


def stored_name(entry: sessions_pb2.JournalEntry) -> str:
    """What a store keeps as the entry's kind: the enum's name, else the name an older writer sent."""
    return _NAMES.get(entry.entry_kind, entry.kind)


def entry(kind: Kind, state: bytes, **fields: object) -> sessions_pb2.JournalEntry:
    """A journal entry of `kind`, with the name alongside for a reader of an older version."""
    return sessions_pb2.JournalEntry(kind=kind_name(kind), entry_kind=kind, state=state, **fields)  # type: ignore[arg-type]
