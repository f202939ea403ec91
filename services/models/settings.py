"""The models service's own settings (COGMESH_*): the catalogue file, its store and how it resolves names.

What every service reads alike is in services.kit.config.Settings, which this extends.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from services.kit.config import Settings


class ModelsSettings(Settings):
    """What the models service reads besides the shared settings."""

    models_file: Path | None = Field(None, description="model catalogue YAML; default: the shipped models.yaml")
    models_store_file: Path | None = Field(
        None, description="YAML file where AddModel persists models when redis_url is empty; default: not persisted"
    )
    models_strict: bool = Field(False, description="unknown model names are NOT_FOUND instead of the default model")
    models_refresh_s: float = Field(
        1.0,
        ge=0,
        description="seconds between checks of the catalogue file and store for changes (the agents folder's too, "
        "where the platform does not tell of changes: inotify); 0: every call",
    )
