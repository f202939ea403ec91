"""The policy service's own settings (COGMESH_*): where its files are and how often they are reread.

What every service reads alike is in services.kit.config.Settings, which this extends.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from services.kit.config import Settings


class PolicySettings(Settings):
    """What the policy service reads besides the shared settings."""

    policy_dir: Path | None = Field(
        None, description="folder of policy.yaml, interceptors.yaml, role_router.yaml; default: the shipped policy"
    )
    policy_reload_s: float = Field(1.0, gt=0, description="seconds between checks of the policy files for changes")
