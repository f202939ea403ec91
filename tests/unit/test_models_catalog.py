from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml

from services.lib.models.catalog import (
    CatalogError,
    ModelCatalog,
    ModelSpec,
    Resolution,
    UnknownModelError,
)

# The seed's full alias table: model id -> (provider, aliases).
SEED_TABLE: dict[str, tuple[str, tuple[str, ...]]] = {
    "claude-sonnet-4-20250514": ("anthropic", ("sonnet", "sonnet-4", "claude-sonnet")),
    "claude-opus-4-20250514": ("anthropic", ("opus", "opus-4", "claude-opus")),
    "claude-haiku-3-20250307": ("anthropic", ("haiku", "haiku-3", "claude-haiku")),
    "gpt-4o": ("openai", ("4o", "gpt4o")),
    "gpt-4o-mini": ("openai", ("4o-mini", "gpt4o-mini", "mini")),
    "o3": ("openai", ("o3-reasoning",)),
    "o3-mini": ("openai", ("o3m",)),
    "gemini-2.5-pro": ("google", ("gemini-pro", "gemini")),
    "gemini-2.5-flash": ("google", ("gemini-flash", "flash")),
    "deepseek-chat": ("deepseek", ("deepseek", "ds-chat")),
    "deepseek-reasoner": ("deepseek", ("deepseek-r1", "ds-r1", "r1")),
}
SEED_ALIASES = [(alias, model_id) for model_id, (_, aliases) in SEED_TABLE.items() for alias in aliases]


@pytest.fixture(scope="module")
def catalog() -> ModelCatalog:
    return ModelCatalog.default()


def _model(model_id: str, provider: str = "acme", aliases: list[str] | None = None) -> dict[str, Any]:
    return {
        "id": model_id,
        "provider": provider,
        "aliases": aliases or [],
        "description": f"{model_id} test model",
        "context_window": 1000,
        "max_output_tokens": 100,
        "capabilities": {
            "tools": True,
            "streaming": True,
            "vision": False,
            "structured_output": False,
        },
        "pricing": {"input_per_million_usd": 1.0, "output_per_million_usd": 2.0},
    }


def _catalog_doc(*models: dict[str, Any], default: str | None = None) -> dict[str, Any]:
    return {"default_model": default or models[0]["id"], "models": list(models)}


def _write(tmp_path: Path, doc: object) -> Path:
    path = tmp_path / "models.yaml"
    path.write_text(yaml.safe_dump(doc) if not isinstance(doc, str) else doc, encoding="utf-8")
    return path


def _load(tmp_path: Path, doc: object) -> ModelCatalog:
    return ModelCatalog.from_yaml(_write(tmp_path, doc))


# --- shipped catalogue ----------------------------------------------------


def test_default_catalogue_has_seed_models_plus_local(catalog: ModelCatalog) -> None:
    assert {spec.id for spec in catalog.list_models()} == set(SEED_TABLE) | {"cogmesh-local"}


@pytest.mark.parametrize("model_id", sorted(SEED_TABLE))
def test_seed_models_have_exactly_the_seed_aliases_and_provider(catalog: ModelCatalog, model_id: str) -> None:
    provider, aliases = SEED_TABLE[model_id]
    spec = catalog.get(model_id)
    assert spec.provider == provider
    assert set(spec.aliases) == set(aliases)
    assert len(spec.aliases) == len(aliases)


def test_local_model_is_the_free_offline_default(catalog: ModelCatalog) -> None:
    local = catalog.default_model
    assert local.id == "cogmesh-local"
    assert local.provider == "local"
    assert set(local.aliases) == {"local", "cogmesh"}
    assert local.pricing.input_per_million_usd == 0
    assert local.pricing.output_per_million_usd == 0


@pytest.mark.parametrize("model_id", sorted(SEED_TABLE))
def test_hosted_models_have_plausible_limits_and_prices(catalog: ModelCatalog, model_id: str) -> None:
    spec = catalog.get(model_id)
    assert spec.description.strip()
    assert spec.max_output_tokens <= spec.context_window
    assert spec.pricing.input_per_million_usd > 0
    assert spec.pricing.output_per_million_usd >= spec.pricing.input_per_million_usd
    assert spec.capabilities.streaming is True


# --- resolution -------------------------------------------------------------


@pytest.mark.parametrize(("alias", "model_id"), SEED_ALIASES)
def test_every_seed_alias_resolves_to_its_model(catalog: ModelCatalog, alias: str, model_id: str) -> None:
    resolution = catalog.resolve(alias)
    assert resolution == Resolution(catalog.get(model_id), "alias", alias)
    assert resolution.model.provider == SEED_TABLE[model_id][0]


