"""Tool results over the agent's limit: kept whole in the archive, the model gets their head.

A fetched page or a file can be megabytes. Whole, it would overflow the model's context
and every record of the turn after it (its journal, its messages, its events). So a
result longer than the turn's `result_limit_chars` (the agent's
`config.tool_token_limit_before_evict`, else COGMESH_TOOL_RESULT_LIMIT_TOKENS, at 4
characters a token) goes to the context service's archive, and the call's result becomes
a marker with its execution id, its size and its first characters; the model reads the
rest in pages with get_tool_response. Archiving is idempotent (the same result keeps
its id), so a step taken over and run again archives nothing twice.

Without an archive (the context service down, or none configured), the result is cut to
the limit and says how much was dropped: the turn goes on either way.
"""

from __future__ import annotations

from services.kit.errors import CogmeshError
from services.kit.logging import log
from services.runtime.steps.start import MARKER_PREFIX
from services.runtime.steps.state import CallState, Run

PREVIEW_CHARS = 2000  # the head the model sees at once, before it decides to page


async def bound_result(run: Run, item: CallState) -> None:
    """Archive `item`'s result when it is over the turn's limit; its result becomes the marker."""
    turn = run.turn
    limit, result = turn.result_limit_chars, item.result
    if limit <= 0 or len(result) <= limit or item.tool is turn.archive_tool:
        return  # a page of the archive is sized to the limit already
    name = item.call.name
    preview = result[: min(PREVIEW_CHARS, limit // 2)]
    archived = ""
    if turn.archive_result is not None:
        try:
            archived = await turn.archive_result(name, item.call.id, result)
        except CogmeshError as exc:
            log.warning("could not archive a long tool result; it is cut", tool=name, error=exc.message)
    if archived:
        item.result = (
            f"{MARKER_PREFIX}'{archived}' (the {name} result has {len(result):,} characters, over this agent's "
            f"limit of {limit:,}: it was archived; call get_tool_response with this executionId and an offset "
            f"to read it in pages). Its first {len(preview):,} characters:\n{preview}"
        )
        run.archived = True
    else:
        kept = result[: max(limit - 200, 0)]
        item.result = (
            f"{kept}\n[cut: the {name} result has {len(result):,} characters, over this agent's limit of "
            f"{limit:,}; the archive is unavailable, so the last {len(result) - len(kept):,} were dropped]"
        )
