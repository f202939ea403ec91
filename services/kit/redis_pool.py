"""The one way every service opens Redis: standalone, Sentinel or Cluster, with a bounded pool.

The forms of COGMESH_REDIS_URL are read by services/kit/redis_url.py.

redis-py's default pool fails a call at once with "Too many connections" when all of its
connections are busy (100 since redis-py 8), which turned a burst of 1,000 turns into
UNAVAILABLE errors. Every client made here makes such a call wait for a free connection,
up to `POOL_WAIT_FACTOR` socket timeouts, so a burst queues while a Redis that is down
(refused at once) or hung (socket timeout) still fails every call in bounded time. A
cluster client bounds the calls in flight on all of its nodes together the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import redis.asyncio as aioredis
from redis import exceptions as rex
from redis.asyncio.client import PubSub
from redis.asyncio.cluster import ClusterNode, ClusterPipeline
from redis.asyncio.connection import BlockingConnectionPool, parse_url
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool
from redis.backoff import NoBackoff
from redis.commands.core import AsyncScript

from services.kit.config import Settings
from services.kit.errors import Unavailable
from services.kit.logging import log
from services.kit.redis_url import parse_redis_url

T = TypeVar("T")

POOL_SIZE = 100  # connections per client; more calls at once wait for one
POOL_WAIT_FACTOR = 5  # a call waits up to this many socket timeouts for a free connection

# A client of any form: the commands the suite uses exist on both.
Client = aioredis.Redis | aioredis.RedisCluster

# What redis-py raises when Redis, or a cluster node, is away, hung or failing over
# (a cluster's SlotNotCoveredError is no RedisError).
REDIS_ERRORS: tuple[type[Exception], ...] = (rex.RedisError, rex.RedisClusterException, OSError)


@dataclass(frozen=True)
class ReplicaWait:
    """Wait after a write until `replicas` replicas have it (Redis WAIT), at most `timeout_ms`."""

    replicas: int
    timeout_ms: int

    @classmethod
    def of(cls, settings: Settings) -> ReplicaWait | None:
        """COGMESH_REDIS_WAIT_REPLICAS / _TIMEOUT_MS; None when writes need no replica."""
        return (
            cls(settings.redis_wait_replicas, settings.redis_wait_timeout_ms) if settings.redis_wait_replicas else None
        )


class _BlockingSentinelPool(SentinelConnectionPool, BlockingConnectionPool):
    """Sentinel's pool (connections follow the primary through a failover) that queues a burst."""


@contextlib.contextmanager
def closed_under_us() -> Iterator[None]:
    """A ConnectionError for a command whose connection was closed under it.

    redis-py's cluster client closes every connection when a node reports CLUSTERDOWN
    during a failover, including those other calls are writing on, and a write on a
    closed asyncio connection then fails as AttributeError/TypeError, which no retry
    recognises (redis-py #4287, #3546).
    """
    try:
        yield
    except (AttributeError, TypeError) as exc:
        if "NoneType" not in str(exc):
            raise
        raise rex.ConnectionError(f"connection closed under the command: {exc}") from exc


class BoundedCluster(aioredis.RedisCluster):
    """A RedisCluster whose calls wait (boundedly) for one of `pool_size` places instead of failing.

    redis-py's cluster client raises MaxConnectionsError when a node's connections are all
    busy. Here at most `pool_size` calls are in flight on all nodes together (so no node
    needs more connections than that); more wait up to `wait_s`, then fail like a Redis
    that cannot be reached.
    """

    def __init__(self, *, pool_size: int, wait_s: float, **kwargs: Any):
        kwargs["max_connections"] = pool_size + 1  # +1: a pipeline's own
        super().__init__(**kwargs)
        self._places = asyncio.Semaphore(pool_size)
        self._wait_s = wait_s

    @contextlib.asynccontextmanager
    async def _place(self) -> Any:
        try:
            async with asyncio.timeout(self._wait_s):
                await self._places.acquire()
        except TimeoutError:
            raise rex.ConnectionError(f"no Redis connection free within {self._wait_s:g}s") from None
        try:
            yield
        finally:
            self._places.release()

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        async with self._place():
            with closed_under_us():
                if self._initialize:
                    # Find the nodes before routing: calls made together while redis-py does it lazily
                    # race each other and close each other's connections (redis-py #3935).
                    await self.initialize()
                return await super().execute_command(*args, **kwargs)

    def pipeline(self, transaction: Any | None = None, shard_hint: Any | None = None) -> ClusterPipeline:
        if shard_hint:
            raise rex.RedisClusterException("shard_hint is deprecated in cluster mode")
        return _BoundedPipeline(self, transaction)  # type: ignore[abstract]


