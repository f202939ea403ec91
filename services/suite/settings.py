"""The whole suite's settings: every service's, for the processes that run them all.

`cogmesh up` (services/suite/supervisor.py) and the in-process suite (services/suite/inprocess.py)
start every service from one configuration; each service's build takes it as its own class.
"""

from __future__ import annotations

from pydantic import Field

from gateway.settings import GatewaySettings
from services.context.settings import ContextSettings
from services.kit.config import Settings
from services.memory.settings import MemorySettings
from services.models.settings import ModelsSettings
from services.policy.settings import PolicySettings
from services.runtime.settings import RuntimeSettings
from services.sessions.settings import SessionsSettings

# Every service's settings class, by the name `cogmesh up` and the docs give it.
SERVICE_SETTINGS: dict[str, type[Settings]] = {
    "models": ModelsSettings,
    "sessions": SessionsSettings,
    "memory": MemorySettings,
    "context": ContextSettings,
    "policy": PolicySettings,
    "runtime": RuntimeSettings,
    "gateway": GatewaySettings,
}


class SuiteSettings(
    RuntimeSettings, SessionsSettings, PolicySettings, ContextSettings, ModelsSettings, MemorySettings, GatewaySettings
):
    """Every field of every service, and how many processes `cogmesh up` runs of each."""

    runtime_workers: int = Field(
        0, ge=0, description="runtime processes `cogmesh up` runs, each on its own port; 0: one per core, at least 2"
    )
    replicas: int = Field(
        1, ge=1, description="processes of every other service `cogmesh up` runs; above 1 needs redis_url"
    )