@pytest.mark.parametrize("model_id", sorted(SEED_TABLE))
def test_full_ids_resolve_as_full_name(catalog: ModelCatalog, model_id: str) -> None:
    resolution = catalog.resolve(model_id)
    assert resolution.model.id == model_id
    assert resolution.matched_by == "full_name"


def test_matching_is_case_insensitive_and_strips_whitespace(
    catalog: ModelCatalog,
) -> None:
    assert catalog.resolve("  SONNET\t").model.id == "claude-sonnet-4-20250514"
    resolution = catalog.resolve(" GPT-4O ")
    assert (resolution.model.id, resolution.matched_by, resolution.requested) == (
        "gpt-4o",
        "full_name",
        " GPT-4O ",
    )
    assert catalog.resolve("Gemini-2.5").model.id == "gemini-2.5-pro"


def test_alias_wins_even_when_it_is_also_an_id_prefix(catalog: ModelCatalog) -> None:
    resolution = catalog.resolve("claude-sonnet")
    assert resolution.model.id == "claude-sonnet-4-20250514"
    assert resolution.matched_by == "alias"


def test_full_name_wins_over_prefix(catalog: ModelCatalog) -> None:
    # "o3" is both an id and a prefix of "o3-mini".
    resolution = catalog.resolve("o3")
    assert (resolution.model.id, resolution.matched_by) == ("o3", "full_name")


def test_unique_prefix_resolves_to_that_model(catalog: ModelCatalog) -> None:
    resolution = catalog.resolve("gpt-4o-m")
    assert (resolution.model.id, resolution.matched_by) == ("gpt-4o-mini", "prefix")


def test_shared_prefix_picks_the_shortest_id(catalog: ModelCatalog) -> None:
    # gemini-2.5-pro (14 chars) beats gemini-2.5-flash (16 chars), every time.
    for _ in range(3):
        resolution = catalog.resolve("gemini-2.5")
        assert (resolution.model.id, resolution.matched_by) == (
            "gemini-2.5-pro",
            "prefix",
        )
    assert catalog.resolve("claude").model.id == "claude-opus-4-20250514"
    assert catalog.resolve("gpt").model.id == "gpt-4o"


def test_prefix_ties_are_broken_alphabetically_and_length_comes_first(
    tmp_path: Path,
) -> None:
    doc = _catalog_doc(
        _model("acme-zeta"),
        _model("acme-beta"),
        _model("acme-al"),
        _model("acme-alphabet"),
    )
    catalog = _load(tmp_path, doc)
    assert catalog.resolve("acme-").model.id == "acme-al"  # shortest, not first alphabetically
    assert catalog.resolve("acme-b").model.id == "acme-beta"
    assert catalog.resolve("acme-alp").model.id == "acme-alphabet"
    tie = _load(tmp_path, _catalog_doc(_model("m-b"), _model("m-a")))
    assert tie.resolve("m-").model.id == "m-a"


def test_alias_beats_a_prefix_of_another_model(tmp_path: Path) -> None:
    doc = _catalog_doc(_model("gpt-4o"), _model("other", aliases=["gpt-4"]))
    resolution = _load(tmp_path, doc).resolve("gpt-4")
    assert (resolution.model.id, resolution.matched_by) == ("other", "alias")


def test_prefixes_match_ids_not_aliases(tmp_path: Path) -> None:
    catalog = _load(tmp_path, _catalog_doc(_model("base"), _model("x-model", aliases=["fancy"])))
    assert catalog.resolve("fan").matched_by == "default"


@pytest.mark.parametrize("name", ["no-such-model", "sonnet-5", "4o-", "anthropic"])
def test_unknown_names_fall_back_to_default(catalog: ModelCatalog, name: str) -> None:
    assert catalog.resolve(name) == Resolution(catalog.default_model, "default", name)


@pytest.mark.parametrize("name", ["", "   ", "\n\t"])
def test_empty_name_resolves_to_default_when_not_strict(catalog: ModelCatalog, name: str) -> None:
    assert catalog.resolve(name) == Resolution(catalog.default_model, "default", name)


@pytest.mark.parametrize("name", ["", "   "])
def test_empty_name_in_strict_mode_raises_value_error(catalog: ModelCatalog, name: str) -> None:
    with pytest.raises(ValueError, match="name"):
        catalog.resolve(name, strict=True)


