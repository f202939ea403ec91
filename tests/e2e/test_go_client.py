"""Go beside the suite, wired the way a team deploys it.

`cogmesh up` runs as processes next to the two Go examples of clients/go: the runtime
lists the Go ToolService in COGMESH_TOOL_SERVERS_FILE (prefix go_), policy.yaml registers
the Go HookService for PreToolUse (it denies go_reverse by name), and an agent "gopher"
is offered both Go tools. Then:

- the Go client's end-to-end tests (clients/go/cogmesh/e2e_test.go, built with
  `go test -c`) run against it, one pytest test each: a turn calling the Go tool
  server, the Go hook's denial (the servers' logs show both from their side), an
  approval and a question answered from Go, a Subscribe resumed after its connection
  broke (no seq missing or repeated), INVALID_ARGUMENT with its field violation and a
  rate-limit refusal with its RetryInfo, decoded in Go;
- the Go quickstart of docs/clients.md runs as written: the blocks after a
  `<!-- docs-test: go -->` mark run in a scratch folder (a mark naming a path saves
  its block there), from `go mod init` and `go get cogmesh.dev/go` to the program's output.

Go builds in module mode, offline, from Debian's packages: clients/go/go.mod plus replace
directives to Debian's Go sources (tools/golang.py, `make go-toolchain`); where they are
not installed, every test here is skipped with the reason.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from services.kit.config import DEFAULT_PORTS
from services.lib.agents import DEFAULT_AGENTS_DIR
from tests.e2e.test_cogmesh_up import ROOT, suite_addresses
from tests.e2e.test_grpcurl_docs import start_gateway, start_up, stop
from tools import golang

pytestmark = pytest.mark.skipif(golang.missing() is not None, reason=str(golang.missing()))

DEFAULT_POLICY_DIR = ROOT / "services" / "defaults" / "policy"
CLIENTS_PAGE = ROOT / "docs" / "clients.md"
GO_MARK = re.compile(r"^<!-- docs-test: go(?: (\S+))? -->$")
DENIED_TOOL = "go_reverse"
GOPHER = """\
name: gopher
description: Text tools served in Go; a Go hook denies go_reverse.
prompts_dir: default
model: local
tools: [go_word_count, go_reverse]
"""
# Each test of clients/go/cogmesh/e2e_test.go, run on its own against the live suite.
GO_TESTS = [
    "TestTurnCallsTheGoToolServer",
    "TestGoHookDeniesAToolByName",
    "TestApprovalAnsweredFromGo",
    "TestQuestionAnsweredFromGo",
    "TestSubscribeResumesAfterABrokenStream",
    "TestBadRequestIsInvalidArgumentNamingTheField",
    "TestRateLimitRefusalCarriesRetryInfo",
    "TestTurnTextSkipsVoidedDeltas",
    "TestRewoundVoidsTheDroppedTurns",
    "TestForkAndRewindFromGo",
    "TestAgentVersionsFromGo",
]


def go_build(*args: str) -> None:
    result = golang.go(*args)
    assert result.returncode == 0, f"go {' '.join(args)}\n{result.stdout}{result.stderr}"


@pytest.fixture(scope="module")
def go_binaries(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("go-bin")
    for example in ("toolserver", "hookserver"):
        go_build("build", "-o", str(out / example), f"{golang.IMPORT_ROOT}/examples/{example}")
    go_build("test", "-c", "-o", str(out / "cogmesh.test"), f"{golang.IMPORT_ROOT}/cogmesh")
    return out


class GoServer:
    """An example server of clients/go: its address from the first JSON line it prints, then every line it logs."""

    def __init__(self, binary: Path, *args: str) -> None:
        self.process = subprocess.Popen(
            [str(binary), "-listen", "127.0.0.1:0", *args], stdout=subprocess.PIPE, text=True
        )
        assert self.process.stdout is not None
        first = self.process.stdout.readline()  # printed once it listens; "" if it exited first
        serving = json.loads(first) if first.startswith("{") else {}
        if serving.get("event") != "serving":
            stop(self.process)
            raise AssertionError(f"{binary.name} did not start: {first!r}")
        self.address: str = serving["address"]
        self.lines: list[dict[str, Any]] = []
        self._logged = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with self._logged:
                self.lines.append(json.loads(line))
                self._logged.notify_all()

    def wait_logged(self, predicate: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        """The first line the server logged that matches; the bound only stops a hang."""
        with self._logged:
            found = self._logged.wait_for(lambda: next((x for x in self.lines if predicate(x)), None), timeout=60)
        assert found, f"nothing logged matches; the server logged {self.lines}"
        return found

    def stop(self) -> None:
        stop(self.process)
        self._reader.join()


@dataclass
class Live:
    gateway: str
    limited_gateway: str
    tools: GoServer
    hooks: GoServer
    env: dict[str, str]


def deployment(tmp: Path, tools: GoServer, hooks: GoServer) -> dict[str, str]:
    """The configuration a team writes to add the Go servers; returns the settings pointing at it."""
    agents, policy = tmp / "agents", tmp / "policy"
    shutil.copytree(DEFAULT_AGENTS_DIR, agents)
    (agents / "gopher.yaml").write_text(GOPHER)
    shutil.copytree(DEFAULT_POLICY_DIR, policy)
    hook = f"  - {{event: PreToolUse, matcher: 'go_.*', remote: '{hooks.address}', timeout_ms: 5000, fail: closed}}\n"
    shipped = (policy / "policy.yaml").read_text()
    assert "\nhooks: []\n" in shipped, "services/defaults/policy/policy.yaml no longer says `hooks: []`"
    (policy / "policy.yaml").write_text(shipped.replace("\nhooks: []\n", f"\nhooks:\n{hook}"))
    (tmp / "tool_servers.yaml").write_text(
        f"servers:\n  text:\n    transport: grpc\n    address: {tools.address}\n    prefix: go_\n"
    )
    return {
        "COGMESH_AGENTS_DIR": str(agents),
        "COGMESH_POLICY_DIR": str(policy),
        "COGMESH_TOOL_SERVERS_FILE": str(tmp / "tool_servers.yaml"),
    }


@pytest.fixture(scope="module")
def live(go_binaries: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    tmp = tmp_path_factory.mktemp("go-suite")
    addresses, variables, ports = suite_addresses(extra=1)
    env = {k: v for k, v in os.environ.items() if k not in ("COGMESH_API_KEYS_FILE", "COGMESH_DEV_MODE")}
    env |= variables
    # A second gateway over the same services that lets one call through, then refuses for 1000 s.
    limited_address = f"127.0.0.1:{ports[-1]}"
    limits = {"COGMESH_TENANT_RATE_PER_S": "0.001", "COGMESH_TENANT_BURST": "1", "COGMESH_DEV_MODE": "true"}
    with contextlib.ExitStack() as running:  # stops whatever started, last first
        tools = GoServer(go_binaries / "toolserver")
        running.callback(tools.stop)
        hooks = GoServer(go_binaries / "hookserver", "-deny", DENIED_TOOL)
        running.callback(hooks.stop)
        env |= deployment(tmp, tools, hooks)
        running.callback(stop, start_up(env, tmp / "logs"))
        running.callback(stop, start_gateway(env | limits, limited_address))
        yield Live(addresses["gateway"], limited_address, tools, hooks, env)


def saw_the_allowed_call(live: Live) -> None:
    """The Go tool server ran the call the Go hook allowed, with the call's identity."""
    called = live.tools.wait_logged(lambda x: x.get("event") == "call" and x["tool"] == "word_count")
    assert called["session_id"] and called["call_id"] and called["tenant_id"]
    allowed = live.hooks.wait_logged(lambda x: x.get("event") == "PreToolUse" and x["tool"] == "go_word_count")
    assert not allowed["deny"] and allowed["session_id"] == called["session_id"] and allowed["agent"] == "gopher"


