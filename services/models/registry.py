"""The live model catalogue: the catalogue file, hot-reloaded, plus models added at run time.

``ModelRegistry.catalog()`` is what every request resolves against. It checks,
at most every ``refresh_s`` seconds, and whenever the models service's publish
loop is woken by a change in the file's folder (services/kit/filewatch.py):

* the catalogue file's (mtime, size): when it changed, the file is loaded
  again; a file that no longer loads is logged and the last good catalogue
  keeps serving, so a bad edit never takes the service down;
* the store's version: when another replica added or removed a model, the
  added models are read again. A store that announces its changes (Redis:
  a PUBLISH after each, `RedisModelStore.follow`) is read on the announcement
  instead, and on this clock only every `store_recheck_s` as a safety net, so
  an idle models service sends Redis nothing.

Models added with ``add`` sit on top of the file's models (an added model
replaces the file's model of the same id when ``replace`` is set) and are
written to the ``ModelStore`` when one is configured: a YAML file
(``FileModelStore``) or Redis (``RedisModelStore``, shared by replicas).
An added model that collides with the file after a reload is skipped and
logged; the others still serve.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError
from redis.asyncio import RedisCluster
from redis.asyncio.client import PubSub

from services.kit.logging import log
from services.kit.redis_pool import REDIS_ERRORS, Client, broadcast_subscription, next_message, publish
from services.kit.redis_url import check_prefix
from services.kit.yaml_config import ConfigError, parse, read_text_if_exists
from services.lib.models.catalog import CatalogError, ModelCatalog, ModelSpec
from services.lib.redis_keys import models_keys

_ADDED = "<added models>"
FOLLOW_PING_S = 30.0  # a quiet subscription to the store's announcements is pinged this often
FOLLOW_STUCK_S = 5.0  # a subscription's read or ping this much past its own timeout is given up
_FOLLOW_ERRORS: tuple[type[Exception], ...] = (*REDIS_ERRORS, TimeoutError)
RETRY_MIN_S, RETRY_MAX_S = 0.05, 2.0  # backoff between subscriptions when Redis is away


class StoreError(RuntimeError):
    """The store of added models cannot be read or written."""


class ModelStore(Protocol):
    name: str

    async def load(self) -> list[ModelSpec]: ...

    async def save(self, spec: ModelSpec) -> None: ...

    async def delete(self, model_id: str) -> bool: ...

    async def version(self) -> str:
        """A stamp that changes whenever the stored models change."""
        ...


def _spec_from_json(data: Any, where: str) -> ModelSpec:
    try:
        return ModelSpec.model_validate(data)
    except ValidationError as exc:
        raise StoreError(f"{where}: invalid model: {exc.errors()[0]['msg']}") from exc


class _AddedModelsFile(BaseModel):
    model_config = ConfigDict(extra="ignore")  # as before: only `models` is read

    models: list[ModelSpec] = []


class FileModelStore:
    """Added models as a YAML document ``{models: [...]}``, rewritten atomically on every change."""

    name = "file"

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = asyncio.Lock()

    async def load(self) -> list[ModelSpec]:
        try:
            text = read_text_if_exists(self.path)
            if text is None:
                return []
            return parse(text, str(self.path)).validate(_AddedModelsFile).models
        except ConfigError as exc:
            raise StoreError(str(exc)) from exc

    async def save(self, spec: ModelSpec) -> None:
        async with self._lock:
            models = {m.id: m for m in await self.load()}
            models[spec.id] = spec
            self._write(list(models.values()))

    async def delete(self, model_id: str) -> bool:
        async with self._lock:
            models = {m.id: m for m in await self.load()}
            if models.pop(model_id, None) is None:
                return False
            self._write(list(models.values()))
            return True

    async def version(self) -> str:
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            return ""
        return f"{stat.st_mtime_ns}:{stat.st_size}"

    def _write(self, models: list[ModelSpec]) -> None:
        document = {"models": [m.model_dump(mode="json") for m in sorted(models, key=lambda m: m.id)]}
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(
                "# Models added at run time through ModelsService.AddModel.\n"
                + yaml.safe_dump(document, sort_keys=False, allow_unicode=True),
                encoding="utf-8",
            )
            os.replace(tmp, self.path)  # readers see the old or the new file, never half of one
        except OSError as exc:
            raise StoreError(f"{self.path}: cannot write: {exc}") from exc


class RedisModelStore:
    """Added models in the hash ``<prefix>{models}:added`` (id -> JSON); ``<prefix>{models}:version`` counts changes.

    Both keys share one hash tag (one cluster slot), so a change and its count are one MULTI/EXEC.
    Each change is then announced on the channel ``<prefix>{models}:version:changed``.
    """

    name = "redis"

    def __init__(self, client: Client, prefix: str = "cogmesh:") -> None:
        self._redis = client
        self._hash, self._version = models_keys(check_prefix(prefix))
        self.channel = f"{self._version}:changed"  # the version's hash tag: the same cluster node

    async def _announce(self) -> None:
        # A hint: a replica that misses it reads the version on its next subscription or recheck.
        try:
            await publish(self._redis, self.channel, "changed")
        except REDIS_ERRORS as exc:
            log.warning("announcing a change of the added models failed", error=str(exc))

    async def follow(self, changed: Callable[[], Awaitable[None]]) -> None:
        """Call `changed` on each change a replica announces and on each (re)subscription; until cancelled.

        A subscription's confirmation counts as a change: announcements made before it, or
        while the connection was away (redis-py subscribes again on its own), were missed.
        A quiet subscription is pinged every `FOLLOW_PING_S`, so a connection that died
        without a word is found and made again, and the store's version is read then too.
        """
        backoff = RETRY_MIN_S
        while True:
            pubsub: PubSub | None = None
            try:
                pubsub = await broadcast_subscription(self._redis, self.channel)
                while True:
                    # Bounded from outside too: a read or ping stuck on a connection that went away
                    # without a word must not hold the follower; the subscription is made again.
                    async with asyncio.timeout(FOLLOW_PING_S + FOLLOW_STUCK_S):
                        message = await next_message(pubsub, FOLLOW_PING_S)
                    if message is None:
                        async with asyncio.timeout(FOLLOW_STUCK_S):
                            await pubsub.ping()
                        # A quiet spell is checked too (one GET): a subscription that came back without
                        # its confirmation reaching here would otherwise miss changes until the next one.
                        await changed()
                    elif message["type"] in ("subscribe", "message"):
                        backoff = RETRY_MIN_S
                        await changed()
            except _FOLLOW_ERRORS as exc:
                log.warning("model store subscription lost redis; subscribing again", error=str(exc) or "stuck")
                if isinstance(self._redis, RedisCluster):
                    with contextlib.suppress(*REDIS_ERRORS):
                        await self._redis.nodes_manager.initialize()  # the channel's primary after a failover
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, RETRY_MAX_S)
            finally:
                if pubsub is not None:
                    with contextlib.suppress(Exception):
                        await pubsub.aclose()  # type: ignore[no-untyped-call]

    async def load(self) -> list[ModelSpec]:
        try:
            raw = await self._redis.hgetall(self._hash)
        except REDIS_ERRORS as exc:
            raise StoreError(f"redis: {exc}") from exc
        return [
            _spec_from_json(json.loads(value), f"redis {self._hash}[{key!r}]") for key, value in sorted(raw.items())
        ]

    async def save(self, spec: ModelSpec) -> None:
        try:
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.hset(self._hash, spec.id, json.dumps(spec.model_dump(mode="json")))
                pipe.incr(self._version)
                await pipe.execute()
        except REDIS_ERRORS as exc:
            raise StoreError(f"redis: {exc}") from exc
        await self._announce()

    async def delete(self, model_id: str) -> bool:
        try:
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.hdel(self._hash, model_id)
                pipe.incr(self._version)
                removed, _ = await pipe.execute()
        except REDIS_ERRORS as exc:
            raise StoreError(f"redis: {exc}") from exc
        await self._announce()
        return bool(removed)

    async def version(self) -> str:
        try:
            value = await self._redis.get(self._version)
        except REDIS_ERRORS as exc:
            raise StoreError(f"redis: {exc}") from exc
        return "" if value is None else str(value)


@dataclass(frozen=True)
class AddResult:
    model: ModelSpec
    replaced: bool
    persisted: bool


class ModelExists(LookupError):
    """AddModel without replace for an id that is already in the catalogue."""


class ModelConflict(ValueError):
    """An added model's id or alias collides with another model; ``field`` is relative to the request."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