def test_strict_mode_raises_for_unknown_names(catalog: ModelCatalog) -> None:
    with pytest.raises(UnknownModelError) as excinfo:
        catalog.resolve("no-such-model", strict=True)
    assert excinfo.value.name == "no-such-model"
    assert "no-such-model" in str(excinfo.value)
    assert isinstance(excinfo.value, LookupError)


def test_strict_mode_still_resolves_alias_full_name_and_prefix(
    catalog: ModelCatalog,
) -> None:
    assert catalog.resolve("r1", strict=True).matched_by == "alias"
    assert catalog.resolve("o3-mini", strict=True).matched_by == "full_name"
    assert catalog.resolve("deepseek-rea", strict=True).matched_by == "prefix"


def test_resolution_is_frozen(catalog: ModelCatalog) -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        catalog.resolve("sonnet").matched_by = "default"  # type: ignore[misc]


# --- lookups and listings ---------------------------------------------------


def test_get_is_exact_id_only(catalog: ModelCatalog) -> None:
    assert catalog.get(" GPT-4o-MINI ").id == "gpt-4o-mini"
    with pytest.raises(UnknownModelError) as excinfo:
        catalog.get("sonnet")
    assert excinfo.value.name == "sonnet"
    with pytest.raises(UnknownModelError):
        catalog.get("gpt-4o-m")


def test_list_models_is_sorted_by_id(catalog: ModelCatalog) -> None:
    ids = [spec.id for spec in catalog.list_models()]
    assert ids == sorted(ids)
    assert len(ids) == len(SEED_TABLE) + 1


@pytest.mark.parametrize(
    ("provider", "expected"),
    [
        ("openai", ["gpt-4o", "gpt-4o-mini", "o3", "o3-mini"]),
        (
            "anthropic",
            [
                "claude-haiku-3-20250307",
                "claude-opus-4-20250514",
                "claude-sonnet-4-20250514",
            ],
        ),
        ("google", ["gemini-2.5-flash", "gemini-2.5-pro"]),
        ("deepseek", ["deepseek-chat", "deepseek-reasoner"]),
        ("local", ["cogmesh-local"]),
        (" OpenAI ", ["gpt-4o", "gpt-4o-mini", "o3", "o3-mini"]),
        ("mistral", []),
    ],
)
def test_list_models_filters_by_provider(catalog: ModelCatalog, provider: str, expected: list[str]) -> None:
    assert [spec.id for spec in catalog.list_models(provider)] == expected


def test_list_aliases_maps_every_alias_in_sorted_order(catalog: ModelCatalog) -> None:
    aliases = catalog.list_aliases()
    assert list(aliases) == sorted(aliases)
    assert aliases == {
        **dict(SEED_ALIASES),
        "local": "cogmesh-local",
        "cogmesh": "cogmesh-local",
    }


def test_list_aliases_returns_a_copy(catalog: ModelCatalog) -> None:
    catalog.list_aliases()["sonnet"] = "gpt-4o"
    assert catalog.resolve("sonnet").model.id == "claude-sonnet-4-20250514"


def test_list_providers(catalog: ModelCatalog) -> None:
    assert catalog.list_providers() == [
        "anthropic",
        "deepseek",
        "google",
        "local",
        "openai",
    ]


def test_describe_uses_resolution(catalog: ModelCatalog) -> None:
    assert catalog.describe("sonnet") == catalog.get("claude-sonnet-4-20250514").description
    assert catalog.describe("gpt-4o-m") == catalog.get("gpt-4o-mini").description
    assert catalog.describe("unknown") == catalog.default_model.description
    with pytest.raises(UnknownModelError):
        catalog.describe("unknown", strict=True)


def test_catalogue_can_be_built_from_specs() -> None:
    spec = ModelSpec.model_validate(_model("Solo", provider="ACME", aliases=[" S "]))
    catalog = ModelCatalog([spec], "solo")
    assert (spec.id, spec.provider, spec.aliases) == ("solo", "acme", ("s",))
    assert catalog.resolve("S").model is spec
    assert catalog.default_model is spec


# --- invalid catalogue files ------------------------------------------------


def _error(tmp_path: Path, doc: object) -> CatalogError:
    path = _write(tmp_path, doc)
    with pytest.raises(CatalogError) as excinfo:
        ModelCatalog.from_yaml(path)
    assert str(path) in str(excinfo.value)
    return excinfo.value


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match="cannot read"):
        ModelCatalog.from_yaml(tmp_path / "absent.yaml")


def test_bad_yaml_reports_position(tmp_path: Path) -> None:
    error = _error(tmp_path, "default_model: a\nmodels: [\n  {id: a\n")
    assert error.field is None and error.line == 4  # the end of the file, where a '}' was expected
    assert "models.yaml:4: YAML syntax error" in str(error)


