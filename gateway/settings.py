"""The gateway's own settings (COGMESH_*): auth, tenant limits, TLS, subscriber streams, A2A, schedules
and its browser edge (gateway/web), which reads the same class.

What every service reads alike is in services.kit.config.Settings, which this extends.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from services.kit.config import DEFAULT_PORTS, Settings


class GatewaySettings(Settings):
    """What the gateway and its browser edge read besides the shared settings."""

    heartbeat_s: float = Field(15.0, gt=0, description="idle seconds before a Subscribe heartbeat")
    subscriber_stall_s: float = Field(
        10.0, gt=0, description="seconds a subscriber may take no message before it is ended with RESOURCE_EXHAUSTED"
    )
    tenant_id: str = Field("default", description="tenant of unauthenticated (dev mode) callers")
    api_keys_file: Path | None = Field(None, description="YAML of hashed API keys -> tenant; enables auth")
    dev_mode: bool = Field(False, description="no auth: every caller is tenant_id; loopback only")
    tenant_rate_per_s: float = Field(200.0, gt=0, description="requests per second per tenant at the gateway")
    tenant_burst: int = Field(400, gt=0, description="burst of requests per tenant at the gateway")
    tenant_max_streams: int = Field(500, gt=0, description="concurrent streams per tenant at the gateway")
    tls_cert_file: Path | None = Field(None, description="PEM certificate: the gateway serves TLS")
    tls_key_file: Path | None = Field(None, description="PEM private key for tls_cert_file")
    tls_client_ca_file: Path | None = Field(None, description="PEM CA bundle: require client certificates (mTLS)")
    a2a_url: str = Field("", description="address the A2A agent card advertises; empty: the gateway's listen address")
    web_addr: str = Field(
        f"127.0.0.1:{DEFAULT_PORTS['web']}",
        description="HTTP address of the browser edge (Connect, gRPC-Web and the web console)",
    )
    web_cors_origins: str = Field(
        "",
        description="comma-separated origins (https://app.example.com) whose pages may call the browser edge, "
        "or *; empty: the edge's own pages only",
    )
    web_console_dir: Path | None = Field(
        None, description="folder of the built web console; default: gateway/web/console/dist (`make console`)"
    )
    scheduler_tick_s: float = Field(
        1.0,
        gt=0,
        description="seconds a gateway scheduler waits to look at the store again after a look that could not "
        "finish (the store away, more runs due than a batch); otherwise it looks when a schedule fires or a run's "
        "lease lapses, and at least every max(tick, min(lease, grace / 2))",
    )
    scheduler_lease_s: float = Field(
        30.0, gt=0, description="seconds a gateway holds a schedule run unrenewed before another replica takes it over"
    )
    scheduler_grace_s: float = Field(
        60.0, ge=0, description="seconds after its time a schedule's tick still counts as on time, not missed"
    )