def _file_stamp(path: Path) -> tuple[int, int] | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_mtime_ns, stat.st_size


class ModelRegistry:
    def __init__(
        self,
        path: Path,
        store: ModelStore | None = None,
        *,
        refresh_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Load ``path`` now (a broken file at startup raises CatalogError)."""
        self.path = path
        self.store = store
        self._refresh_s = refresh_s
        self._store_check_s = refresh_s
        self._store_checked_at = float("-inf")
        self._clock = clock
        self._stamp = _file_stamp(path)
        self._base = ModelCatalog.from_yaml(path)
        self._added: dict[str, ModelSpec] = {}
        self._store_version: str | None = None
        self._catalog = self._base
        self._checked_at = float("-inf")
        self._lock = asyncio.Lock()
        self.last_error = ""

    async def start(self) -> None:
        """Read the store's models (startup)."""
        await self._refresh(force=True)

    async def catalog(self, look: bool = False) -> ModelCatalog:
        """The catalogue, its file looked at if `look` or if `refresh_s` passed since the last look."""
        if look or self._clock() - self._checked_at >= self._refresh_s:
            await self._refresh()
        return self._catalog

    def store_announces_changes(self, recheck_s: float) -> None:
        """The store's changes are announced (`store_changed`): its version is read on this clock every `recheck_s`."""
        self._store_check_s = recheck_s

    async def store_changed(self) -> None:
        """A replica changed the store (or a change may have been missed): read its version now."""
        async with self._lock:
            self._store_checked_at = self._clock()
            if self.store is not None and await self._reload_store(False):
                self._catalog = self._merge()

    async def _refresh(self, force: bool = False) -> None:
        async with self._lock:
            now = self._clock()
            self._checked_at = now
            stamp = _file_stamp(self.path)
            changed = force
            if stamp != self._stamp:
                self._stamp = stamp
                changed |= self._reload_file()
            if self.store is not None and (force or now - self._store_checked_at >= self._store_check_s):
                self._store_checked_at = now
                changed |= await self._reload_store(force)
            if changed:
                self._catalog = self._merge()

    def _reload_file(self) -> bool:
        try:
            self._base = ModelCatalog.from_yaml(self.path)
        except CatalogError as exc:
            self.last_error = str(exc)
            log.error("model catalogue reload failed; keeping the last good catalogue", problem=str(exc))
            return False
        self.last_error = ""
        log.info("model catalogue reloaded", path=str(self.path), models=len(self._base.models))
        return True

    async def _reload_store(self, force: bool) -> bool:
        assert self.store is not None
        try:
            version = await self.store.version()
            if version == self._store_version and not force:
                return False
            models = await self.store.load()
        except StoreError as exc:
            # The file's models and the last known added ones keep serving.
            log.error("reading added models failed", store=self.store.name, problem=str(exc))
            return False
        self._store_version = version
        self._added = {m.id: m for m in models}
        return True

    def _merge(self) -> ModelCatalog:
        try:
            return self._base.with_models(self._added.values(), source=_ADDED)
        except CatalogError:
            pass
        # Add one by one so a single conflicting model does not hide the others.
        catalog = self._base
        for spec in self._added.values():
            try:
                catalog = catalog.with_models([spec], source=_ADDED)
            except CatalogError as exc:
                log.error("added model conflicts with the catalogue; skipped", model=spec.id, problem=exc.problem)
        return catalog

    def is_added(self, model_id: str) -> bool:
        return model_id.strip().lower() in self._added

    async def add(self, spec: ModelSpec, *, replace: bool = False) -> AddResult:
        """Add ``spec``; raises ModelExists, ModelConflict or StoreError."""
        current = await self.catalog()
        existing = current.get_or_none(spec.id)
        if existing is not None and not replace:
            raise ModelExists(f"model {spec.id!r} is already in the catalogue; set replace to overwrite it")
        async with self._lock:
            merged = self._with(spec)
            persisted = False
            if self.store is not None:
                await self.store.save(spec)
                persisted = True
                # Our own write changed the version; re-reading it would be a no-op.
                self._store_version = None
            self._added[spec.id] = spec
            self._catalog = merged
        return AddResult(spec, existing is not None, persisted)

    def _with(self, spec: ModelSpec) -> ModelCatalog:
        try:
            return self._catalog.with_models([spec], source=_ADDED)
        except CatalogError as exc:
            # The new model is last in the merged list; an error on another model
            # can only be that model's alias equal to the new id.
            last = f"models[{len(self._catalog.models) - (1 if self._catalog.get_or_none(spec.id) else 0)}]"
            field = exc.field or ""
            field = "model" + field.removeprefix(last) if field.startswith(last) else "model.id"
            raise ModelConflict(field, exc.problem) from exc

    async def remove(self, model_id: str) -> bool:
        key = model_id.strip().lower()
        await self.catalog()
        async with self._lock:
            if key not in self._added:
                return False
            if self.store is not None:
                await self.store.delete(key)
                self._store_version = None
            del self._added[key]
            self._catalog = self._merge()
        return True
