"""The suite as users run it: `cogmesh up` as a real process tree, driven by the
`cogmesh` CLI, grpcurl and plain gRPC health checks."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.kit.config import DEFAULT_PORTS
from tests.support.ports import free_ports

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
GRPC_SERVICES = ["models", "policy", "context", "sessions", "memory", "runtime", "gateway"]
SERVICES = [*GRPC_SERVICES, "web"]  # each gets a free port; web is the browser edge (HTTP)


def suite_addresses(extra: int = 0) -> tuple[dict[str, str], dict[str, str], list[int]]:
    """Free ports for `cogmesh up`: each service's address, the COGMESH_<SERVICE>_ADDR variables
    (two addresses for the runtime, whose two workers would otherwise take the first port + 10,
    which may be in use), and `extra` more free ports."""
    ports = free_ports(len(SERVICES) + 1 + extra)
    addresses = {name: f"127.0.0.1:{port}" for name, port in zip(SERVICES, ports, strict=False)}
    env = {f"COGMESH_{name.upper()}_ADDR": address for name, address in addresses.items()}
    env["COGMESH_RUNTIME_ADDR"] = f"{addresses['runtime']},127.0.0.1:{ports[len(SERVICES)]}"
    return addresses, env, ports[len(SERVICES) + 1 :]


@dataclass
class Up:
    process: subprocess.Popen[str]
    addresses: dict[str, str]
    pids: dict[str, int]
    env: dict[str, str]
    ready: dict[str, str] = field(default_factory=dict)  # the "ready" line: gateway, console, log_dir
    served: dict[str, str] = field(default_factory=dict)  # where each process said it is SERVING

    def lines_until(self, predicate, timeout_s: float) -> list[dict]:  # type: ignore[no-untyped-def]
        seen, deadline = [], time.monotonic() + timeout_s
        assert self.process.stdout is not None
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                raise AssertionError(f"cogmesh up exited early; output so far: {seen}")
            item = json.loads(line)
            seen.append(item)
            if predicate(item):
                return seen
        raise AssertionError(f"timed out; output so far: {seen}")


RUNTIME_WORKERS = ["runtime-1", "runtime-2"]


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    addresses, variables, _ = suite_addresses()
    env = dict(os.environ) | variables
    log_dir = tmp_path_factory.mktemp("logs")
    process = subprocess.Popen(
        [str(BIN / "cogmesh"), "up", "--json", "--log-dir", str(log_dir)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    handle = Up(process, addresses, {}, env)
    try:
        lines = handle.lines_until(lambda item: item.get("event") == "ready", 60)
        handle.ready = lines[-1]
        for item in lines:
            match = re.match(r"([\w-]+)\s+SERVING\s+(\S+)\s+\(pid (\d+)\)", item.get("text", ""))
            if match:
                handle.pids[match.group(1)] = int(match.group(3))
                handle.served[match.group(1)] = match.group(2)
        yield handle
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                raise


def cli(up: Up, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "cogmesh"), *args, "--gateway", up.addresses["gateway"]],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=up.env,
    )


def test_every_service_reports_serving(up: Up) -> None:
    assert set(up.pids) == set(SERVICES) - {"runtime"} | set(RUNTIME_WORKERS)
    workers = up.env["COGMESH_RUNTIME_ADDR"].split(",")
    assert [up.served[name] for name in RUNTIME_WORKERS] == workers
    grpc_addresses = [(name, up.addresses[name]) for name in GRPC_SERVICES]
    for name, address in [*grpc_addresses, ("runtime-2", workers[1])]:
        with grpc.insecure_channel(address) as channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING, name
    health = httpx.get(f"http://{up.addresses['web']}/healthz", timeout=5)
    assert health.status_code == 200 and health.json()["status"] == "SERVING"
    assert up.ready["console"] == f"http://{up.addresses['web']}/console/"


def test_chat_json_streams_the_calculator_turn(up: Up) -> None:
    result = cli(up, "chat", "--json", "What is 17 * 23?")
    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines()]
    assert [int(e["seq"]) for e in events] == list(range(1, len(events) + 1))
    started = [e["tool_call_started"] for e in events if "tool_call_started" in e]
    assert [(s["name"], s["arguments"]) for s in started] == [("calculator", {"expression": "17 * 23"})]
    assert "391" in events[-1]["final"]["text"]


def test_chat_human_output_and_list_commands(up: Up) -> None:
    result = cli(up, "chat", "What is (2 + 3) * 4?")
    assert result.returncode == 0, result.stderr
    assert "→ calculator" in result.stdout
    assert "(2 + 3) * 4 = 20." in result.stdout
    sessions = json.loads(cli(up, "sessions", "list", "--json").stdout)
    assert len(sessions["sessions"]) >= 1
    models = json.loads(cli(up, "models", "list", "--json").stdout)
    assert models["default_model"] == "cogmesh-local"
    assert {"gpt-4o", "claude-sonnet-4-20250514", "deepseek-reasoner"} <= {m["id"] for m in models["models"]}


def test_cli_names_an_unknown_session(up: Up) -> None:
    result = cli(up, "chat", "--json", "--session", "nope", "hi")
    assert result.returncode == 1
    error = json.loads(result.stdout)["error"]
    assert error["code"] == "NOT_FOUND" and error["reason"] == "SESSION_NOT_FOUND"


def test_cli_reports_an_unreachable_gateway() -> None:
    port = free_ports(1)[0]
    result = subprocess.run(
        [str(BIN / "cogmesh"), "chat", "hi", "--gateway", f"127.0.0.1:{port}", "--connect-timeout", "1"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2
    assert f"cannot reach the gateway at 127.0.0.1:{port}" in result.stderr


def readme_grpcurl_commands() -> list[str]:
    """Every grpcurl command in README.md, joined across line continuations."""
    text = (ROOT / "README.md").read_text()
    commands = []
    for block in re.findall(r"```(?:sh|bash|shell)\n(.*?)```", text, re.S):
        for command in block.replace("\\\n", " ").splitlines():
            if command.strip().startswith("grpcurl "):
                commands.append(command.strip())
    return commands


def test_readme_grpcurl_commands_run_as_written(up: Up) -> None:
    commands = readme_grpcurl_commands()
    assert len(commands) >= 4, "README must document grpcurl list, describe and calls"
    session = json.loads(cli(up, "chat", "--json", "1 + 1").stdout.splitlines()[0])["session_id"]
    outputs = {}
    for command in commands:
        # Only the addresses (the test's own free ports) and the session id placeholder differ from README.
        for name, port in DEFAULT_PORTS.items():
            command = command.replace(f"127.0.0.1:{port}", up.addresses[name])
        command = command.replace("SESSION_ID", session)
        argv = shlex.split(command)
        argv[0] = str(BIN / "grpcurl")
        result = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        assert result.returncode == 0, f"{command}\n{result.stderr}"
        outputs[command] = result.stdout
    listing = next(out for cmd, out in outputs.items() if cmd.endswith(" list"))
    assert "cogmesh.gateway.v1.GatewayService" in listing and "grpc.health.v1.Health" in listing
    assert any('"status": "SERVING"' in out for out in outputs.values())
    assert any('"text": "17 * 23 = 391."' in out for out in outputs.values())
    assert any('"id": "claude-sonnet-4-20250514"' in out for out in outputs.values())


def test_grpcurl_reports_bad_input_as_invalid_argument(up: Up) -> None:
    result = subprocess.run(
        [
            str(BIN / "grpcurl"),
            "-plaintext",
            "-d",
            '{"session_id": ""}',
            up.addresses["gateway"],
            "cogmesh.gateway.v1.GatewayService/GetSession",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode != 0
    assert "InvalidArgument" in result.stderr and "session_id" in result.stderr


def test_watch_replays_a_session_until_idle(up: Up) -> None:
    chat = cli(up, "chat", "--json", "What is 3 * 3?")
    events = [json.loads(line) for line in chat.stdout.splitlines()]
    watched = cli(up, "watch", events[0]["session_id"], "--after", "2", "--until-idle", "--json")
    assert watched.returncode == 0, watched.stderr
    replay = [json.loads(line) for line in watched.stdout.splitlines()]
    assert [e["seq"] for e in replay] == [e["seq"] for e in events[2:]]
    assert "3 * 3 = 9." in replay[-1]["final"]["text"]


def test_turns_go_on_while_a_runtime_worker_restarts(up: Up) -> None:
    os.kill(up.pids["runtime-1"], signal.SIGKILL)
    lines = up.lines_until(lambda item: "runtime-1 exited with code -9" in item.get("text", ""), 60)
    # The other worker takes every turn meanwhile: round_robin skips the one that is down.
    for _ in range(2):
        result = cli(up, "chat", "--json", "What is 6 * 7?")
        assert result.returncode == 0, result.stderr
        assert "42" in json.loads(result.stdout.splitlines()[-1])["final"]["text"]
    lines += up.lines_until(lambda item: "runtime-1 is SERVING again" in item.get("text", ""), 60)
    assert not any("runtime-2" in item.get("text", "") for item in lines)
    result = cli(up, "chat", "--json", "What is 6 * 7?")
    assert result.returncode == 0, result.stderr


def test_sigterm_stops_everything(up: Up) -> None:
    children = [pid for name, pid in up.pids.items() if name != "runtime-1"]  # restarted: a new pid
    up.process.send_signal(signal.SIGTERM)
    assert up.process.wait(30) == 0
    for pid in children:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
