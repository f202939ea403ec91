"""The sessions service's own settings (COGMESH_*): how long sessions live, and webhook delivery.

What every service reads alike is in services.kit.config.Settings, which this extends.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from services.kit.config import Settings


class SessionsSettings(Settings):
    """What the sessions service reads besides the shared settings."""

    session_ttl_s: float = Field(86_400.0, ge=0, description="idle seconds before a session is evicted; 0: never")
    # Webhooks (docs/webhooks.md), delivered by the sessions service.
    webhook_allow_private_targets: bool = Field(
        False, description="let webhooks target private, loopback and link-local addresses (refused: SSRF)"
    )
    webhook_secrets_key_file: Path | None = Field(
        None, description="32 random bytes in base64 that seal webhook secrets at rest; required with redis_url"
    )
    webhook_timeout_s: float = Field(10.0, gt=0, description="seconds one webhook POST may take")
    webhook_retry_first_s: float = Field(1.0, gt=0, description="delay before a failed webhook's first retry")
    webhook_retry_max_s: float = Field(3600.0, gt=0, description="longest delay between webhook retries")
    webhook_retry_window_s: float = Field(
        86_400.0, gt=0, description="seconds a webhook delivery is retried before it is dead"
    )
    webhook_poll_s: float = Field(
        1.0,
        gt=0,
        description="seconds before a sessions replica looks again for due webhook deliveries after a failed "
        "look, or after another replica claimed a due delivery first",
    )