class _BoundedPipeline(ClusterPipeline):
    """A cluster pipeline that takes one of its client's places, and fails like Redis when closed under it."""

    async def execute(self, raise_on_error: bool = True, allow_redirections: bool = True) -> list[Any]:
        client = self.cluster_client
        assert isinstance(client, BoundedCluster)
        async with client._place():
            with closed_under_us():
                return await super().execute(raise_on_error, allow_redirections)


class _ClusterNoTimeoutRetry(BoundedCluster):
    # After a timeout the command may have run: only a caller that can tell (a batch id) retries it.
    ERRORS_ALLOW_RETRY = (rex.ConnectionError, rex.ClusterDownError, rex.SlotNotCoveredError)  # type: ignore[assignment]


def pooled_client(
    url: str,
    timeout_s: float,
    retry_timeouts: bool = True,
    pool_size: int = POOL_SIZE,
    socket_timeout_s: float | None = None,
    **options: Any,
) -> Client:
    """A client of `url`'s form whose calls wait boundedly for a connection and fail within `timeout_s` once sent.

    A call that fails on a dropped connection is retried once at once (and, with
    `retry_timeouts`, one that timed out), so every caller's commands must be safe to
    run twice or carry their own way to tell. `socket_timeout_s` overrides the read
    timeout (a blocking read waits longer than a call).
    """
    target = parse_redis_url(url)
    errors: tuple[type[rex.RedisError], ...] = (rex.ConnectionError, rex.TimeoutError)
    retry = Retry(NoBackoff(), 1, supported_errors=errors if retry_timeouts else (rex.ConnectionError,))
    socket = {
        "socket_timeout": socket_timeout_s or timeout_s,
        "socket_connect_timeout": timeout_s,
        **options,
    }
    if target.kind == "cluster":
        kwargs = parse_url(target.options_url)
        kwargs.pop("host", None), kwargs.pop("port", None), kwargs.pop("db", None)
        cluster_class = BoundedCluster if retry_timeouts else _ClusterNoTimeoutRetry
        return cluster_class(
            startup_nodes=[ClusterNode(host, port) for host, port in target.nodes],
            pool_size=pool_size,
            wait_s=POOL_WAIT_FACTOR * timeout_s,
            retry=retry,
            **(kwargs | socket),
        )
    pool_options = {"max_connections": pool_size, "timeout": POOL_WAIT_FACTOR * timeout_s, "retry": retry}
    if target.kind == "sentinel":
        kwargs = parse_url(target.options_url)
        kwargs.pop("host", None), kwargs.pop("port", None)
        sentinel_options = {"socket_timeout": timeout_s, "socket_connect_timeout": timeout_s}
        if target.sentinel_password:
            sentinel_options["password"] = target.sentinel_password  # type: ignore[assignment]
        sentinel = Sentinel(list(target.nodes), sentinel_kwargs=sentinel_options)  # type: ignore[no-untyped-call]
        master_options: dict[str, Any] = kwargs | socket | pool_options
        client: aioredis.Redis = sentinel.master_for(
            target.service, connection_pool_class=_BlockingSentinelPool, **master_options
        )
        return client
    pool = BlockingConnectionPool.from_url(url, **(socket | pool_options))
    return aioredis.Redis.from_pool(pool)


