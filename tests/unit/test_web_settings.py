"""The browser edge's own settings: where it binds, and which origins may call it."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.settings import GatewaySettings
from gateway.web.app import cors_origins
from gateway.web.main import listen_address


def test_without_keys_the_edge_binds_loopback_only() -> None:
    assert listen_address(GatewaySettings(web_addr="127.0.0.1:8123")) == ("127.0.0.1", 8123)
    assert listen_address(GatewaySettings(web_addr="[::1]:8123")) == ("::1", 8123)
    with pytest.raises(SystemExit, match=r"binds loopback only, not 0\.0\.0\.0:8123"):
        listen_address(GatewaySettings(web_addr="0.0.0.0:8123"))
    # --listen (COGMESH_LISTEN) wins over COGMESH_WEB_ADDR, as for every service.
    assert listen_address(GatewaySettings(listen="0.0.0.0:9", api_keys_file=Path("keys.yaml"))) == ("0.0.0.0", 9)
    with pytest.raises(SystemExit, match="host:port"):
        listen_address(GatewaySettings(web_addr="8123"))


def test_cors_origins_are_a_comma_separated_list() -> None:
    assert cors_origins(GatewaySettings()) == []
    assert cors_origins(GatewaySettings(web_cors_origins=" https://a.example/, http://localhost:5173 ")) == [
        "https://a.example",
        "http://localhost:5173",
    ]
    assert cors_origins(GatewaySettings(web_cors_origins="*")) == ["*"]
