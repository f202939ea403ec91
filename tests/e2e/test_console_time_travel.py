"""The web console's turns panel in a real browser: Debian's headless Chromium, driven by
playwright-core (tests/browser/time_travel.mjs), against `cogmesh up` as processes on free ports.
The page lists a session's turns with their steps, forks after and before a turn (opening the
fork) and rewinds after a confirm; what it showed is checked against the gateway's own replay,
turns and conversation over gRPC. Screenshots are kept in tests/artifacts/ (ignored by git)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from cogmesh.common.v1 import turns_pb2
from cogmesh.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from tests.e2e.test_cogmesh_up import BIN, ROOT, Up, suite_addresses
from tests.e2e.test_web_console import missing_prerequisite

DRIVER = ROOT / "tests" / "browser" / "time_travel.mjs"
ARTIFACTS = ROOT / "tests" / "artifacts"
QUESTIONS = ["What is 2 + 2?", "What is 3 * 3?", "What is 10 - 4?"]


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    addresses, variables, _ = suite_addresses()  # the runtime's second worker gets a port of its own
    env = dict(os.environ) | variables
    env.pop("COGMESH_API_KEYS_FILE", None)  # dev mode: the console needs no key
    log_dir = tmp_path_factory.mktemp("logs")
    process = subprocess.Popen(
        [str(BIN / "cogmesh"), "up", "--json", "--ready-timeout", "90", "--log-dir", str(log_dir)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    handle = Up(process, addresses, {}, env)
    try:
        handle.ready = handle.lines_until(lambda item: item.get("event") == "ready", 240)[-1]
        yield handle
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def gateway(up: Up) -> tuple[grpc.Channel, Any]:
    channel = grpc.insecure_channel(up.addresses["gateway"])
    return channel, gateway_pb2_grpc.GatewayServiceStub(channel)  # type: ignore[no-untyped-call]


def replay_through_rewind(stub: Any, session_id: str) -> list[Any]:
    """The session's events as the gateway's gRPC port replays them, up to its rewound event (the last)."""
    call = stub.Subscribe(gateway_pb2.SubscribeRequest(session_id=session_id), timeout=30)
    events: list[Any] = []
    try:
        for reply in call:
            events += reply.events
            if any(e.WhichOneof("payload") == "rewound" for e in reply.events):
                return events
    finally:
        call.cancel()
    raise AssertionError(f"the replay ended without a rewound event: {[e.seq for e in events]}")


def conversation(stub: Any, session_id: str, through_turn_id: str = "") -> list[tuple[int, str]]:
    said: list[tuple[int, str]] = []
    token = ""
    while True:
        request = gateway_pb2.ListMessagesRequest(
            session_id=session_id, page_token=token, through_turn_id=through_turn_id
        )
        page = stub.ListMessages(request, timeout=30)
        said += [(m.role, m.content) for m in page.messages]
        if not (token := page.next_page_token):
            return said


def test_turns_fork_and_rewind_in_chromium(up: Up, capsys: pytest.CaptureFixture[str]) -> None:
    if (why := missing_prerequisite()) is not None:
        pytest.skip(why)
    ARTIFACTS.mkdir(exist_ok=True)
    driver = subprocess.run(
        [shutil.which("node") or "node", str(DRIVER), up.ready["console"], str(ARTIFACTS)],
        capture_output=True,
        text=True,
        timeout=400,
        cwd=DRIVER.parent,
    )
    with capsys.disabled():  # shown even when the test passes
        print(f"\n    screenshots of the console's turns: {ARTIFACTS}/console-turns.png, console-rewound.png")
    assert driver.returncode == 0, driver.stderr[-5000:]
    seen = json.loads(driver.stdout.strip().splitlines()[-1])
    assert seen["errors"] == [], "\n".join(seen["errors"])

    channel, stub = gateway(up)
    with channel:
        original = seen["original"]
        # The panel drew the three turns, oldest first, each with its question, outcome and steps.
        drawn = original["turns"]
        assert [t["question"] for t in drawn] == QUESTIONS
        assert {t["outcome"] for t in drawn} == {"completed"}
        for record in drawn:
            assert {"request", "model_call", "tool_call"} <= set(record["steps"]), record
        first_id = drawn[0]["turnId"]

        # Fork after the first turn: the fork holds the conversation up to it and names its origin.
        fork_after = seen["forkAfter"]
        fork = stub.GetSession(gateway_pb2.GetSessionRequest(session_id=fork_after["session"]), timeout=30).session
        assert (fork.forked_from.session_id, fork.forked_from.turn_id) == (original["session"], first_id)
        assert fork_after["origin"] == f"fork of {original['session'][:8]} after turn {first_id[:8]}"
        assert f"fork of {original['session'][:8]}" in fork_after["listed"]
        upto_first = conversation(stub, original["session"], first_id)
        assert conversation(stub, fork_after["session"]) == upto_first

        # Fork before the second: its question was offered again, sent, and answered in the fork.
        fork_before = seen["forkBefore"]
        assert fork_before["draft"] == QUESTIONS[1]
        assert fork_before["answer"] == "3 * 3 = 9."
        assert conversation(stub, fork_before["session"])[: len(upto_first)] == upto_first

        # The refused confirm sent nothing; the accepted one rewound from the second turn, once.
        assert "#3" in seen["refused"]["question"]
        rewind = seen["rewind"]
        assert "#2" in rewind["question"] and "1 turn after it" in rewind["question"]
        assert [r.get("turnId") for r in rewind["requests"]] == [drawn[1]["turnId"]]
        assert [t["turnId"] for t in rewind["turns"]] == [first_id]

        # The page shows what still counts of the log: the first turn and the rewound notice.
        log = replay_through_rewind(stub, original["session"])
        rewound = [e for e in log if e.WhichOneof("payload") == "rewound"]
        assert len(rewound) == 1
        void = range(rewound[0].rewound.void_after_seq + 1, rewound[0].rewound.void_through_seq + 1)
        assert list(rewound[0].rewound.dropped_turn_ids) == [t["turnId"] for t in drawn[1:]]
        counted = [e.seq for e in log if e.seq not in void]
        assert rewind["rendered"] == counted
        assert rewind["cards"] == [first_id]
        assert "2 turns dropped" in rewind["notice"]
        assert seen["reloaded"] == {"rendered": counted, "cards": [first_id]}
        assert conversation(stub, original["session"]) == upto_first
        left = stub.ListTurns(gateway_pb2.ListTurnsRequest(session_id=original["session"]), timeout=30).turns
        assert [(t.turn_id, t.outcome) for t in left] == [(first_id, turns_pb2.TURN_OUTCOME_COMPLETED)]
