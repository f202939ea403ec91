"""The settings split: the kit's shared fields, each service's own, and the suite's class that has them all."""

from __future__ import annotations

import importlib
from collections import Counter

import pytest
from pydantic import ValidationError

from gateway.settings import GatewaySettings
from services.kit.config import Settings, declared_fields, settings_parser
from services.runtime.settings import RuntimeSettings
from services.sessions.settings import SessionsSettings
from services.suite.settings import SERVICE_SETTINGS, SuiteSettings

CLASSES: list[type[Settings]] = [Settings, *SERVICE_SETTINGS.values(), SuiteSettings]
# Each service's process: its module's `main` parses its flags before it starts anything.
MAINS = {name: f"services.{name}.main" for name in SERVICE_SETTINGS} | {"gateway": "gateway.main"}


def test_every_field_is_declared_exactly_once_and_the_suite_has_them_all() -> None:
    counts = Counter(name for cls in CLASSES for name in declared_fields(cls))
    assert [name for name, n in counts.items() if n > 1] == []
    assert set(counts) == set(SuiteSettings.model_fields)
    for cls in SERVICE_SETTINGS.values():  # a service has the shared fields and its own, no other service's
        assert set(cls.model_fields) == set(declared_fields(Settings)) | set(declared_fields(cls)), cls.__name__
        assert issubclass(SuiteSettings, cls)


def test_the_suite_keeps_every_default() -> None:
    # One class over the same fields: its defaults are each owner's (no user-visible change).
    suite = SuiteSettings().model_dump()
    for cls in SERVICE_SETTINGS.values():
        assert {name: suite[name] for name in cls.model_fields} == cls().model_dump()


def test_each_service_reads_its_own_variables_and_ignores_the_others(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COGMESH_WEBHOOK_TIMEOUT_S", "3")
    monkeypatch.setenv("COGMESH_TAKEOVER_POLL_S", "0.5")
    monkeypatch.setenv("COGMESH_CALL_TIMEOUT_S", "7")
    sessions, runtime, suite = SessionsSettings(), RuntimeSettings(), SuiteSettings()
    assert (sessions.webhook_timeout_s, sessions.call_timeout_s) == (3.0, 7.0)
    assert (runtime.takeover_poll_s, runtime.call_timeout_s) == (0.5, 7.0)
    assert (suite.webhook_timeout_s, suite.takeover_poll_s) == (3.0, 0.5)
    # Another service's bad value does not stop this one: only its owner validates it.
    monkeypatch.setenv("COGMESH_WEBHOOK_TIMEOUT_S", "-1")
    assert RuntimeSettings().takeover_poll_s == 0.5
    with pytest.raises(ValidationError, match="webhook_timeout_s"):
        SessionsSettings()


def test_a_field_of_another_service_given_in_code_is_an_error() -> None:
    # extra="forbid": a test or bench that builds the wrong class fails here instead of running with a default.
    with pytest.raises(ValidationError, match="webhook_timeout_s"):
        RuntimeSettings(webhook_timeout_s=3)  # type: ignore[call-arg]


def test_the_shared_validators_hold_in_every_class() -> None:
    for cls in CLASSES:
        with pytest.raises(ValidationError, match="turn_lease_renew_s"):
            cls(turn_lease_ttl_s=2, turn_lease_renew_s=2)


def flags(cls: type[Settings]) -> set[str]:
    return {option for action in settings_parser(cls)._actions for option in action.option_strings} - {"-h", "--help"}


def test_a_service_parser_has_its_own_and_the_shared_flags_only() -> None:
    shared = flags(Settings)
    assert {"--listen", "--call-timeout-s", "--redis-url", "--turn-lease-ttl-s"} <= shared
    for name, cls in SERVICE_SETTINGS.items():
        others = set().union(*(flags(other) for other in SERVICE_SETTINGS.values() if other is not cls)) - shared
        own = {"--" + field.replace("_", "-") for field in declared_fields(cls)}
        assert flags(cls) == shared | own, name
        assert not flags(cls) & others, name
    assert "--takeover-poll-s" in flags(RuntimeSettings) and "--takeover-poll-s" not in flags(GatewaySettings)
    assert "--runtime-workers" not in flags(RuntimeSettings)  # `cogmesh up`'s, in SuiteSettings only


@pytest.mark.parametrize("service", sorted(MAINS))
def test_a_service_help_lists_its_settings_and_no_other_services(
    service: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.argv", [f"cogmesh-{service}", "--help"])
    with pytest.raises(SystemExit) as stopped:
        importlib.import_module(MAINS[service]).main()  # --help exits before anything starts
    assert stopped.value.code == 0
    shown = capsys.readouterr().out
    own = SERVICE_SETTINGS[service]
    assert f"usage: cogmesh-{service}" in shown
    for field in [*declared_fields(own), "listen", "call_timeout_s", "max_connection_age_s"]:
        assert f"--{field.replace('_', '-')} " in shown, field
    for other in SERVICE_SETTINGS.values():
        for field in declared_fields(other) if other is not own else []:
            assert f"--{field.replace('_', '-')} " not in shown, field


def test_the_browser_edge_takes_the_gateways_flags(capsys: pytest.CaptureFixture[str]) -> None:
    from gateway.web.main import main

    with pytest.raises(SystemExit):
        main(["--help"])
    shown = capsys.readouterr().out
    assert "--web-cors-origins " in shown and "--tenant-burst " in shown and "--policy-dir " not in shown
