"""Agent definitions shared by every service.

An agent is declared in one file per agent, directly inside the agents folder:

* ``<name>.yaml`` / ``<name>.yml``: a mapping of ``AgentDefinition`` fields;
* ``<name>.md``: YAML front matter between ``---`` lines, then a Markdown body that
  becomes the system prompt. The agent's name is the file name unless the front
  matter gives one. A ``README.md`` is documentation and is skipped.

The definition names the agent, the model it runs on (a catalogue name resolved by
the models service), the tools and skills it may use, where its prompt files live,
its subagents, the runtime engine, limits and budgets. ``system_prompt`` is inline
text or ``{file: <path>}`` (relative to the agent file, ``.md`` optional), read at
load time. ``AgentRegistry`` loads a folder; a broken file is reported in
``AgentRegistry.errors`` (file, line and field) instead of preventing the other agents
from loading. The YAML is read as every configuration file is (``services.kit.yaml_config``):
only ``true`` and ``false`` are booleans.

One process reads the folder: the models service (``load_agents``, a registry that
reloads the folder when a file in it changes) puts every definition, as JSON, and
every load problem into its catalogue snapshot. The other processes hold a
``SnapshotAgentRegistry`` fed from that snapshot; one that finds no models service at
start loads the folder once (``SnapshotAgentRegistry.load_folder``) until a snapshot
arrives. A definition that would not come back equal from its JSON (a date or a number
as a key in ``output_schema``, say) is a load problem, so every process holds the same.
"""

from __future__ import annotations

import builtins
import os
import re
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import ErrorDetails

from services.kit.logging import log
from services.kit.yaml_config import (
    ConfigError,
    ConfigProblem,
    YamlDocument,
    describe_error,
    field_path,
    parse,
    read_text,
)
from services.lib.scope import KEY_PATTERN as SCOPE_KEY_PATTERN

AGENT_NAME_PATTERN = r"^[a-z][a-z0-9_-]{0,62}$"
AGENT_FILE_SUFFIXES = (".yaml", ".yml", ".md")
RELOAD_CHECK_INTERVAL_S = 1.0
DEFAULT_AGENTS_DIR = Path(__file__).resolve().parent.parent / "defaults" / "agents"

AgentMode = Literal["primary", "subagent", "all"]


class AgentConfig(BaseModel):
    """Per-agent LLM overrides applied on top of the resolved catalogue model."""

    # Unknown keys are errors so that a typo such as ``temprature`` is reported
    # instead of being silently ignored.
    model_config = ConfigDict(extra="forbid", frozen=True)

    provider: str | None = Field(
        default=None, description='Serve the model through this provider instead of the catalogue\'s (e.g. "vllm").'
    )
    model: str | None = Field(
        default=None, description="Catalogue name of the model; wins over the agent's `model` when set."
    )
    temperature: float | None = Field(
        default=None, ge=0, le=2, description="Sampling temperature; unset: the model's default."
    )
    max_tokens: int | None = Field(
        default=None, gt=0, description="Cap on the tokens of each model answer; unset: the model's default."
    )
    recursion_limit: int | None = Field(
        default=None, gt=0, description="Maximum model calls per turn (the loop's iteration limit)."
    )
    tool_token_limit_before_evict: int | None = Field(
        default=None,
        ge=100,
        description="Tool results over this many tokens (4 characters a token) are archived: the model gets "
        "their head behind a marker and pages through them with `get_tool_response`. Unset: the runtime's "
        "`COGMESH_TOOL_RESULT_LIMIT_TOKENS` (25,000).",
    )
    fallback_models: list[str] = Field(
        default_factory=list,
        description="Catalogue names tried in order when the current model fails (provider error, rate limit, "
        "timeout, context length): the failover chain.",
    )


