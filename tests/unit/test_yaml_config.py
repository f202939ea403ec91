"""One YAML reader for every configuration file: the same booleans and the same error shape in all seven kinds."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, field_validator

from gateway.auth import hash_key, load_keys
from services.kit import yaml_config
from services.kit.yaml_config import ConfigError, ConfigProblem
from services.lib.agents import AgentRegistry, ReloadingAgentRegistry
from services.lib.models.catalog import CatalogError, ModelCatalog
from services.lib.policy.config import ConfigRejected, ConfigStore, InterceptorsFile, load_config, parse_text
from services.lib.providers import load_providers
from services.models.registry import FileModelStore, ModelRegistry, StoreError
from services.runtime.tools.catalog import load_tool_servers

MODEL = """\
  - id: m1
    provider: acme
    aliases: {aliases}
    description: {description}
    context_window: 8000
    max_output_tokens: 1000
    capabilities: {{tools: {tools}, streaming: true, vision: false, structured_output: false}}
    pricing: {{input_per_million_usd: {price}, output_per_million_usd: 2}}
"""


def model(aliases: str = "[]", description: str = "a model", tools: str = "true", price: str = "1") -> str:
    return MODEL.format(aliases=aliases, description=description, tools=tools, price=price)


KEY = hash_key("k")


def load_agent(path: Path) -> Any:
    return AgentRegistry.load_dir(path.parent).get(path.stem)  # a broken file is in the registry's errors


def load_policy(path: Path) -> Any:
    return load_config(path.parent, 1)


def load_added(path: Path) -> Any:
    return asyncio.run(FileModelStore(path).load())


# kind: (file name, loader, a file with one mistake, the error it must give with {file} for the name messages use)
KINDS: dict[str, tuple[str, Callable[[Path], Any], str, str]] = {
    "agent": (
        "foo.yaml",
        load_agent,
        "name: foo\ntools:\n  - calculator\n  - {name: x}\n",
        "{file}:4: tools[1]: Input should be a valid string",
    ),
    "policy": (
        "interceptors.yaml",
        load_policy,
        "interceptors:\n  - type: Failover\n    fallbacks: [a]\n    on: [timeout, never]\n",
        "{file}:4: interceptors[0].on[1]: Input should be 'rate_limit', 'timeout', 'error' or 'context_length'",
    ),
    "providers": (
        "providers.yaml",
        load_providers,
        "providers:\n  mylab:\n    kind: openai\n    timeout_s: 0\n",
        "{file}:4: providers.mylab.timeout_s: Input should be greater than 0",
    ),
    "tool servers": (
        "tools.yaml",
        load_tool_servers,
        "servers:\n  a:\n    transport: grpc\n    address: x:1\n    retries: 9\n",
        "{file}:5: servers.a.retries: Input should be less than or equal to 5",
    ),
    "model catalogue": (
        "models.yaml",
        ModelCatalog.from_yaml,
        "default_model: m1\nmodels:\n" + model(price="-1"),
        "{file}:10: models[0].pricing.input_per_million_usd: Input should be greater than or equal to 0",
    ),
    "added models": (
        "added.yaml",
        load_added,
        "models:\n" + model(description="''"),
        "{file}:5: models[0].description: String should have at least 1 character",
    ),
    "api keys": (
        "keys.yaml",
        load_keys,
        f"keys:\n  - sha256: {KEY}\n    tenant: acme\n    principal: ''\n",
        "{file}:4: keys[0].principal: String should have at least 1 character",
    ),
}


def problems_of(kind: str, path: Path) -> str:
    """What the loader of `kind` says about the file: its exception's message, or the agent registry's errors."""
    _, loader, _, _ = KINDS[kind]
    if kind == "agent":
        return "; ".join(str(error) for error in AgentRegistry.load_dir(path.parent).errors)
    # Each loader keeps the exception type its callers catch; the added models' StoreError is a RuntimeError.
    with pytest.raises((ValueError, StoreError)) as caught:
        loader(path)
    return str(caught.value)


def file_label(kind: str, path: Path) -> str:
    # Agents and policy files are named within their folder; the single files by the path they were given.
    return path.name if kind in ("agent", "policy") else str(path)


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_mistake_names_file_line_and_field(tmp_path: Path, kind: str) -> None:
    name, _, text, expected = KINDS[kind]
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    assert expected.format(file=file_label(kind, path)) in problems_of(kind, path).split("; ")


SYNTAX_ERROR = "a: 1\nb: [unclosed\nc: 2\n"


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_syntax_error_names_its_line(tmp_path: Path, kind: str) -> None:
    name = KINDS[kind][0]
    path = tmp_path / name
    path.write_text(SYNTAX_ERROR, encoding="utf-8")
    message = problems_of(kind, path)
    assert message.startswith(f"{file_label(kind, path)}:3: YAML syntax error: "), message


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_loader_raises_or_reports_a_config_error(tmp_path: Path, kind: str) -> None:
    name, loader, text, _ = KINDS[kind]
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    if kind == "agent":
        assert AgentRegistry.load_dir(tmp_path).errors[0].line == 4
        return
    with pytest.raises((ValueError, StoreError)) as caught:
        loader(path)
    # StoreError (a RuntimeError, what the models registry catches) wraps the added models' ConfigError.
    error = caught.value.__cause__ if kind == "added models" else caught.value
    assert isinstance(error, ConfigError) and isinstance(error, ValueError)
    assert all(isinstance(problem, ConfigProblem) and problem.line for problem in error.problems)


# `no`, `yes` and `on` where a string goes: YAML 1.1 made them booleans, and each of these failed to load.
WORDS: dict[str, tuple[str, Callable[[Any], Any], Any]] = {
    "agent": (
        "name: foo\ndescription: no\ntools: [yes, on]\ninterrupt_on: {on: true}\n",
        lambda agent: (agent.description, agent.tools, agent.interrupt_on),
        ("no", ["yes", "on"], {"on": True}),
    ),
    "policy": (
        "interceptors:\n  - type: Failover\n    name: no\n    fallbacks: [yes]\n    on: [timeout]\n",
        lambda config: (config.interceptors.interceptors[0].name, config.interceptors.interceptors[0].fallbacks),
        ("no", ["yes"]),
    ),
    "providers": (
        "providers:\n  mylab:\n    kind: openai\n    api_key_env: [no, yes, on]\n",
        lambda providers: providers["mylab"].api_key_env,
        ["no", "yes", "on"],
    ),
    "tool servers": (
        "servers:\n  a:\n    transport: stdio\n    command: no\n    args: [yes, on]\n",
        lambda servers: (servers.servers["a"].command, servers.servers["a"].args),
        ("no", ["yes", "on"]),
    ),
    "model catalogue": (
        "default_model: m1\nmodels:\n" + model(aliases="[yes, on]", description="no"),
        lambda catalog: (
            catalog.get("m1").description,
            catalog.resolve("on").model.id,
            catalog.resolve("yes").model.id,
        ),
        ("no", "m1", "m1"),
    ),
    "added models": (
        "models:\n" + model(aliases="[yes, on]", description="no"),
        lambda models: (models[0].description, models[0].aliases),
        ("no", ("yes", "on")),
    ),
    "api keys": (
        f"keys:\n  - sha256: {KEY}\n    tenant: no\n    principal: yes\n    scope: {{pin: {{end_user: on}}}}\n",
        lambda keys: (keys[KEY].tenant_id, keys[KEY].name, dict(keys[KEY].pinned_scope)),
        ("no", "yes", {"end_user": "on"}),
    ),
}


@pytest.mark.parametrize("kind", list(KINDS))
def test_yes_no_and_on_are_strings_in_every_kind(tmp_path: Path, kind: str) -> None:
    name, loader, _, _ = KINDS[kind]
    text, read, expected = WORDS[kind]
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    assert read(loader(path)) == expected


def test_a_boolean_field_still_reads_yes_and_no(tmp_path: Path) -> None:
    (tmp_path / "foo.yaml").write_text("name: foo\nhidden: yes\ntodo_list: off\n")
    agent = AgentRegistry.load_dir(tmp_path).get("foo")
    assert (agent.hidden, agent.todo_list) == (True, False)


def test_a_strict_boolean_field_wants_true_or_false(tmp_path: Path) -> None:
    # The catalogue's capabilities are StrictBool: `yes` (a boolean under YAML 1.1) is now refused, with its line.
    path = tmp_path / "models.yaml"
    path.write_text("default_model: m1\nmodels:\n" + model(tools="yes"))
    with pytest.raises(CatalogError) as caught:
        ModelCatalog.from_yaml(path)
    assert str(caught.value) == f"{path}:9: models[0].capabilities.tools: Input should be a valid boolean"


# --------------------------------------------------------------------------- the same message at start and on reload


def test_policy_reload_reports_what_a_start_reports(tmp_path: Path) -> None:
    (tmp_path / "policy.yaml").write_text("tools:\n  extra_denied: [a]\n")
    store = ConfigStore(tmp_path)
    (tmp_path / "policy.yaml").write_text("tools:\n  extra_denied: a\n  nope: 1\n")
    assert store.reload_if_changed() == "rejected"
    with pytest.raises(ConfigRejected) as caught:
        ConfigStore(tmp_path)
    assert (
        [str(e) for e in store.errors]
        == [str(e) for e in caught.value.errors]
        == [
            "policy.yaml:2: tools.extra_denied: Input should be a valid list",
            "policy.yaml:3: tools.nope: Extra inputs are not permitted",
        ]
    )


def test_agent_reload_reports_what_a_start_reports(tmp_path: Path) -> None:
    (tmp_path / "foo.yaml").write_text("name: foo\n")
    registry = ReloadingAgentRegistry(tmp_path, check_interval_s=3600)
    (tmp_path / "foo.yaml").write_text("name: foo\nlimits:\n  max_iterations: 0\n")
    assert registry.reload_now()
    started = AgentRegistry.load_dir(tmp_path)
    assert (
        [str(e) for e in registry.errors]
        == [str(e) for e in started.errors]
        == ["foo.yaml:3: limits.max_iterations: Input should be greater than 0"]
    )


async def test_catalogue_reload_reports_what_a_start_reports(tmp_path: Path) -> None:
    path = tmp_path / "models.yaml"
    path.write_text("default_model: m1\nmodels:\n" + model())
    registry = ModelRegistry(path, refresh_s=0)
    path.write_text("default_model: m2\nmodels:\n" + model())
    await registry.catalog()
    with pytest.raises(CatalogError) as caught:
        ModelRegistry(path)
    assert registry.last_error == str(caught.value)
    assert registry.last_error == f"{path}:1: default_model: 'm2' is not the id of any model in the catalogue"


# --------------------------------------------------------------------------- the module itself


def test_only_true_and_false_are_booleans() -> None:
    data = yaml_config.parse(
        "a: [true, True, TRUE, false, False, FALSE]\nb: [yes, no, on, off, y, n, Yes, NO, On]\nc: null\nd: 1.5\n",
        "x.yaml",
    ).data
    assert data["a"] == [True, True, True, False, False, False]
    assert data["b"] == ["yes", "no", "on", "off", "y", "n", "Yes", "NO", "On"]
    assert data["c"] is None and data["d"] == 1.5


class Inner(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    size: int = 0


class Outer(BaseModel):
    model_config = ConfigDict(extra="forbid")
    items: list[Inner] = []
    table: dict[str, Inner] = {}


def test_every_problem_is_located_at_once() -> None:
    text = "items:\n  - name: a\n  - name: b\n    size: big\n  - {}\ntable:\n  t:\n    name: [x]\n"
    with pytest.raises(ConfigError) as caught:
        yaml_config.parse(text, "x.yaml").validate(Outer)
    assert [str(p) for p in caught.value.problems] == [
        "x.yaml:4: items[1].size: Input should be a valid integer, unable to parse string as an integer",
        "x.yaml:5: items[2].name: Field required",  # a missing field is placed at its parent
        "x.yaml:8: table.t.name: Input should be a valid string",
    ]
    assert str(caught.value) == "; ".join(str(p) for p in caught.value.problems)


def test_an_empty_file_is_an_empty_mapping_and_a_list_is_refused() -> None:
    assert yaml_config.parse("# nothing\n", "x.yaml").validate(Outer) == Outer()
    with pytest.raises(ConfigError, match=r"^x.yaml:1: expected a mapping at top level, got list$"):
        yaml_config.parse("- a\n", "x.yaml").validate(Outer)


def test_a_validation_below_a_key_is_located_under_it() -> None:
    document = yaml_config.parse("table:\n  t:\n    name: a\n    size: 3\n", "x.yaml")
    merged = {**document.data["table"]["t"], "size": "big"}
    with pytest.raises(ConfigError, match=r"^x.yaml:4: table.t.size: Input should be a valid integer"):
        document.validate(Inner, merged, at=("table", "t"))


def test_front_matter_lines_count_from_the_file() -> None:
    with pytest.raises(ConfigError, match=r"^x.md:3: items\[0\].name: Field required$"):
        yaml_config.parse("items:\n  - size: 1\n", "x.md", first_line=2).validate(Outer)
    with pytest.raises(ConfigError, match=r"^x.md:4: YAML syntax error"):
        yaml_config.parse("a: 1\nb: [\n", "x.md", first_line=2)


def test_an_unreadable_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"absent.yaml: cannot read: No such file or directory$"):
        yaml_config.load(tmp_path / "absent.yaml", Outer)
    assert yaml_config.read_text_if_exists(tmp_path / "absent.yaml") is None
    (tmp_path / "latin1.yaml").write_bytes(b"name: caf\xe9\n")
    with pytest.raises(ConfigError, match=r"latin1.yaml: cannot read: 'utf-8' codec"):
        yaml_config.read_text(tmp_path / "latin1.yaml")


@pytest.mark.parametrize(
    ("loc", "path"),
    [
        (("tools", 2, "name"), "tools[2].name"),
        (("a", "b"), "a.b"),
        ((), ""),
        (("models", 0, "aliases", 1), "models[0].aliases[1]"),
    ],
)
def test_field_paths_read_back(loc: tuple[int | str, ...], path: str) -> None:
    assert yaml_config.field_path(loc) == path
    assert yaml_config.loc_of(path) == loc


def test_a_union_tag_is_not_part_of_the_path() -> None:
    text = "interceptors:\n  - type: BudgetGuard\n    model_calls: -1\n"
    with pytest.raises(ConfigRejected) as caught:
        parse_text("interceptors.yaml", text, InterceptorsFile)
    assert [str(e) for e in caught.value.errors] == [
        "interceptors.yaml:3: interceptors[0].model_calls: Input should be greater than or equal to 0"
    ]


class Checked(BaseModel):
    value: int

    @field_validator("value")
    @classmethod
    def _not_negative(cls, value: int) -> int:
        if value < 0:
            raise ValueError("must not be negative")
        return value


def test_messages_drop_pydantics_value_error_prefix() -> None:
    with pytest.raises(ConfigError) as caught:
        yaml_config.parse("value: -1\n", "x.yaml").validate(Checked)
    assert str(caught.value) == "x.yaml:1: value: must not be negative"
