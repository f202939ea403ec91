"""Versioned configuration snapshots pushed over server-streaming watch RPCs.

A control plane (models, policy) is the source of truth: it validates, hot-reloads
and publishes each new version to a `SnapshotFeed`; its Watch RPC streams the feed.
A data plane (runtime, gateway) holds a `SnapshotWatcher`: it keeps the last good
snapshot, decides locally from it, and names its version in what it records.

The rules are those of xDS, OPA bundles and client-go informers:
- a watcher with no snapshot waits for the first one (with a deadline, then reports
  "not synced"), never gets an empty answer;
- a snapshot the watcher cannot apply is logged and the last good one stays in force;
- a broken stream is reopened with backoff, quoting the version held, so a control
  plane restart costs one message, not a gap.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Generic, TypeVar

import grpc

from services.kit.errors import DependencyError, from_dependency
from services.kit.logging import log

S = TypeVar("S")  # what a watcher holds: the applied snapshot
M = TypeVar("M")  # the snapshot message on the wire

RETRY_MIN_S = 0.2
RETRY_MAX_S = 5.0
# A watch is reopened this often even when healthy (quoting the version held, so it costs one
# call and no snapshot): a stream never outlives a proxy's idea of a long request.
WATCH_RENEW_S = 600.0


class SnapshotFeed(Generic[M]):
    """The current snapshot of a control plane and the watchers waiting for the next."""

    def __init__(self) -> None:
        self._version = ""
        self._message: M | None = None
        self._changed = asyncio.Condition()

    @property
    def version(self) -> str:
        return self._version

    async def publish(self, version: str, message: M) -> bool:
        """Make `message` current; False (and nobody woken) when `version` is already current."""
        if version == self._version:
            return False
        async with self._changed:
            self._version, self._message = version, message
            self._changed.notify_all()
        return True

    async def watch(self, known_version: str) -> AsyncIterator[M]:
        """The snapshots after `known_version`, as they are published; ends when the caller stops reading."""
        held = known_version

        def newer() -> bool:
            return self._message is not None and self._version != held

        while True:
            async with self._changed:
                await self._changed.wait_for(newer)
                held, message = self._version, self._message
            assert message is not None
            yield message


class NotSynced(RuntimeError):
    """No snapshot arrived in time: the caller decides whether to wait more or fail."""


class SnapshotWatcher(Generic[S, M]):
    """Holds the last good snapshot of one control plane, kept current by a watch stream.

    `open_stream(known_version)` opens the Watch RPC; `apply(message)` turns a
    snapshot message into what the data plane decides with (it raises to refuse a
    snapshot, which keeps the last good one) and `version_of(message)` names it.
    """

    def __init__(
        self,
        name: str,
        open_stream: Callable[[str], AsyncIterator[M]],
        apply: Callable[[M], S | Awaitable[S]],
        version_of: Callable[[M], str],
    ) -> None:
        self.name = name
        self._open, self._apply, self._version_of = open_stream, apply, version_of
        self._current: S | None = None
        self._version = ""
        self._synced = asyncio.Event()
        self._applied = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None
        self.refused = 0  # snapshots that could not be applied
        self.received = 0
        self.listeners: list[Callable[[S, str], None]] = []

    @property
    def version(self) -> str:
        return self._version

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    def current(self) -> S:
        if self._current is None:
            raise NotSynced(f"no {self.name} snapshot received yet")
        return self._current

    def current_or_none(self) -> S | None:
        return self._current

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"watch-{self.name}")

    async def wait_synced(self, timeout_s: float) -> bool:
        """True once a snapshot is held; False when none arrived within `timeout_s`."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._synced.wait(), timeout_s)
        return self.synced

    async def wait_until(self, holds: Callable[[S], bool], timeout_s: float) -> bool:
        """True once the snapshot held satisfies `holds`; False when none did within `timeout_s`."""

        def ready() -> bool:
            return self._current is not None and holds(self._current)

        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s), self._applied:
                await self._applied.wait_for(ready)
        return ready()

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _take(self, message: M) -> None:
        version = self._version_of(message)
        self.received += 1
        try:
            applied = self._apply(message)
            if isinstance(applied, Awaitable):
                applied = await applied
        except Exception as exc:  # noqa: BLE001 - refused: the last good snapshot stays in force
            self.refused += 1
            log.warning("snapshot refused", snapshot=self.name, version=version, held=self._version, error=str(exc))
            return
        async with self._applied:
            self._current, self._version = applied, version
            self._applied.notify_all()
        self._synced.set()
        log.info("snapshot applied", snapshot=self.name, version=version)
        for listener in self.listeners:
            listener(applied, version)

    async def _run(self) -> None:
        delay = RETRY_MIN_S
        while True:
            try:
                async for message in self._open(self._version):
                    await self._take(message)
                    delay = RETRY_MIN_S
            except asyncio.CancelledError:
                raise
            except DependencyError as exc:
                if exc.status_code == grpc.StatusCode.DEADLINE_EXCEEDED:
                    continue  # the periodic renewal (or a WATCH_RENEW_S wait for a service that never came)
                log.debug(
                    "snapshot watch broken", snapshot=self.name, code=exc.status_code.name, details=exc.status_message
                )
            except Exception as exc:  # noqa: BLE001 - a bug must not end the watch for good
                log.warning("snapshot watch failed", snapshot=self.name, error=repr(exc))
            # Jittered backoff, so replicas do not all come back at the same instant.
            await asyncio.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, RETRY_MAX_S)


def stream_of(
    rpc_of: Callable[[], Callable[..., Any]], request_of: Callable[[str], Any], dependency: str = "upstream"
) -> Callable[[str], AsyncIterator[Any]]:
    """`open_stream` for a server-streaming method (`rpc_of()` returns it, so channels open on first use):
    a typed client's (services/kit/dependencies.py), or a stub's, whose failure becomes a DependencyError here."""

    async def open_stream(known_version: str) -> AsyncIterator[Any]:
        call = rpc_of()(request_of(known_version), wait_for_ready=True, timeout=WATCH_RENEW_S)
        try:
            async for reply in call:
                yield reply
        except grpc.aio.AioRpcError as exc:
            raise from_dependency(exc, dependency) from exc
        finally:
            call.cancel()

    return open_stream