def is_cluster(client: Client) -> bool:
    return isinstance(client, aioredis.RedisCluster)


async def _channel_node(client: aioredis.RedisCluster, channel: str) -> ClusterNode:
    await client.initialize()
    node = client.get_node_from_key(channel)
    if node is None:
        raise rex.SlotNotCoveredError(f"no primary serves the slot of channel {channel!r} yet")
    return node


async def broadcast_subscription(client: Client, channel: str) -> PubSub:
    """A pub/sub connection subscribed to `channel`, on any topology.

    PUBLISH reaches every node of a cluster, but its reply counts only the subscribers of
    the node it ran on: every subscriber and `publish` use the primary of the channel's slot.
    """
    if isinstance(client, aioredis.RedisCluster):
        pubsub: PubSub = client.pubsub(node=await _channel_node(client, channel))
    else:
        pubsub = client.pubsub()
    await pubsub.subscribe(channel)
    return pubsub


async def next_message(pubsub: PubSub, wait_s: float, ignore_subscribe_messages: bool = False) -> Any:
    """`pubsub.get_message`, except that a cancellation of the reading task is never lost.

    Under load, redis-py (8.1) can swallow a cancel that lands in its pub/sub read and return
    as if the wait ran out: a loop reading messages until cancelled then goes round for ever,
    and whoever awaits the cancelled task waits with it (seen in the models service's follower).
    """
    message = await pubsub.get_message(ignore_subscribe_messages=ignore_subscribe_messages, timeout=wait_s)
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError
    return message


async def publish(client: Client, channel: str, message: str) -> int:
    """PUBLISH; returns how many subscribers (see `broadcast_subscription`) heard it."""
    if isinstance(client, aioredis.RedisCluster):
        return int(await client.publish(channel, message, target_nodes=await _channel_node(client, channel)))
    return int(await client.publish(channel, message))


async def follow_broadcast(
    client: Client,
    channel: str,
    handle: Callable[[bytes], Awaitable[None]],
    what: str,
    subscribed: asyncio.Event | None = None,
) -> None:
    """Hand every message PUBLISHed on `channel` to `handle`, until cancelled; `subscribed` is set once listening.

    A lost connection (Redis restarting, a cluster node failing over) is logged and the
    subscription made again, on the channel's new primary if need be; messages published
    meanwhile are missed, so listeners must only use them as hints.
    """
    backoff = 0.05
    while True:
        pubsub: PubSub | None = None
        try:
            pubsub = await broadcast_subscription(client, channel)
            if subscribed is not None:
                subscribed.set()
            backoff = 0.05
            while True:
                message = await next_message(pubsub, 1.0, ignore_subscribe_messages=True)
                if message is not None:
                    await handle(message["data"])
        except REDIS_ERRORS as exc:
            log.warning(f"{what} subscription lost redis; subscribing again", error=str(exc))
            if isinstance(client, aioredis.RedisCluster):
                with contextlib.suppress(*REDIS_ERRORS):
                    await client.nodes_manager.initialize()  # the slot map after a failover
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 2.0)
        finally:
            if pubsub is not None:
                with contextlib.suppress(Exception):
                    await pubsub.aclose()  # type: ignore[no-untyped-call]


class NotReplicated(rex.RedisError):
    """A write was applied on the primary, but fewer replicas than asked confirmed it in time.

    It may still reach them, or be lost if the primary fails first: the caller should
    retry it (the suite's scripts are safe to run twice) or report it unconfirmed.
    """


# Of REDIS_ERRORS, the ones that mean "not now": the same call may succeed later (a write may have run).
UNAVAILABLE_ERRORS: tuple[type[Exception], ...] = (
    rex.ConnectionError,
    rex.TimeoutError,
    rex.ClusterError,  # CLUSTERDOWN, MASTERDOWN
    rex.TryAgainError,
    rex.AskError,  # MOVED/ASK left after the client's redirections
    rex.RedisClusterException,
    NotReplicated,
)


