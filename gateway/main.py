"""Gateway entry point: `python -m gateway`."""

from __future__ import annotations

import ipaddress
from collections.abc import Awaitable, Callable

from a2a.types import a2a_pb2, a2a_pb2_grpc

from cogmesh.gateway.v1 import (
    agents_pb2,
    agents_pb2_grpc,
    gateway_pb2,
    gateway_pb2_grpc,
    schedules_pb2,
    schedules_pb2_grpc,
    webhooks_pb2,
    webhooks_pb2_grpc,
)
from cogmesh.memory.v1 import memory_pb2, memory_pb2_grpc
from gateway import auth
from gateway.a2a.servicer import A2AServicer
from gateway.agents.servicer import AgentServicer
from gateway.auth import Authenticator, load_keys
from gateway.guard import GatewayGuard
from gateway.limits import TenantLimits
from gateway.memory import GatewayMemoryServicer
from gateway.remote_event_log import RemoteEventLog
from gateway.schedules.scheduler import Scheduler
from gateway.schedules.servicer import ScheduleServicer
from gateway.servicer import GatewayServicer
from gateway.settings import GatewaySettings
from gateway.webhooks.servicer import GatewayWebhookServicer
from services.kit.clients import Clients
from services.kit.logging import log
from services.kit.server import App, mount, run, server_credentials
from services.lib.event_log import EventLogReader
from services.lib.models.watch import agents_of_catalog
from services.lib.redis_event_log import RedisEventLog


def is_loopback(address: str) -> bool:
    host = address.rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def authenticator(settings: GatewaySettings) -> Authenticator:
    """API keys when configured; otherwise only an explicit, loopback-only dev mode."""
    if settings.api_keys_file is not None:
        try:
            return Authenticator(load_keys(settings.api_keys_file))
        except ValueError as exc:
            raise SystemExit(f"gateway: {exc}") from exc
    if not settings.dev_mode:
        raise SystemExit(
            "gateway: no API keys configured. Set COGMESH_API_KEYS_FILE, or COGMESH_DEV_MODE=true "
            "for an unauthenticated gateway on loopback"
        )
    listen = settings.listen_address("gateway")
    if not is_loopback(listen):
        raise SystemExit(f"gateway: dev mode (no auth) binds loopback only, not {listen}; configure API keys")
    log.warning("dev mode: no authentication, every caller is one tenant", tenant=settings.tenant_id, listen=listen)
    return Authenticator(None, settings.tenant_id)


def event_log(settings: GatewaySettings, clients: Clients) -> EventLogReader:
    """Read from Redis Streams when COGMESH_REDIS_URL is set, else from the sessions service (its memory).

    Either way the sessions service writes the log; the gateway only reads it."""
    if settings.redis_url:
        return RedisEventLog(
            settings.redis_url,
            prefix=settings.redis_key_prefix,
            retention=settings.event_retention,
            max_lag=settings.subscriber_max_lag,
            timeout_s=settings.redis_timeout_s,
            fanout_rate=settings.fanout_messages_per_s,
        )
    return RemoteEventLog(
        clients,
        lambda: auth.tenant_of_call(settings.tenant_id),
        retention=settings.event_retention,
        max_lag=settings.subscriber_max_lag,
        max_batch=512,
        fanout_rate=settings.fanout_messages_per_s,
    )


def a2a_url(settings: GatewaySettings) -> str:
    """The address the A2A agent card advertises: COGMESH_A2A_URL, else where the gateway listens."""
    return settings.a2a_url or settings.listen_address("gateway")


async def build(settings: GatewaySettings, clients: Clients) -> App:
    # First: a TLS file that cannot be read stops the gateway before it waits on anything.
    credentials = server_credentials(settings.tls_cert_file, settings.tls_key_file, settings.tls_client_ca_file)
    guard = GatewayGuard(
        authenticator(settings),
        TenantLimits(settings.tenant_rate_per_s, settings.tenant_burst, settings.tenant_max_streams),
    )
    events = event_log(settings, clients)
    # The agents and the models come with the models service's catalogue snapshot: names are checked
    # against it before a turn takes its lease.
    agents, catalogue = await agents_of_catalog(clients, settings)
    servicer = GatewayServicer(settings, clients, agents, events, catalogue)
    # A2A binding: the same agents, turns and event log, behind the same auth and limits.
    a2a = A2AServicer(
        settings,
        clients,
        agents,
        events,
        servicer.turns,
        secured=not guard.authenticator.dev_mode,
        card_url=a2a_url(settings),
    )
    on_close: list[Callable[[], Awaitable[None]]] = [servicer.turns.close, events.close, catalogue.close]
    # Every replica runs a scheduler: each tick is claimed by one of them (gateway/schedules).
    scheduler = Scheduler(settings, clients, agents, events, servicer.turns)
    app = App(
        "gateway",
        [
            mount(servicer, gateway_pb2, gateway_pb2_grpc, "GatewayService"),
            mount(a2a, a2a_pb2, a2a_pb2_grpc, "A2AService"),
            mount(GatewayMemoryServicer(clients), memory_pb2, memory_pb2_grpc, "MemoryService"),
            mount(ScheduleServicer(scheduler), schedules_pb2, schedules_pb2_grpc, "ScheduleService"),
            mount(GatewayWebhookServicer(clients), webhooks_pb2, webhooks_pb2_grpc, "WebhookService"),
            mount(AgentServicer(clients, agents, catalogue), agents_pb2, agents_pb2_grpc, "AgentService"),
        ],
        on_close=on_close,
        on_drained=[servicer.hand_off_subscribers, scheduler.stop],
        on_serving=[lambda _address: scheduler.start()],
        interceptors=[guard],
        public=True,
        credentials=credentials,
    )
    servicer.services = tuple(m.service_name for m in app.mounts)  # GetCapabilities reports their features
    return app


def main() -> None:
    run("gateway", build, GatewaySettings)