def test_empty_file(tmp_path: Path) -> None:
    assert "empty" in str(_error(tmp_path, ""))


def test_top_level_must_be_a_mapping(tmp_path: Path) -> None:
    error = _error(tmp_path, ["not", "a", "mapping"])
    assert error.field is None
    assert error.problem == "expected a mapping at top level, got list"


def test_missing_field_names_its_path(tmp_path: Path) -> None:
    broken = _model("b")
    del broken["provider"]
    error = _error(tmp_path, _catalog_doc(_model("a"), broken))
    assert error.field == "models[1].provider"
    # A missing field is placed at its parent: the line where models[1] starts.
    items = [n for n, line in enumerate((tmp_path / "models.yaml").read_text().splitlines(), 1) if line[:2] == "- "]
    assert str(error) == f"{tmp_path / 'models.yaml'}:{items[1]}: models[1].provider: Field required"


def test_all_schema_errors_are_reported(tmp_path: Path) -> None:
    first, second = _model("a"), _model("b")
    del first["description"]
    second["capabilities"]["vision"] = "no"
    error = _error(tmp_path, _catalog_doc(first, second))
    assert error.field == "models[0].description"
    assert "models[1].capabilities.vision" in str(error)


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda m: m.update(context_window=0), "models[0].context_window"),
        (lambda m: m.update(max_output_tokens=5000), "models[0].max_output_tokens"),
        (
            lambda m: m["pricing"].update(output_per_million_usd=-1),
            "models[0].pricing.output_per_million_usd",
        ),
        (
            lambda m: m["capabilities"].update(tools="yes"),
            "models[0].capabilities.tools",
        ),
        (lambda m: m.update(id="two words"), "models[0].id"),
        (lambda m: m.update(aliases=["ok", ""]), "models[0].aliases[1]"),
        (lambda m: m.update(max_output_token=10), "models[0].max_output_token"),
    ],
)
def test_invalid_model_fields(tmp_path: Path, mutate: Any, field: str) -> None:
    model = _model("a")
    mutate(model)
    assert _error(tmp_path, _catalog_doc(model, default="a")).field == field


def test_output_larger_than_context_is_explained(tmp_path: Path) -> None:
    error = _error(tmp_path, _catalog_doc({**_model("a"), "max_output_tokens": 5000}))
    assert "exceeds context_window" in error.problem


def test_empty_model_list(tmp_path: Path) -> None:
    assert _error(tmp_path, {"default_model": "a", "models": []}).field == "models"


def test_duplicate_id_case_insensitive(tmp_path: Path) -> None:
    error = _error(tmp_path, _catalog_doc(_model("a"), _model("b"), _model("A")))
    assert error.field == "models[2].id"
    assert "duplicate model id 'a'" in str(error)


def test_alias_claimed_by_two_models(tmp_path: Path) -> None:
    doc = _catalog_doc(_model("a", aliases=["shared"]), _model("b", aliases=["own", "Shared"]))
    error = _error(tmp_path, doc)
    assert error.field == "models[1].aliases[1]"
    assert "'shared' is already claimed by model 'a'" in str(error)


def test_alias_repeated_within_one_model(tmp_path: Path) -> None:
    error = _error(tmp_path, _catalog_doc(_model("a", aliases=["x", "x"])))
    assert error.field == "models[0].aliases[1]"


@pytest.mark.parametrize("alias_owner_index", [0, 1])
def test_alias_equal_to_a_model_id(tmp_path: Path, alias_owner_index: int) -> None:
    # The colliding id may come before or after the alias in the file.
    models = [_model("a"), _model("b")]
    models[alias_owner_index]["aliases"] = ["b" if alias_owner_index == 0 else "a"]
    error = _error(tmp_path, _catalog_doc(*models))
    assert error.field == f"models[{alias_owner_index}].aliases[0]"
    assert "already a model id" in error.problem


def test_unknown_default_model(tmp_path: Path) -> None:
    error = _error(tmp_path, _catalog_doc(_model("a", aliases=["alias-a"]), default="missing"))
    assert error.field == "default_model"
    assert "'missing'" in str(error)


def test_default_model_must_be_an_id_not_an_alias(tmp_path: Path) -> None:
    error = _error(tmp_path, _catalog_doc(_model("a", aliases=["alias-a"]), default="alias-a"))
    assert error.field == "default_model"


def test_default_model_is_matched_case_insensitively(tmp_path: Path) -> None:
    catalog = _load(tmp_path, _catalog_doc(_model("a"), _model("b"), default=" B "))
    assert catalog.default_model.id == "b"
