"""Before a model call: the context service summarizes a transcript near its budget."""

from __future__ import annotations

from collections.abc import AsyncIterator

from cogmesh.common.v1 import events_pb2
from services.lib.llm import ChatMessage
from services.runtime.steps.start import is_marker
from services.runtime.steps.state import Run, event, notice
from services.runtime.turn import CompactionFailed


async def compact(run: Run) -> AsyncIterator[events_pb2.RuntimeEvent]:
    """Compact when needed; `run.compacted` says the transcript was replaced (a step the journal keeps)."""
    turn = run.turn
    compactor = turn.compactor
    if compactor is None:
        return
    transcript = run.messages[1:]
    # Only the turn's own user message may follow the stored transcript: the summary counts
    # stored messages, so nothing of this turn may be summarized (see Compaction.covered).
    # (A structured-output repair adds a user message of its own: no compaction after one.)
    users = [m for m in transcript if m.role == "user"]
    if run.repairs or not users or users[-1].content != turn.user_text:
        return
    if not compactor.needed(transcript, turn.summary):
        return
    try:
        result = await compactor.compact(transcript, turn.summary, turn.covered)
    except CompactionFailed as exc:
        yield notice(turn, "compaction", f"the conversation could not be compacted: {exc}")
        return
    if result is None:
        return
    turn.summary, turn.covered = result.summary, result.covered
    if result.system_prompt is not None:
        run.system_prompt = result.system_prompt
    run.messages = [ChatMessage("system", run.system_prompt), *result.messages]
    run.archived = run.archived or result.archived or any(is_marker(m) for m in result.messages)
    run.compacted = True
    yield event(turn, context_compacted=result.event)
