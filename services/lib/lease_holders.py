"""A session's turn lease holder, as the gateway, the runtime and the sessions service agree on it.

A paused turn is resumed under a holder of its own, (turn id, attempt id), so a second replica
resuming the same turn at the same moment is refused instead of sharing the fencing token. The
holder is typed everywhere: on the wire (a turn id and a `sessions.v1.LeaseResume`), in the
stores' models (`LeaseInfo.resume`, `Claimed.resume`) and in Redis (`lease_turn`,
`lease_resume`). Its old text form, `<turn_id>:resume:<attempt>`, remains only in what the
previous version wrote or sends (an older gateway's AcquireTurnLease, a lease in Redis written
before `lease_resume`, an older sessions service's ClaimedTurn): `parse_holder` is the one place
that reads it.
"""

from __future__ import annotations

from dataclasses import dataclass

RESUME_MARK = ":resume:"


@dataclass(frozen=True)
class Holder:
    """Who holds a session's turn lease: a turn, or a resume of it (`resume` is its attempt id)."""

    turn_id: str
    resume: str = ""


def parse_holder(text: str) -> Holder:
    """A holder in the previous version's text form (a plain turn id reads as itself)."""
    turn_id, mark, attempt = text.partition(RESUME_MARK)
    return Holder(turn_id, attempt if mark else "")