# Error replies that mean "not now" as well (a replica promoted, a server loading or busy).
TRANSIENT_REPLIES = ("READONLY", "LOADING", "MASTERDOWN", "TRYAGAIN", "BUSY", "OOM")


async def unless_unavailable(call: Awaitable[T], store: str) -> T:
    """`call`'s reply; Unavailable naming `store` when Redis cannot answer now (the call may succeed later)."""
    try:
        return await call
    except UNAVAILABLE_ERRORS as exc:
        raise Unavailable(f"{store} unavailable: {exc or type(exc).__name__}") from exc
    except rex.ResponseError as exc:
        if str(exc).startswith(TRANSIENT_REPLIES):
            raise Unavailable(f"{store} unavailable: {exc}") from exc
        raise


async def eval_then_wait(
    client: Client, script: AsyncScript, keys: list[str], args: list[Any], wait: ReplicaWait
) -> Any:
    """Run `script`, then WAIT on the same connection until `wait.replicas` replicas hold its writes.

    WAIT only counts the writes of the connection it is sent on, so the two commands must
    share one: a pipeline on a standalone Redis or Sentinel's primary, and on a cluster one
    connection of the slot's primary (redis-py has no cluster pipeline that carries
    EVALSHA). A cluster whose slot map is stale (a failover) is read again and the pair
    sent once more; a node missing the script gets it (each node has its own cache).
    """
    for attempt in range(3):
        if isinstance(client, aioredis.RedisCluster):
            try:
                reply, acked = await _cluster_eval_then_wait(client, script, keys, args, wait)
            except rex.ConnectionError:
                if attempt:
                    raise
                await client.nodes_manager.initialize()  # a dropped connection, or a primary gone: once more
                continue
        else:
            pipe = client.pipeline(transaction=False)
            pipe.evalsha(script.sha, len(keys), *keys, *args)
            pipe.execute_command("WAIT", wait.replicas, wait.timeout_ms)
            reply, acked = await pipe.execute(raise_on_error=False)
        if isinstance(reply, rex.NoScriptError):
            await client.script_load(script.script)
            continue
        if isinstance(reply, rex.MovedError | rex.AskError) and isinstance(client, aioredis.RedisCluster):
            await client.nodes_manager.initialize()  # the slot moved (a failover): send the pair to its new primary
            continue
        if isinstance(reply, Exception):
            raise reply
        if isinstance(acked, Exception):
            raise acked
        if int(acked) < wait.replicas:
            raise NotReplicated(
                f"written, but {acked} of {wait.replicas} replica(s) confirmed it within {wait.timeout_ms} ms "
                "(COGMESH_REDIS_WAIT_REPLICAS)"
            )
        return reply
    raise rex.ConnectionError("the cluster kept moving the slot while writing; try again")


async def _cluster_eval_then_wait(
    client: aioredis.RedisCluster, script: AsyncScript, keys: list[str], args: list[Any], wait: ReplicaWait
) -> tuple[Any, Any]:
    await client.initialize()
    node = client.get_node_from_key(keys[0])
    if node is None:
        raise rex.SlotNotCoveredError(f"no primary serves the slot of {keys[0]!r} yet")
    bounded = client._place() if isinstance(client, BoundedCluster) else contextlib.nullcontext()
    commands = [("EVALSHA", script.sha, len(keys), *keys, *args), ("WAIT", wait.replicas, wait.timeout_ms)]
    replies: list[Any] = []
    async with bounded:
        connection = node.acquire_connection()
        try:
            with closed_under_us():
                await connection.send_packed_command(connection.pack_commands(commands))
                for _ in commands:
                    try:
                        replies.append(await connection.read_response())
                    except rex.ResponseError as exc:  # the error of one command; the next reply follows it
                        replies.append(exc)
        except (rex.ConnectionError, rex.TimeoutError, OSError):
            await connection.disconnect()
            raise
        finally:
            node.release(connection)
    return replies[0], replies[1]
