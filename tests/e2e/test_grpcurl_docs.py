"""The docs/ pages, run as written against a live suite (`cogmesh up` as processes).

docs/grpcurl.md: every grpcurl command runs in a shell, in page order, so the session
that the page's CreateSession makes is the one the later commands use. Only the
ports (this test's free ports) and the SESSION_ID placeholder differ from the page.
A command followed by a ```text block must fail with exactly that output on stderr and
nothing on stdout, or, piped into another command, print exactly that on stdout; a block
marked `<!-- grpcurl-docs: runs until stopped -->` runs in the background while the
next block runs, and must show what that block did. Commands of the Authentication
section go to a second gateway that has API keys.

docs/clients.md: the blocks marked `<!-- docs-test: run -->` (generate Python stubs
with protoc, call the gateway with them, build and use a protoset) run in a scratch
folder. docs/api.md: fresh, complete, made from the proto comments.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from cogmesh.gateway.v1 import agents_pb2, gateway_pb2
from gateway.servicer import GatewayServicer
from services.kit.config import DEFAULT_PORTS
from services.suite.supervisor import REPLICA_PORT_STEP
from tests.e2e.test_cogmesh_up import suite_addresses
from tools import protodoc

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PAGE = ROOT / "docs" / "grpcurl.md"
CLIENTS_PAGE = ROOT / "docs" / "clients.md"
RUN_MARK = "<!-- docs-test: run -->"
BACKGROUND_MARK = "<!-- grpcurl-docs: runs until stopped -->"
AUTH_SECTION = "Authentication"


@dataclass
class Block:
    section: str
    commands: list[str]
    background: bool = False
    expected: str | None = None  # what the ```text block after the command shows


def page_blocks(text: str) -> list[Block]:
    """The page's ```sh blocks that hold grpcurl commands, with what the page expects of them."""
    blocks: list[Block] = []
    section, lines, i = "", text.splitlines(), 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("## "):
            section = line[3:].strip()
        if line.strip() != "```sh":
            i += 1
            continue
        end = lines.index("```", i + 1)
        commands = [c.strip() for c in lines[i + 1 : end] if c.strip().startswith("grpcurl ")]
        background = i > 0 and lines[i - 1].strip() == BACKGROUND_MARK
        # A ```text block right after the command shows what it must print.
        j = end + 1
        while j < len(lines) and not lines[j].strip():
            j += 1
        expected = None
        if j < len(lines) and lines[j].strip() == "```text":
            expected = "\n".join(lines[j + 1 : lines.index("```", j + 1)])
            assert len(commands) == 1, f"one command per block with an expected output: {commands}"
        if commands:
            blocks.append(Block(section, commands, background, expected))
        i = end + 1
    return blocks


@dataclass
class Live:
    addresses: dict[str, str]
    keyed_gateway: str
    api_key: str
    env: dict[str, str]
    outputs: list[tuple[str, str]] = field(default_factory=list)


def wait_serving(address: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with grpc.insecure_channel(address) as channel:
                stub = health_pb2_grpc.HealthStub(channel)
                reply = stub.Check(health_pb2.HealthCheckRequest(), timeout=2)  # type: ignore[attr-defined]
            if reply.status == health_pb2.HealthCheckResponse.SERVING:
                return
        except grpc.RpcError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"{address} not SERVING after {timeout_s} s")
        time.sleep(0.2)


