"""The example provider and tool-server files load, and a bad file stops the runtime with a clear message."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.kit.clients import Clients
from services.lib.providers import load_providers
from services.runtime import main as runtime_main
from services.runtime.settings import RuntimeSettings
from services.runtime.tools.catalog import load_tool_servers

EXAMPLES = Path(__file__).resolve().parents[2] / "services" / "runtime" / "examples"


def test_example_files_are_valid() -> None:
    providers = load_providers(EXAMPLES / "providers.yaml")
    assert providers["vllm"].base_url == "http://127.0.0.1:8000/v1" and not providers["vllm"].api_key_required
    servers = load_tool_servers(EXAMPLES / "tool_servers.yaml")
    assert {name: s.transport for name, s in servers.servers.items()} == {
        "everything": "stdio",
        "search": "http",
        "billing": "grpc",
    }


@pytest.mark.parametrize(
    ("field", "text", "expected"),
    [
        ("providers_file", "providers:\n  x:\n    kind: nope\n", "providers.x.kind"),
        ("tool_servers_file", "servers:\n  x:\n    transport: grpc\n", "needs 'address'"),
    ],
)
async def test_bad_config_stops_the_runtime_with_the_reason(
    tmp_path: Path, field: str, text: str, expected: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    settings = RuntimeSettings(**{field: path})
    with pytest.raises(SystemExit) as caught:
        await runtime_main.build(settings, Clients(settings))
    assert expected in str(caught.value) and "bad.yaml" in str(caught.value)


async def test_unknown_default_runtime_stops_the_runtime() -> None:
    settings = RuntimeSettings(runtime="warp")
    with pytest.raises(SystemExit, match="COGMESH_RUNTIME='warp' is not a runtime engine; known: cogmesh, single-shot"):
        await runtime_main.build(settings, Clients(settings))
