"""The rubric grader's judge: a model, named as the gateway's catalogue names it, asked for a verdict.

The route is the suite's own provider path, taken from the CLI's side: the model name or alias is
resolved with the catalogue the gateway lists (ListModels, the same resolution rules as the
runtime's), and the model is called through the runtime's provider adapters
(services/runtime/providers/registry.py) with the providers file and API keys of the
environment (COGMESH_PROVIDERS_FILE, OPENAI_API_KEY, ...), or the built-in local model for
provider `local`. The judge's answer does not become a session: it is not the agent under test.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from cogmesh.client import GatewayClient
from services.lib.llm import ChatMessage, ChatModel, TextDelta
from services.suite.eval.dataset import Case

INSTRUCTION = (
    "You grade an AI assistant's answer against a rubric. Read the user's messages, the answer and the rubric "
    'and reply with one JSON object and nothing else: {"pass": true or false, "reason": "one short sentence"}.'
)
_OBJECT = re.compile(r"\{.*\}", re.DOTALL)
_WORD = re.compile(r"^\W*(pass|passed|fail|failed)\b", re.IGNORECASE)


def judge_prompt(rubric: str, case: Case, answer: str) -> list[ChatMessage]:
    parts = [f"User message {n}:\n{message}" for n, message in enumerate(case.messages, start=1)]
    if case.expected is not None:
        parts.append(f"Reference answer:\n{case.expected}")
    parts += [f"Assistant's answer:\n{answer}", f"Rubric:\n{rubric}"]
    return [ChatMessage("system", INSTRUCTION), ChatMessage("user", "\n\n".join(parts))]


def parse_verdict(text: str) -> tuple[bool, str]:
    """(passed, reason) from a judge's reply: a JSON object with a boolean `pass`, or a reply starting with
    PASS or FAIL. ValueError for anything else (the grader then fails, quoting it)."""
    found = _OBJECT.search(text)
    if found is not None:
        try:
            value: Any = json.loads(found.group(0))
        except json.JSONDecodeError:
            value = None
        if isinstance(value, dict) and isinstance(value.get("pass"), bool):
            return value["pass"], str(value.get("reason", "")).strip()
    word = _WORD.match(text.strip())
    if word is not None:
        return word.group(1).lower().startswith("pass"), text.strip()[word.end() :].strip(" :-\n")
    flat = " ".join(text.split())
    raise ValueError(f'its reply is not a verdict (want {{"pass": true|false, "reason": ...}}): {flat[:200]!r}')


class ModelJudge:
    """Asks a chat model (from `models`, by name) for a verdict on each answer."""

    def __init__(self, models: Callable[[str], Awaitable[ChatModel]]):
        self._models = models

    async def verdict(self, model: str, rubric: str, case: Case, answer: str) -> tuple[bool, str]:
        chat = await self._models(model)
        reply = ""
        async for chunk in chat.stream(judge_prompt(rubric, case, answer), []):
            if isinstance(chunk, TextDelta):
                reply += chunk.text
        return parse_verdict(reply)


class CatalogModels:
    """Chat models by the names the gateway's catalogue knows, built on the suite's provider adapters."""

    def __init__(self, client: GatewayClient, providers_file: Path | None):
        from services.lib.providers import load_providers  # the SDKs load only when a rubric needs them
        from services.runtime.providers.registry import ProviderRegistry

        self._client = client
        self._registry = ProviderRegistry(load_providers(providers_file))
        self._catalog: Any = None
        self._lock = asyncio.Lock()

    async def __call__(self, name: str) -> ChatModel:
        from services.lib.models.api import model_from_proto
        from services.lib.models.catalog import ModelCatalog, UnknownModelError
        from services.runtime.local_model import LocalModel
        from services.runtime.providers.registry import ProviderUnavailable

        async with self._lock:
            if self._catalog is None:
                listed = await self._client.list_models()
                self._catalog = ModelCatalog([model_from_proto(m) for m in listed.models], listed.default_model)
        try:
            spec = self._catalog.resolve(name, strict=True).model
        except UnknownModelError as exc:
            raise LookupError(f"the gateway's catalogue has no model {name!r}") from exc
        if spec.provider == "local":
            return LocalModel()
        try:
            return self._registry.model(spec.provider, spec.id, temperature=0.0)
        except ProviderUnavailable as exc:
            raise LookupError(str(exc)) from exc

    async def close(self) -> None:
        await self._registry.close()
