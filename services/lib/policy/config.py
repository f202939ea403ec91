"""The policy configuration: three YAML files in one folder, validated, hot-reloaded.

- policy.yaml: tool policy lists, tool budget, tool selector, hooks and commands;
  top level for every agent, `agents.<name>` and `agents.<name>.roles.<role>` add to it.
- interceptors.yaml: interceptor chains; top level for every agent, then per agent
  and per role, run in that order.
- role_router.yaml: default role and each role's keywords and skills; top level
  for every agent unless `agents.<name>` gives the agent its own router.

A missing file means its defaults. A file that does not parse or validate is
rejected with errors naming file, line and field; the last good configuration
stays in force.
"""

from __future__ import annotations

import hashlib
import importlib
import re
import string
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails

from services.kit import yaml_config
from services.kit.filewatch import FolderWatch
from services.kit.logging import log
from services.kit.yaml_config import ConfigProblem
from services.lib.policy.budget import DEFAULT_MAX_MCP_CALLS, DEFAULT_MAX_TOOL_CALLS
from services.lib.policy.interceptors.base import Interceptor

POLICY_FILE = "policy.yaml"
INTERCEPTORS_FILE = "interceptors.yaml"
ROLE_ROUTER_FILE = "role_router.yaml"
FILES = (POLICY_FILE, INTERCEPTORS_FILE, ROLE_ROUTER_FILE)
DEFAULT_POLICY_DIR = Path(__file__).resolve().parents[2] / "defaults" / "policy"

_ENTRY_POINT = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
_ADDRESS = re.compile(r"^(?:[\w.-]+|\[[0-9a-fA-F:]+\]):\d{1,5}$|^unix:.+$")


def resolve_entry_point(spec: str) -> Any:
    """ "package.module:attr.path" -> the object; ValueError with a readable cause."""
    if not _ENTRY_POINT.match(spec):
        raise ValueError(f"{spec!r} is not an entry point; expected 'package.module:function'")
    module_name, _, attr_path = spec.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
    except Exception as exc:
        raise ValueError(f"cannot import module {module_name!r}: {type(exc).__name__}: {exc}") from exc
    for part in attr_path.split("."):
        if not hasattr(target, part):
            raise ValueError(f"module {module_name!r} has no attribute {attr_path!r}")
        target = getattr(target, part)
    return target


def _callable_entry_point(spec: str) -> str:
    if not callable(resolve_entry_point(spec)):
        raise ValueError(f"{spec!r} is not callable")
    return spec


class _Strict(BaseModel):
    # Unknown keys are errors: a typo must not silently turn a rule off.
    model_config = ConfigDict(extra="forbid", frozen=True)


# --------------------------------------------------------------------------- policy.yaml


class ToolsSection(_Strict):
    extra_denied: list[str] = []
    allowed_system_tools: list[str] = []
    allowed_local_tools: list[str] = []


class BudgetSection(_Strict):
    """0 means unlimited."""

    max_tool_calls: int = Field(DEFAULT_MAX_TOOL_CALLS, ge=0)
    max_mcp_calls: int = Field(DEFAULT_MAX_MCP_CALLS, ge=0)
    timeout_per_call_ms: int = Field(30_000, gt=0)


GroupName = Literal["always", "mcp", "memory", "planning", "sandbox", "web"]
GROUP_NAMES: tuple[GroupName, ...] = ("always", "mcp", "memory", "planning", "sandbox", "web")


class SelectorSection(_Strict):
    max_tools: int = Field(30, gt=0)
    group_priority: list[GroupName] = list(GROUP_NAMES)
    group_limits: dict[GroupName, Annotated[int, Field(ge=0)]] = {}
    # Name patterns (globs) per group; a group listed here replaces its default patterns.
    groups: dict[GroupName, list[str]] = {}
    # Group of tools no pattern matches (an agent's own tools, like calculator).
    default_group: GroupName = "always"


