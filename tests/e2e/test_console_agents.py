"""Agents as versioned resources through the browser edge: AgentService over Connect
(gateway/web/forward_agents.py) and the web console's agent versions in Debian's headless
Chromium (tests/browser/agents.mjs), against `cogmesh up` as processes on free ports in dev mode,
through its own browser edge. Screenshots go to tests/artifacts/."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.protobuf import struct_pb2

from cogmesh.gateway.v1 import agents_pb2, agents_pb2_grpc, gateway_pb2, gateway_pb2_grpc
from gateway.web.forward_agents import AGENT_SERVICE_PATH
from tests.e2e.test_cogmesh_up import BIN, ROOT, Up, suite_addresses
from tests.e2e.test_web_console import missing_prerequisite

DRIVER = ROOT / "tests" / "browser" / "agents.mjs"
ARTIFACTS = ROOT / "tests" / "artifacts"


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Up, str]]:
    """The suite in dev mode (every caller may write agents), and the base URL of its browser edge."""
    addresses, variables, _ = suite_addresses()  # the runtime's second worker gets a port of its own
    env = dict(os.environ) | variables
    env.pop("COGMESH_API_KEYS_FILE", None)
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
        yield handle, str(handle.ready["console"]).rstrip("/").removesuffix("/console")
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def connect(base: str, method: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """One Connect unary call with a JSON body: (HTTP status, JSON reply)."""
    request = urllib.request.Request(
        f"{base}{AGENT_SERVICE_PATH}{method}",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json", "connect-protocol-version": "1"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def definition(prompt: str) -> struct_pb2.Struct:
    out = struct_pb2.Struct()
    out.update({"model": "local", "tools": ["calculator"], "system_prompt": prompt, "description": prompt})
    return out


@pytest.fixture(scope="module")
def tutor(up: tuple[Up, str]) -> Iterator[None]:
    """Agent "tutor": versions 1 and 2, alias prod -> 1, stored over the gateway's gRPC port."""
    with grpc.insecure_channel(up[0].addresses["gateway"]) as channel:
        agents: Any = agents_pb2_grpc.AgentServiceStub(channel)  # type: ignore[no-untyped-call]
        agents.CreateAgent(agents_pb2.CreateAgentRequest(name="tutor", definition=definition("Tutor one.")), timeout=30)
        agents.UpdateAgent(agents_pb2.UpdateAgentRequest(name="tutor", definition=definition("Tutor two.")), timeout=30)
        agents.SetAgentAlias(agents_pb2.SetAgentAliasRequest(name="tutor", alias="prod", version=1), timeout=30)
    yield


def test_agent_service_over_connect(up: tuple[Up, str], tutor: None) -> None:
    base = up[1]
    status, page = connect(base, "ListAgentVersions", {"name": "tutor"})
    assert status == 200, page
    assert [v["version"] for v in page["versions"]] == ["2", "1"]  # int64 in JSON: strings
    assert page["aliases"] == {"prod": "1"}
    status, got = connect(base, "GetAgent", {"name": "tutor@prod"})
    assert (status, got["agent"]["version"], got["agent"]["definition"]["system_prompt"]) == (200, "1", "Tutor one.")

    # The gateway's refusals come back with their code, message and details.
    status, missing = connect(base, "GetAgent", {"name": "nosuch"})
    assert (status, missing["code"]) == (404, "not_found"), missing
    status, bad = connect(base, "CreateAgent", {"name": "broken", "definition": {"model": "no-such-model-anywhere"}})
    assert (status, bad["code"]) == (400, "invalid_argument"), bad
    assert "definition.model" in json.dumps(bad["details"]) or "definition.model" in bad["message"], bad
    # A field the protos do not have is refused by the edge's codec, not dropped.
    status, typo = connect(base, "GetAgent", {"nmae": "tutor"})
    assert (status, typo["code"]) == (400, "invalid_argument"), typo


def test_console_shows_agent_versions(up: tuple[Up, str], tutor: None, capsys: pytest.CaptureFixture[str]) -> None:
    if (why := missing_prerequisite()) is not None:
        pytest.skip(why)
    ARTIFACTS.mkdir(exist_ok=True)
    driver = subprocess.run(
        [shutil.which("node") or "node", str(DRIVER), f"{up[1]}/console/", str(ARTIFACTS)],
        capture_output=True,
        text=True,
        timeout=400,
        cwd=DRIVER.parent,
    )
    with capsys.disabled():  # shown even when the test passes
        print(f"\n    screenshot of the console's agents: {ARTIFACTS}/console-agents.png")
    assert driver.returncode == 0, driver.stderr[-5000:]
    seen = json.loads(driver.stdout.strip().splitlines()[-1])
    assert seen["errors"] == [], "\n".join(seen["errors"])

    assert seen["picker"] == "tutor (v2)"
    session = seen["session"]
    assert session["header"] == "tutor@1"
    assert session["listed"].startswith("tutor@1 · ")
    assert session["refLeft"] == ""
    with grpc.insecure_channel(up[0].addresses["gateway"]) as channel:
        stub: Any = gateway_pb2_grpc.GatewayServiceStub(channel)  # type: ignore[no-untyped-call]
        stored = stub.GetSession(gateway_pb2.GetSessionRequest(session_id=session["id"]), timeout=30).session
    assert (stored.agent, stored.agent_version) == ("tutor", 1)

    assert any(item.startswith("tutor latest v2") for item in seen["list"]), seen["list"]
    agent = seen["agent"]
    assert (agent["hash"], agent["name"], agent["sessionHidden"]) == ("#/agents/tutor", "tutor", True)
    assert agent["versions"] == [{"version": "2", "aliases": []}, {"version": "1", "aliases": ["prod"]}]
    assert agent["aliases"] == ["prod → v1"]

    # What the console changed, read back over gRPC.
    assert "definition: not JSON" in seen["refused"], seen["refused"]
    assert seen["changed"] == {"versions": 1}
    with grpc.insecure_channel(up[0].addresses["gateway"]) as channel:
        agents: Any = agents_pb2_grpc.AgentServiceStub(channel)  # type: ignore[no-untyped-call]
        prod = agents.GetAgent(agents_pb2.GetAgentRequest(name="tutor@prod"), timeout=30).agent
        scribe = agents.GetAgent(agents_pb2.GetAgentRequest(name="scribe"), timeout=30).agent
    assert (prod.version, prod.definition["description"]) == (3, "v3 from the console")
    assert (scribe.version, list(scribe.definition["tools"])) == (1, ["calculator"])