def stop(process: subprocess.Popen[Any]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def start_up(env: dict[str, str], log_dir: Path) -> subprocess.Popen[str]:
    """`cogmesh up` as processes, returned once it says it is ready."""
    suite = subprocess.Popen(
        [str(BIN / "cogmesh"), "up", "--json", "--log-dir", str(log_dir)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    assert suite.stdout is not None
    for line in suite.stdout:
        if json.loads(line).get("event") == "ready":
            return suite
    stop(suite)
    raise AssertionError("cogmesh up exited before it was ready")


def start_gateway(env: dict[str, str], address: str) -> subprocess.Popen[bytes]:
    """One more gateway over the internal services env names, returned once it is SERVING."""
    gateway = subprocess.Popen(
        [sys.executable, "-m", "gateway"],
        env=env | {"COGMESH_LISTEN": address},
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_serving(address, 60)
    except BaseException:
        stop(gateway)
        raise
    return gateway


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    addresses, variables, ports = suite_addresses(extra=1)
    base_env = {k: v for k, v in os.environ.items() if k not in ("COGMESH_API_KEYS_FILE", "COGMESH_DEV_MODE")}
    env = base_env | variables | {"COGMESH_HEARTBEAT_S": "1"}
    tmp = tmp_path_factory.mktemp("grpcurl-docs")
    suite = start_up(env, tmp / "logs")
    keyed: subprocess.Popen[bytes] | None = None
    try:
        # A second gateway with API keys over the same internal services, for the Authentication section.
        key = subprocess.run(
            [str(BIN / "cogmesh"), "keys", "new", "--json", "--tenant", "acme", "--principal", "docs"],
            capture_output=True,
            text=True,
            check=True,
        )
        made = json.loads(key.stdout)
        keys_file = tmp / "keys.yaml"
        keys_file.write_text(f"keys:\n  - {json.dumps(made['entry'])}\n")
        keyed_address = f"127.0.0.1:{ports[-1]}"
        keyed = start_gateway(env | {"COGMESH_API_KEYS_FILE": str(keys_file)}, keyed_address)
        shell_env = base_env | {
            "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            "COGMESH_API_KEY": made["api_key"],
        }
        yield Live(addresses, keyed_address, made["api_key"], shell_env)
    finally:
        if keyed is not None:
            stop(keyed)
        stop(suite)


def localize(command: str, block: Block, live: Live, session_id: str) -> str:
    """The page's command with this test's addresses and session."""
    for name, port in DEFAULT_PORTS.items():
        target = live.keyed_gateway if name == "gateway" and block.section == AUTH_SECTION else live.addresses[name]
        command = command.replace(f"127.0.0.1:{port}", target)
    return command.replace("SESSION_ID", session_id)


def with_addresses(text: str, live: Live) -> str:
    for name, port in DEFAULT_PORTS.items():
        text = text.replace(f"127.0.0.1:{port}", live.addresses[name])
    return text


def json_stream(text: str) -> list[dict[str, Any]]:
    """grpcurl prints one JSON document per message, back to back."""
    decoder, items, pos = json.JSONDecoder(), [], 0
    while pos < len(text.rstrip()):
        while text[pos].isspace():
            pos += 1
        item, pos = decoder.raw_decode(text, pos)
        items.append(item)
    return items


def events_of(text: str) -> list[dict[str, Any]]:
    return [event for message in json_stream(text) for event in message.get("events", [])]


class Follower:
    """A background command whose output is read as it comes."""

    def __init__(self, command: str, env: dict[str, str]):
        # exec: the signal reaches grpcurl itself, like Ctrl-C in a terminal. SIGINT is set back to its
        # default first: a suite started in the background of a non-interactive shell (`make test &`)
        # inherits it ignored, bash cannot undo that, and grpcurl would then never see the interrupt.
        trampoline = (
            "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
            "os.execvp('bash', ['bash', '-c', 'exec ' + sys.argv[1]])"
        )
        self.process = subprocess.Popen(
            [sys.executable, "-c", trampoline, command],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.output = ""
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.output += line

    def wait_for(self, *needles: str, timeout_s: float = 30) -> None:
        deadline = time.monotonic() + timeout_s
        while not all(n in self.output for n in needles):
            assert self.process.poll() is None, f"stopped early: {self.output}"
            assert time.monotonic() < deadline, f"never saw {needles} in: {self.output[-3000:]}"
            time.sleep(0.05)

    def interrupt(self) -> None:
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(60)  # a bound for a hang, not a timing: grpcurl exits on SIGINT at once
        finally:
            if self.process.poll() is None:
                self.process.kill()
        self._reader.join()


def run(command: str, env: dict[str, str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=120, env=env, cwd=cwd)


def test_every_grpcurl_command_of_the_page_runs_as_written(live: Live) -> None:
    blocks = page_blocks(PAGE.read_text())
    session_id = "SESSION_ID"
    paused_session, interrupt_id, turn_id = "PAUSED_SESSION_ID", "INTERRUPT_ID", "TURN_ID"
    outputs: dict[str, str] = {}
    follower: Follower | None = None
    for block in blocks:
        for page_command in block.commands:
            # PAUSED_SESSION_ID first: it contains SESSION_ID.
            command = page_command.replace("PAUSED_SESSION_ID", paused_session).replace("INTERRUPT_ID", interrupt_id)
            command = command.replace("TURN_ID", turn_id)
            command = localize(command, block, live, session_id)
            if block.background:
                follower = Follower(command, live.env)
                follower.wait_for('"seq": "1"')  # it replayed the log so far; now it follows
                continue
            if block.expected is not None:
                check_expected(command, block.expected, live.env)
                continue
            result = run(command, live.env)
            assert result.returncode == 0, f"{page_command}\n{result.stderr}"
            outputs[page_command] = result.stdout
            if "/CreateSession" in page_command and '"careful"' in page_command:
                paused_session = json.loads(result.stdout)["session"]["session_id"]
            elif "/CreateSession" in page_command and block.section != AUTH_SECTION and session_id == "SESSION_ID":
                session_id = json.loads(result.stdout)["session"]["session_id"]
            elif "/ListTurns" in page_command and turn_id == "TURN_ID":
                turn_id = json.loads(result.stdout)["turns"][1]["turn_id"]  # the session's second turn
            for event in events_of(result.stdout) if "/SendMessage" in page_command else []:  # the last pause
                for kind in ("approval_required", "user_input_requested"):
                    if kind in event:
                        interrupt_id = event[kind]["interrupt_id"]
        if follower is not None and not block.background:
            # The block after a follower: the follower must have shown its turn, then idle heartbeats.
            final = next(e["final"]["text"] for e in reversed(events_of(result.stdout)) if "final" in e)
            follower.wait_for(json.dumps(final), '"heartbeat": true')
            follower.interrupt()
            outputs["<follower>"] = follower.output
            follower = None
    assert follower is None, "a background command was never followed by another block"
    check_outputs(outputs)


def check_expected(command: str, expected: str, env: dict[str, str]) -> None:
    """A failing grpcurl prints its error on stderr only; piped on, the pipe prints `expected` on stdout."""
    grpcurl, pipe, rest = command.partition(" | ")  # the first " | " is the shell's: the JSON before it has none
    if not pipe:
        result = run(command, env)
        assert result.returncode != 0, f"{command} should fail:\n{result.stdout}"
        assert result.stdout == "", f"{command} printed on stdout, the page says stderr:\n{result.stdout}"
        assert result.stderr.strip() == expected.strip(), command
        return
    if rest.startswith("jq ") and shutil.which("jq") is None:
        # No jq here (it is not a dependency): what the page pipes into it must still be the JSON it reads.
        fed = run(grpcurl, env)
        assert expected.strip() in json.dumps(json.loads(fed.stdout)), f"{grpcurl} fed jq:\n{fed.stdout}"
        return
    result = run(command, env)
    assert result.returncode == 0, f"{command}\n{result.stderr}"
    assert result.stdout.strip() == expected.strip(), f"{command} printed:\n{result.stdout}"


def output(outputs: dict[str, str], *parts: str) -> str:
    matches = [out for cmd, out in outputs.items() if all(p in cmd for p in parts)]
    assert len(matches) == 1, f"expected one command with {parts}, found {len(matches)}"
    return matches[0]


def check_outputs(outputs: dict[str, str]) -> None:
    """What the page promises each command prints."""
    services = next(out for cmd, out in outputs.items() if cmd.endswith("127.0.0.1:50051 list"))
    assert {"cogmesh.gateway.v1.GatewayService", "grpc.health.v1.Health"} <= set(services.split())
    assert "grpc.reflection.v1.ServerReflection" in services or "grpc.reflection.v1alpha.ServerReflection" in services
    methods = next(out for cmd, out in outputs.items() if cmd.endswith("list cogmesh.gateway.v1.GatewayService"))
    gateway = gateway_pb2.DESCRIPTOR.services_by_name["GatewayService"]
    assert set(methods.split()) == {m.full_name for m in gateway.methods}
    assert "returns ( stream .cogmesh.gateway.v1.SendMessageResponse )" in output(
        outputs, "describe cogmesh.gateway.v1.GatewayService"
    )
    assert '"after_seq": "0"' in output(outputs, "-msg-template")
    assert all(json.loads(out)["status"] == "SERVING" for cmd, out in outputs.items() if "Health/Check" in cmd)

    created = json.loads(output(outputs, "user_id", "/CreateSession"))["session"]
    assert (created["agent"], created["user_id"], created["topic_id"]) == ("default", "alice", "demo")
    assert created["scope"] == {"end_user": "alice"}
    assert json.loads(output(outputs, "/GetSession"))["session"]["session_id"] == created["session_id"]
    assert created["session_id"] in [s["session_id"] for s in json.loads(output(outputs, "/ListSessions"))["sessions"]]

    turn = events_of(output(outputs, "17 * 23", "/SendMessage"))
    assert [int(e["seq"]) for e in turn] == list(range(1, len(turn) + 1))
    assert turn[-1]["final"]["text"] == "17 * 23 = 391."
    assert any(e.get("tool_call_started", {}).get("arguments") == {"expression": "17 * 23"} for e in turn)
    hello = events_of(output(outputs, '"model": "local"', "/SendMessage"))
    assert hello[-1]["final"]["model"] == "cogmesh-local"
    replay = events_of(output(outputs, '"after_seq": 3', "/Subscribe"))
    assert [int(e["seq"]) for e in replay] == list(range(4, len(turn) + len(hello) + 1))
    followed = events_of(outputs["<follower>"])
    assert [int(e["seq"]) for e in followed] == list(range(1, len(followed) + 1))
    assert followed[-1]["final"]["text"] == "6 * 7 = 42."

    approved = events_of(output(outputs, "/ResolveApproval"))
    assert approved[-1]["final"]["text"] == "12 * 12 = 144."
    assert "Lisbon" in output(outputs, "/AnswerInterrupt")
    conversed = output(outputs, "/Converse")  # both frames acknowledged; the careful agent pauses for approval
    assert '"frame_id": "1"' in conversed and '"frame_id": "2"' in conversed and "approval_required" in conversed
    assert json.loads(output(outputs, "/CancelTurn")) == {"cancelled": False, "turn_id": ""}
    assert "default" in [a["name"] for a in json.loads(output(outputs, "/ListAgents", "-plaintext 127"))["agents"]]
    catalogue = json.loads(next(out for cmd, out in outputs.items() if cmd.endswith("GatewayService/ListModels")))
    assert catalogue["default_model"] == "cogmesh-local"
    anthropic = json.loads(output(outputs, "anthropic", "/ListModels"))["models"]
    assert anthropic and {m["provider"] for m in anthropic} == {"anthropic"}
    offered = json.loads(output(outputs, "/GetCapabilities"))
    assert offered["protocols"][0] == "grpc" and "cogmesh" in {r["name"] for r in offered["runtimes"]}
    assert offered["features"]["approvals"] is True and offered["interceptors"] == ["BudgetGuard"]
    assert json.loads(output(outputs, "/DeleteSession")) == {"deleted": True}

    tutor = json.loads(output(outputs, '"docs-tutor@prod"}', "/GetAgent"))["agent"]
    assert (tutor["version"], tutor["aliases"], tutor["created_by"]) == ("1", ["prod"], "dev")
    listed = json.loads(output(outputs, "/ListAgentVersions"))
    assert [v["version"] for v in listed["versions"]] == ["2", "1"] and listed["aliases"] == {"prod": "1"}
    on_prod = json.loads(output(outputs, '"agent": "docs-tutor@prod"}', "/CreateSession"))["session"]
    assert (on_prod["agent"], on_prod["agent_version"]) == ("docs-tutor", "1")
    moved = json.loads(output(outputs, '"paths": ["agent"]', "/UpdateSession"))["session"]
    assert (moved["agent"], moved["agent_version"]) == ("docs-tutor", "1")
    assert events_of(output(outputs, "9 * 9", "/SendMessage"))[-1]["final"]["text"] == "9 * 9 = 81."
    assert json.loads(next(out for cmd, out in outputs.items() if cmd.endswith("/DeleteAgent"))) == {
        "deleted_versions": "2"
    }

    assert json.loads(output(outputs, "Bearer", "/CreateSession"))["session"]["tenant_id"] == "acme"
    assert json.loads(output(outputs, '-d \'{"name": "sonnet"}\''))["model"]["id"] == "claude-sonnet-4-20250514"


def test_the_page_calls_every_public_rpc_the_gateway_serves() -> None:
    called = {
        m.group(1)
        for b in page_blocks(PAGE.read_text())
        for c in b.commands
        for m in [re.search(r" (\S+/\w+)$", c)]
        if m
    }
    gateway = gateway_pb2.DESCRIPTOR.services_by_name["GatewayService"]
    missing = sorted({f"{gateway.full_name}/{m.name}" for m in gateway.methods} - called)
    # An RPC may stay off the page only while the gateway's servicer does not implement it yet.
    served = [rpc for rpc in missing if rpc.rsplit("/", 1)[1] in vars(GatewayServicer)]
    assert not served, f"docs/grpcurl.md shows no call of {served}, which the gateway serves"
    agents = agents_pb2.DESCRIPTOR.services_by_name["AgentService"]
    unshown = sorted({f"{agents.full_name}/{m.name}" for m in agents.methods} - called)
    assert not unshown, f"docs/grpcurl.md shows no call of {unshown}"


def test_the_page_lists_every_default_port_and_internal_service() -> None:
    text = " ".join(PAGE.read_text().split())
    ports = text.split("The default ports:", 1)[1].split("grpcurl comes with", 1)[0]
    labels = {"runtime": "runtime workers", "web": "browser edge"}
    for name, port in DEFAULT_PORTS.items():
        assert f"{labels.get(name, name)} `{port}`" in ports, f"the port list leaves out {name} ({port}): {ports}"
    assert f"`{DEFAULT_PORTS['runtime'] + REPLICA_PORT_STEP}`" in ports, "the second runtime worker's port"
    internal = [name for name in DEFAULT_PORTS if name not in ("gateway", "web")]
    count = ["no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"][len(internal)]
    assert f"The other {count} services ({', '.join(internal[:-1])} and {internal[-1]})" in text


def test_api_reference_is_fresh_and_complete() -> None:
    text = protodoc.render(protodoc.compile_descriptors())
    assert (ROOT / "docs" / "api.md").read_text() == text, "docs/api.md is stale: run `python tools/protodoc.py`"
    gateway = gateway_pb2.DESCRIPTOR.services_by_name["GatewayService"]
    for method in gateway.methods:
        assert f"| `{method.name}` |" in text
        for message in (method.input_type, method.output_type):
            assert f"### message `{message.full_name}`" in text
    # Comments come from the protos: a field's, an enum value's, a streaming marker.
    assert (
        "| `after_seq` | 2 | `uint64` | Deliver events with seq greater than this; 0 replays everything retained. |"
        in text
    )
    assert "| `ERROR_REASON_CURSOR_EXPIRED` | 7 |" in text
    assert "stream [`cogmesh.gateway.v1.SubscribeResponse`](#cogmesh-gateway-v1-subscriberesponse)" in text


def marked_blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of each fenced block right after a RUN_MARK line."""
    lines, blocks = text.splitlines(), []
    for i, line in enumerate(lines):
        if line.strip() == RUN_MARK:
            fence = lines[i + 1].strip()
            assert fence.startswith("```"), f"{RUN_MARK} must precede a fenced block (line {i + 1})"
            end = lines.index("```", i + 2)
            blocks.append((fence[3:], "\n".join(lines[i + 2 : end])))
    return blocks


def test_client_generation_page_runs_as_written(live: Live, tmp_path: Path) -> None:
    blocks = marked_blocks(CLIENTS_PAGE.read_text())
    assert [language for language, _ in blocks] == ["sh", "python", "sh"]
    (tmp_path / "protos").symlink_to(ROOT / "protos")  # the page runs from a checkout's root
    tools = [BIN, ROOT / ".tools" / "node_modules" / ".bin", ROOT / "clients" / "node" / "node_modules" / ".bin"]
    path = os.pathsep.join([*map(str, tools), os.environ.get("PATH", "")])
    env = live.env | {"PATH": path, "PYTHONPATH": str(tmp_path / "gen" / "python")}
    outputs: list[str] = []
    for language, body in blocks:
        body = with_addresses(body, live)
        if language == "sh":
            for command in body.splitlines():
                result = run(command, env, cwd=tmp_path)
                assert result.returncode == 0, f"{command}\n{result.stderr}"
                outputs.append(result.stdout)
        else:
            result = subprocess.run(
                [sys.executable, "-c", body], capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path
            )
            assert result.returncode == 0, result.stderr
            outputs.append(result.stdout)
    # The snippet ran on the stubs the page generated, not on the installed cogmesh-client.
    where = run("python -c 'import cogmesh.gateway.v1.gateway_pb2 as m; print(m.__file__)'", env, cwd=tmp_path)
    assert where.stdout.strip() == str(tmp_path / "gen" / "python" / "cogmesh" / "gateway" / "v1" / "gateway_pb2.py")
    turn = outputs[3].splitlines()
    assert turn[0] == "1 status" and turn[-2].endswith(" final") and turn[-1] == "17 * 23 = 391.", turn
    assert "  // Deliver events with seq greater than this; 0 replays everything retained." in outputs[5]
    assert json.loads(outputs[6])["models"][0]["id"] == "cogmesh-local"