HookEventName = Literal["PreToolUse", "PostToolUse", "Stop", "UserPromptSubmit"]


class HookSection(_Strict):
    event: HookEventName
    name: str = ""
    # Regular expression matched against the whole tool name; empty or "*" matches all.
    matcher: str = ""
    # Exactly one of: a Python function ("package.module:function") or a HookService address.
    local: str | None = None
    remote: str | None = None
    timeout_ms: int = Field(1000, gt=0, le=60_000)
    fail: Literal["open", "closed"] = "closed"

    @field_validator("matcher")
    @classmethod
    def _matcher_compiles(cls, value: str, info: ValidationInfo) -> str:
        if value and info.data.get("event") not in ("PreToolUse", "PostToolUse"):
            raise ValueError(f"{info.data.get('event')} hooks take no matcher (only PreToolUse and PostToolUse do)")
        if value and value != "*":
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"not a regular expression: {exc}") from None
        return value

    @field_validator("local")
    @classmethod
    def _local_resolves(cls, value: str | None) -> str | None:
        return None if value is None else _callable_entry_point(value)

    @field_validator("remote")
    @classmethod
    def _remote_is_address(cls, value: str | None) -> str | None:
        if value is not None and not _ADDRESS.match(value):
            raise ValueError(f"{value!r} is not a host:port address")
        return value

    @model_validator(mode="after")
    def _one_transport(self) -> HookSection:
        if (self.local is None) == (self.remote is None):
            raise ValueError("give exactly one of `local` (package.module:function) or `remote` (host:port)")
        return self


class CommandSection(_Strict):
    name: str = Field(pattern=r"^[a-z][\w-]{0,31}$")
    description: str = ""
    aliases: list[Annotated[str, Field(pattern=r"^([a-z][\w-]{0,31}|\?)$")]] = []
    reply: str | None = None
    entry_point: str | None = None

    @field_validator("entry_point")
    @classmethod
    def _entry_point_resolves(cls, value: str | None) -> str | None:
        return None if value is None else _callable_entry_point(value)

    @model_validator(mode="after")
    def _one_handler(self) -> CommandSection:
        if (self.reply is None) == (self.entry_point is None):
            raise ValueError("give exactly one of `reply` (fixed text) or `entry_point` (package.module:function)")
        return self


class Layer(_Strict):
    """One level of policy.yaml: the top level, an agent or a role."""

    tools: ToolsSection = ToolsSection()
    # Unset: the enclosing level's budget / selector applies.
    budget: BudgetSection | None = None
    selector: SelectorSection | None = None
    hooks: list[HookSection] = []


class AgentLayer(Layer):
    roles: dict[str, Layer] = {}


class PolicyFile(Layer):
    budget: BudgetSection | None = BudgetSection()
    selector: SelectorSection | None = SelectorSection()
    commands: list[CommandSection] = []
    agents: dict[str, AgentLayer] = {}


# --------------------------------------------------------------------------- interceptors.yaml


class _Interceptor(_Strict):
    name: str = ""
    # What a raising interceptor does; unset: its default (stop, or continue for the compressor).
    on_error: Literal["stop", "continue"] | None = None


class BudgetGuardSpec(_Interceptor):
    type: Literal["BudgetGuard", "budget_guard"]
    model_calls: int = Field(0, ge=0)
    tool_calls: int = Field(0, ge=0)
    exit_behavior: Literal["stop", "error"] = "stop"
    warning_threshold: float = Field(0.8, gt=0, le=1)


PiiName = Literal[
    "api_key", "email", "credit_card", "ssn", "phone_us", "ip_address", "date_of_birth", "passport", "all"
]


class PIIShieldSpec(_Interceptor):
    type: Literal["PIIShield", "pii_shield"]
    patterns: list[PiiName] = ["all"]
    action: Literal["mask", "block", "warn", "log"] = "mask"


