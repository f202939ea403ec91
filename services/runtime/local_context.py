"""The system prompt built in the runtime's process: the context service's BuildContext, no hop.

A prompt depends on the agent's definition and prompt files (the agents folder this
runtime already reads and reloads) and on the turn's input (role, summary, recalled
memories); it needs nothing from another service. So the runtime answers
BuildContext itself with the library the context service answers it with
(services/lib/context), over the same kind of builder: prompt files re-read when they
change on disk (hot reload), the token counter of `COGMESH_TOKEN_COUNTER`. The
prompt, its hash, token counts and pack report are the ones the RPC would return.

Requests that rehydrate the session from the sessions service still go to the context
service, as do compaction and the tool-result archive.
"""

from __future__ import annotations

from cogmesh.context.v1 import context_pb2
from services.kit.config import Settings
from services.kit.validation import check as check_rules
from services.lib.agents import AgentRegistry
from services.lib.context.api import build_context
from services.lib.context.builder import ContextBuilder
from services.lib.context.prompt_files import PromptFiles
from services.lib.tokens import make_counter


class LocalContext:
    """BuildContext (request proto -> response proto) for requests that need no session read."""

    def __init__(self, agents: AgentRegistry, builder: ContextBuilder) -> None:
        self.agents, self.builder = agents, builder

    @classmethod
    def from_settings(cls, agents: AgentRegistry, settings: Settings) -> LocalContext:
        # The context service's builder, from the same settings: same files, same counter, same answers.
        return cls(agents, ContextBuilder(PromptFiles(), make_counter(settings.token_counter)))

    @staticmethod
    def answers(request: context_pb2.BuildContextRequest) -> bool:
        """Whether the request can be answered here: it does not ask to rehydrate from the sessions service."""
        return not request.rehydrate

    async def BuildContext(self, request: context_pb2.BuildContextRequest) -> context_pb2.BuildContextResponse:
        check_rules(request)  # the protos' field rules, as the service's interceptor checks them
        return await build_context(self.builder, self.agents, request)