def saw_the_denial(live: Live) -> None:
    """The Go hook denied the call by its name, and the Go tool server never saw it."""
    denied = live.hooks.wait_logged(lambda x: x.get("event") == "PreToolUse" and x["tool"] == DENIED_TOOL)
    assert denied["deny"] and denied["agent"] == "gopher"
    assert not [x for x in live.tools.lines if x.get("tool") == "reverse"], "the denied tool ran"


SERVER_CHECKS = {"TestTurnCallsTheGoToolServer": saw_the_allowed_call, "TestGoHookDeniesAToolByName": saw_the_denial}


@pytest.mark.timeout(600)  # the first test may compile grpc-go and protobuf-go into an empty cache
@pytest.mark.parametrize("name", GO_TESTS)
def test_go_client_end_to_end(name: str, live: Live, go_binaries: Path) -> None:
    env = live.env | {"COGMESH_E2E_GATEWAY": live.gateway, "COGMESH_E2E_LIMITED_GATEWAY": live.limited_gateway}
    result = subprocess.run(
        [str(go_binaries / "cogmesh.test"), "-test.v", "-test.count=1", f"-test.run=^{name}$"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0 and f"--- PASS: {name} " in output, output
    if name in SERVER_CHECKS:
        SERVER_CHECKS[name](live)


@dataclass
class DocBlock:
    language: str
    body: str
    path: str | None  # where the page says to save it; None: run it
    prints: str | None  # the ```text block right after it: what running it prints ("..." skips lines)


def doc_blocks(text: str) -> list[DocBlock]:
    """Each fenced block right after a Go docs-test mark."""
    lines, blocks = text.splitlines(), []
    for i, line in enumerate(lines):
        mark = GO_MARK.match(line.strip())
        if not mark:
            continue
        fence = lines[i + 1].strip()
        assert fence.startswith("```"), f"a docs-test mark must precede a fenced block (line {i + 1})"
        end = lines.index("```", i + 2)
        after = next((j for j in range(end + 1, len(lines)) if lines[j].strip()), end)
        prints = None
        if lines[after].strip() == "```text":
            prints = "\n".join(lines[after + 1 : lines.index("```", after + 1)])
        blocks.append(DocBlock(fence[3:], "\n".join(lines[i + 2 : end]), mark.group(1), prints))
    return blocks


def assert_prints(output: str, expected: str) -> None:
    """The output is the expected lines, where a "..." line stands for any lines."""
    pattern = "\n".join(".*?" if line == "..." else re.escape(line) for line in expected.splitlines())
    assert re.fullmatch(pattern, output.rstrip("\n"), re.DOTALL), f"the page says it prints\n{expected}\ngot\n{output}"


@pytest.mark.timeout(600)  # `go run` may compile grpc-go into an empty cache
def test_go_quickstart_of_the_clients_page_runs_as_written(live: Live, tmp_path: Path) -> None:
    blocks = doc_blocks(CLIENTS_PAGE.read_text())
    shapes = [(b.language, b.path is not None) for b in blocks]
    assert shapes == [("sh", False), ("go", True), ("sh", False), ("sh", False)]
    (tmp_path / "tools").symlink_to(ROOT / "tools")  # the page runs from a checkout's root
    caches = {name: golang.offline_environment()[name] for name in ("GOPATH", "GOCACHE")}  # out of the user's home
    path = f"{Path(sys.executable).parent}{os.pathsep}{live.env['PATH']}"  # the page's `python`: this venv's
    env = live.env | caches | {"GOFLAGS": "", "PATH": path}
    for block in blocks:
        body = block.body
        for service, port in DEFAULT_PORTS.items():
            body = body.replace(f"127.0.0.1:{port}", live.env[f"COGMESH_{service.upper()}_ADDR"])
        if block.path is not None:
            (tmp_path / block.path).write_text(body + "\n")
            continue
        output = ""
        for command in body.splitlines():
            result = subprocess.run(
                ["bash", "-c", command], capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path
            )
            assert result.returncode == 0, f"{command}\n{result.stdout}{result.stderr}"
            output += result.stdout
        if block.prints is not None:
            assert_prints(output, block.prints)
    # The program is a module of its own that requires cogmesh.dev/go, as `go get` left it.
    go_mod = (tmp_path / "quickstart" / "go.mod").read_text()
    assert re.search(rf"^\s*(require )?{re.escape(golang.IMPORT_ROOT)} v0\.1\.0$", go_mod, re.M), go_mod
    assert blocks[-1].prints is not None, "the page shows what the quickstart prints"