class AgentLimits(BaseModel):
    """Per-turn limits; unset fields keep the runtime's defaults."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_iterations: int | None = Field(
        default=None, gt=0, description="Maximum model calls in a turn; unset: the runtime's 8."
    )
    max_tool_calls: int | None = Field(
        default=None, ge=0, description="Maximum tool calls in a turn; unset: 8 (services/lib/policy/budget.py)."
    )
    max_mcp_calls: int | None = Field(
        default=None, ge=0, description="Maximum MCP tool calls in a turn; unset: 6 (services/lib/policy/budget.py)."
    )
    tool_timeout_s: float | None = Field(
        default=None, gt=0, description="Timeout of one tool call in seconds; unset: the runtime's 30."
    )
    max_parallel_tools: int | None = Field(
        default=None, gt=0, description="Tool calls of one model step that run at once; unset: the runtime's 4."
    )
    max_wall_clock_s: float | None = Field(
        default=None, gt=0, description="Wall-clock limit of a whole turn in seconds; unset: the runtime's 300."
    )
    on_tool_limit: Literal["finalize", "error"] = Field(
        default="finalize",
        description='On reaching a tool limit: "finalize" asks the model to answer without tools; "error" ends '
        "the turn with `budget_exceeded`.",
    )


class AgentBudget(BaseModel):
    """Cost budget of the agent's turns (or whole sessions with ``per_session``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_cost_usd: float | None = Field(default=None, gt=0, description="Maximum cost in USD; unset: no cost limit.")
    max_total_tokens: int | None = Field(
        default=None, gt=0, description="Maximum tokens, input and output together; unset: no token limit."
    )
    action: Literal["error", "warn"] = Field(
        default="error",
        description='Over a limit: "error" ends the turn with `budget_exceeded`; "warn" reports it and goes on.',
    )
    per_session: bool = Field(
        default=False, description="Count the whole session's spending (true) or each turn's alone (false)."
    )


class AgentCompaction(BaseModel):
    """How the runtime keeps a long conversation within its context budget.

    Before each model call the runtime estimates the transcript's tokens and, near
    ``max_tokens``, has the context service summarize its older part (seed 004's
    summarization lifecycle). Zero limits take the context service's defaults,
    derived from the model's context window.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = Field(default=True, description="Summarize the older part of a long transcript; false: never.")
    max_tokens: int = Field(
        default=0,
        ge=0,
        description="Compact when transcript plus summary exceed this many tokens; 0: half the context window.",
    )
    context_token_limit: int = Field(
        default=0, ge=0, description="Target size of the live transcript after compaction; 0: half of `max_tokens`."
    )
    summary_token_limit: int = Field(
        default=0, ge=0, description="Target size of each summary; 0: the context service's default."
    )
    model: str = Field(default="", description="Catalogue name of the summarizing model; empty: the agent's model.")


# A memory namespace holds 1 to 8 labels of 1 to 384 characters without '/', '{', '}' or control
# characters (the memory service's rule; docs/memory.md).
MAX_NAMESPACE_LABELS = 8
MAX_LABEL_CHARS = 384
_BAD_LABEL_CHARS = re.compile(r"[/{}\x00-\x1f\x7f]")
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
TOOL_NAME_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"


def _namespace_label(label: str) -> str:
    """A literal label, or ``{key}``: the session's scope value for ``key``."""
    placeholder = _PLACEHOLDER.fullmatch(label)
    if placeholder is not None:
        key = placeholder.group(1)
        if not SCOPE_KEY_PATTERN.fullmatch(key):
            raise ValueError(f"{label!r}: a placeholder names a scope key matching [a-z][a-z0-9_]{{0,63}}")
        return label
    if not label:
        raise ValueError("a label must not be empty")
    if len(label) > MAX_LABEL_CHARS:
        raise ValueError(f"{label[:20]!r}...: a label has at most {MAX_LABEL_CHARS} characters")
    if _BAD_LABEL_CHARS.search(label):
        raise ValueError(
            f"{label!r}: a label is a whole placeholder like '{{end_user}}' or literal text without "
            "'/', '{', '}' or control characters"
        )
    return label


def namespace_placeholder(label: str) -> str | None:
    """The scope key of a ``{key}`` label; None for a literal label."""
    placeholder = _PLACEHOLDER.fullmatch(label)
    return placeholder.group(1) if placeholder is not None else None


NamespaceLabel = Annotated[str, AfterValidator(_namespace_label)]


