"""The web console in a real browser: Debian's headless Chromium, driven by playwright-core
(tests/browser/console.mjs), against `cogmesh up` as processes on free ports with a slow
built-in model. What the page rendered is checked against the gateway's own replay over gRPC.
Screenshots are kept in tests/artifacts/ (ignored by git); the test prints where."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from cogmesh.common.v1 import events_pb2
from cogmesh.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from tests.e2e.test_cogmesh_up import BIN, ROOT, Up, suite_addresses

CHROMIUM = Path(os.environ.get("CHROMIUM", "/usr/bin/chromium"))
DRIVER = ROOT / "tests" / "browser" / "console.mjs"
CONSOLE = ROOT / "gateway" / "web" / "console" / "dist" / "index.html"
ARTIFACTS = ROOT / "tests" / "artifacts"
REVIEWED_AGENT = """
name: reviewed
description: computes once a reviewer approves
prompts_dir: default
model: local
tools: [calculator]
interrupt_on: {calculator: true}
approvals:
  calculator: {prompt: "Compute {expression} for the report?", defaults: {decision: reject, comment: not needed}}
default_role: assistant
"""


def missing_prerequisite() -> str | None:
    if not CHROMIUM.exists():
        return f"{CHROMIUM} is not installed: `make test` installs Debian's chromium as root (apt-get install chromium)"
    if not (DRIVER.parent / "node_modules" / "playwright-core").is_dir():
        return "tests/browser has no node_modules: `make test` runs npm ci there"
    if not CONSOLE.exists():
        return "the console is not built: run `make console`"
    return None


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    addresses, variables, _ = suite_addresses()  # the runtime's second worker gets a port of its own
    env = dict(os.environ) | variables
    # A slow model: plain messages get 200 tokens 40 ms apart (8 s at least), so a reload after the
    # 10th token lands mid-turn however loaded the machine is (the delays only stretch).
    env |= {"COGMESH_LOCAL_DELAY_MS": "40", "COGMESH_LOCAL_REPLY_TOKENS": "200"}
    env["COGMESH_MODELS_STRICT"] = "true"  # so `/model nosuch-model` is refused with a native_notice
    # The shipped policy plus a content filter, so a message with "forbidden" fails its turn (a guardrail error).
    policy = tmp_path_factory.mktemp("policy")
    shutil.copytree(ROOT / "services" / "defaults" / "policy", policy, dirs_exist_ok=True)
    interceptors = policy / "interceptors.yaml"
    interceptors.write_text(
        interceptors.read_text().replace(
            "interceptors:\n", "interceptors:\n  - type: ContentFilter\n    blocked_words: [forbidden]\n", 1
        )
    )
    env["COGMESH_POLICY_DIR"] = str(policy)
    # The shipped agents plus one whose approvals carry a reviewer's prompt and suggested answer.
    agents = tmp_path_factory.mktemp("agents")
    shutil.copytree(ROOT / "services" / "defaults" / "agents", agents, dirs_exist_ok=True)
    (agents / "reviewed.yaml").write_text(REVIEWED_AGENT)
    env["COGMESH_AGENTS_DIR"] = str(agents)
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


def replay(up: Up, session_id: str) -> list[Any]:
    """The session's events as the gateway's gRPC port replays them."""
    with grpc.insecure_channel(up.addresses["gateway"]) as channel:
        stub: Any = gateway_pb2_grpc.GatewayServiceStub(channel)
        request = gateway_pb2.SubscribeRequest(session_id=session_id, stop_when_idle=True)
        return [event for reply in stub.Subscribe(request, timeout=30) for event in reply.events]


def session_scope(up: Up, session_id: str) -> dict[str, str]:
    with grpc.insecure_channel(up.addresses["gateway"]) as channel:
        stub: Any = gateway_pb2_grpc.GatewayServiceStub(channel)
        return dict(stub.GetSession(gateway_pb2.GetSessionRequest(session_id=session_id), timeout=30).session.scope)


def test_the_console_in_chromium(up: Up, capsys: pytest.CaptureFixture[str]) -> None:
    if (why := missing_prerequisite()) is not None:
        pytest.skip(why)
    ARTIFACTS.mkdir(exist_ok=True)
    for old in ARTIFACTS.glob("console-*.png"):
        old.unlink()
    driver = subprocess.run(
        [shutil.which("node") or "node", str(DRIVER), up.ready["console"], str(ARTIFACTS)],
        capture_output=True,
        text=True,
        timeout=400,
        cwd=DRIVER.parent,
    )
    with capsys.disabled():  # shown even when the test passes
        print(f"\n    screenshots of the console: {ARTIFACTS}/console-*.png")
    assert driver.returncode == 0, driver.stderr[-5000:]
    seen = json.loads(driver.stdout.strip().splitlines()[-1])
    assert seen["errors"] == [], "\n".join(seen["errors"])

    # The picker offers only agents a session can run (not the `arithmetic` subagent) and starts on `default`.
    assert seen["picker"]["selected"] == "default", seen["picker"]
    assert "careful" in seen["picker"]["offered"] and "arithmetic" not in seen["picker"]["offered"]

    # 0. A bad scope: the gateway's violation, named, on the banner, and no session created.
    bad = seen["badScope"]
    assert bad["banner"].startswith("INVALID_ARGUMENT") and 'scope["Team"]' in bad["banner"], bad["banner"]
    assert bad["listedAfter"] == bad["listedBefore"]

    # 1. The calculator call and 391 appeared, each event once, in the gateway's order.
    calc = seen["calculator"]
    assert session_scope(up, calc["session"]) == {"end_user": "alice", "project": "p1"}
    assert "end_user=alice · project=p1" in calc["listedScope"]
    log = replay(up, calc["session"])
    first_turn = [e.seq for e in log if e.turn_id == log[0].turn_id]
    assert calc["rendered"] == first_turn
    assert calc["renderedWithNotice"] == [e.seq for e in log]
    assert "[command] the session keeps its model" in calc["notice"] and "nosuch-model" in calc["notice"]
    assert "calculator" in calc["toolCall"] and '"17 * 23"' in calc["toolCall"]
    assert "391" in calc["toolResult"] and calc["answer"] == "17 * 23 = 391."
    assert "1 tool call(s)" in calc["final"] and "ms" in calc["final"]
    assert {"model", "tool"} <= set(calc["timelineBars"])

    # 2. The approval was answered with the button and the turn finished.
    approval = seen["approval"]
    assert approval["rendered"] == [e.seq for e in replay(up, approval["session"])]
    assert approval["answer"] == "12 * 12 = 144." and approval["answered"]
    assert approval["waitBars"] >= 1  # the wait for the human is on the timeline
    assert approval["decided"].startswith("✔ approved calculator")  # approval_decided, from the log
    # The agent's approvals: the prompt with the call's arguments, the suggested answer pre-filled and taken.
    reviewed = seen["reviewed"]
    assert reviewed["prompt"] == "Compute 7 * 6 for the report?"
    assert (reviewed["suggested"], reviewed["reason"]) == ("reject", "not needed")
    assert reviewed["decided"] == "✔ rejected calculator by dev: not needed"  # dev mode's principal
    assert reviewed["rendered"] == [e.seq for e in replay(up, reviewed["session"])]

    # 3. Reloaded mid-turn: no event twice, none missing, and Subscribe resumed after the last seq shown.
    reload = seen["reload"]
    log = replay(up, reload["session"])
    seqs = [e.seq for e in log]
    assert reload["rendered"] == seqs, "the page shows every event of the log once, in order"
    resumed_after = int(reload["subscribe"]["afterSeq"])
    assert resumed_after >= max(reload["beforeReload"])
    assert reload["restoredAtLeast"][: len(reload["beforeReload"])] == reload["beforeReload"]
    # Mid-turn: the page showed events of a turn still running (live), and resumed before its end.
    assert log[-1].WhichOneof("payload") == "final" and resumed_after < log[-1].seq, "the reload came mid-turn"
    assert reload["finalTurnDeltas"] == 200
    # The running turn showed its question, before the reload and after it (before the final event came).
    assert reload["runningTurn"] == {"state": "running", "question": "Tell me a long story."}
    assert reload["restoredTurn"]["question"] == "Tell me a long story."

    # 4. Cancelled mid-stream: the card says "cancelled", not "failed", and keeps its question.
    cancelled = seen["cancelled"]
    end = replay(up, cancelled["session"])[-1]
    assert end.WhichOneof("payload") == "error" and end.error.kind == events_pb2.ERROR_KIND_CANCELLED
    assert cancelled["turn"] == {"state": "cancelled", "question": "Tell me another long story."}
    assert cancelled["error"].startswith("✗ cancelled"), cancelled["error"]

    # 5. Failed by the content filter: "failed", with its question.
    failed = seen["failed"]
    end = replay(up, failed["session"])[-1]
    assert end.WhichOneof("payload") == "error" and end.error.kind == events_pb2.ERROR_KIND_GUARDRAIL
    assert failed["turn"] == {"state": "failed", "question": "Say the forbidden word."}
    assert "forbidden" in failed["error"], failed["error"]
    assert (ARTIFACTS / "console-reload.png").stat().st_size > 10_000
