"""The Redis session store's Lua scripts (files of services/sessions/lua/, read here): each store method is
one script, so each is atomic.

Every script gets the session's keys (services/lib/redis_keys.py: all in the session's
cluster slot) through KEYS, in the order of `SESSION_KEYS`, then the key of the
session's identity; CREATE gets a second session's keys after them. ARGV = tenant, the
lease-free channel, session TTL (ms, 0 = none), session id, the clock's offset (ms, 0
but in tests), "1" when the store is on a cluster (scripts SPUBLISH the session's news
for the gateways' shard watch), then the script's own arguments (ARGV[7]...).

Times come from Redis (TIME), so every replica agrees on lease expiry. What spans
sessions lives in slots of its own and is kept by the store between scripts: a
tenant's index of sessions and its scope indexes, and the index of open turns (`open_turn_bucket`) that
ClaimOrphanedTurns searches.

The session's event log is a stream with one entry per append, whose id is `<seq>-0` of its last
event (field `e`: a lone serialized RuntimeEvent without its seq; or `n` events as a StoredEvents in
field `b`, their seqs running up to the id); the hash keeps the last seq (`eseq`) and the
lease, including whether its turn is open (accepted, not ended or paused: its lease
waits, held, for a takeover instead of running out), who runs it and how often it was
taken over. `tr` holds each turn's first seq (field `<turn>`; written when the log's turn changes, the hash's
`rturn` naming the last turn written, so a turn's further appends cost nothing; a rewind drops its turns'). A
turn's journal is `j` (field `<turn>` = entry count, `<turn>|<n>` =
`kind|seq|ms|state`), the order its turns were written in is `jt` (the hash names the last one,
`jlast`, and its entry count, `jn`, so a journal write needs no read). The hash remembers the last n
appends with an id in one field, `ring` (the count `ab` it is up to date with, then `,<mark>:<last seq>`
for each append, oldest first; the mark is the id's SHA-1, 16 hex digits, so an id of any text fits):
the append script reads it with the hash's other fields and finds an id in it with one string search,
so telling a retried append costs no command. Being longer than a listpack's values, it also makes
the hash a hash table, whose field reads cost O(1). Each append also writes the oldest of the slots
`r0`..`r<n-1>` (`<last seq>|<append id>`, slot `ab` mod n, `ab` counting the appends with an id),
where the version before the ring looked: a sessions replica of that version still tells a retried
append in a rolling upgrade or a rollback, and an append reads the slots instead of a ring that is
behind `ab` (none yet, or that version appended since). (Sessions written before the slots kept their
ids in the sorted set `events:batches`; an append looks there while both are empty.)

A session is alive until the hash's `expires_at` (by Redis's clock): a turn's end or pause sets it (the
TTL from then), as do writes outside a turn (`touch`); the turn's start and its writes leave it while it
outlasts the lease by half the TTL or more, else set it to the lease's end plus the TTL (`keep`). Redis
evicts the keys a little later: all at once, at `pexp` (kept in the hash), which `touch` moves to
`expires_at` plus a tenth of the TTL only when `expires_at` has passed it, so an active session's keys are
re-expired once per tenth of the TTL, not at every turn's end; a key a write creates gets `pexp` too. The
scripts read the hash's fields they need in one HMGET and write them in one HSET (`meta`, `put`, `flush`).

Replies are arrays whose first element is a status: "ok" or the name of a domain
error. Every script is safe to run twice (the client retries once on a dropped
connection): a create with the same id, an append with the same request id, an
acquire by the same turn, a consume with the same token all answer as the first did.
"""

from __future__ import annotations

from services.kit import lua
from services.lib.redis_event_log import DROPPED_TTL_S
from services.sessions.model import JOURNALS_KEPT

# Scripts that write nothing (no WAIT after them; services/kit/redis_pool.py ReplicaWait).
READS = frozenset(
    {"GET", "LIST_MESSAGES", "LAST_MESSAGES", "LEASE_STATE", "LIST_GOALS", "GET_CHECKPOINT", "LIST_CHECKPOINTS"}
    | {"REHYDRATE", "JOURNAL", "LOG_STATE", "TURN_SEQS"}
)

# Scripts over no session, run without the PREAMBLE: the open-turn index (one bucket per slot: a zset of
# session -> when to look at it, and a hash of their generations; written before a turn opens, so an open
# turn always has an entry).
BARE = frozenset({"SCHEDULE", "DUE", "DUE_ALL", "RESCHEDULE"})
READS = READS | {"DUE", "DUE_ALL"}

# Scripts that read Redis's clock only when they need it (`clock()`); every other session script has it as `now`.
CLOCK_ON_DEMAND = frozenset({"APPEND_EVENTS"})

# The names (services/lib/redis_keys.py SessionKeys) of a session's keys, in KEYS order; the identity key follows.
SESSION_KEYS = (
    *("s", "m", "g", "c", "co", "d", "x", "q", "w", "a", "al"),
    *("events", "events:batches", "j", "jt", "events:dropped", "events:news", "tr"),
)

# Keys that live and expire with the session (the tombstone and the channel do not; `events:batches`, written
# only before the ring of append ids, keeps the expiry it had).
_DATA_KEYS = ("s", "m", "g", "c", "co", "d", "a", "al", "events", "j", "jt", "tr")
ENTRY_EVENTS = 32  # events per stream entry at most: a reader that needs one entry's first seq reads no more
EXPIRY_SLACK = 10  # the keys outlive `expires_at` by up to TTL / EXPIRY_SLACK: re-expired once per that

# The scripts, one per file in services/sessions/lua/ (its name in lower case; each file's opening comments
# say what its KEYS and ARGV hold). preamble.lua is the session scripts' shared part, filled from here.
_LUA = lua.load(
    "services.sessions",
    KEYSET=", ".join(f"[{name!r}] = KEYS[at + {i + 1}]" for i, name in enumerate(SESSION_KEYS))
    + f", i = KEYS[at + {len(SESSION_KEYS) + 1}]",
    DATA_KEYS=", ".join(f"K[{name!r}]" for name in _DATA_KEYS),
    KEYS_PER_SESSION=len(SESSION_KEYS) + 1,
    JOURNALS_KEPT=JOURNALS_KEPT,
    EXPIRY_SLACK=EXPIRY_SLACK,
    ENTRY_EVENTS=ENTRY_EVENTS,
    DROPPED_TTL_S=DROPPED_TTL_S,
)
PREAMBLE = _LUA["preamble"]
SCRIPTS = {name.upper(): text for name, text in _LUA.items() if name != "preamble"}

# A tenant's index and its scope indexes (services/lib/redis_keys.py TenantKeys: one slot), which the store
# keeps between session scripts.
INDEX_ADD, INDEX_REMOVE, INDEX_BACKFILL = SCRIPTS["INDEX_ADD"], SCRIPTS["INDEX_REMOVE"], SCRIPTS["INDEX_BACKFILL"]
LABEL_INDEX = SCRIPTS["LABEL_INDEX"]


def source(name: str) -> str:
    """The whole Lua source of the script `name`: its PREAMBLE (but for BARE ones), then its own."""
    body = SCRIPTS[name]
    if name in BARE:
        return body
    return PREAMBLE + ("" if name in CLOCK_ON_DEMAND else "local now = clock()\n") + body
