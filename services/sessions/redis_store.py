"""The Redis session store: every replica of the sessions service shares one Redis (or Redis Cluster).

Each method on a session is one Lua script (services/sessions/redis_lua.py) over that
session's keys, which share one cluster slot (services/lib/redis_keys.py), so it is
atomic: an append lands whole or not at all, and two replicas appending to one session
see one order. Session keys carry the session TTL (Redis expiry does the eviction), set when a
turn ends rather than at each of its writes (redis_lua.py: `touch`, `keep`);
lease expiry uses Redis's clock, so replicas never disagree about it. A release
publishes on a channel that wakes the turns queued on any replica.

What spans sessions lives in slots of its own and is kept in separate steps, each safe
to repeat: a tenant's index of sessions (listing, CloseAll) and its scope indexes (a
listing filtered by scope) get a session after its script created it and lose it after
its script deleted it; a listing skips, and forgets, an entry whose session expired.
Sessions listed before scope indexes existed are put in them by the tenant's first
filtered listing (`_backfill`, once per tenant); a replica of an older version still
creating sessions after that leaves its sessions out of them (roll every replica first,
or delete the field "*" of the tenant's `scope-of` hash to backfill again). A session made for a user/topic gets an id
that starts with its identity's hash tag, so the identity's key ("the newest session
of this user/topic") is in the session's slot and its script updates it atomically.

Connection failures and timeouts become StoreUnavailable (UNAVAILABLE, retryable).
The client retries once at once on a dropped connection, which is safe because
every script answers a repeat exactly as it answered the first run. Calls share a
bounded pool of connections: a burst waits for a free one rather than failing.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from typing import Any, TypeVar

from redis import exceptions as rex
from redis.commands.core import AsyncScript

from services.kit.protos import now as proto_now
from services.kit.redis_pool import (
    POOL_SIZE,
    UNAVAILABLE_ERRORS,
    Client,
    NotReplicated,
    ReplicaWait,
    eval_then_wait,
    follow_broadcast,
    is_cluster,
    pooled_client,
)
from services.kit.redis_url import check_prefix
from services.lib import lease_holders
from services.lib import scope as scopes
from services.lib import session_search as search
from services.lib.answers import misfit
from services.lib.event_log import Batch, check_cursor, field_one, leaves_idle
from services.lib.redis_event_log import DROP_WAKE_S, RedisEventLog, decode_entries, read_range
from services.lib.redis_keys import SessionKeys, TenantKeys, identity_key, open_turn_bucket, open_turn_buckets
from services.sessions import redis_lua as lua
from services.sessions.model import (
    CONSUMED_TTL_S,
    ENQUEUE_BASE,
    INTERRUPT_BASE,
    MAX_GOALS,
    MAX_PENDING_CHECKPOINTS,
    REMEMBERED_APPENDS,
    WAITER_TTL_S,
    Acquired,
    Appended,
    AppendResult,
    Checkpoint,
    CheckpointConflict,
    CheckpointExists,
    CheckpointNotFound,
    Claimed,
    Goal,
    GoalStatus,
    HistoryChanged,
    InvalidValue,
    JournalRecord,
    JsonObject,
    LeaseHeld,
    LeaseInfo,
    LeaseState,
    LimitExceeded,
    LogState,
    NewCheckpoint,
    NewEvents,
    NewSession,
    Origin,
    Orphans,
    Page,
    PauseAnswer,
    PauseAnswered,
    Phase,
    Queued,
    Rehydration,
    Renewal,
    Renewed,
    Rewind,
    SessionNotFound,
    SessionRecord,
    SessionUpdate,
    StaleLease,
    StoreUnavailable,
    Strategy,
    Summary,
    active_goal,
    effects_of,
)

T = TypeVar("T")

CLOSE_BATCH = 200
MAX_REPLAY_BATCH = 512  # events per batch of a replay (ReadEvents without follow)
INDEXED_LEASES = 10_000  # (session, token) pairs whose open turn this process knows to be in the open-turn index
NONE_OPEN = -1  # DUE's and DUE_ALL's answer when the buckets they look at hold no open turn at all
INDEX_SWEEP = 2  # oldest entries of a tenant's index checked for expired sessions at each create
# A filtered listing (labels, status, agent, times) reads at most SCAN_BUDGET index entries per call, in
# batches of a page and up, doubling to FILTER_BATCH, then answers what it found with a cursor to go on from:
# a call's cost stays bounded however rare the matches (bench/session_search.py).
SCAN_BUDGET = 1000
FILTER_BATCH = 250
# The session hash's fields a filter looks at (services/lib/session_search.py Facts), read in one HMGET.
_FACT_FIELDS = ("tenant_id", "expires_at", "agent", "labels", "created_at", "updated_at", "scope", "forked_from", "av")
_STATUS_FIELDS = ("lease_turn", "lease_exp", "lease_open", "outcome")
# Redis answers that mean "not now" rather than "wrong": the caller may retry.
_TRANSIENT_REPLIES = ("READONLY", "LOADING", "MASTERDOWN", "MISCONF", "OOM", "BUSY", "TRYAGAIN", "NOREPLICAS")


def connect(url: str, timeout_s: float, pool_size: int = POOL_SIZE) -> Client:
    """A client whose calls fail within timeout_s instead of hanging, and retry once (no backoff)."""
    return pooled_client(url, timeout_s, pool_size=pool_size, health_check_interval=15)


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _ms(value: Any) -> float:
    return int(value or 0) / 1000.0


def _holder(turn: Any, resume: Any) -> lease_holders.Holder:
    """A lease's holder as the scripts keep it (`lease_turn`, `lease_resume`); a lease written before
    `lease_resume` existed keeps a resume's holder as text in `lease_turn`."""
    if resume:
        return lease_holders.Holder(_s(turn), _s(resume))
    return lease_holders.parse_holder(_s(turn))


def _origin_json(origin: Origin | None) -> str:
    """A fork's origin as the session hash keeps it (`forked_from`); "" for a session that was created."""
    if origin is None:
        return ""
    return json.dumps({"session_id": origin.session_id, "turn_id": origin.turn_id, "at": origin.forked_at})


def _label_pairs(blob: Any) -> set[tuple[str, str]]:
    """The (key, value) pairs a session is indexed under, as the label-of hash keeps them ("[]": none)."""
    return {(str(k), str(v)) for k, v in json.loads(blob)} if blob else set()


def _label_blob(pairs: set[tuple[str, str]]) -> str:
    return json.dumps(sorted(pairs))


def _origin(stored: bytes | None) -> Origin | None:
    if not stored:
        return None
    value = json.loads(stored)
    return Origin(value["session_id"], value["turn_id"], float(value["at"]))


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


