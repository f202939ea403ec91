"""A turn sent the moment a restarted dependency reports SERVING succeeds (issue 14, item 6).

While the dependency is down, turns keep coming: the callers' channels to it fail their
reconnects and back off (up to 1 s). When it is SERVING again they may still be waiting
out that backoff; internal calls now wait for the channel to be ready
(services/kit/clients.py) instead of failing the turn at once with ERROR_KIND_UNAVAILABLE
"connections to all backends failing". No resend, no settling pause: the first turn
after the restart is the one that must work. The turn sent while it was down still ends
with a retryable error naming the dependency, within the internal call deadline.
"""

from __future__ import annotations

import time

import pytest

from cogmesh.common.v1 import events_pb2
from tests.reliability.conftest import CALL_TIMEOUT_S, Suite
from tests.reliability.helpers import calc_request, kind, messages, new_session, run_turn

MARGIN_S = 10.0  # a noisy 2-core machine


@pytest.mark.parametrize("victim", ["models", "context"])
async def test_a_turn_right_after_a_restart_reports_serving_succeeds(healthy: Suite, victim: str) -> None:
    cluster = healthy.cluster
    session_id = await new_session(cluster)
    warm = await run_turn(cluster, calc_request(session_id))  # every channel of the turn's path is connected
    assert kind(warm[-1]) == "final", warm[-1]

    cluster.kill(victim)
    started = time.monotonic()
    down = await run_turn(cluster, calc_request(session_id))  # traffic while it is down
    assert time.monotonic() - started < CALL_TIMEOUT_S + MARGIN_S
    error = down[-1].error
    assert kind(down[-1]) == "error" and error.kind == events_pb2.ERROR_KIND_UNAVAILABLE, down[-1]
    assert error.retryable and f"{victim} service unavailable" in error.message, error

    cluster.start(victim)  # returns once the new process answers SERVING
    events = await run_turn(cluster, calc_request(session_id))
    assert kind(events[-1]) == "final", events[-1]
    assert len(await messages(cluster, session_id)) == 8  # the two good turns, stored once each
