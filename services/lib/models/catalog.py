"""Model catalogue: load the model list from YAML and resolve user-supplied names.

Pure domain code; the gRPC model service wraps it.

Resolution order for :meth:`ModelCatalog.resolve`:

1. exact alias (``"sonnet"``),
2. exact model id (``"gpt-4o"``),
3. prefix of a model id (``"gpt-4o-m"`` -> ``gpt-4o-mini``). When several ids
   share the prefix the shortest id wins and ties are broken alphabetically,
   so ``"gemini-2.5"`` always resolves to ``gemini-2.5-pro``,
4. the catalogue's ``default_model`` (unless ``strict=True``).

Names are matched case-insensitively after stripping surrounding whitespace.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PositiveInt,
    StrictBool,
    StringConstraints,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from pydantic_core import ErrorDetails, PydanticCustomError

from services.kit import yaml_config
from services.kit.yaml_config import ConfigError, ConfigProblem

__all__ = [
    "DEFAULT_CATALOG_PATH",
    "Capabilities",
    "CatalogError",
    "CatalogFile",
    "MatchKind",
    "ModelCatalog",
    "ModelSpec",
    "Pricing",
    "Resolution",
    "UnknownModelError",
    "format_validation_error",
]

DEFAULT_CATALOG_PATH = Path(__file__).resolve().parents[2] / "defaults" / "models.yaml"

MatchKind = Literal["alias", "full_name", "prefix", "default"]

# Ids, aliases and providers are stored in canonical (stripped, lower-case) form
# so that every lookup is a plain dict hit on the normalised query.
Name = Annotated[
    str,
    StringConstraints(strip_whitespace=True, to_lower=True, min_length=1, pattern=r"^\S+$"),
]


def _normalise(name: str) -> str:
    return name.strip().lower()


class _Frozen(BaseModel):
    # extra="forbid" turns typos such as `max_output_token` into load errors.
    model_config = ConfigDict(frozen=True, extra="forbid")


class Pricing(_Frozen):
    input_per_million_usd: float = Field(ge=0)
    output_per_million_usd: float = Field(ge=0)


class Capabilities(_Frozen):
    # StrictBool so that e.g. the string "no" is rejected rather than coerced.
    tools: StrictBool
    streaming: StrictBool
    vision: StrictBool
    structured_output: StrictBool


class ModelSpec(_Frozen):
    id: Name
    provider: Name
    aliases: tuple[Name, ...] = ()
    description: str = Field(min_length=1)
    context_window: PositiveInt
    max_output_tokens: PositiveInt
    capabilities: Capabilities
    pricing: Pricing

    @field_validator("max_output_tokens")
    @classmethod
    def _output_fits_context(cls, value: int, info: ValidationInfo) -> int:
        context_window = info.data.get("context_window")
        if context_window is not None and value > context_window:
            raise PydanticCustomError(
                "output_exceeds_context",
                "max_output_tokens ({value}) exceeds context_window ({context_window})",
                {"value": value, "context_window": context_window},
            )
        return value


class CatalogFile(_Frozen):
    """Schema of the whole YAML document; cross-model rules live in ModelCatalog."""

    default_model: Name
    models: list[ModelSpec] = Field(min_length=1)


class CatalogError(ConfigError):
    """The catalogue file is unreadable or invalid.

    ``field`` is the dotted path of the offending value (``models[3].provider``),
    or None when the problem concerns the file as a whole; ``line`` its line in the
    file (0: not known). ``more`` are the file's other problems, in the message too.
    """

    def __init__(
        self, source: str, problem: str, field: str | None = None, *, line: int = 0, more: Iterable[ConfigProblem] = ()
    ) -> None:
        super().__init__([ConfigProblem(source, line, field or "", problem), *more])
        self.source = source
        self.field = field
        self.problem = problem
        self.line = line


class UnknownModelError(LookupError):
    """No alias, model id or id prefix matches ``name``."""

    def __init__(self, name: str) -> None:
        super().__init__(f"unknown model {name!r}: no alias, model id or id prefix matches")
        self.name = name


@dataclass(frozen=True, slots=True)
class Resolution:
    model: ModelSpec
    matched_by: MatchKind
    requested: str

    @property
    def fallback_reason(self) -> str:
        """Why the default model answered; "" when the name matched."""
        if self.matched_by != "default":
            return ""
        if not self.requested.strip():
            return f"no model name given; using the default model {self.model.id!r}"
        return f"no alias, model id or id prefix matches {self.requested!r}; using the default model {self.model.id!r}"


def _format_error(error: ErrorDetails) -> tuple[str | None, str]:
    message = error["msg"]
    return yaml_config.field_path(error["loc"]) or None, message[:1].lower() + message[1:]


def format_validation_error(exc: ValidationError) -> list[tuple[str, str]]:
    """(dotted field path, problem) for every error of a pydantic validation."""
    return [(field or "", problem) for field, problem in (_format_error(e) for e in exc.errors())]


class ModelCatalog:
    """Immutable view over a validated set of models with O(1) name lookups."""

    def __init__(
        self,
        models: Iterable[ModelSpec],
        default_model: str,
        *,
        source: str = "<catalog>",
    ) -> None:
        """Index ``models``; raise CatalogError on cross-model conflicts.

        ``source`` only labels error messages (normally the YAML file path).
        """
        specs = list(models)
        self._by_id: dict[str, ModelSpec] = {}
        index_of: dict[str, int] = {}
        for i, spec in enumerate(specs):
            if spec.id in self._by_id:
                raise CatalogError(
                    source,
                    f"duplicate model id {spec.id!r} (first defined at models[{index_of[spec.id]}])",
                    f"models[{i}].id",
                )
            self._by_id[spec.id] = spec
            index_of[spec.id] = i

        # Aliases are checked after all ids are known so that an alias shadowing a
        # later model's id is caught too.
        self._alias_to_id: dict[str, str] = {}
        for i, spec in enumerate(specs):
            for j, alias in enumerate(spec.aliases):
                field = f"models[{i}].aliases[{j}]"
                if alias in self._by_id:
                    raise CatalogError(source, f"alias {alias!r} is already a model id", field)
                if alias in self._alias_to_id:
                    owner = self._alias_to_id[alias]
                    raise CatalogError(
                        source,
                        f"alias {alias!r} is already claimed by model {owner!r}",
                        field,
                    )
                self._alias_to_id[alias] = spec.id

        default_id = _normalise(default_model)
        if default_id not in self._by_id:
            raise CatalogError(
                source,
                f"{default_model!r} is not the id of any model in the catalogue",
                "default_model",
            )
        self._default = self._by_id[default_id]

        # Every proper prefix of every id maps to its preferred id. Iterating in
        # preference order (shortest, then alphabetical) and keeping the first
        # claimant makes prefix resolution deterministic and a single dict hit.
        self._prefix_to_id: dict[str, str] = {}
        for model_id in sorted(self._by_id, key=lambda mid: (len(mid), mid)):
            for end in range(1, len(model_id)):
                self._prefix_to_id.setdefault(model_id[:end], model_id)

        self._sorted_ids = sorted(self._by_id)

    @classmethod
    def from_yaml(cls, path: str | Path) -> ModelCatalog:
        """Load a catalogue file; CatalogError names file, line and field (every schema problem at once)."""
        source = str(path)
        try:
            document = yaml_config.parse(yaml_config.read_text(Path(path), source), source)
        except ConfigError as exc:
            raise _catalog_error(exc) from exc
        if document.data is None:
            raise CatalogError(source, "catalogue file is empty")
        try:
            parsed = document.validate(CatalogFile)
        except ConfigError as exc:
            raise _catalog_error(exc) from exc
        try:
            return cls(parsed.models, parsed.default_model, source=source)
        except CatalogError as exc:
            if exc.field is None:
                raise
            line = document.locate(yaml_config.loc_of(exc.field))[0]
            raise CatalogError(source, exc.problem, exc.field, line=line) from exc

    @property
    def models(self) -> list[ModelSpec]:
        """Every model, in id order."""
        return [self._by_id[model_id] for model_id in self._sorted_ids]

    def with_models(self, added: Iterable[ModelSpec], *, source: str = "<added>") -> ModelCatalog:
        """A new catalogue with ``added`` on top: an added model replaces the one with its id.

        Raises CatalogError (naming ``models[i]`` of the merged list) when an
        added alias collides with another model.
        """
        extra = {spec.id: spec for spec in added}
        merged = [spec for spec in self.models if spec.id not in extra] + list(extra.values())
        return ModelCatalog(merged, self._default.id, source=source)

    @classmethod
    def default(cls) -> ModelCatalog:
        """Load the catalogue shipped in ``services/defaults/models.yaml``."""
        return cls.from_yaml(DEFAULT_CATALOG_PATH)

    @property
    def default_model(self) -> ModelSpec:
        return self._default

    def resolve(self, name: str, *, strict: bool = False) -> Resolution:
        """Map a user-supplied name to a model (see module docstring for the order).

        With ``strict=True`` an unmatched name raises UnknownModelError and an
        empty name raises ValueError instead of falling back to the default.
        """
        key = _normalise(name)
        if not key:
            if strict:
                raise ValueError("name must be a non-empty model name, alias or id prefix")
            return Resolution(self._default, "default", name)
        if key in self._alias_to_id:
            return Resolution(self._by_id[self._alias_to_id[key]], "alias", name)
        if key in self._by_id:
            return Resolution(self._by_id[key], "full_name", name)
        if key in self._prefix_to_id:
            return Resolution(self._by_id[self._prefix_to_id[key]], "prefix", name)
        if strict:
            raise UnknownModelError(name)
        return Resolution(self._default, "default", name)

    def get_or_none(self, model_id: str) -> ModelSpec | None:
        return self._by_id.get(_normalise(model_id))

    def get(self, model_id: str) -> ModelSpec:
        """Exact id lookup (case-insensitive); aliases and prefixes are not tried."""
        spec = self._by_id.get(_normalise(model_id))
        if spec is None:
            raise UnknownModelError(model_id)
        return spec

    def list_models(self, provider: str | None = None) -> list[ModelSpec]:
        """All models sorted by id, optionally only those of ``provider``."""
        wanted = None if provider is None else _normalise(provider)
        return [
            self._by_id[model_id]
            for model_id in self._sorted_ids
            if wanted is None or self._by_id[model_id].provider == wanted
        ]

    def list_aliases(self) -> dict[str, str]:
        """Alias -> model id, in alias order."""
        return dict(sorted(self._alias_to_id.items()))

    def list_providers(self) -> list[str]:
        return sorted({spec.provider for spec in self._by_id.values()})

    def describe(self, name: str, *, strict: bool = False) -> str:
        """Description of the model ``name`` resolves to (same rules as resolve)."""
        return self.resolve(name, strict=strict).model.description


def _catalog_error(error: ConfigError) -> CatalogError:
    first, *more = error.problems
    return CatalogError(first.file, first.message, first.field or None, line=first.line, more=more)