class AutoPipeline:
    """Scripts called in the same event-loop tick travel together in one pipeline (one round trip).

    Each script stays atomic on its own; batching only saves the per-call round trip and
    pool checkout, which is most of a Python client's cost. Not a transaction: one
    script's error is that caller's alone. A Redis Cluster gets no auto-pipeline: its
    scripts are called one by one (a cluster pipeline cannot carry EVALSHA).
    """

    def __init__(self, client: Client, wait: ReplicaWait | None = None):
        self._client = client
        self._wait = wait
        self._queue: list[tuple[str, list[str], list[Any], bool, asyncio.Future[Any]]] = []
        self._tasks: set[asyncio.Task[None]] = set()

    async def evalsha(self, sha: str, keys: list[str], args: list[Any], writes: bool) -> Any:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        if not self._queue:
            loop.call_soon(self._flush)
        self._queue.append((sha, keys, args, writes, future))
        return await future

    def _flush(self) -> None:
        batch, self._queue = self._queue, []
        task = asyncio.create_task(self._send(batch))
        self._tasks.add(task)  # keep a reference until it is done
        task.add_done_callback(self._tasks.discard)

    async def _send(self, batch: list[tuple[str, list[str], list[Any], bool, asyncio.Future[Any]]]) -> None:
        # One WAIT after the batch covers every write in it (WAIT counts the connection's writes so far).
        wait = self._wait if any(writes for _, _, _, writes, _ in batch) else None
        unconfirmed: NotReplicated | None = None
        try:
            if len(batch) == 1 and wait is None:
                sha, keys, args, _, _ = batch[0]
                results: list[Any] = [await self._client.evalsha(sha, len(keys), *keys, *args)]
            else:
                pipe = self._client.pipeline(transaction=False)
                for sha, keys, args, _, _ in batch:
                    pipe.evalsha(sha, len(keys), *keys, *args)
                if wait is not None:
                    pipe.execute_command("WAIT", wait.replicas, wait.timeout_ms)
                results = await pipe.execute(raise_on_error=False)
                if wait is not None:
                    acked = results.pop()
                    if isinstance(acked, Exception) or int(acked) < wait.replicas:
                        unconfirmed = NotReplicated(
                            f"written, but {acked} of {wait.replicas} replica(s) confirmed it within "
                            f"{wait.timeout_ms} ms (COGMESH_REDIS_WAIT_REPLICAS)"
                        )
        except BaseException as exc:  # every caller of the batch gets the failure, even a cancellation
            for *_, future in batch:
                if not future.done():
                    future.set_exception(exc if isinstance(exc, Exception) else rex.ConnectionError("store closed"))
            if not isinstance(exc, Exception):
                raise
            return
        for (_, _, _, writes, future), result in zip(batch, results, strict=True):
            if future.done():  # the caller went away
                continue
            if isinstance(result, BaseException):
                future.set_exception(result)
            elif writes and unconfirmed is not None:
                future.set_exception(unconfirmed)
            else:
                future.set_result(result)