class ContentFilterSpec(_Interceptor):
    type: Literal["ContentFilter", "content_filter"]
    blocked_words: list[str] = []
    blocked_patterns: list[str] = []
    action: Literal["block", "mask"] = "block"
    case_sensitive: bool = False

    @field_validator("blocked_patterns")
    @classmethod
    def _patterns_compile(cls, value: list[str]) -> list[str]:
        for i, pattern in enumerate(value):
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"pattern {i} ({pattern!r}) is not a regular expression: {exc}") from None
        return value


class TokenLimiterSpec(_Interceptor):
    type: Literal["TokenLimiter", "token_limiter"]
    max_tokens: int = Field(gt=0)
    message: str = "Context too large. Please start a new conversation."
    exit_behavior: Literal["stop", "error"] = "error"


class ContextCompressorSpec(_Interceptor):
    type: Literal["ContextCompressor", "context_compressor"]
    threshold_tokens: int = Field(8000, gt=0)
    keep_recent: int = Field(4, ge=0)


class ToolGateSpec(_Interceptor):
    type: Literal["ToolGate", "tool_gate"]
    allow: list[str] = ["*"]
    deny: list[str] = []
    # Python filter "package.module:function" called as fn(tools, ctx) -> tools or names to keep.
    filter: str | None = None

    @field_validator("filter")
    @classmethod
    def _filter_resolves(cls, value: str | None) -> str | None:
        return None if value is None else _callable_entry_point(value)


class PermissionGateSpec(_Interceptor):
    type: Literal["PermissionGate", "permission_gate"]
    tools: list[str] = []
    by_role: dict[str, list[str]] = {}


class ConversationGateSpec(_Interceptor):
    type: Literal["ConversationGate", "conversation_gate"]
    stages: dict[Annotated[int, Field(ge=0)], list[str]]

    @field_validator("stages")
    @classmethod
    def _has_stage_zero(cls, value: dict[int, list[str]]) -> dict[int, list[str]]:
        if 0 not in value:
            raise ValueError("must include stage 0 (the tools of a new conversation)")
        return value


class SafeGateSpec(_Interceptor):
    type: Literal["SafeGate", "safe_gate"]
    tools: list[str] = ["search", "read_file"]


class RoleGateSpec(_Interceptor):
    type: Literal["RoleGate", "role_gate"]
    tools: list[str] = ["search", "read_file"]
    admin_roles: list[str] = ["admin"]
    by_role: dict[str, list[str]] = {}
    role_key: str = Field("role", min_length=1)


class LoggingSpec(_Interceptor):
    type: Literal["LoggingInterceptor", "logging"]
    phases: list[Literal["pre_run", "pre_think", "post_think", "pre_act", "post_act", "post_run", "on_error"]] = [
        "pre_run", "pre_think", "post_think", "pre_act", "post_act", "post_run", "on_error",
    ]  # fmt: skip
    level: Literal["debug", "info", "warning"] = "info"
    include_args: bool = False


class HITLSpec(_Interceptor):
    type: Literal["HITLInterceptor", "hitl"]
    tools: list[str] = Field(["*"], min_length=1)
    except_tools: list[str] = []
    description: str = Field("{tool} needs a human's approval before it runs", min_length=1)


# "scope:<key>": one window per value of the session's scope key (per end user, per project...).
def _rate_scope(value: str) -> str:
    if value in ("agent", "session", "tenant", "global") or re.fullmatch(r"scope:[a-z][a-z0-9_]{0,63}", value):
        return value
    raise ValueError(f"must be agent, session, tenant, global or scope:<key> (e.g. scope:end_user), not {value!r}")


RateScope = Annotated[str, AfterValidator(_rate_scope)]


class RateLimiterSpec(_Interceptor):
    type: Literal["RateLimiter", "rate_limiter"]
    calls_per_window: int = Field(10, gt=0)
    window_seconds: float = Field(60.0, gt=0)
    action: Literal["wait", "block"] = "wait"
    per_tool: bool = False
    scope: RateScope = "agent"
    max_wait_seconds: float | None = Field(None, ge=0)


