"""A small run of the durable-turns fault suite (tests/reliability/chaos.py) in every `make test`.

Nine turns (tool, streaming, approval) under SIGKILLs of runtimes and gateways every one
to two seconds, and one Redis restart (fsync always here, so a restart loses nothing
acknowledged and every check is exact; the full run in RELIABILITY.md uses everysec).
Every check is on what the turns did, never on how fast: where the kills land varies
from run to run, what must hold does not.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.reliability.chaos import run


@pytest.mark.timeout(600)  # nine turns with takeovers (6 s leases) and eight processes to start
async def test_turns_survive_random_kills_of_runtimes_gateways_and_redis(tmp_path: Path) -> None:
    report = await run(
        turns=9, concurrency=3, redis_restarts=1, seed=5, every_s=(1.0, 2.0), workdir=tmp_path, appendfsync="always"
    )
    assert report["failures"] == [], report["failures"]
    assert report["completed_right"] == report["turns"] == 9
    assert report["side_effects_exactly_once"] == report["tool_turns"] == 6
    assert report["tool_calls_without_key"] == 0
    assert sum(report["kills"].values()) >= 2, report["kills"]  # the killer ran while turns did
