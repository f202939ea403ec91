"""The clients as their ecosystems ship them, installed where the repository is not.

- Python: clients/python builds a wheel carrying `py.typed` and the stubs' `.pyi`; a fresh
  virtualenv installs it with its declared dependencies and nothing else (no servers),
  mypy reads its types there, and it runs a turn against a live suite.
- Node: `npm pack` builds clients/node (its prepack compiles it) into a tarball with the
  type declarations; a fresh npm project installs the tarball, a plain .mjs runs a turn
  through both entry points, and a .ts is typechecked by tsc, compiled and run.

The suite is `cogmesh up` from this repository's environment, with an API key. Nothing
is downloaded: the Python dependencies come as wheels repacked from this virtualenv's
installed distributions, the npm ones from npm's cache (`--prefer-offline`).
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import venv
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.e2e.test_cogmesh_up import suite_addresses
from tests.e2e.test_grpcurl_docs import start_up, stop

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PYTHON_CLIENT = ROOT / "clients" / "python"
NODE_CLIENT = ROOT / "clients" / "node"
QUESTION, ANSWER = "What is 17 * 23?", "391"
# The public protos (protos/generate.py's PUBLIC_PROTOS), the only stubs a client package carries.
PUBLIC_STUBS = {
    *(f"cogmesh/common/v1/{name}" for name in ("errors", "events", "messages", "resources", "turns")),
    *(f"cogmesh/gateway/v1/{name}" for name in ("agents", "gateway", "schedules", "webhooks")),
    "cogmesh/policy/v1/hooks",
    "cogmesh/tools/v1/tools",
    "buf/validate/validate",  # the vendored field rules the public protos import (protos/README.md)
}


@dataclass
class Suite:
    gateway: str  # host:port of the gRPC gateway
    web: str  # base URL of the browser edge (Connect, gRPC-Web)
    api_key: str


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Suite]:
    tmp = tmp_path_factory.mktemp("distribution-suite")
    made = json.loads(
        subprocess.run(
            [str(BIN / "cogmesh"), "keys", "new", "--json", "--tenant", "acme", "--principal", "distribution"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    (tmp / "keys.yaml").write_text(f"keys:\n  - {json.dumps(made['entry'])}\n")
    addresses, variables, _ = suite_addresses()
    env = {k: v for k, v in os.environ.items() if k != "COGMESH_DEV_MODE"}
    env |= variables | {"COGMESH_API_KEYS_FILE": str(tmp / "keys.yaml")}
    process = start_up(env, tmp / "logs")
    try:
        yield Suite(addresses["gateway"], f"http://{addresses['web']}", made["api_key"])
    finally:
        stop(process)


def run(command: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"{' '.join(command)}\n{result.stdout}{result.stderr}"
    return result.stdout


# ---------------------------------------------------------------- Python


def repacked_wheel(distribution: metadata.Distribution, out: Path) -> Path:
    """An installed distribution of this virtualenv as a wheel again: its files under
    site-packages and its dist-info, with a RECORD for exactly those."""
    info = distribution.read_text("WHEEL") or ""
    tag = next(line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("Tag:"))
    name = re.sub(r"[-_.]+", "_", distribution.metadata["Name"]).lower()
    wheel = out / f"{name}-{distribution.version}-{tag}.whl"
    site = Path(str(distribution.locate_file("")))
    files = [f for f in distribution.files or [] if f.parts[0] != ".." and "__pycache__" not in f.parts]
    rows = []
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        for file in files:
            if file.name in ("RECORD", "INSTALLER", "direct_url.json", "REQUESTED"):
                continue
            data = (site / file).read_bytes()
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            archive.writestr(str(file), data)
            rows.append([str(file), f"sha256={digest}", str(len(data))])
        record = next(str(f) for f in files if f.name == "RECORD")
        buffer = io.StringIO()
        csv.writer(buffer, lineterminator="\n").writerows([*rows, [record, "", ""]])
        archive.writestr(record, buffer.getvalue())
    return wheel


def dependency_wheels(requirements: list[str], out: Path) -> list[str]:
    """Wheels of the requirements and of theirs, as this virtualenv has them installed; their names."""
    pending, seen = [Requirement(r) for r in requirements], set()
    while pending:
        requirement = pending.pop()
        name = canonicalize_name(requirement.name)
        if name in seen or (requirement.marker is not None and not requirement.marker.evaluate({"extra": ""})):
            continue
        seen.add(name)
        distribution = metadata.distribution(name)
        assert requirement.specifier.contains(distribution.version, prereleases=True), (
            f"{name} {distribution.version} installed here does not satisfy the client's {requirement}"
        )
        repacked_wheel(distribution, out)
        pending.extend(Requirement(r) for r in distribution.requires or [])
    return sorted(seen)


PROBE = """
import importlib.util
from cogmesh.client import GatewayClient
from cogmesh.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from cogmesh.common.v1 import events_pb2
from cogmesh.tools.v1 import tools_pb2_grpc
from cogmesh.policy.v1 import hooks_pb2_grpc
event = events_pb2.RuntimeEvent(seq=3)
event.final.text = "ok"
assert events_pb2.RuntimeEvent.FromString(event.SerializeToString()).final.text == "ok"
for server_package in ("services", "gateway", "grpc_health", "pydantic"):
    assert importlib.util.find_spec(server_package) is None, server_package