class MemoryContext(BaseModel):
    """The memory context pack: the top memories for the user's message, in the system prompt."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = Field(default=False, description="Put the pack in the system prompt of every turn.")
    limit: int = Field(
        default=5, ge=1, le=20, description="How many memories the runtime recalls (SearchMemories' limit)."
    )
    max_tokens: int = Field(
        default=400,
        ge=1,
        le=8000,
        description="Token cap of the pack (the context service's recalled_memories_max); the lowest ranked go first.",
    )
    timeout_ms: int = Field(
        default=2000,
        ge=1,
        le=60000,
        description="How long the prompt build waits for the search; past it the pack is left out, with a notice.",
    )


class AgentMemory(BaseModel):
    """Memories across sessions: the memory tools' names and namespace, and the context pack.

    ``namespace`` is the template of the memory namespace (inside the session's tenant):
    a label ``{key}`` is the session's scope entry for ``key`` as ``key=value`` (set by the
    application at CreateSession, never by the model), any other label is literal. The tools are offered
    only when ``tools`` lists them by these names; the pack only when ``context.enabled``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    namespace: list[NamespaceLabel] = Field(
        default_factory=lambda: ["{end_user}", "memories"],
        min_length=1,
        max_length=MAX_NAMESPACE_LABELS,
        description="Template of the memory namespace, 1 to 8 labels: `{key}` is the session's scope entry for "
        "`key` (as `key=value`), any other label literal text without `/`, `{`, `}` or control characters.",
    )
    save_tool: str = Field(
        default="save_memory",
        pattern=TOOL_NAME_PATTERN,
        description="Name of the tool that saves a memory; offered only when `tools` lists it.",
    )
    search_tool: str = Field(
        default="search_memories",
        pattern=TOOL_NAME_PATTERN,
        description="Name of the tool that searches the memories; offered only when `tools` lists it.",
    )
    context: MemoryContext = Field(
        default_factory=MemoryContext,
        description="The memory context pack: memories recalled for the user's message, in the system prompt.",
    )

    @model_validator(mode="after")
    def _distinct_tools(self) -> AgentMemory:
        if self.save_tool == self.search_tool:
            raise ValueError(f"save_tool and search_tool must differ (both {self.save_tool!r})")
        for name in (self.save_tool, self.search_tool):
            if name.startswith("mcp__"):
                raise ValueError(f"tool name {name!r}: 'mcp__' names MCP tools")
        return self

    @property
    def scope_keys(self) -> list[str]:
        """The scope keys the namespace needs, in template order."""
        return [key for label in self.namespace if (key := namespace_placeholder(label)) is not None]

    def tool_names(self) -> tuple[str, str]:
        return self.save_tool, self.search_tool


