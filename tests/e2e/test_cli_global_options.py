"""The CLI's global options (--gateway, --api-key, --json) go before the command or after it (issue 31)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from services.suite.cli import parse
from tests.support.ports import free_port

BIN = Path(sys.executable).parent


@pytest.mark.parametrize(
    "argv",
    [
        ["--gateway", "10.0.0.1:7", "--api-key", "cm_k", "--json", "chat", "hi"],
        ["chat", "--gateway", "10.0.0.1:7", "--api-key", "cm_k", "--json", "hi"],
        ["--gateway", "10.0.0.1:7", "chat", "hi", "--api-key", "cm_k", "--json"],
        ["--json", "--api-key", "cm_k", "--gateway", "10.0.0.1:7", "sessions", "list"],
        ["--gateway", "10.0.0.1:7", "watch", "s1", "--json", "--api-key", "cm_k"],
        ["--api-key", "cm_k", "--gateway", "10.0.0.1:7", "models", "list", "--json"],
        ["--gateway", "10.0.0.1:7", "--json", "agents", "list", "--api-key", "cm_k"],
    ],
)
def test_global_options_before_or_after_the_command(argv: list[str]) -> None:
    args = parse(argv)
    assert (args.gateway, args.api_key, args.json) == ("10.0.0.1:7", "cm_k", True)


def test_defaults_when_not_given_and_the_later_value_wins() -> None:
    args = parse(["models", "list"])
    assert (args.gateway, args.api_key, args.json) == ("", "", False)
    assert parse(["--gateway", "a:1", "chat", "--gateway", "b:2", "hi"]).gateway == "b:2"


@pytest.mark.parametrize(
    "argv", [["--gateway", "a:1", "up"], ["--api-key", "k", "keys", "new", "--tenant", "t", "--principal", "p"]]
)
def test_gateway_options_are_refused_where_they_mean_nothing(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        parse(argv)
    assert exited.value.code == 2
    assert "--gateway and --api-key do not apply to `cogmesh " in capsys.readouterr().err


def test_gateway_before_the_command_is_the_one_called() -> None:
    port = free_port()
    result = subprocess.run(
        [str(BIN / "cogmesh"), "--gateway", f"127.0.0.1:{port}", "chat", "hi", "--connect-timeout", "1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert f"cannot reach the gateway at 127.0.0.1:{port}" in result.stderr
