"""Interactive `cogmesh chat` as users run it: the real CLI as a subprocess, its stdin a
pipe, against `cogmesh up` (every service its own process). The `careful` agent asks a
human's approval before every calculator call; "@ask_user ..." makes it ask a question."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.e2e.test_cogmesh_up import BIN, ROOT, Up, suite_addresses

TIMEOUT_S = 60  # generous: the machine is shared and noisy; nothing here should take more than a few seconds


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    addresses, variables, _ = suite_addresses()
    env = dict(os.environ) | variables
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
        handle.lines_until(lambda item: item.get("event") == "ready", 240)
        yield handle
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            raise


def chat(up: Up, script: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`cogmesh chat` with no message: an interactive session fed `script` line by line."""
    return subprocess.run(
        [str(BIN / "cogmesh"), "chat", *args, "--gateway", up.addresses["gateway"]],
        input=script,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        env=up.env,
    )


def json_lines(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines()]


def events(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [i for i in items if "seq" in i]


class Live:
    """A running `cogmesh chat --json` whose stdout lines the test reads with a deadline (never hangs)."""

    def __init__(self, up: Up, *args: str):
        self.process = subprocess.Popen(
            [str(BIN / "cogmesh"), "chat", "--json", *args, "--gateway", up.addresses["gateway"]],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=up.env,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line)

    def send(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def until(self, predicate: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
        seen: list[dict[str, Any]] = []
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                item = json.loads(self.lines.get(timeout=max(0.0, deadline - time.monotonic())))
            except queue.Empty:
                break
            seen.append(item)
            if predicate(item):
                return seen
        raise AssertionError(f"timed out; saw {seen}")

    def close(self) -> tuple[int, str]:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            code = self.process.wait(TIMEOUT_S)
        finally:
            if self.process.poll() is None:
                self.process.kill()
        assert self.process.stderr is not None
        return code, self.process.stderr.read()


def paused(item: dict[str, Any]) -> bool:
    return bool(item.get("status", {}).get("state") == "TURN_STATE_PAUSED")


def test_interactive_chat_streams_turns_and_answers_approvals(up: Up) -> None:
    script = "\n".join(
        [
            "What is 12 * 12?",
            "maybe",  # not an answer: asked again
            "approve",
            "What is 9 - 1?",
            "reject not on a Sunday",
            "@ask_user Which unit?",
            "cm",
            "/quit",
        ]
    )
    result = chat(up, script, "--agent", "careful")
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "agent careful" in out and "/help lists commands" in out
    # Tool calls, the approval request, the pause and the answers, in order.
    approve_part, reject_part = out.split("What is 9 - 1?", 1)
    assert '→ calculator {"expression": "12 * 12"}' in approve_part
    assert '? approval needed: calculator {"expression": "12 * 12"}' in approve_part
    assert "⏸ waiting for approval" in approve_part
    assert "'maybe' is not an answer" in approve_part
    assert "← calculator: 144" in approve_part and "12 * 12 = 144." in approve_part
    assert "✗ calculator: error: a human reviewer rejected this call: not on a Sunday" in reject_part
    assert "? asks: Which unit?" in reject_part and "The ask_user tool returned: cm" in reject_part
    assert out.count("✓ 2 model call(s) · 1 tool call(s)") == 3  # every turn ended with its status line


def test_slash_commands_are_local_or_go_to_the_agent(up: Up) -> None:
    script = "\n".join(["/session", "/agents", "/models", "/help", "/cancel", "/new default", "/role", "/quit"])
    result = chat(up, script)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    sessions = [line.split()[1] for line in out.splitlines() if line.startswith("session ")]
    assert len(sessions) == 3 and sessions[0] == sessions[1] != sessions[2]  # start, /session, /new
    assert "careful" in out and "planner" in out  # /agents
    assert "cogmesh-local" in out and "(default)" in out  # /models
    assert "/history" in out and "replay the session's events" in out  # the CLI's own /help...
    assert "/role [NAME]" in out and "/reset" in out  # ...then the policy service's commands
    assert "no turn is running" in out  # /cancel on an idle session
    assert "command /role" in out  # an unknown-to-the-CLI command went to the agent


def test_json_mode_is_parsable_and_edit_checks_its_json(up: Up) -> None:
    script = "\n".join(
        [
            "What is 2 + 2?",
            "edit {not json",
            "edit [1, 2]",
            'edit {"expression": "20 + 22"}',
            "/session",
            "/models",
            "/cancel",
            "/quit",
        ]
    )
    result = chat(up, script, "--json", "--agent", "careful")
    assert result.returncode == 0, result.stderr
    items = json_lines(result.stdout)  # every stdout line is JSON: no prompts, no echo
    session_id = items[0]["session"]["session_id"]
    turn = events(items)
    assert [int(e["seq"]) for e in turn] == list(range(1, len(turn) + 1))
    assert all(e["session_id"] == session_id for e in turn)
    assert [e["approval_required"]["action_name"] for e in turn if "approval_required" in e] == ["calculator"]
    assert turn[-1]["final"]["text"] == "2 + 2 = 42."
    assert "edited arguments are not valid JSON" in result.stderr
    assert "edited arguments must be a JSON object, got list" in result.stderr
    replies = [i for i in items if "seq" not in i]
    assert replies[1]["session"]["message_count"] == "4"
    assert replies[2]["default_model"] == "cogmesh-local"
    assert replies[3] == {"cancelled": False, "turn_id": ""}


def test_ctrl_c_cancels_the_paused_turn_and_the_session_goes_on(up: Up) -> None:
    live = Live(up, "--agent", "careful")
    try:
        live.send("What is 3 * 3?")
        live.until(paused)
        live.process.send_signal(signal.SIGINT)
        ended = live.until(lambda item: "error" in item or "final" in item)
        assert ended[-1]["error"]["kind"] == "ERROR_KIND_CANCELLED"
        live.send("hello there")  # the CLI is still there, on the same session
        reply = live.until(lambda item: "final" in item)
        assert 'You said: "hello there"' in reply[-1]["final"]["text"]
        live.send("/quit")
    finally:
        code, stderr = live.close()
    assert code == 0, stderr
    assert "cancelling the paused turn" in stderr


def test_end_of_input_leaves_the_turn_paused_for_watch(up: Up) -> None:
    result = chat(up, "What is 5 * 5?\n", "--json", "--agent", "careful")
    assert result.returncode == 1
    assert "end of input: the turn stays paused" in result.stderr
    items = json_lines(result.stdout)
    session_id = items[0]["session"]["session_id"]
    gateway = up.addresses["gateway"]
    watched = subprocess.run(
        [str(BIN / "cogmesh"), "watch", session_id, "--after", "1", "--until-idle", "--json", "--gateway", gateway],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        env=up.env,
    )
    assert watched.returncode == 0, watched.stderr
    replay = json_lines(watched.stdout)
    assert [e["seq"] for e in replay] == [e["seq"] for e in events(items)[1:]]
    assert paused(replay[-1])
    # Another chat picks the paused session up with --session and answers it.
    resumed = chat(up, "approve\n/quit\n", "--session", session_id)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert '? approval needed: calculator {"expression": "5 * 5"}' in resumed.stdout
    assert "5 * 5 = 25." in resumed.stdout


def test_an_unknown_session_is_a_clear_error(up: Up) -> None:
    result = chat(up, "/quit\n", "--json", "--session", "nope")
    assert result.returncode == 1
    error = json_lines(result.stdout)[0]["error"]
    assert error["code"] == "NOT_FOUND" and error["reason"] == "SESSION_NOT_FOUND"


def test_a_chat_with_a_scope_creates_its_session_in_that_scope(up: Up) -> None:
    result = chat(up, "/quit\n", "--json", "--scope", "end_user=u_42", "--scope", "project=apollo")
    assert result.returncode == 0, result.stderr
    session = json_lines(result.stdout)[0]["session"]
    assert session["scope"] == {"end_user": "u_42", "project": "apollo"}
    gateway = ["--gateway", up.addresses["gateway"]]
    listed = subprocess.run(
        [str(BIN / "cogmesh"), "sessions", "list", "--json", "--scope", "end_user=u_42", *gateway],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        env=up.env,
    )
    assert listed.returncode == 0, listed.stderr
    assert [s["session_id"] for s in json.loads(listed.stdout)["sessions"]] == [session["session_id"]]


def test_ctrl_c_at_the_prompt_leaves(up: Up) -> None:
    live = Live(up)
    try:
        live.until(lambda item: "session" in item)
        live.process.send_signal(signal.SIGINT)
        code = live.process.wait(TIMEOUT_S)
    finally:
        if live.process.poll() is None:
            live.process.kill()
    assert code == 130


def test_bad_arguments_are_named_before_any_call() -> None:
    for argv, named in [
        (["watch", "s1", "--after", "-1"], "argument --after: must not be negative, got -1"),
        (["chat", "--connect-timeout", "soon"], "argument --connect-timeout: expected seconds, got 'soon'"),
        (["sessions", "list", "--page-size", "x"], "argument --page-size: expected a whole number, got 'x'"),
        (["chat", "--scope", "end_user"], "argument --scope: expected KEY=VALUE, got 'end_user'"),
    ]:
        result = subprocess.run([str(BIN / "cogmesh"), *argv], capture_output=True, text=True, timeout=TIMEOUT_S)
        assert result.returncode == 2 and named in result.stderr, result.stderr