print("client-only install OK")
"""

TURN = """
import sys
from cogmesh.client import Client

gateway, api_key, question = sys.argv[1:]
with Client(gateway, api_key=api_key) as client:
    session = client.create_session(agent="default")
    result = client.run(session.session_id, question)
    assert result.ok, result.error
    print(result.text)
"""

# mypy over the installed package: a wrong type is only caught where py.typed makes mypy read it.
TYPED = """
from cogmesh.client import Client, TurnResult

def answer(client: Client, session_id: str) -> str:
    return client.run(session_id, "What is 17 * 23?").text

def wrong(result: TurnResult) -> int:
    return result.text
"""


@pytest.fixture(scope="module")
def python_client(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv with the client's wheel and its declared dependencies only; its python."""
    tmp = tmp_path_factory.mktemp("python-client")
    source = tmp / "source"  # a copy: a build in clients/python would leave build/ and *.egg-info there
    shutil.copytree(PYTHON_CLIENT, source, ignore=shutil.ignore_patterns("*.egg-info", "build", "__pycache__"))
    dist = tmp / "dist"
    run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", str(dist), "."],
        source,
    )
    (wheel,) = dist.glob("cogmesh_client-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "cogmesh/py.typed" in names, names
    assert "cogmesh/gateway/v1/gateway_pb2.pyi" in names and "cogmesh/client/gateway.py" in names
    assert not [n for n in names if n.split("/")[0] in ("services", "gateway", "tests")], "server code in the wheel"
    # The public API's stubs only: none of the services' internal ones (sessions, runtime, ...).
    stubs = {n.removesuffix(".pyi").removesuffix(".py") for n in names if re.search(r"_pb2(_grpc)?\.pyi?$", n)}
    assert {s.rsplit("_pb2", 1)[0] for s in stubs} == PUBLIC_STUBS, sorted(stubs)
    with zipfile.ZipFile(wheel) as archive:
        meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
        declared = [
            line.split(":", 1)[1].strip()
            for line in archive.read(meta).decode().splitlines()
            if line.startswith("Requires-Dist:") and "extra ==" not in line
        ]
    assert declared, "the wheel declares no dependencies"
    wheelhouse = tmp / "wheelhouse"
    wheelhouse.mkdir()
    dependency_wheels(declared, wheelhouse)
    env_dir = tmp / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    run(
        [str(python), "-m", "pip", "install", "--quiet", "--no-index", "--find-links", str(wheelhouse), str(wheel)], tmp
    )
    return python


def test_python_wheel_installs_alone(python_client: Path, tmp_path: Path) -> None:
    # Run from tmp_path so the repository's own folders are not on sys.path.
    assert "client-only install OK" in run([str(python_client), "-c", PROBE], tmp_path)
    installed = run([str(python_client), "-m", "pip", "list", "--format=json"], tmp_path)
    names = {canonicalize_name(p["name"]) for p in json.loads(installed)}
    assert "cogmesh-client" in names and not names & {"cogmesh", "pydantic", "redis"}, names


def test_python_wheel_is_typed(python_client: Path, tmp_path: Path) -> None:
    (tmp_path / "typed.py").write_text(TYPED)
    result = subprocess.run(
        [str(BIN / "mypy"), "--strict", "--no-incremental", f"--python-executable={python_client}", "typed.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env={k: v for k, v in os.environ.items() if k not in ("MYPYPATH", "PYTHONPATH")},
    )
    output = result.stdout + result.stderr
    assert "py.typed" not in output and "import-untyped" not in output and "import-not-found" not in output, output
    # The one error: the wrong return type, which mypy knows from the installed package's annotations.
    assert re.findall(r"error: .*\[(\S+)\]", output) == ["return-value"], output
    assert '(got "str", expected "int")' in output, output


def test_python_wheel_runs_a_turn(python_client: Path, suite: Suite, tmp_path: Path) -> None:
    answer = run([str(python_client), "-c", TURN, suite.gateway, suite.api_key, QUESTION], tmp_path)
    assert ANSWER in answer, answer


# ---------------------------------------------------------------- Node

CONSUMER_MJS = """
import { CogmeshClient, is } from "@cogmesh/client";
import { CogmeshWebClient } from "@cogmesh/client/web";

const [gateway, web, apiKey, question] = process.argv.slice(2);
const client = new CogmeshClient({ address: gateway, apiKey });
const session = await client.createSession({ agent: "default" });
let text = "";
for await (const event of client.sendMessage(session.sessionId, question)) {
  if (is(event, "final")) text = event.payload.value.text;
}
client.close();
const browser = new CogmeshWebClient({ baseUrl: web, apiKey });
const other = await browser.createSession({ agent: "default" });
const asked = await browser.ask(other.sessionId, question);
browser.close();
console.log(JSON.stringify({ grpc: text, connect: asked.text }));
"""

CONSUMER_TS = """
import { CogmeshClient, TurnPausedError, is, type RuntimeEvent } from "@cogmesh/client";

const [gateway, apiKey, question] = process.argv.slice(2) as [string, string, string];
const client = new CogmeshClient({ address: gateway, apiKey });
const session = await client.createSession({ agent: "default" });
const kinds: string[] = [];
const remember = (event: RuntimeEvent): void => {
  kinds.push(event.payload.case ?? "unknown");
};
for await (const event of client.sendMessage(session.sessionId, question)) {
  remember(event);
  if (is(event, "toolCallStarted")) {
    const name: string = event.payload.value.name; // narrowed by is(): a typo here fails tsc
    kinds.push(`tool:${name}`);
  }
}
try {
  const result = await client.ask(session.sessionId, question);
  console.log(JSON.stringify({ text: result.text, seq: typeof result.events.at(-1)?.seq, kinds }));
} catch (err) {
  if (err instanceof TurnPausedError) throw new Error(`paused: ${err.kind}`);
  throw err;
} finally {
  client.close();
}
"""

TSCONFIG = {
    "compilerOptions": {
        "target": "ES2022",
        "module": "NodeNext",
        "moduleResolution": "NodeNext",
        "strict": True,
        "types": ["node"],
        "outDir": "out",
    },
    "files": ["consumer.ts"],
}


def npm_pins() -> dict[str, str]:
    """TypeScript and Node's types at the versions clients/node builds with (so npm's cache has them)."""
    dev = json.loads((NODE_CLIENT / "package.json").read_text())["devDependencies"]
    return {name: dev[name] for name in ("typescript", "@types/node")}


@pytest.fixture(scope="module")
def node_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh npm project with the packed @cogmesh/client installed from its tarball."""
    npm = shutil.which("npm")
    assert npm is not None, "npm is required for the Node client"
    assert (NODE_CLIENT / "node_modules" / ".bin" / "tsc").exists(), (
        "clients/node has no dependencies installed: run `npm ci --prefix clients/node`"
    )
    tmp = tmp_path_factory.mktemp("node-client")
    # Pack a copy, as a clean checkout would: the prepack build must not race other tests over dist/.
    source = tmp / "source"
    shutil.copytree(NODE_CLIENT, source, ignore=shutil.ignore_patterns("node_modules", "dist"))
    (source / "node_modules").symlink_to(NODE_CLIENT / "node_modules")
    packed = json.loads(run([npm, "pack", "--json", "--pack-destination", str(tmp)], source))
    files = {entry["path"] for entry in packed[0]["files"]}
    for entry in ("index", "web"):
        assert {f"dist/src/{entry}.js", f"dist/src/{entry}.d.ts"} <= files, sorted(files)
    assert not [f for f in files if f.startswith(("dist/test", "test/", "node_modules"))], sorted(files)
    stubs = {
        re.sub(r"_pb\.(d\.ts|js|js\.map|ts)$", "", f.split("/gen/", 1)[1])
        for f in files
        if "/gen/cogmesh/" in f or "/gen/buf/" in f
    }
    assert stubs == PUBLIC_STUBS, sorted(stubs)  # no internal service's stubs
    project = tmp / "project"
    project.mkdir()
    (project / "package.json").write_text(json.dumps({"name": "consumer", "private": True, "type": "module"}))
    pins = [f"{name}@{version}" for name, version in npm_pins().items()]
    install = [npm, "install", "--prefer-offline", "--no-audit", "--no-fund", str(tmp / packed[0]["filename"])]
    run([*install, *pins], project)
    manifest = json.loads((project / "node_modules" / "@cogmesh" / "client" / "package.json").read_text())
    assert manifest["types"] == "./dist/src/index.d.ts", manifest
    return project


def test_node_package_runs_a_turn_from_plain_javascript(node_project: Path, suite: Suite) -> None:
    (node_project / "consumer.mjs").write_text(CONSUMER_MJS)
    out = run(["node", "consumer.mjs", suite.gateway, suite.web, suite.api_key, QUESTION], node_project)
    answers = json.loads(out.strip().splitlines()[-1])
    assert ANSWER in answers["grpc"] and ANSWER in answers["connect"], answers


def test_node_package_typechecks_and_runs_from_typescript(node_project: Path, suite: Suite) -> None:
    (node_project / "consumer.ts").write_text(CONSUMER_TS)
    (node_project / "tsconfig.json").write_text(json.dumps(TSCONFIG))
    tsc = str(node_project / "node_modules" / ".bin" / "tsc")
    run([tsc, "-p", "."], node_project)  # typechecks against the package's .d.ts, then emits out/consumer.js
    out = run(["node", "out/consumer.js", suite.gateway, suite.api_key, QUESTION], node_project)
    result = json.loads(out.strip().splitlines()[-1])
    assert ANSWER in result["text"] and result["seq"] == "bigint", result
    assert "tool:calculator" in result["kinds"] and result["kinds"][-1] == "final", result
    # And tsc rejects a misuse, so the check above has teeth: a field the types do not have.
    (node_project / "consumer.ts").write_text(
        CONSUMER_TS.replace("event.payload.value.name", "event.payload.value.nme")
    )
    wrong = subprocess.run([tsc, "-p", ".", "--noEmit"], cwd=node_project, capture_output=True, text=True)
    assert wrong.returncode != 0 and "nme" in wrong.stdout, wrong.stdout
