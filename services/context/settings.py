"""The context service's settings (COGMESH_*).

It reads only what every service reads alike (services.kit.config.Settings; the token counter is
shared because the runtime builds prompts with the same code); a knob of its own goes here.
"""

from __future__ import annotations

from services.kit.config import Settings


class ContextSettings(Settings):
    """What the context service reads: the shared settings, none of its own yet."""