class ThrottleSpec(_Interceptor):
    type: Literal["ThrottleInterceptor", "throttle"]
    min_delay: float = Field(0.5, gt=0)
    per_tool: bool = True
    scope: RateScope = "agent"


class FailoverSpec(_Interceptor):
    type: Literal["Failover", "failover"]
    fallbacks: list[str] = Field(min_length=1)
    on: list[Literal["rate_limit", "timeout", "error", "context_length"]] = ["rate_limit", "timeout", "error"]
    max_retries_per_model: int = Field(2, ge=1)


class CircuitBreakerSpec(_Interceptor):
    type: Literal["CircuitBreaker", "circuit_breaker"]
    failure_threshold: int = Field(5, ge=1)
    reset_timeout: float = Field(30.0, gt=0)
    tools: list[str] | None = None


class ContextPromptSpec(_Interceptor):
    type: Literal["ContextPrompt", "context_prompt"]
    template: str

    @field_validator("template")
    @classmethod
    def _template_parses(cls, value: str) -> str:
        try:
            list(string.Formatter().parse(value))
        except ValueError as exc:
            raise ValueError(f"bad template: {exc}") from None
        return value


class ConversationPromptSpec(_Interceptor):
    type: Literal["ConversationPrompt", "conversation_prompt"]
    stages: dict[Annotated[int, Field(ge=0)], str]


class LambdaPromptSpec(_Interceptor):
    type: Literal["LambdaPrompt", "lambda_prompt"]
    # "package.module:function" called as fn(prompt, ctx) -> new prompt.
    adapter: str

    @field_validator("adapter")
    @classmethod
    def _adapter_resolves(cls, value: str) -> str:
        return _callable_entry_point(value)


class CustomSpec(_Interceptor):
    type: Literal["custom"]
    # "package.module:Class" of an Interceptor subclass; `options` are its keyword arguments.
    entry_point: str
    options: dict[str, Any] = {}

    @field_validator("entry_point")
    @classmethod
    def _entry_point_resolves(cls, value: str) -> str:
        return _callable_entry_point(value)

    @model_validator(mode="after")
    def _builds(self) -> CustomSpec:
        # Build it once now so bad options are a config error, not a failure on some later turn.
        try:
            built = resolve_entry_point(self.entry_point)(**self.options)
        except Exception as exc:
            raise ValueError(f"{self.entry_point}(**options) failed: {type(exc).__name__}: {exc}") from exc
        if not isinstance(built, Interceptor):
            raise ValueError(f"{self.entry_point} built a {type(built).__name__}, not an Interceptor")
        return self


InterceptorSpec = Annotated[
    BudgetGuardSpec
    | PIIShieldSpec
    | ContentFilterSpec
    | TokenLimiterSpec
    | ContextCompressorSpec
    | ToolGateSpec
    | PermissionGateSpec
    | ConversationGateSpec
    | SafeGateSpec
    | RoleGateSpec
    | LoggingSpec
    | HITLSpec
    | RateLimiterSpec
    | ThrottleSpec
    | FailoverSpec
    | CircuitBreakerSpec
    | ContextPromptSpec
    | ConversationPromptSpec
    | LambdaPromptSpec
    | CustomSpec,
    Field(discriminator="type"),
]


class AgentInterceptors(_Strict):
    interceptors: list[InterceptorSpec] = []
    roles: dict[str, list[InterceptorSpec]] = {}


class InterceptorsFile(_Strict):
    interceptors: list[InterceptorSpec] = []
    agents: dict[str, AgentInterceptors] = {}


# --------------------------------------------------------------------------- role_router.yaml


class RoleRoute(_Strict):
    keywords: list[str] = []
    skills: list[str] = []