class RedisSessionStore:
    def __init__(
        self,
        client: Client,
        prefix: str = "cogmesh:",
        session_ttl_s: float = 0.0,
        waiter_ttl_s: float = WAITER_TTL_S,
        wait: ReplicaWait | None = None,
        event_retention: int = 10_000,
        events: RedisEventLog | None = None,
    ):
        self._redis = client
        self._wait = wait
        self._waiter_ttl_ms = int(waiter_ttl_s * 1000)
        self._prefix = check_prefix(prefix)
        self._channel = f"{prefix}lease-free"
        self._ttl_ms = int(session_ttl_s * 1000)
        self._retention = event_retention
        self._events = events  # follows logs for ReadEvents (the gateways read Redis themselves)
        self._notify = "1" if is_cluster(client) else ""  # scripts SPUBLISH news for the gateways' shard watch
        self.clock_offset_ms = 0  # added to Redis's clock by every script: tests move time with it
        self.drop_wake_s = DROP_WAKE_S  # how long a deleted session's marker stays to end its readers
        self._scripts: dict[str, AsyncScript] = {}
        self._loading: dict[str, asyncio.Future[Any]] = {}  # script sha -> its SCRIPT LOAD under way
        self._changed: dict[str, asyncio.Event] = {}
        self._listener: asyncio.Task[None] | None = None
        self._cluster = is_cluster(client)
        self._pipeline = None if self._cluster else AutoPipeline(client, wait)
        self._index_add = client.register_script(lua.INDEX_ADD)
        self._index_remove = client.register_script(lua.INDEX_REMOVE)
        self._index_backfill = client.register_script(lua.INDEX_BACKFILL)
        self._label_index = client.register_script(lua.LABEL_INDEX)
        self._indexed: OrderedDict[str, int] = OrderedDict()  # session -> token of its open turn, in the index

    @classmethod
    def from_url(
        cls,
        url: str,
        prefix: str,
        session_ttl_s: float,
        timeout_s: float,
        waiter_ttl_s: float = WAITER_TTL_S,
        wait: ReplicaWait | None = None,
        event_retention: int = 10_000,
        subscriber_max_lag: int = 5_000,
        fanout_messages_per_s: float = 0.0,
    ) -> RedisSessionStore:
        events = RedisEventLog(
            url,
            prefix=prefix,
            retention=event_retention,
            max_lag=subscriber_max_lag,
            timeout_s=timeout_s,
            fanout_rate=fanout_messages_per_s,
        )
        return cls(connect(url, timeout_s), prefix, session_ttl_s, waiter_ttl_s, wait, event_retention, events)

    async def ping(self) -> None:
        await self._call(self._redis.ping())

    # ----------------------------------------------------------------- plumbing

    def _keys(self, session_id: str) -> list[str]:
        """The session's keys, in the order the scripts take them (redis_lua.SESSION_KEYS, then its identity's)."""
        keys = SessionKeys(self._prefix, session_id)
        return [*(keys.key(name) for name in lua.SESSION_KEYS), identity_key(self._prefix, keys.tag)]

    def _identity_tag(self, tenant_id: str, user_id: str, topic_id: str, scope: Mapping[str, str]) -> str:
        """The hash tag a (tenant, user, topic, scope)'s sessions start their ids with; "" for anonymous sessions."""
        if not user_id and not topic_id:
            return ""
        identity: list[Any] = [tenant_id, user_id, topic_id]
        if scope:  # unscoped sessions keep the tags they had before scopes existed
            identity.append(scopes.identity(scope))
        return hashlib.sha256(json.dumps(identity).encode()).hexdigest()[:32]

    async def _call(self, call: Awaitable[T]) -> T:
        """A plain command: connection failures, timeouts and Redis's "not now" replies become StoreUnavailable."""
        try:
            return await call
        except UNAVAILABLE_ERRORS as exc:
            raise StoreUnavailable(str(exc) or type(exc).__name__) from exc
        except rex.ResponseError as exc:
            if str(exc).startswith(_TRANSIENT_REPLIES):
                raise StoreUnavailable(str(exc)) from exc
            raise

    async def _eval(self, name: str, keys: list[str], argv: list[Any]) -> Any:
        script = self._scripts.get(name)
        if script is None:
            script = self._scripts[name] = self._redis.register_script(lua.source(name))
        wait = None if name in lua.READS else self._wait
        if self._pipeline is None:
            if wait is not None:
                return await eval_then_wait(self._redis, script, keys, argv, wait)
            return await script(keys=keys, args=argv)  # each cluster node has its own script cache: Script loads it
        try:
            return await self._pipeline.evalsha(script.sha, keys, argv, wait is not None)
        except rex.NoScriptError:  # a restarted Redis forgot the scripts: load this one and go again
            await self._load(script)
            return await self._pipeline.evalsha(script.sha, keys, argv, wait is not None)

    async def _load(self, script: AsyncScript) -> None:
        """SCRIPT LOAD once for all the calls that found the script missing together (a batch fails as one)."""
        loading = self._loading.get(script.sha)
        if loading is None:
            loading = self._loading[script.sha] = asyncio.ensure_future(self._redis.script_load(script.script))
            loading.add_done_callback(lambda _: self._loading.pop(script.sha, None))
        await asyncio.shield(loading)

    async def _run(
        self, name: str, tenant_id: str, session_id: str, *args: Any, more_keys: Sequence[str] = ()
    ) -> list[Any]:
        argv = [tenant_id, self._channel, self._ttl_ms, session_id, self.clock_offset_ms, self._notify, *args]
        reply = await self._call(self._eval(name, [*self._keys(session_id), *more_keys], argv))
        status = _s(reply[0])
        if status == "not_found":
            raise SessionNotFound(session_id)
        if status == "stale":
            raise StaleLease(session_id, int(args[0]))
        return list(reply)

    def _record(self, view: list[Any]) -> SessionRecord:
        fields, message_count, active_turn, pending = view
        h = {_s(k): v for k, v in zip(fields[::2], fields[1::2], strict=True)}
        return SessionRecord(
            session_id=_s(h["session_id"]),
            tenant_id=_s(h["tenant_id"]),
            user_id=_s(h.get("user_id", b"")),
            topic_id=_s(h.get("topic_id", b"")),
            agent=_s(h.get("agent", b"")),
            role_id=_s(h.get("role_id", b"")),
            active_skill_ids=tuple(json.loads(h.get("skills", b"[]"))),
            prompt_hash=_s(h.get("prompt_hash", b"")),
            created_at=_ms(h.get("created_at")),
            updated_at=_ms(h.get("updated_at")),
            message_count=int(message_count),
            active_turn_id=_holder(active_turn, "").turn_id,
            runtime_config=json.loads(h.get("config", b"{}")),
            delegated_from=_s(h.get("deleg_from", b"")),
            delegation_turn_count=int(h.get("deleg_count", 0)),
            expires_at=_ms(h.get("expires_at")),
            pending_interrupt_ids=tuple(_s(p) for p in pending),
            scope=json.loads(h.get("scope", b"{}")),
            active_agent=_s(h.get("active_agent", b"")),
            delegated_turns=int(h.get("deleg_turns", 0)),
            plan=bytes(h.get("plan", b"")),
            labels=json.loads(h.get("labels", b"{}")),
            outcome=_s(h.get("outcome", b"")),
            forked_from=_origin(h.get("forked_from")),
            agent_version=int(h.get("av", 0)),
        )

    @staticmethod
    def _hash(view: list[Any]) -> dict[str, bytes]:
        fields = view[0]
        return {_s(k): v for k, v in zip(fields[::2], fields[1::2], strict=True)}

    # ----------------------------------------------------------------- sessions

    async def create(self, tenant_id: str, new: NewSession, reuse_existing: bool = False) -> tuple[SessionRecord, bool]:
        tag = self._identity_tag(tenant_id, new.user_id, new.topic_id, new.scope)
        # Chosen here so that a retried script recognises its own session.
        session_id = f"{tag}.{uuid.uuid4().hex[:16]}" if tag else uuid.uuid4().hex
        reuse = reuse_existing and bool(tag)
        for _ in range(10):  # another create of the identity in between makes the script ask again
            expected, more_keys = "", []
            if reuse:
                existing = await self._call(self._redis.get(identity_key(self._prefix, tag)))
                if existing:
                    expected = _s(existing)
                    more_keys = self._keys(expected)
            reply = await self._run(
                "CREATE",
                tenant_id,
                session_id,
                new.user_id,
                new.topic_id,
                new.agent,
                new.role_id,
                json.dumps(list(new.active_skill_ids)),
                json.dumps(new.runtime_config),
                new.delegated_from,
                "1" if tag else "",
                "1" if reuse else "0",
                expected,
                json.dumps(dict(new.scope), sort_keys=True),
                json.dumps(dict(new.labels), sort_keys=True),
                _origin_json(new.forked_from),
                new.agent_version,
                more_keys=more_keys,
            )
            status = _s(reply[0])
            if status == "moved":
                continue
            if status == "collision":  # a uuid4 collision: practically impossible, but never overwrite
                return await self.create(tenant_id, new, reuse_existing)
            if status == "ok":
                await self._index(tenant_id, session_id, new.scope)
                if new.labels:
                    await self._relabel(tenant_id, session_id, add=new.labels, keep=new.labels)
            return self._record(reply[2]), status == "reused"
        raise StoreUnavailable(f"session identity {new.user_id}/{new.topic_id} kept changing under CreateSession")

    async def _index(self, tenant_id: str, session_id: str, scope: Mapping[str, str]) -> None:
        """List the new session in its tenant's index and scope indexes; forget a few of the oldest entries
        whose session expired."""
        tenant = TenantKeys(self._prefix, tenant_id)
        keys = [tenant.index, tenant.seq, tenant.scopes, *(tenant.scope_index(k, v) for k, v in sorted(scope.items()))]
        scope_json = json.dumps(dict(scope), sort_keys=True)
        oldest = await self._call(self._index_add(keys=keys, args=[session_id, INDEX_SWEEP, scope_json]))
        others = [_s(old) for old in oldest if _s(old) != session_id]
        if not others:
            return
        alive = await asyncio.gather(*(self._call(self._redis.exists(self._keys(sid)[0])) for sid in others))
        gone = [sid for sid, present in zip(others, alive, strict=True) if not present]
        await self._unindex(tenant, gone)

    async def _unindex(self, tenant: TenantKeys, session_ids: Sequence[str | bytes], also: str = "") -> None:
        """Take sessions out of their tenant's index and every scope and label index they are in (and `also`, the
        index they were just read from)."""
        if not session_ids:
            return
        # A session's scope never changes, so what the hash says still holds when the script runs; a label the
        # session gains meanwhile is added after (by its update), so an entry left behind is only ever extra.
        scoped: Any = await self._call(self._redis.hmget(tenant.scopes, list(session_ids)))
        labelled: Any = await self._call(self._redis.hmget(tenant.labels, list(session_ids)))
        keys = {tenant.scope_index(k, v) for blob in scoped if blob for k, v in json.loads(blob).items()}
        keys |= {tenant.label_index(k, v) for blob in labelled for k, v in _label_pairs(blob)}
        keys |= {also} - {"", tenant.index}
        await self._call(
            self._index_remove(keys=[tenant.index, tenant.scopes, tenant.labels, *sorted(keys)], args=list(session_ids))
        )

    async def _relabel(
        self, tenant_id: str, session_id: str, add: Mapping[str, str], keep: Mapping[str, str] | None
    ) -> None:
        """Put the session into the label indexes of `add`, and (with `keep`: its labels now) out of those of any
        other label it was indexed under; records the (key, value) pairs it is indexed under, which between the two
        steps of an update may hold two values of one key. Adding comes before the session's labels change and
        removing after, so an index never misses a session that has its label."""
        tenant = TenantKeys(self._prefix, tenant_id)
        for _ in range(5):  # another update of the session's labels in between: read again
            recorded_blob = await self._call(self._redis.hget(tenant.labels, session_id))
            recorded = _label_pairs(recorded_blob)
            wanted = set(add.items())
            after = wanted | {pair for pair in recorded if keep is None or keep.get(pair[0]) == pair[1]}
            if keep is not None:
                after |= set(keep.items())
            adding = sorted(tenant.label_index(k, v) for k, v in after - recorded)
            removing = sorted(tenant.label_index(k, v) for k, v in recorded - after)
            done = await self._call(
                self._label_index(
                    keys=[tenant.index, tenant.labels, *adding, *removing],
                    args=[session_id, len(adding), _label_blob(after), _s(recorded_blob) if recorded_blob else ""],
                )
            )
            if int(done) >= 0:
                return
        raise StoreUnavailable(f"session {session_id}: its labels kept changing while they were indexed")

    async def _backfill(self, tenant_id: str, tenant: TenantKeys, labels: bool = False) -> None:
        """Put the tenant's sessions listed before its scope indexes (with `labels`: its label indexes) existed
        into them; once per tenant.

        Sessions indexed since carry a score above the counter read here, and are in their
        indexes already. Progress is kept after each batch (field "*" of the scope-of or
        label-of hash), so an interrupted backfill goes on where it stopped.
        """
        field, held_by = ("labels", tenant.labels) if labels else ("scope", tenant.scopes)
        index_of = tenant.label_index if labels else tenant.scope_index
        done: Any = await self._call(self._redis.hget(held_by, "*"))
        if done == b"done":
            return
        top = int(await self._call(self._redis.get(tenant.seq)) or 0)
        after = f"({int(done)}" if done else "-inf"
        while True:
            page: Any = await self._call(self._redis.zrangebyscore(tenant.index, after, top, 0, CLOSE_BATCH, True))
            if not page:
                break
            held = await asyncio.gather(
                *(self._call(self._redis.hmget(self._keys(_s(sid))[0], "tenant_id", field)) for sid, _ in page)
            )
            keys: dict[str, int] = {}
            args: list[Any] = [int(page[-1][1])]
            for (sid, _), (owner, blob) in zip(page, held, strict=True):
                pairs = json.loads(blob) if blob and _s(owner) == tenant_id else {}
                if not pairs:  # none, or gone (a listing forgets it)
                    continue
                names = [index_of(k, v) for k, v in sorted(pairs.items())]
                recorded = _label_blob(set(pairs.items())) if labels else blob
                args += [sid, recorded, len(names), *(keys.setdefault(name, len(keys) + 3) for name in names)]
            await self._call(self._index_backfill(keys=[tenant.index, held_by, *keys], args=args))
            after = f"({int(page[-1][1])}"
        await self._call(self._redis.hset(held_by, "*", "done"))

    async def get(self, tenant_id: str, session_id: str) -> SessionRecord:
        reply = await self._run("GET", tenant_id, session_id)
        return self._record(reply[1])

    async def lookup(
        self, tenant_id: str, user_id: str, topic_id: str, scope: Mapping[str, str] | None = None
    ) -> SessionRecord:
        tag = self._identity_tag(tenant_id, user_id, topic_id, scope or {})
        found = await self._call(self._redis.get(identity_key(self._prefix, tag))) if tag else None
        if not found:
            raise SessionNotFound(f"{user_id}/{topic_id}")
        try:
            return await self.get(tenant_id, _s(found))
        except SessionNotFound:
            raise SessionNotFound(f"{user_id}/{topic_id}") from None

    async def list_sessions(
        self,
        tenant_id: str,
        cursor: int | None,
        limit: int,
        scope_filter: Mapping[str, str] | None = None,
        where: search.SessionFilter | None = None,
    ) -> Page[SessionRecord]:
        tenant = TenantKeys(self._prefix, tenant_id)
        index = tenant.index
        names = []
        if scope_filter:
            await self._backfill(tenant_id, tenant)
            names += [tenant.scope_index(k, v) for k, v in sorted(scope_filter.items())]
        if where and where.labels:
            await self._backfill(tenant_id, tenant, labels=True)
            names += [tenant.label_index(k, v) for k, v in sorted(where.labels.items())]
        if names:
            # The smallest of the filter's scope and label indexes; its scores are the tenant index's, so are the
            # cursors. The filter is still checked on every session read from it.
            index = names[0]
            if len(names) > 1:
                sizes = await asyncio.gather(*(self._call(self._redis.zcard(name)) for name in names))
                index = min(zip(sizes, names, strict=True))[1]
        found: list[tuple[SessionRecord, int]] = []
        below = "+inf" if cursor is None else f"({cursor}"
        scanned, stride = 0, limit + 1  # a filtered read's batches grow while matches are sparse
        while len(found) <= limit:
            want = limit + 1 - len(found)
            if where:
                want, stride = min(max(want, stride), SCAN_BUDGET - scanned), min(stride * 2, FILTER_BATCH)
                if want <= 0:  # the budget is spent: answer what was found, and where to go on from
                    return Page([r for r, _ in found], int(below[1:]))
            batch: Any = await self._call(self._redis.zrevrangebyscore(index, below, "-inf", 0, want, True))
            if not batch:
                break
            ended, below = len(batch) < want, f"({int(batch[-1][1])}"
            scanned += len(batch)
            if where:  # the facts of each entry first, so that only matches are read whole
                batch = await self._matching(tenant_id, batch, where, scope_filter or {})
                if len(batch) > limit + 1 - len(found):
                    batch = batch[: limit + 1 - len(found)]
                    ended, below = False, f"({int(batch[-1][1])}"  # the rest is read again by the next batch
            elif scope_filter and len(scope_filter) > 1:  # the other pairs, checked before any record is read
                held = await self._call(self._redis.hmget(tenant.scopes, [sid for sid, _ in batch]))
                batch = [
                    (sid, score)
                    for (sid, score), blob in zip(batch, held, strict=True)
                    if not blob or scopes.holds(json.loads(blob), scope_filter)
                ]
            records = await asyncio.gather(*(self.get(tenant_id, _s(sid)) for sid, _ in batch), return_exceptions=True)
            gone = []
            for (sid, score), record in zip(batch, records, strict=True):
                if isinstance(record, SessionNotFound):
                    gone.append(sid)  # evicted by its TTL
                elif isinstance(record, BaseException):
                    raise record
                elif scope_filter and not scopes.holds(record.scope, scope_filter):
                    continue
                elif where and not search.matches(record.facts(), where):
                    continue  # changed since its facts were read
                else:
                    found.append((record, int(score)))
            await self._unindex(tenant, gone, index)
            if ended:
                break
        if len(found) > limit:
            return Page([r for r, _ in found[:limit]], found[limit - 1][1])
        return Page([r for r, _ in found], None)

    async def _matching(
        self, tenant_id: str, batch: list[Any], where: search.SessionFilter, scope_filter: Mapping[str, str]
    ) -> list[Any]:
        """The (session id, score) entries of `batch` whose session `where` and `scope_filter` match, by the few
        fields of its hash a filter needs (one pipelined HMGET each, two HLENs more for a status filter); a session
        gone stays in, for the whole read to find it gone and forget it."""
        fields = _FACT_FIELDS + (_STATUS_FIELDS if where.needs_status else ())
        pipe = self._redis.pipeline(transaction=False)
        for sid, _ in batch:
            keys = SessionKeys(self._prefix, _s(sid))
            pipe.hmget(keys.key("s"), list(fields))
            if where.needs_status:  # undecided checkpoints: all of them, less the decided ones
                pipe.hlen(keys.key("c"))
                pipe.hlen(keys.key("d"))
        replies: list[Any] = await self._call(pipe.execute())
        now = 0.0
        if where.needs_status:
            seconds, micros = await self._call(self._redis.time())
            now = int(seconds) + int(micros) / 1e6 + self.clock_offset_ms / 1000  # the scripts' clock
        step = 3 if where.needs_status else 1
        kept = []
        for i, entry in enumerate(batch):
            h = dict(zip(fields, replies[i * step], strict=True))
            if h["tenant_id"] is None:
                kept.append(entry)
                continue
            running = pending = False
            if where.needs_status:
                lease_turn, lease_exp = _s(h["lease_turn"] or b""), _ms(h["lease_exp"])
                running = bool(lease_turn) and (h["lease_open"] == b"1" or lease_exp > now)
                pending = int(replies[i * step + 1]) > int(replies[i * step + 2])
            facts = search.Facts(
                agent=_s(h["agent"] or b""),
                labels=json.loads(h["labels"] or b"{}"),
                created_at=_ms(h["created_at"]),
                updated_at=_ms(h["updated_at"]),
                status=search.status(running, pending, _s(h.get("outcome") or b"")),
                scope=json.loads(h["scope"] or b"{}"),
                forked_from=(origin.session_id if (origin := _origin(h["forked_from"])) else ""),
                agent_version=int(h["av"] or 0),
            )
            mine = _s(h["tenant_id"]) == tenant_id and scopes.holds(facts.scope, scope_filter)
            if mine and search.matches(facts, where):
                kept.append(entry)
        return kept

    async def update(self, tenant_id: str, session_id: str, update: SessionUpdate, token: int) -> SessionRecord:
        names = {
            "role_id": "role_id",
            "prompt_hash": "prompt_hash",
            "delegated_from": "deleg_from",
            "delegation_turn_count": "deleg_count",
            "active_agent": "active_agent",
            "plan": "plan",
            "agent": "agent",
            "agent_version": "av",
        }
        pairs: list[Any] = []
        for name, value in update.changes().items():
            if name == "active_skill_ids":
                pairs += ["skills", json.dumps(list(value))]
            elif name == "runtime_config":
                pairs += ["config", json.dumps(value)]
            elif name == "labels":
                pairs += ["labels", json.dumps(dict(value), sort_keys=True)]
            else:
                pairs += [names[name], value]
        # Label changes merge with the labels as the script finds them, so two updates of different keys both hold.
        changes = update.label_changes or {}
        if update.labels is not None and len(update.labels) > search.MAX_LABELS:
            raise InvalidValue("labels", search.too_many_labels(session_id, len(update.labels)))
        ops: list[Any] = []
        for key, value in changes.items():
            ops += [key, "" if value is None else "1", value or ""]
        relabelled = update.labels is not None or bool(changes)
        if relabelled:  # the labels it gains join their indexes first: an index never misses a session
            gained = {k: v for k, v in {**(update.labels or {}), **changes}.items() if v is not None}
            await self._relabel(tenant_id, session_id, add=gained, keep=None)
        reply = await self._run("UPDATE", tenant_id, session_id, token, search.MAX_LABELS, len(changes), *ops, *pairs)
        if _s(reply[0]) == "too_many":
            raise InvalidValue("labels", search.too_many_labels(session_id, int(reply[1])))
        record = self._record(reply[1])
        if relabelled:  # and it leaves those of the labels it lost
            await self._relabel(tenant_id, session_id, add={}, keep=record.labels)
        return record

    async def delete(self, tenant_id: str, session_id: str) -> bool:
        try:
            await self._run("DELETE", tenant_id, session_id, self.drop_wake_s)
        except SessionNotFound:
            return False
        await self._unindex(TenantKeys(self._prefix, tenant_id), [session_id])
        return True

    async def close_all(self, tenant_id: str, user_id: str) -> int:
        # Page by page through the tenant's index, so one huge tenant never blocks Redis for long.
        tenant = TenantKeys(self._prefix, tenant_id)
        closed, after = 0, "-inf"
        while True:
            page: Any = await self._call(self._redis.zrangebyscore(tenant.index, after, "+inf", 0, CLOSE_BATCH, True))
            if not page:
                return closed
            results = await asyncio.gather(
                *(self._run("CLOSE", tenant_id, _s(sid), user_id, self.drop_wake_s) for sid, _ in page),
                return_exceptions=True,
            )
            gone = []
            for (sid, _), result in zip(page, results, strict=True):
                if isinstance(result, SessionNotFound):
                    gone.append(sid)
                elif isinstance(result, BaseException):
                    raise result
                elif _s(result[0]) == "ok":
                    gone.append(sid)
                    closed += 1
            await self._unindex(tenant, gone)
            after = f"({int(page[-1][1])}"

    # ----------------------------------------------------------------- messages

    async def append_messages(
        self, tenant_id: str, session_id: str, payloads: Sequence[bytes], token: int, request_id: str = ""
    ) -> AppendResult:
        # Without the caller's id, a fresh one still makes the client's own retry harmless.
        reply = await self._run(
            "APPEND", tenant_id, session_id, token, request_id or uuid.uuid4().hex, REMEMBERED_APPENDS, *payloads
        )
        return AppendResult(int(reply[1]), deduplicated=_s(reply[0]) == "duplicate")

    async def list_messages(self, tenant_id: str, session_id: str, offset: int, limit: int) -> Page[bytes]:
        reply = await self._run("LIST_MESSAGES", tenant_id, session_id, offset, limit)
        total = int(reply[1])
        return Page(list(reply[2]), offset + limit if offset + limit < total else None)

    async def last_messages(self, tenant_id: str, session_id: str, n: int) -> list[bytes]:
        reply = await self._run("LAST_MESSAGES", tenant_id, session_id, n)
        return list(reply[1])

    # ----------------------------------------------------------------- the turn lease

    async def try_acquire(
        self,
        tenant_id: str,
        session_id: str,
        turn_id: str,
        ttl_s: float,
        strategy: Strategy,
        opening: NewEvents | None = None,
        resume: str = "",
        rehydrate: int = 0,
    ) -> Acquired | Queued:
        base = INTERRUPT_BASE if strategy.interrupts else ENQUEUE_BASE
        logged: list[Any] = [0, 0, 0]
        if opening is not None and (opening.events or opening.journal):
            logged = self._log_args(session_id, opening)
            await self._schedule(session_id, int(ttl_s * 1000))  # the index first: an open turn is never missing
        reply = await self._run(
            "TRY_ACQUIRE",
            tenant_id,
            session_id,
            turn_id,
            int(ttl_s * 1000),
            "interrupt" if strategy.interrupts else strategy.value,  # ROLLBACK waits as INTERRUPT does
            self._waiter_ttl_ms,
            int(base),
            resume,
            *logged,
            max(0, rehydrate),
            self._retention,
        )
        status = _s(reply[0])
        if status == "acquired":
            token, start, last = int(reply[1]), int(reply[4]), int(reply[5])
            if last:
                self._stamped(opening, last)
                self._remember_indexed(session_id, token)
            rehydration = self._rehydration(reply[6:9]) if len(reply) > 6 else None
            return Acquired(token, _ms(reply[2]), tuple(_s(i) for i in reply[3]), start, last, rehydration)
        if status == "held":
            raise LeaseHeld(session_id, _holder(reply[1], "").turn_id)
        return Queued(_holder(reply[1], "").turn_id, _ms(reply[2]))

    async def leave_queue(self, tenant_id: str, session_id: str, turn_id: str) -> None:
        with contextlib.suppress(SessionNotFound):
            await self._run("LEAVE_QUEUE", tenant_id, session_id, turn_id)

    async def wait_for_change(self, session_id: str, timeout_s: float) -> None:
        self._ensure_listener()
        event = self._changed.setdefault(session_id, asyncio.Event())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), timeout_s)

    def _ensure_listener(self) -> None:
        if self._listener is None or self._listener.done():
            self._listener = asyncio.create_task(self._listen(), name="sessions-lease-listener")

    async def _listen(self) -> None:
        """Wake local waiters when any replica releases a lease; polling covers the gaps."""

        async def wake(data: bytes) -> None:
            event = self._changed.pop(_s(data), None)
            if event is not None:
                event.set()

        await follow_broadcast(self._redis, self._channel, wake, "lease-free")

    async def renew_lease(
        self, tenant_id: str, session_id: str, token: int, ttl_s: float, holder: str = "", hand_over: bool = False
    ) -> LeaseInfo:
        if hand_over:  # another replica may take the turn over at once: the index must look now
            await self._schedule(session_id, 0)
        reply = await self._run(
            "RENEW", tenant_id, session_id, token or -1, int(ttl_s * 1000), holder, "1" if hand_over else ""
        )
        return self._lease(reply)

    @staticmethod
    def _lease(reply: list[Any]) -> LeaseInfo:
        """LeaseInfo from a script's lease_reply: [status, turn, token, expiry, interrupted by, holder, takeovers,
        resume attempt]."""
        held = _holder(reply[1], reply[7])
        return LeaseInfo(
            held.turn_id, int(reply[2]), _ms(reply[3]), _s(reply[4]), _s(reply[5]), int(reply[6]), held.resume
        )

    async def release_lease(self, tenant_id: str, session_id: str, token: int) -> bool:
        reply = await self._run("RELEASE", tenant_id, session_id, token)
        return bool(int(reply[1]))

    async def lease_state(self, tenant_id: str, session_id: str) -> LeaseState:
        reply = await self._run("LEASE_STATE", tenant_id, session_id)
        queued = tuple(_s(t) for t in reply[1])
        if len(reply) == 2:
            return LeaseState(None, queued)
        return LeaseState(self._lease(reply[2]), queued)

    # ----------------------------------------------------------------- summary, goals, phase

    async def update_summary(self, tenant_id: str, session_id: str, text: str, covered: int, token: int) -> Summary:
        reply = await self._run("UPDATE_SUMMARY", tenant_id, session_id, token, text, covered)
        if _s(reply[0]) == "invalid":
            raise InvalidValue(
                "covered_message_count", f"covers {covered} messages but the session has {int(reply[1])}"
            )
        return Summary(text, covered, _ms(reply[1]))

    async def save_goal(
        self,
        tenant_id: str,
        session_id: str,
        goal_id: str,
        text: str,
        status: GoalStatus,
        data: JsonObject,
        token: int,
    ) -> Goal:
        goal_id = goal_id or uuid.uuid4().hex
        blob = json.dumps({"id": goal_id, "text": text, "status": status.value, "data": data})
        reply = await self._run("SAVE_GOAL", tenant_id, session_id, token, goal_id, blob, MAX_GOALS)
        if _s(reply[0]) == "limit":
            raise LimitExceeded(f"session {session_id!r} already has {MAX_GOALS} goals")
        return Goal(goal_id, text, status, dict(data), _ms(reply[1]), _ms(reply[2]))

    @staticmethod
    def _goal(stored: bytes) -> Goal:
        created, updated, blob = stored.split(b"|", 2)
        value = json.loads(blob)
        return Goal(value["id"], value["text"], GoalStatus(value["status"]), value["data"], _ms(created), _ms(updated))

    async def list_goals(self, tenant_id: str, session_id: str) -> list[Goal]:
        reply = await self._run("LIST_GOALS", tenant_id, session_id)
        return sorted((self._goal(g) for g in reply[1]), key=lambda g: (g.created_at, g.goal_id))

    async def set_phase(self, tenant_id: str, session_id: str, phase: str, data: JsonObject, token: int) -> Phase:
        blob = json.dumps({"phase": phase, "data": data})
        reply = await self._run("SET_PHASE", tenant_id, session_id, token, blob)
        return Phase(phase, dict(data), _ms(reply[1]))

    # ----------------------------------------------------------------- checkpoints

    @staticmethod
    def _checkpoint(stored: bytes, decided: bytes) -> Checkpoint:
        created, token, blob = stored.split(b"|", 2)
        value = json.loads(blob)
        decision: bytes | None = None
        decided_at = 0.0
        if decided:
            at, encoded = decided.split(b"|", 1)
            decision, decided_at = base64.b64decode(encoded), _ms(at)
        return Checkpoint(
            interrupt_id=value["id"],
            turn_id=value["turn"],
            kind=value["kind"],
            request=base64.b64decode(value["request"]),
            payload=base64.b64decode(value["payload"]),
            lease_token=int(token),
            created_at=_ms(created),
            decision=decision,
            decided_at=decided_at,
        )

    def _checkpoint_reply(self, session_id: str, interrupt_id: str, reply: list[Any]) -> Checkpoint:
        status = _s(reply[0])
        if status == "no_checkpoint":
            raise CheckpointNotFound(session_id, interrupt_id)
        if status == "exists":
            raise CheckpointExists(session_id, interrupt_id)
        if status == "conflict":
            raise CheckpointConflict(session_id, interrupt_id, "was already decided differently")
        if status == "undecided":
            raise CheckpointConflict(session_id, interrupt_id, "has no decision yet")
        if status == "limit":
            raise LimitExceeded(f"session {session_id!r} already has {MAX_PENDING_CHECKPOINTS} pending checkpoints")
        return self._checkpoint(reply[1], reply[2] if len(reply) > 2 else b"")

    async def write_checkpoint(self, tenant_id: str, session_id: str, new: NewCheckpoint, token: int) -> Checkpoint:
        blob = json.dumps(
            {
                "id": new.interrupt_id,
                "turn": new.turn_id,
                "kind": new.kind,
                "request": _b64(new.request),
                "payload": _b64(new.payload),
            }
        )
        reply = await self._run(
            "WRITE_CHECKPOINT", tenant_id, session_id, token or -1, new.interrupt_id, blob, MAX_PENDING_CHECKPOINTS
        )
        return self._checkpoint_reply(session_id, new.interrupt_id, reply)

    async def get_checkpoint(self, tenant_id: str, session_id: str, interrupt_id: str) -> Checkpoint:
        reply = await self._run("GET_CHECKPOINT", tenant_id, session_id, interrupt_id)
        return self._checkpoint_reply(session_id, interrupt_id, reply)

    async def list_checkpoints(self, tenant_id: str, session_id: str) -> list[Checkpoint]:
        reply = await self._run("LIST_CHECKPOINTS", tenant_id, session_id)
        return [self._checkpoint(stored, decided) for stored, decided in reply[1]]

    async def decide_checkpoint(
        self, tenant_id: str, session_id: str, interrupt_id: str, decision: bytes
    ) -> Checkpoint:
        reply = await self._run("DECIDE_CHECKPOINT", tenant_id, session_id, interrupt_id, _b64(decision))
        return self._checkpoint_reply(session_id, interrupt_id, reply)

    async def consume_checkpoint(
        self, tenant_id: str, session_id: str, interrupt_id: str, token: int, allow_undecided: bool
    ) -> Checkpoint:
        reply = await self._run(
            "CONSUME_CHECKPOINT",
            tenant_id,
            session_id,
            token or -1,
            interrupt_id,
            "1" if allow_undecided else "0",
            int(CONSUMED_TTL_S * 1000),
        )
        return self._checkpoint_reply(session_id, interrupt_id, reply)

    async def answer_pause(self, tenant_id: str, session_id: str, answer: PauseAnswer) -> PauseAnswered:
        has_decision = answer.decision is not None
        reply = await self._run(
            "ANSWER_PAUSE",
            tenant_id,
            session_id,
            answer.interrupt_id,
            answer.kind,
            _b64(answer.decision) if answer.decision is not None else "",
            "1" if has_decision else "",
            "1" if answer.abandon else "",
            answer.resume,
            int(answer.ttl_s * 1000),
        )
        status = _s(reply[0])
        if status == "misfit":
            raise InvalidValue("decision", misfit(answer.interrupt_id, _s(reply[1]), answer.kind))
        if status == "conflict":
            recorded = base64.b64decode(reply[1].split(b"|", 1)[1])
            raise CheckpointConflict(session_id, answer.interrupt_id, "was already decided differently", recorded)
        if status == "held":
            raise LeaseHeld(session_id, _holder(reply[1], "").turn_id, resuming=_s(reply[2]) == "1")
        checkpoint = self._checkpoint_reply(session_id, answer.interrupt_id, reply[:3])
        return PauseAnswered(checkpoint, int(reply[3]), int(reply[4]), self._journal_records(reply[5]))

    # ----------------------------------------------------------------- rehydration

    async def rehydrate(self, tenant_id: str, session_id: str, last_n: int) -> Rehydration:
        reply = await self._run("REHYDRATE", tenant_id, session_id, last_n)
        return self._rehydration(reply[1:4])

    def _rehydration(self, reply: Sequence[Any]) -> Rehydration:
        """A rehydration from a script's (view, last messages, goals)."""
        view, last, goals = reply
        h = self._hash(view)
        summary = None
        if "summary_at" in h:
            summary = Summary(_s(h["summary_text"]), int(h["summary_covered"]), _ms(h["summary_at"]))
        phase = None
        if "phase_at" in h:
            value = json.loads(h["phase"])
            phase = Phase(value["phase"], value["data"], _ms(h["phase_at"]))
        return Rehydration(
            session=self._record(view),
            summary=summary,
            last_messages=list(last),
            goal=active_goal([self._goal(g) for g in goals]),
            phase=phase,
        )

    # ----------------------------------------------------------------- the event log and journals

    def _log_args(self, session_id: str, new: NewEvents) -> list[Any]:
        """The events (stamped, serialized without their seq, which the script assigns; one argument), journal
        entries and what the events change in the session (model.effects_of), as the scripts'
        log_events reads them."""
        stamp = proto_now()
        payloads = []
        for event in new.events:
            event.seq, event.session_id, event.turn_id = 0, session_id, new.turn_id
            if not event.HasField("create_time"):
                event.create_time.CopyFrom(stamp)
            payloads.append(event.SerializeToString())
        entries: list[Any] = []
        for kind, state, position in new.journal:
            entries += [kind, position, state]
        effects = effects_of(new.events)
        changes: list[Any] = []
        if effects.active_agent is not None:
            changes += ["active_agent", effects.active_agent]
        if effects.plan is not None:
            changes += ["plan", effects.plan]
        if effects.delegated:
            changes += ["delegated", "1"]
        if effects.outcome is not None:  # how the turn ended or paused: the session's status (search.status)
            changes += ["outcome", effects.outcome]
        # A stream entry per ENTRY_EVENTS events: a lone event as it is, several as their StoredEvents encoding.
        chunks = [payloads[i : i + lua.ENTRY_EVENTS] for i in range(0, len(payloads), lua.ENTRY_EVENTS)]
        logged = [c[0] if len(c) == 1 else b"".join(field_one(p) for p in c) for c in chunks]
        # The journal's entries are stamped here, as the events are (no Redis TIME per write).
        recorded = stamp.ToMilliseconds() + self.clock_offset_ms
        return [len(payloads), len(logged), *logged, len(new.journal), recorded, *entries, len(changes) // 2, *changes]

    @staticmethod
    def _stamped(new: NewEvents | None, last_seq: int) -> None:
        """Give the logged events their seqs, as the memory store does."""
        if new is not None:
            for offset, event in enumerate(new.events):
                event.seq = last_seq - len(new.events) + 1 + offset

    async def _schedule(self, session_id: str, after_ms: int) -> None:
        """Have the open-turn index look at the session within `after_ms` (or sooner, as it already would)."""
        await self._call(
            self._eval(
                "SCHEDULE",
                list(open_turn_bucket(self._prefix, session_id)),
                [session_id, after_ms, self.clock_offset_ms],
            )
        )

    def _remember_indexed(self, session_id: str, token: int) -> None:
        self._indexed[session_id] = token
        self._indexed.move_to_end(session_id)
        if len(self._indexed) > INDEXED_LEASES:
            self._indexed.popitem(last=False)

    async def append_events(self, tenant_id: str, session_id: str, new: NewEvents) -> Appended:
        opens = not new.release and new.pause is None
        if opens and self._indexed.get(session_id) != new.token:
            # The turn is (or stays) open under this token: its index entry must exist before it does.
            await self._schedule(session_id, 0)
        pause: list[Any] = ["", "", 0]
        if new.pause is not None:
            p = new.pause
            blob = json.dumps(
                {
                    "id": p.interrupt_id,
                    "turn": p.turn_id,
                    "kind": p.kind,
                    "request": _b64(p.request),
                    "payload": _b64(p.payload),
                }
            )
            pause = [p.interrupt_id, blob, MAX_PENDING_CHECKPOINTS]
        reply = await self._run(
            "APPEND_EVENTS",
            tenant_id,
            session_id,
            new.token,
            new.turn_id,
            new.append_id,
            REMEMBERED_APPENDS,
            "1" if new.release else "",
            *self._log_args(session_id, new),
            len(new.messages),
            *new.messages,
            *pause,
            new.consume_interrupt_id,
            int(CONSUMED_TTL_S * 1000),
            new.holder,
            self._retention,
        )
        status = _s(reply[0])
        if status == "exists":
            assert new.pause is not None
            raise CheckpointExists(session_id, new.pause.interrupt_id)
        if status == "no_checkpoint":
            raise CheckpointNotFound(session_id, new.consume_interrupt_id)
        if status == "other_turn":
            why = f"interrupt {new.consume_interrupt_id!r} paused turn {_s(reply[1])!r}, not turn {new.turn_id!r}"
            raise InvalidValue("consume_interrupt_id", why)
        if status == "limit":
            raise LimitExceeded(f"session {session_id!r} already has {MAX_PENDING_CHECKPOINTS} pending checkpoints")
        last, count = int(reply[1]), int(reply[2])
        if status == "duplicate":
            return Appended(last, count, duplicate=True)
        self._stamped(new, last)
        if opens:
            self._remember_indexed(session_id, new.token)
        else:
            self._indexed.pop(session_id, None)
        return Appended(last, count)

    async def read_events(
        self, tenant_id: str, session_id: str, after_seq: int, follow: bool, heartbeat_s: float
    ) -> AsyncIterator[Batch | None]:
        await self.get(tenant_id, session_id)  # the caller's tenant's, and there
        assert self._events is not None, "a RedisSessionStore made without an event log reader cannot read events"
        if follow:
            async for batch in self._events.read(session_id, after_seq, heartbeat_s):
                yield batch
            return
        state = await self.log_state(tenant_id, session_id)
        check_cursor(session_id, after_seq, state.first_seq, state.last_seq)
        stream = SessionKeys(self._prefix, session_id).key("events")
        while after_seq < state.last_seq:
            stop = min(after_seq + MAX_REPLAY_BATCH, state.last_seq)
            batch = await self._call(read_range(self._redis, stream, after_seq, stop))
            if not batch or batch[0].seq != after_seq + 1:  # trimmed or deleted meanwhile
                state = await self.log_state(tenant_id, session_id)
                check_cursor(session_id, after_seq, state.first_seq, state.last_seq)
                continue
            after_seq = batch[-1].seq
            yield batch

    async def log_state(self, tenant_id: str, session_id: str) -> LogState:
        reply = await self._run("LOG_STATE", tenant_id, session_id)
        last, first_id, last_fields = int(reply[1]), _s(reply[2]), reply[3]
        if not last:
            return LogState(1, 0, True)
        first = int(first_id.split("-", 1)[0]) if first_id else last + 1
        fields = dict(zip(last_fields[::2], last_fields[1::2], strict=True))
        tail = decode_entries([(f"{last}-0", fields)])  # empty: the drop's marker
        return LogState(first, last, not tail or leaves_idle(tail[-1]))

    async def journal(self, tenant_id: str, session_id: str, turn_id: str) -> list[JournalRecord]:
        reply = await self._run("JOURNAL", tenant_id, session_id, turn_id)
        return self._journal_records(reply[1])

    @staticmethod
    def _journal_records(stored_entries: list[bytes]) -> list[JournalRecord]:
        records = []
        for stored in stored_entries:
            kind, seq, at, state = stored.split(b"|", 3)
            records.append(JournalRecord(_s(kind), state, int(seq), _ms(at)))
        return records

    async def renew_leases(self, renewals: Sequence[Renewal]) -> list[Renewed]:
        async def renew(r: Renewal) -> Renewed:
            try:
                info = await self.renew_lease(r.tenant_id, r.session_id, r.token, r.ttl_s, r.holder, r.hand_over)
            except (SessionNotFound, StaleLease):
                return Renewed(r.session_id, r.token, held=False)
            return Renewed(r.session_id, r.token, True, info.interrupt_requested_by, info.expires_at)

        return list(await asyncio.gather(*(renew(r) for r in renewals)))  # one pipeline on a standalone Redis

    async def claim_orphans(self, holder: str, limit: int, ttl_s: float) -> Orphans:
        """Look at the sessions the open-turn index says are due; claim those whose open turn's lease ran out.

        A session whose lease is still live is looked at again when it could run out; one
        whose turn ended or paused leaves the index (unless a turn opened there meanwhile:
        its generation moved on, and the entry stays due).
        """
        buckets = open_turn_buckets(self._prefix)
        looks: list[tuple[tuple[str, str], str, str]]
        claimed = Orphans()
        # The scripts answer NONE_OPEN for a bucket that holds no open turn at all.
        if self._cluster:  # the buckets sit on different slots: one call each
            due: Any = await self._call(
                asyncio.gather(*(self._eval("DUE", list(b), [limit, self.clock_offset_ms]) for b in buckets))
            )
            claimed.none_open = all(entries == NONE_OPEN for entries in due)
            due = [[] if entries == NONE_OPEN else entries for entries in due]
            looks = [(b, _s(sid), _s(gen)) for b, entries in zip(buckets, due, strict=True) for sid, gen in entries]
        else:  # one Redis holds them all: one call for every bucket (an idle replica's poll is one command)
            keys = [key for bucket in buckets for key in bucket]
            found = await self._call(self._eval("DUE_ALL", keys, [limit, self.clock_offset_ms]))
            claimed.none_open = found == NONE_OPEN
            looks = [] if claimed.none_open else [(buckets[int(b)], _s(sid), _s(gen)) for b, sid, gen in found]
        while looks and len(claimed) < limit:
            batch, looks = looks[: limit - len(claimed)], looks[limit - len(claimed) :]
            replies = await asyncio.gather(
                *(self._run("CLAIM", "", sid, holder, int(ttl_s * 1000)) for _, sid, _ in batch)
            )
            reschedules = []
            for (bucket, sid, gen), reply in zip(batch, replies, strict=True):
                status, next_look = _s(reply[0]), 0
                if status == "claimed":
                    tenant, turn, token, takeovers, last_seq, next_look, previous, interrupt, resume = reply[1:10]
                    held = _holder(turn, resume)
                    claimed.append(
                        Claimed(
                            _s(tenant),
                            sid,
                            held.turn_id,
                            int(token),
                            int(takeovers),
                            int(last_seq),
                            _s(previous),
                            _s(interrupt),
                            held.resume,
                        )
                    )
                elif status == "live":
                    next_look = reply[1]
                args = [sid, gen, int(next_look)]  # when the lease could run out, by the scripts' clock
                reschedules.append(self._eval("RESCHEDULE", list(bucket), args))
            await self._call(asyncio.gather(*reschedules))
        return claimed

    def turns_opened(self) -> int | None:
        return None  # a turn opens through any replica: nothing here to wait on

    async def until_turn_opens(self, opened: int, timeout_s: float) -> None:
        return None

    async def interrupt_turn(self, tenant_id: str, session_id: str, turn_id: str, by: str) -> LeaseInfo | None:
        reply = await self._run("INTERRUPT_TURN", tenant_id, session_id, turn_id, by)
        return self._lease(reply) if len(reply) > 1 else None

    # ----------------------------------------------------------------- time travel

    async def turn_seqs(self, tenant_id: str, session_id: str, turn_ids: Sequence[str]) -> dict[str, int]:
        reply = await self._run("TURN_SEQS", tenant_id, session_id, *turn_ids)
        return {t: int(seq) for t, seq in zip(turn_ids, reply[1], strict=True) if seq}

    async def rewind(self, tenant_id: str, session_id: str, rewind: Rewind) -> tuple[SessionRecord, int]:
        logged = NewEvents(rewind.turn_id, rewind.token, [rewind.event])
        reply = await self._run(
            "REWIND",
            tenant_id,
            session_id,
            rewind.token,
            rewind.keep,
            rewind.expected_messages,
            rewind.expected_head,
            rewind.turn_id,
            self._retention,
            len(rewind.dropped_turn_ids),
            *rewind.dropped_turn_ids,
            *self._log_args(session_id, logged),
        )
        status = _s(reply[0])
        if status == "busy":
            raise LeaseHeld(session_id, _holder(reply[1], "").turn_id)
        if status == "moved":
            raise HistoryChanged(session_id)
        last = int(reply[1])
        self._stamped(logged, last)
        return self._record(reply[2]), last

    @property
    def client(self) -> Client:
        """The store's Redis client, which the schedules and webhooks stores of this process share."""
        return self._redis

    async def close(self) -> None:
        if self._events is not None:
            await self._events.close()
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._listener
        for event in self._changed.values():
            event.set()
        await self._redis.aclose()
