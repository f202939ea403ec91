"""Rehydration: turn a session's stored state into the input of a context build.

After a restart the first turn of a session has nothing in memory; the
sessions service returns the rehydration payload, in the seed's restore order:
session state (role, active skills, prompt hash), rolling summary, last N
messages, active goal, phase. ``rehydrate`` fills every field of a
``ContextInput`` that the caller left empty from it, so a caller that already
knows something (say, a new goal) still wins.

Error messages among the recalled messages are filtered by the builder like
any other recent message.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from services.lib.context.builder import ContextInput

DEFAULT_LAST_N = 10


@dataclass(frozen=True)
class RehydrationPayload:
    role_id: str = ""
    active_skill_ids: tuple[str, ...] = ()
    prompt_hash: str = ""
    summary: str = ""
    last_messages: tuple[tuple[str, str], ...] = ()
    goal: str = ""
    phase: str = ""
    # Parts the sessions service could not provide, e.g. ("summary", "goal", "phase").
    unavailable: tuple[str, ...] = ()


@dataclass(frozen=True)
class RehydrationReport:
    role_id: str
    active_skill_ids: tuple[str, ...]
    previous_prompt_hash: str
    summary_loaded: bool
    messages_loaded: int
    goal_loaded: bool
    phase_loaded: bool
    unavailable: tuple[str, ...]


def rehydrate(inp: ContextInput, payload: RehydrationPayload) -> tuple[ContextInput, RehydrationReport]:
    """``inp`` completed from ``payload``, and what was taken from it."""
    use_summary = not inp.summary.strip() and bool(payload.summary.strip())
    use_messages = not inp.last_messages and bool(payload.last_messages)
    use_goal = not inp.goal.strip() and bool(payload.goal.strip())
    use_phase = not inp.phase.strip() and bool(payload.phase.strip())
    completed = replace(
        inp,
        role_id=inp.role_id or payload.role_id,
        summary=payload.summary if use_summary else inp.summary,
        last_messages=payload.last_messages if use_messages else inp.last_messages,
        goal=payload.goal if use_goal else inp.goal,
        phase=payload.phase if use_phase else inp.phase,
    )
    report = RehydrationReport(
        role_id=payload.role_id,
        active_skill_ids=payload.active_skill_ids,
        previous_prompt_hash=payload.prompt_hash,
        summary_loaded=use_summary,
        messages_loaded=len(payload.last_messages) if use_messages else 0,
        goal_loaded=use_goal,
        phase_loaded=use_phase,
        unavailable=payload.unavailable,
    )
    return completed, report