class RouterSection(_Strict):
    default_role: str = ""
    # In the order keywords are tried.
    roles: dict[str, RoleRoute] = {}


class RoleRouterFile(RouterSection):
    agents: dict[str, RouterSection] = {}


# --------------------------------------------------------------------------- loading


# One problem of a policy file (file, line, field, message): the name the policy API gives it.
ConfigError = ConfigProblem


class ConfigRejected(yaml_config.ConfigError):
    """Policy files that do not read, parse or validate; ``errors`` lists every problem."""

    @property
    def errors(self) -> list[ConfigProblem]:
        return self.problems


M = TypeVar("M", bound=BaseModel)


def load_file(path: Path, model: type[M]) -> M:
    """Parse and validate one file; raises ConfigRejected naming file, line and field."""
    text = _read(path)
    return model() if text is None else parse_text(path.name, text, model)


def _read(path: Path) -> str | None:
    """The file's text; None when it does not exist."""
    try:
        return yaml_config.read_text_if_exists(path, path.name)
    except yaml_config.ConfigError as exc:
        raise ConfigRejected(exc.problems) from exc


def parse_text(name: str, text: str, model: type[M]) -> M:
    """Parse and validate the text of file `name`: the same rules whether it comes from the folder or a snapshot."""
    try:
        return yaml_config.parse(text, name).validate(model, describe=_message)
    except yaml_config.ConfigError as exc:
        raise ConfigRejected(exc.problems) from exc


def _message(error: ErrorDetails) -> str:
    if error["type"] == "union_tag_invalid":
        # Each interceptor type has a CamelCase and a snake_case tag: list the CamelCase ones.
        tags = [t.strip(" '") for t in str(error.get("ctx", {}).get("expected_tags", "")).split(",")]
        known = ", ".join(t for t in tags if t[:1].isupper() or t == "custom")
        return f"unknown type {error.get('ctx', {}).get('tag')!r}; expected one of: {known}"
    return yaml_config.describe_error(error)


@dataclass(frozen=True)
class PolicyConfig:
    """One consistent snapshot of the three files."""

    version: int  # counts the configurations this process loaded
    directory: Path
    policy: PolicyFile
    interceptors: InterceptorsFile
    router: RoleRouterFile
    files: tuple[str, ...]
    loaded_at: float = field(default_factory=time.time)
    # The files' texts as validated, and their digest: the version a snapshot carries, the
    # same on every replica serving the same files, named by every decision made with them.
    texts: tuple[tuple[str, str], ...] = ()
    digest: str = ""


def digest_of(texts: Mapping[str, str]) -> str:
    """sha256 of the files (name and content, in name order), first 16 hex digits."""
    h = hashlib.sha256()
    for name in sorted(texts):
        for part in (name, texts[name]):
            data = part.encode("utf-8")
            h.update(len(data).to_bytes(8, "big"))
            h.update(data)
    return h.hexdigest()[:16]


def read_texts(directory: Path) -> dict[str, str]:
    """The texts of the configuration files present in `directory`, each read once."""
    texts: dict[str, str] = {}
    errors: list[ConfigProblem] = []
    for name in FILES:
        try:
            text = _read(directory / name)
        except ConfigRejected as exc:
            errors.extend(exc.errors)
            continue
        if text is not None:
            texts[name] = text
    if errors:
        raise ConfigRejected(errors)
    return texts


