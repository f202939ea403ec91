"""Every Redis key the suite writes, and the rule that keeps one session on one cluster slot.

Redis Cluster places a key by its hash tag, the text between the key's first `{` and
the next `}`. The rule: every key of one session, in every service, is

    <prefix>{<session tag>}<rest of the session id>:<name>

(`SessionKeys`), so all of a session's keys share one slot, whatever the store: its
record, messages, goals, checkpoints, lease and queue (sessions), its event log and
open-turn marks (gateway), its tool archive (context). A script, MULTI/EXEC or pipeline
on one session therefore never crosses slots, and each script is given every key it
touches through KEYS. A new per-session key (a journal, say) is one more name here.

The session tag is the session id, or for an id `<tag>.<rest>` the part before the
first dot: sessions made for a user/topic get ids that start with their identity's tag
(services/sessions/redis_store.py), so the identity's key shares their slot too.

Keys that belong to no single session carry a tag of their own, named here: a tenant's
session index and scope indexes (`TenantKeys`), the buckets of the reaper's open-turn
index (`open_turn_bucket`), the model store (`MODELS_TAG`), a memory namespace and its
tenant's list of namespaces (`memory_keys`, `memory_registry`). Code that needs such a
key and a session's together does it in separate steps, never in one script.
"""

from __future__ import annotations

import hashlib
import zlib

OPEN_TURN_BUCKETS = 16  # the reaper's index of open turns is spread over this many slots
MODELS_TAG = "models"


def session_tag(session_id: str) -> str:
    """The hash tag of a session's keys (see the module docstring)."""
    head = session_id.split(".", 1)[0]
    if head and "{" not in head and "}" not in head:
        return head
    # Ids the suite never makes (the sessions store makes them): still one slot, and distinct keys.
    return "~" + hashlib.sha256(session_id.encode()).hexdigest()[:32]


class SessionKeys:
    """The names of one session's keys: `keys.key("m")` is `<prefix>{<tag>}<rest>:m`."""

    __slots__ = ("base", "session_id", "tag")

    def __init__(self, prefix: str, session_id: str):
        self.session_id = session_id
        self.tag = session_tag(session_id)
        # "/" never follows the tag of an id the suite made (":" or "." does): distinct keys either way.
        rest = session_id[len(self.tag) :] if session_id.startswith(self.tag) else "/" + session_id
        self.base = f"{prefix}{{{self.tag}}}{rest}"

    def key(self, name: str) -> str:
        return f"{self.base}:{name}"


def identity_key(prefix: str, tag: str) -> str:
    """The key naming the newest session of a (tenant, user, topic): in the slot of that identity's sessions."""
    return f"{prefix}{{{tag}}}:identity"


class TenantKeys:
    """A tenant's index of sessions (newest first), the counter that orders it, and its scope indexes:
    one slot per tenant, so one script keeps them all.

    A scope index (`scope_index(key, value)`) holds the tenant's sessions whose scope has
    key=value, under the same scores as the tenant's index; `scopes` names each scoped
    session's scope (so an entry can leave every index once its session is gone), and its
    field "*" says how far the one-time backfill of older sessions got ("done" once all are in).
    A label index (`label_index(key, value)`) and `labels` (each labelled session's labels as
    indexed) are the same for labels, which UpdateSession changes: an index may hold a session
    that no longer has the label (a reader checks the session), never miss one that has it.
    """

    __slots__ = ("base", "index", "labels", "scopes", "seq")

    def __init__(self, prefix: str, tenant_id: str):
        self.base = f"{prefix}{{t:{tenant_id}}}"
        self.index, self.seq = f"{self.base}:sessions", f"{self.base}:seq"
        self.scopes = f"{self.base}:scope-of"
        self.labels = f"{self.base}:label-of"

    def scope_index(self, key: str, value: str) -> str:
        # A scope key never holds "=" (services/lib/scope.py KEY_PATTERN): the first one ends it.
        return f"{self.base}:scope:{key}={value}"

    def label_index(self, key: str, value: str) -> str:
        # A label key never holds "=" (services/lib/session_search.py LABEL_KEY): the first one ends it.
        return f"{self.base}:label:{key}={value}"


def open_turn_bucket(prefix: str, session_id: str) -> tuple[str, str]:
    """The reaper's index bucket of a session: (zset session -> when to look, hash session -> generation)."""
    bucket = zlib.crc32(session_id.encode()) % OPEN_TURN_BUCKETS
    base = f"{prefix}{{open-turns:{bucket}}}"
    return f"{base}:due", f"{base}:gen"


def open_turn_buckets(prefix: str) -> list[tuple[str, str]]:
    base = [f"{prefix}{{open-turns:{b}}}" for b in range(OPEN_TURN_BUCKETS)]
    return [(f"{b}:due", f"{b}:gen") for b in base]


def models_keys(prefix: str) -> tuple[str, str]:
    """The model store: (hash of added models, change counter), one slot so MULTI/EXEC holds them both."""
    base = f"{prefix}{{{MODELS_TAG}}}"
    return f"{base}:added", f"{base}:version"


MEMORY_KEYS = ("items", "meta", "log", "exp", "tomb")  # a memory namespace's keys, in its scripts' KEYS order


def memory_keys(prefix: str, namespace_path: str) -> list[str]:
    """A memory namespace's keys (services/memory/redis_store.py): one slot per namespace."""
    tag = f"{prefix}mem:{{{namespace_path}}}"
    return [f"{tag}:{name}" for name in MEMORY_KEYS]


def memory_registry(prefix: str, tenant_id: str) -> str:
    """The tenant's list of memory namespaces, in a slot of the tenant's own."""
    return f"{prefix}mem:{{{tenant_id}}}:namespaces"
