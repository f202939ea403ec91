"""The runtime's own settings (COGMESH_*): its turns, takeover, the built-in model, engines and tools.

What every service reads alike is in services.kit.config.Settings, which this extends.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from services.kit.config import Settings


class RuntimeSettings(Settings):
    """What the runtime reads besides the shared settings."""

    tool_result_limit_tokens: int = Field(
        25_000,
        ge=100,
        description="tool results over this many tokens (4 characters a token) are archived and the model gets "
        "their head behind a marker it pages through; an agent's config.tool_token_limit_before_evict overrides it",
    )
    local_reply_tokens: int | None = Field(
        None,
        ge=1,
        description="the built-in local model answers plain messages with exactly this many tokens, "
        "one delta each (benchmarks); default: its echo",
    )
    local_delay_ms: float = Field(
        0.0, ge=0, description="the built-in local model waits this long before each chunk: a slow model, for tests"
    )
    takeover_poll_s: float = Field(
        1.0,
        gt=0,
        description="seconds between a runtime replica's looks for turns to take over (their runtime stopped)",
    )
    takeover_idle_wait_s: int = Field(
        30,
        ge=0,
        le=300,
        description="when the last look found no turn open anywhere, the next look waits up to this long at sessions "
        "for one to open (memory stores: one sessions process sees every turn open), so an idle replica looks when "
        "there is work, not on a clock; 0: never wait. Keep it below what a proxy between runtime and sessions "
        "allows a quiet call",
    )
    max_takeovers: int = Field(
        3,
        ge=0,
        description="takeovers a turn gets at one step; a turn whose runtime keeps stopping before it records its "
        "next step then ends with an error (takeovers with steps recorded in between are not counted; ten times "
        "as many in all end it too)",
    )
    runtime_max_turns: int = Field(
        0,
        ge=0,
        description="turns one runtime worker runs at once; past it StartTurn is refused (RESOURCE_EXHAUSTED) and "
        "the gateway tries another worker. 0: no fixed limit (a worker refuses turns anyway while its lease "
        "renewals or its event loop run late: services/runtime/admission.py)",
    )
    journal_steps: bool = Field(
        True,
        description="record each step of a turn in its journal; false only to measure what the journal costs "
        "(bench.journal): a turn taken over then starts again from its request, its tools run again",
    )
    handover_grace_s: float = Field(
        2.0,
        ge=0,
        description="on shutdown, seconds a running turn gets to reach its next recorded step before it is "
        "handed over to another runtime replica where it stands",
    )
    delta_flush_ms: float = Field(
        100.0,
        ge=0,
        description="a running turn appends assistant deltas to the event log at most this often (the first "
        "delta after a pause, and every other event, at once); 0: each delta at once",
    )
    delta_flush_max_ms: float = Field(
        400.0,
        ge=0,
        description="the widest delta window: a long reply's window doubles every 4 appends from delta_flush_ms "
        "up to this, so a long stream costs fewer appends (below delta_flush_ms: no widening)",
    )
    event_log_outage_s: float = Field(
        10.0,
        gt=0,
        description="seconds a running turn waits for an unreachable event log (Redis) before it ends "
        "with a retryable error",
    )
    runtime: str = Field("", description="runtime engine when neither the turn nor the agent names one")
    tool_servers_file: Path | None = Field(None, description="YAML of MCP and ToolService tool servers")