def config_from_texts(texts: Mapping[str, str], version: int, directory: Path) -> PolicyConfig:
    """The configuration the texts of its files make (a missing file means its defaults), or
    ConfigRejected with the errors of every bad file. A name that is not one of FILES is an error."""
    errors = [
        ConfigError(name, 0, "", f"not a policy file; expected one of {', '.join(FILES)}")
        for name in sorted(set(texts) - set(FILES))
    ]
    loaded: list[Any] = []
    for name, model in (
        (POLICY_FILE, PolicyFile),
        (INTERCEPTORS_FILE, InterceptorsFile),
        (ROLE_ROUTER_FILE, RoleRouterFile),
    ):
        text = texts.get(name)
        try:
            loaded.append(model() if text is None else parse_text(name, text, model))
        except ConfigRejected as exc:
            errors.extend(exc.errors)
    if errors:
        raise ConfigRejected(errors)
    policy, interceptors, router = loaded
    present = tuple(name for name in FILES if name in texts)
    ordered = tuple((name, texts[name]) for name in present)
    return PolicyConfig(
        version, directory, policy, interceptors, router, present, texts=ordered, digest=digest_of(texts)
    )


def load_config(directory: Path, version: int) -> PolicyConfig:
    """All three files, or ConfigRejected with the errors of every bad file."""
    return config_from_texts(read_texts(directory), version, directory)


Stamp = tuple[tuple[int, int, int] | None, ...]


def _stamp(directory: Path) -> Stamp:
    stamps: list[tuple[int, int, int] | None] = []
    for name in FILES:
        try:
            st = (directory / name).stat()
        except OSError:
            stamps.append(None)
        else:
            stamps.append((st.st_mtime_ns, st.st_size, st.st_ino))
    return tuple(stamps)


class ConfigStore:
    """The configuration in force, reloaded when a file's mtime, size or inode changes.

    A rejected reload keeps the previous configuration and records the errors until
    the files are fixed. At start there is nothing to fall back to: a bad file raises.
    """

    def __init__(self, directory: Path, config: PolicyConfig | None = None, *, watched: bool = True):
        self.directory = directory
        self.watched = watched  # False: built from texts, no folder to reload from
        self._stamp = _stamp(directory) if watched else ()
        self.current = config if config is not None else load_config(directory, 1)
        self.errors: list[ConfigError] = []
        # Called with each configuration a reload puts in force (not with a rejected one).
        self.listeners: list[Callable[[PolicyConfig], Awaitable[None]]] = []

    @classmethod
    def from_texts(cls, texts: Mapping[str, str], version: int, label: str = "snapshot") -> ConfigStore:
        """A store holding the configuration of these file texts (a snapshot), validated as the
        folder's would be; ConfigRejected as `load_config` raises it."""
        return cls(Path(label), config_from_texts(texts, version, Path(label)), watched=False)

    def reload_if_changed(self) -> Literal["unchanged", "reloaded", "rejected"]:
        if not self.watched:
            return "unchanged"
        stamp = _stamp(self.directory)
        if stamp == self._stamp:
            return "unchanged"
        self._stamp = stamp
        try:
            config = load_config(self.directory, self.current.version + 1)
        except ConfigRejected as exc:
            self.errors = exc.errors
            return "rejected"
        self.current = config
        self.errors = []
        return "reloaded"

    async def watch(self, interval_s: float) -> None:
        """Check the files when their folder changes (every interval_s where the platform does not tell of
        changes) until cancelled; log what each change did."""
        folder = FolderWatch.of_files([self.directory / name for name in FILES], poll_s=interval_s)
        try:
            while True:
                await folder.wait()
                await self._reload_and_tell()
        finally:
            folder.close()

    async def _reload_and_tell(self) -> None:
        outcome = self.reload_if_changed()
        if outcome == "reloaded":
            log.info(
                "policy configuration reloaded",
                version=self.current.version,
                digest=self.current.digest,
                directory=str(self.directory),
            )
            for listener in self.listeners:
                try:
                    await listener(self.current)
                except Exception as exc:  # noqa: BLE001 - a listener's bug must not stop the reloads
                    log.error("policy configuration listener failed", error=repr(exc))
        elif outcome == "rejected":
            for error in self.errors:
                log.error(
                    "policy configuration rejected; the last good one stays in force",
                    file=error.file,
                    line=error.line,
                    field=error.field,
                    problem=error.message,
                    version_in_force=self.current.version,
                )