class ApprovalSettings(BaseModel):
    """What a reviewer UI shows for a tool call that needs approval (seed 004 ``approvalPrompt``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    prompt: str = Field(
        default="",
        max_length=4000,
        description="Text shown to the reviewer; `{name}` is replaced by the call's argument `name` "
        "(unknown names stay as written). Carried in approval_required.prompt.",
    )
    defaults: dict[str, Any] = Field(
        default_factory=dict,
        description='Values a reviewer UI pre-fills, e.g. {"decision": "approve", "comment": "..."}. '
        "Carried in approval_required.defaults.",
    )


class AgentDefinition(BaseModel):
    """Declarative description of one agent.

    ``mode`` says who may run the agent: ``primary`` agents own sessions,
    ``subagent`` agents are only invoked by other agents, ``all`` allows both.
    ``prompts_dir`` holds ``identity.md``, ``guardrails.md`` and
    ``roles/<role>.md``; when loaded from a file a relative path is resolved
    against the folder of that file. ``system_prompt`` is inline text used
    instead of, or in addition to, those files. ``subagents`` names the agents
    this one may delegate to (through the runtime's ``task`` tool); ``interrupt_on``
    maps tool names (or glob patterns) to whether a call needs a human's approval,
    which pauses the turn; ``runtime`` picks the runtime engine; ``compaction``
    bounds the live transcript; ``memory`` configures the memory tools and the
    memory context pack.

    As in every cogmesh configuration file, only ``true`` and ``false`` are booleans
    (YAML 1.2): ``yes``, ``no``, ``on`` and ``off`` are text, so ``description: no`` is
    the text "no". A boolean field still reads them as true or false.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(
        pattern=AGENT_NAME_PATTERN,
        description="The agent's name: lower case letters, digits, `_` and `-`, starting with a letter, at most "
        "63 characters. A Markdown file's name when its front matter gives none.",
    )
    description: str = Field(default="", description="What the agent does, as ListAgents and agent cards show it.")
    prompts_dir: Path | None = Field(
        default=None,
        description="Folder of `identity.md`, `guardrails.md` and `roles/<role>.md`, relative to the agent file.",
    )
    system_prompt: str | None = Field(
        default=None,
        description="Inline system prompt, or `{file: <path>}` (relative to the agent file, `.md` optional); "
        "a Markdown agent file's body. Used instead of, or besides, the `prompts_dir` files.",
    )
    model: str = Field(
        default="", description="Catalogue name of the model (the models service); empty: the catalogue default."
    )
    tools: list[str] = Field(
        default_factory=list,
        description='Tools the agent may call: built-ins ("calculator"), MCP tools ("mcp__<server>__<tool>"), '
        'remote tools, or glob patterns ("mcp__everything__*").',
    )
    skills: list[str] = Field(
        default_factory=list,
        description="Skills active when the policy's router gives the role none; an MCP server named after an "
        "active skill offers all its tools.",
    )
    default_role: str = Field(
        default="", description="The role a session starts in (its `roles/<role>.md` prompt); empty: none."
    )
    mode: AgentMode = Field(
        default="primary",
        description='Who may run the agent: "primary" agents own sessions, "subagent" agents are only invoked '
        'by other agents, "all" both.',
    )
    hidden: bool = Field(
        default=False, description="Left out of ListAgents; sessions can still be created with it by name."
    )
    a2a_exposed: bool = Field(default=False, description="Served over A2A and listed on the agent card (docs/a2a.md).")
    mcp_exposed: bool = Field(
        default=False, description="Served as a tool of the browser edge's MCP server (docs/mcp.md)."
    )
    config: AgentConfig = Field(
        default_factory=AgentConfig, description="Model overrides on top of the catalogue model."
    )
    subagents: list[str] = Field(
        default_factory=list,
        description="Agents (mode subagent or all) this one may delegate to through the runtime's `task` tool.",
    )
    interrupt_on: dict[str, bool] = Field(
        default_factory=dict,
        description="Tool names or glob patterns mapped to whether a call needs a human's approval, which pauses "
        "the turn (exact names win over patterns).",
    )
    approvals: dict[str, ApprovalSettings] = Field(
        default_factory=dict,
        description="Tool names or glob patterns (as in `interrupt_on`) mapped to what a reviewer sees when a "
        "call needs approval: `prompt` and `defaults`.",
    )
    handoffs: list[str] = Field(
        default_factory=list,
        description="Agents (mode primary or all) this one may hand the session to with the `transfer_to_agent` "
        "tool: the receiving agent answers the session's next messages until it hands back "
        "(`transfer_back`) or the session is reset.",
    )
    todo_list: bool = Field(
        default=False,
        description="Offer the built-in `manage_todo_list` tool and the planning prompt: the agent keeps a "
        "versioned todo list in the session, shown live as `plan` events.",
    )
    runtime: str = Field(
        default="",
        description='Runtime engine of the agent\'s turns ("cogmesh", "single-shot"); empty: `COGMESH_RUNTIME`, '
        'else "cogmesh". A turn may override it.',
    )
    limits: AgentLimits = Field(
        default_factory=AgentLimits, description="Per-turn limits; unset fields keep the runtime's defaults."
    )
    budget: AgentBudget = Field(default_factory=AgentBudget, description="Cost budget of each turn or session.")
    output_schema: dict[str, Any] | None = Field(
        default=None, description="JSON Schema of the structured answer every turn must give; unset: free text."
    )
    compaction: AgentCompaction = Field(
        default_factory=AgentCompaction,
        description="How the runtime keeps a long conversation within its context budget.",
    )
    memory: AgentMemory = Field(
        default_factory=AgentMemory,
        description="Memories across sessions: tool names, namespace template, context pack (docs/memory.md).",
    )

    @property
    def model_name(self) -> str:
        """The catalogue name to resolve: ``config.model`` wins over ``model``."""
        return self.config.model or self.model

    @property
    def is_primary(self) -> bool:
        return self.mode in ("primary", "all")


@dataclass(frozen=True)
class AgentLoadError:
    """A problem with one agent file; ``str()`` gives ``"<file>:<line>: <field>: <problem>"`` (the line when known).

    ``message`` is ``"<field>: <problem>"``, or the problem alone when it concerns the whole file.
    """

    path: Path
    message: str
    line: int = 0  # 1-based; 0 when unknown

    def __str__(self) -> str:
        where = f"{self.path.name}:{self.line}" if self.line else self.path.name
        return f"{where}: {self.message}"

    @classmethod
    def of(cls, path: Path, problem: ConfigProblem) -> AgentLoadError:
        message = f"{problem.field}: {problem.message}" if problem.field else problem.message
        return cls(path, message, problem.line)


class UnknownAgentError(LookupError):
    """Raised by ``AgentRegistry.get`` for a name that is not registered."""

    def __init__(self, name: str, known: Sequence[str]) -> None:
        self.name = name
        self.known = tuple(known)
        listing = ", ".join(self.known) or "(none)"
        super().__init__(f"unknown agent {name!r}; known agents: {listing}")


class AgentRegistry:
    """Immutable catalogue of agent definitions, keyed by name."""

    def __init__(
        self,
        definitions: Mapping[str, AgentDefinition],
        errors: Iterable[AgentLoadError] = (),
    ) -> None:
        self._definitions = dict(definitions)
        self._errors = tuple(errors)

    @classmethod
    def from_definitions(
        cls, definitions: Iterable[AgentDefinition], errors: Iterable[AgentLoadError] = ()
    ) -> AgentRegistry:
        """Build a registry from in-memory definitions; duplicate names raise ValueError."""
        by_name: dict[str, AgentDefinition] = {}
        for definition in definitions:
            if definition.name in by_name:
                raise ValueError(f"duplicate agent name {definition.name!r}")
            by_name[definition.name] = definition
        return cls(by_name, errors)

    @classmethod
    def load_dir(cls, path: Path | str) -> AgentRegistry:
        """Load every ``*.yaml``/``*.yml``/``*.md`` file directly inside ``path``.

        Files are read in name order, so when two files declare the same agent
        name the one that sorts later is the one reported. A missing folder
        raises ``FileNotFoundError``: that is a deployment error, not a bad file.
        """
        directory = Path(path)
        files = _agent_files(directory)
        definitions: dict[str, AgentDefinition] = {}
        origins: dict[str, Path] = {}
        documents: dict[str, YamlDocument] = {}
        errors: builtins.list[AgentLoadError] = []
        for file in files:
            loaded = _load_file(file)
            if isinstance(loaded, builtins.list):
                errors.extend(loaded)
                continue
            definition, document = loaded
            if definition.name in definitions:
                first = origins[definition.name].name
                duplicate = f"duplicate agent name {definition.name!r}, already defined in {first}"
                errors.append(AgentLoadError.of(file, document.problem(("name",), duplicate)))
            else:
                definitions[definition.name] = definition
                origins[definition.name] = file
                documents[definition.name] = document
        # A subagent reference must name a loaded agent that may act as a subagent.
        for name, definition in definitions.items():
            for index, sub in enumerate(definition.subagents):
                target = definitions.get(sub)
                if target is None:
                    problem = f"unknown agent {sub!r}"
                elif target.mode == "primary":
                    problem = f"agent {sub!r} has mode 'primary'; a subagent needs mode 'subagent' or 'all'"
                else:
                    continue
                errors.append(AgentLoadError.of(origins[name], documents[name].problem(("subagents", index), problem)))
            # A handoff target answers the session's messages, so it must be able to own one.
            for index, target_name in enumerate(definition.handoffs):
                target = definitions.get(target_name)
                if target is None:
                    problem = f"unknown agent {target_name!r}"
                elif not target.is_primary:
                    problem = f"agent {target_name!r} has mode 'subagent'; a handoff needs mode 'primary' or 'all'"
                elif target_name == name:
                    problem = "an agent cannot hand a session to itself"
                else:
                    continue
                errors.append(AgentLoadError.of(origins[name], documents[name].problem(("handoffs", index), problem)))
        return cls(definitions, errors)

    @classmethod
    def default(cls) -> AgentRegistry:
        """The agents shipped with cogmesh (``services/defaults/agents``)."""
        return cls.load_dir(DEFAULT_AGENTS_DIR)

    @property
    def errors(self) -> tuple[AgentLoadError, ...]:
        return self._errors

    def get(self, name: str) -> AgentDefinition:
        try:
            return self._definitions[name]
        except KeyError:
            raise UnknownAgentError(name, self.names()) from None

    def names(self) -> builtins.list[str]:
        """All registered names, hidden agents included (they can still be run)."""
        return sorted(self._definitions)

    def list(self, include_hidden: bool = False) -> builtins.list[AgentDefinition]:
        """Definitions sorted by name; hidden agents only when asked for."""
        return [
            self._definitions[name] for name in self.names() if include_hidden or not self._definitions[name].hidden
        ]

    def primaries(self) -> builtins.list[AgentDefinition]:
        """Agents that can own a session (mode primary or all), hidden ones included."""
        return [d for d in self.list(include_hidden=True) if d.is_primary]

    def subagents(self) -> builtins.list[AgentDefinition]:
        """Agents other agents may delegate to (mode subagent or all)."""
        return [d for d in self.list(include_hidden=True) if d.mode != "primary"]


class PinnedAgentRegistry(AgentRegistry):
    """A turn's agents: the tenant's stored versions it runs with, over the built-ins of `base`.

    A stored agent stands in for a built-in of the same name for this turn only; every other
    name is looked up in `base` at each call, so a new catalogue snapshot still reaches it."""

    def __init__(self, base: AgentRegistry, pinned: Mapping[str, AgentDefinition]) -> None:
        super().__init__(pinned)
        self.base = base

    @property
    def errors(self) -> tuple[AgentLoadError, ...]:
        return self.base.errors

    def get(self, name: str) -> AgentDefinition:
        found = self._definitions.get(name)
        return found if found is not None else self.base.get(name)

    def names(self) -> builtins.list[str]:
        return sorted(set(self._definitions) | set(self.base.names()))

    def list(self, include_hidden: bool = False) -> builtins.list[AgentDefinition]:
        return [d for d in (self.get(n) for n in self.names()) if include_hidden or not d.hidden]


class ReloadingAgentRegistry(AgentRegistry):
    """An agents folder that reloads itself when a file in it changes (hot reload).

    Every read checks, at most once per ``check_interval_s``, a fingerprint of the
    folder (file names, sizes and modification times of the agent files and of the
    prompt files they read). A changed fingerprint reloads the whole folder; the
    new errors are logged, and agents that still load keep serving.
    """

    def __init__(self, directory: Path, check_interval_s: float = RELOAD_CHECK_INTERVAL_S) -> None:
        self.directory = directory
        self._interval = check_interval_s
        self._lock = threading.Lock()
        self._fingerprint = _fingerprint(directory)
        loaded = AgentRegistry.load_dir(directory)
        super().__init__(loaded._definitions, loaded._errors)
        self._checked = time.monotonic()
        self.reloads = 0

    def _maybe_reload(self, force: bool = False) -> bool:
        now = time.monotonic()
        if not force and now - self._checked < self._interval:
            return False
        with self._lock:
            self._checked = now
            fingerprint = _fingerprint(self.directory)
            if fingerprint == self._fingerprint:
                return False
            self._fingerprint = fingerprint
            loaded = AgentRegistry.load_dir(self.directory)
            self._definitions, self._errors = loaded._definitions, loaded._errors
            self.reloads += 1
        log.info("agents reloaded", directory=str(self.directory), agents=self.names(), errors=len(self._errors))
        _log_errors(self._errors)
        return True

    def reload_now(self) -> bool:
        """Check the folder at once (the owner's publish loop, tests); True when it changed and was reloaded."""
        return self._maybe_reload(force=True)

    @property
    def errors(self) -> tuple[AgentLoadError, ...]:
        self._maybe_reload()
        return self._errors

    def get(self, name: str) -> AgentDefinition:
        self._maybe_reload()
        return super().get(name)

    def names(self) -> builtins.list[str]:
        self._maybe_reload()
        return super().names()


def _agent_files(directory: Path) -> builtins.list[Path]:
    return sorted(
        entry
        for entry in directory.iterdir()
        # Dot-files are editor lock/backup files, and README.md documents the folder.
        if entry.suffix in AGENT_FILE_SUFFIXES
        and not entry.name.startswith(".")
        and entry.name.lower() != "readme.md"
        and entry.is_file()
    )


def _fingerprint(directory: Path) -> tuple[tuple[str, int, int], ...]:
    """What changes when an agent file or a prompt file next to it changes.

    os.scandir, not Path.rglob: the folder's owner takes this every second, and scandir's
    entries carry their type, so a check costs one stat per file (75 us for the shipped folder).
    """
    stats: builtins.list[tuple[str, int, int]] = []
    folders = [str(directory)]
    while folders:
        try:
            with os.scandir(folders.pop()) as entries:
                for entry in entries:
                    try:
                        if entry.is_dir(follow_symlinks=False):  # no symlinked folders: no cycles
                            folders.append(entry.path)
                        elif entry.is_file():
                            info = entry.stat()
                            stats.append((entry.path, info.st_size, info.st_mtime_ns))
                    except OSError:
                        continue  # deleted while scanning: the next check sees the new state
        except OSError:
            continue
    return tuple(sorted(stats))


def _read(path: Path) -> tuple[dict[str, Any], YamlDocument] | AgentLoadError:
    """The raw field mapping of a YAML file, or of a Markdown file's front matter plus body, and its document."""
    try:
        text = read_text(path, path.name)
        body, first_line = None, 1
        if path.suffix == ".md":
            lines = text.splitlines(keepends=True)
            if not lines or lines[0].strip() != "---":
                return AgentLoadError(path, "no front matter: an agent Markdown file starts with a '---' YAML block", 1)
            end = next((i for i in range(1, len(lines)) if lines[i].strip() == "---"), None)
            if end is None:
                return AgentLoadError(path, "front matter is not closed by a '---' line", 1)
            text, body, first_line = "".join(lines[1:end]), "".join(lines[end + 1 :]).strip(), 2
        document = parse(text, path.name, first_line=first_line)
    except ConfigError as exc:
        return AgentLoadError.of(path, exc.problems[0])
    raw = document.data
    if body is not None:
        raw = {} if raw is None else raw
        if isinstance(raw, dict):
            raw.setdefault("name", path.stem)
            if body:
                if "system_prompt" in raw:
                    problem = document.problem(("system_prompt",), "given twice (front matter and Markdown body)")
                    return AgentLoadError.of(path, problem)
                raw["system_prompt"] = body
    if not isinstance(raw, dict):
        return AgentLoadError.of(
            path, document.problem((), f"expected a mapping at top level, got {type(raw).__name__}")
        )
    return raw, document


def _resolve_prompt_file(path: Path, raw: dict[str, Any], document: YamlDocument) -> AgentLoadError | None:
    """Replace ``system_prompt: {file: ...}`` by the file's text (relative to the agent file)."""
    prompt = raw.get("system_prompt")
    if not isinstance(prompt, dict):
        return None
    if set(prompt) != {"file"} or not isinstance(prompt["file"], str) or not prompt["file"].strip():
        return AgentLoadError.of(path, document.problem(("system_prompt",), "expected text or {file: <path>}"))
    candidate = path.parent / prompt["file"]
    if not candidate.is_file() and candidate.suffix != ".md":
        candidate = candidate.with_name(candidate.name + ".md")
    try:
        raw["system_prompt"] = candidate.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        problem = f"cannot read {candidate}: {getattr(exc, 'strerror', exc)}"
        return AgentLoadError.of(path, document.problem(("system_prompt", "file"), problem))
    return None


def _load_file(path: Path) -> tuple[AgentDefinition, YamlDocument] | builtins.list[AgentLoadError]:
    read = _read(path)
    if isinstance(read, AgentLoadError):
        return [read]
    raw, document = read
    problem = _resolve_prompt_file(path, raw, document)
    if problem is not None:
        return [problem]
    try:
        definition = document.validate(AgentDefinition, raw)
    except ConfigError as exc:
        return [AgentLoadError.of(path, p) for p in exc.problems]
    if definition.prompts_dir is not None:
        # An absolute prompts_dir survives the join unchanged.
        prompts_dir = (path.parent / definition.prompts_dir).resolve()
        if not prompts_dir.is_dir():
            return [AgentLoadError.of(path, document.problem(("prompts_dir",), f"not a directory: {prompts_dir}"))]
        definition = definition.model_copy(update={"prompts_dir": prompts_dir})
    not_json = _json_problem(definition)
    if not_json is not None:
        return [AgentLoadError(path, not_json)]
    return definition, document


def agent_to_json(definition: AgentDefinition) -> str:
    """The definition as a catalogue snapshot carries it (fields at their defaults left out)."""
    return definition.model_dump_json(exclude_defaults=True)


def agent_from_json(name: str, text: str) -> AgentDefinition:
    """A definition from a snapshot; ValueError naming the agent when it does not parse or names another."""
    try:
        definition = AgentDefinition.model_validate_json(text)
    except ValidationError as exc:
        problems = "; ".join(_describe(error) for error in exc.errors())
        raise ValueError(f"agent {name!r}: its definition_json does not load: {problems}") from exc
    if definition.name != name:
        raise ValueError(f"agent {name!r}: its definition_json names agent {definition.name!r}")
    return definition


def _json_problem(definition: AgentDefinition) -> str | None:
    """Why the definition would not come back equal from its JSON (processes holding the snapshot would differ)."""
    try:
        back = AgentDefinition.model_validate_json(agent_to_json(definition))
    except ValidationError as exc:
        return f"{_describe(exc.errors()[0])} (after a round trip through JSON)"
    for field in AgentDefinition.model_fields:
        if getattr(back, field) != getattr(definition, field):
            return f"{field}: has a value JSON cannot carry (a date, NaN or a key that is not a string?)"
    return None


def agents_of_snapshot(
    agents: Iterable[tuple[str, str]], problems: Iterable[tuple[str, str] | tuple[str, str, int]] = ()
) -> AgentRegistry:
    """The registry a catalogue snapshot carries: (name, definition JSON) pairs and (file, problem[, line]).

    Raises ValueError naming the first agent that does not load, or a name given twice:
    the holder then refuses the whole snapshot and keeps the last good one.
    """
    return AgentRegistry.from_definitions(
        (agent_from_json(name, text) for name, text in agents),
        [AgentLoadError(Path(file), problem, *line) for file, problem, *line in problems],
    )


class SnapshotAgentRegistry(AgentRegistry):
    """The agents of the models service's catalogue snapshot, as a process other than the folder's owner holds them.

    The holder of the snapshot calls `take` with the agents of each one it applies;
    reads see the last. Until the first arrives the registry is empty, or holds the
    folder as `load_folder` read it once (a process that found no models service at
    start); the first snapshot replaces that, and nothing here reads the folder again.
    """

    def __init__(self) -> None:
        super().__init__({})
        self.version = ""  # the catalogue snapshot the agents came with; "" before the first
        self.folder: Path | None = None  # the folder read once while no snapshot came

    def take(self, agents: AgentRegistry, version: str) -> None:
        if version == self.version:
            return
        if self.folder is not None:
            log.info("agents follow the catalogue snapshot now", version=version, instead_of=str(self.folder))
        self._definitions, self._errors = dict(agents._definitions), agents._errors
        self.version, self.folder = version, None

    def load_folder(self, agents_dir: Path | None) -> bool:
        """Read the folder once (no reload follows), unless a snapshot came first; True when it was read."""
        if self.version:
            return False
        directory = Path(agents_dir) if agents_dir else DEFAULT_AGENTS_DIR
        loaded = AgentRegistry.load_dir(directory)
        self._definitions, self._errors = loaded._definitions, loaded._errors
        self.folder = directory
        _log_errors(self._errors)
        return True


def _log_errors(errors: Iterable[AgentLoadError]) -> None:
    for error in errors:
        log.error("agent definition rejected", file=str(error.path), line=error.line, problem=error.message)


def _describe(error: ErrorDetails) -> str:
    location = field_path(error["loc"])
    return f"{location}: {describe_error(error)}" if location else describe_error(error)


def load_agents(agents_dir: Path | None) -> ReloadingAgentRegistry:
    """The registry of the folder's owner (the models service): the configured folder or the shipped agents.

    It reloads itself when the folder changes. Files that fail to load are logged
    with file and field; the others still serve.
    """
    registry = ReloadingAgentRegistry(Path(agents_dir) if agents_dir else DEFAULT_AGENTS_DIR)
    _log_errors(registry.errors)
    return registry
