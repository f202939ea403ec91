"""Context service entry point: `python -m services.context`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from cogmesh.context.v1 import context_pb2, context_pb2_grpc
from services.context.archive import MemoryToolArchive, RedisToolArchive, ToolArchive
from services.context.compaction import Compactor
from services.context.servicer import ContextServicer
from services.context.settings import ContextSettings
from services.kit.clients import Clients
from services.kit.redis_pool import pooled_client
from services.kit.server import App, mount, run
from services.lib.context.builder import ContextBuilder
from services.lib.context.prompt_files import PromptFiles
from services.lib.models.watch import agents_of_catalog
from services.lib.tokens import make_counter


async def build(settings: ContextSettings, clients: Clients) -> App:
    counter = make_counter(settings.token_counter)
    archive: ToolArchive = MemoryToolArchive()
    on_close: list[Callable[[], Awaitable[None]]] = []
    redis_url = settings.redis_url
    if redis_url:
        timeout = settings.redis_timeout_s
        client = pooled_client(redis_url, timeout)
        archive = RedisToolArchive(client, settings.redis_key_prefix)

        async def close() -> None:
            await client.aclose()

        on_close.append(close)
    # The agents come with the models service's catalogue snapshot (that service reads the folder);
    # the prompt files their prompts_dir names are read here, where the prompt is built.
    agents, catalogue = await agents_of_catalog(clients, settings)
    on_close.append(catalogue.close)
    servicer = ContextServicer(
        agents,
        ContextBuilder(PromptFiles(), counter),
        Compactor(counter, archive),
        archive,
        clients,
    )
    return App("context", [mount(servicer, context_pb2, context_pb2_grpc, "ContextService")], on_close)


def main() -> None:
    run("context", build, ContextSettings)
