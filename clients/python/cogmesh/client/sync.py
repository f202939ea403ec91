"""A blocking client with the same methods as GatewayClient, for scripts and notebooks.

It drives one GatewayClient on a private event loop in a background thread, so resume,
retries, client tools and errors behave exactly as in the async client.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

from cogmesh.client.errors import ClientClosed
from cogmesh.client.gateway import DEFAULT_ADDRESS, TURN_TIMEOUT_S, GatewayClient, Tools
from cogmesh.client.results import Pause, TurnResult
from cogmesh.common.v1 import events_pb2, messages_pb2, resources_pb2, turns_pb2
from cogmesh.gateway.v1 import agents_pb2, gateway_pb2

T = TypeVar("T")


class Client:
    """`with Client("127.0.0.1:50051") as client: print(client.run(sid, "What is 2 + 2?").text)`."""

    def __init__(self, address: str | Sequence[str] = DEFAULT_ADDRESS, **options: Any):
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="cogmesh-client", daemon=True)
        self._thread.start()
        try:
            self._async = self._call(self._make(address, options))
        except BaseException:
            self._stop_loop()
            raise

    @staticmethod
    async def _make(address: str | Sequence[str], options: dict[str, Any]) -> GatewayClient:
        return GatewayClient(address, **options)  # channels must be created on the loop that uses them

    def _call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        if not self._loop.is_running():
            coroutine.close()
            raise ClientClosed("the Client is closed; open a new one")
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def _iterate(self, stream: AsyncIterator[T]) -> Iterator[T]:
        try:
            while True:
                try:
                    yield self._call(anext(stream))  # type: ignore[arg-type]
                except StopAsyncIteration:
                    return
        finally:
            if self._loop.is_running():
                self._call(stream.aclose())  # type: ignore[attr-defined]

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        if self._loop.is_running():
            self._call(self._async.close())
            self._stop_loop()

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

    @property
    def address(self) -> str:
        return self._async.address

    def wait_ready(self, timeout_s: float) -> None:
        self._call(self._async.wait_ready(timeout_s))

    def create_session(
        self,
        agent: str = "",
        user_id: str = "",
        topic_id: str = "",
        scope: Mapping[str, str] | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> resources_pb2.Session:
        return self._call(self._async.create_session(agent, user_id, topic_id, scope, labels))

    def update_labels(
        self, session_id: str, labels: Mapping[str, str | None], *, replace: bool = False
    ) -> resources_pb2.Session:
        return self._call(self._async.update_labels(session_id, labels, replace=replace))

    def move_session(self, session_id: str, agent: str) -> resources_pb2.Session:
        return self._call(self._async.move_session(session_id, agent))

    def get_session(self, session_id: str) -> resources_pb2.Session:
        return self._call(self._async.get_session(session_id))

    def list_sessions(
        self,
        page_size: int = 50,
        page_token: str = "",
        scope_filter: Mapping[str, str] | None = None,
        **filters: Any,
    ) -> gateway_pb2.ListSessionsResponse:
        """As GatewayClient.list_sessions: labels=, statuses=, agent=, agent_version=, created_after=... filter."""
        return self._call(self._async.list_sessions(page_size, page_token, scope_filter, **filters))

    def delete_session(self, session_id: str) -> bool:
        return self._call(self._async.delete_session(session_id))

    def cancel_turn(self, session_id: str, turn_id: str = "") -> str:
        return self._call(self._async.cancel_turn(session_id, turn_id))

    def list_turns(
        self, session_id: str, *, include_steps: bool = False, page_size: int = 50
    ) -> Iterator[turns_pb2.TurnRecord]:
        return self._iterate(self._async.list_turns(session_id, include_steps=include_steps, page_size=page_size))

    def list_messages(
        self, session_id: str, *, through_turn_id: str = "", page_size: int = 100
    ) -> Iterator[messages_pb2.Message]:
        return self._iterate(
            self._async.list_messages(session_id, through_turn_id=through_turn_id, page_size=page_size)
        )

    def fork_session(
        self,
        session_id: str,
        turn_id: str = "",
        *,
        before: bool = False,
        agent: str = "",
        labels: Mapping[str, str] | None = None,
    ) -> gateway_pb2.ForkSessionResponse:
        return self._call(self._async.fork_session(session_id, turn_id, before=before, agent=agent, labels=labels))

    def rewind_session(self, session_id: str, turn_id: str) -> gateway_pb2.RewindSessionResponse:
        return self._call(self._async.rewind_session(session_id, turn_id))

    def list_models(self, provider: str = "") -> gateway_pb2.ListModelsResponse:
        return self._call(self._async.list_models(provider))

    def list_agents(self) -> gateway_pb2.ListAgentsResponse:
        return self._call(self._async.list_agents())

    def create_agent(self, name: str, definition: Mapping[str, Any]) -> agents_pb2.AgentVersion:
        return self._call(self._async.create_agent(name, definition))

    def update_agent(
        self, name: str, definition: Mapping[str, Any], *, expected_version: int = 0
    ) -> agents_pb2.AgentVersion:
        return self._call(self._async.update_agent(name, definition, expected_version=expected_version))

    def get_agent(self, ref: str, *, version: int = 0, alias: str = "") -> agents_pb2.AgentVersion:
        return self._call(self._async.get_agent(ref, version=version, alias=alias))

    def list_agent_versions(self, name: str, *, page_size: int = 50) -> Iterator[agents_pb2.AgentVersion]:
        return self._iterate(self._async.list_agent_versions(name, page_size=page_size))

    def delete_agent(self, name: str) -> int:
        return self._call(self._async.delete_agent(name))

    def set_agent_alias(self, name: str, alias: str, version: int) -> agents_pb2.SetAgentAliasResponse:
        return self._call(self._async.set_agent_alias(name, alias, version))

    def delete_agent_alias(self, name: str, alias: str) -> int:
        return self._call(self._async.delete_agent_alias(name, alias))

    def send_message(self, session_id: str, content: str, **options: Any) -> Iterator[events_pb2.RuntimeEvent]:
        """Same options as GatewayClient.send_message."""
        return self._iterate(self._async.send_message(session_id, content, **options))

    def run(
        self,
        session_id: str,
        content: str,
        *,
        model: str = "",
        tools: Tools = (),
        runtime: str = "",
        output_schema: Mapping[str, Any] | None = None,
        limits: Mapping[str, int] | turns_pb2.TurnLimits | None = None,
        cost_budget: Mapping[str, Any] | turns_pb2.CostBudget | None = None,
        multitask_strategy: str | int = "",
        cancel_on_disconnect: bool = False,
        timeout_s: float | None = TURN_TIMEOUT_S,
    ) -> TurnResult:
        return self._call(
            self._async.run(
                session_id,
                content,
                model=model,
                tools=tools,
                runtime=runtime,
                output_schema=output_schema,
                limits=limits,
                cost_budget=cost_budget,
                multitask_strategy=multitask_strategy,
                cancel_on_disconnect=cancel_on_disconnect,
                timeout_s=timeout_s,
            )
        )

    def approve(self, pause: Pause, *, timeout_s: float | None = TURN_TIMEOUT_S) -> TurnResult:
        return self._call(self._async.approve(pause, timeout_s=timeout_s))

    def edit(
        self, pause: Pause, arguments: Mapping[str, Any], *, timeout_s: float | None = TURN_TIMEOUT_S
    ) -> TurnResult:
        return self._call(self._async.edit(pause, arguments, timeout_s=timeout_s))

    def reject(self, pause: Pause, reason: str = "", *, timeout_s: float | None = TURN_TIMEOUT_S) -> TurnResult:
        return self._call(self._async.reject(pause, reason, timeout_s=timeout_s))

    def answer(self, pause: Pause, text: str, *, timeout_s: float | None = TURN_TIMEOUT_S) -> TurnResult:
        return self._call(self._async.answer(pause, text, timeout_s=timeout_s))

    def send_tool_result(
        self, pause: Pause, content: str, *, is_error: bool = False, timeout_s: float | None = TURN_TIMEOUT_S
    ) -> TurnResult:
        return self._call(self._async.send_tool_result(pause, content, is_error=is_error, timeout_s=timeout_s))

    def resolve_approval(
        self, session_id: str, interrupt_id: str, decision: str | int, **options: Any
    ) -> Iterator[events_pb2.RuntimeEvent]:
        return self._iterate(self._async.resolve_approval(session_id, interrupt_id, decision, **options))

    def answer_interrupt(self, session_id: str, interrupt_id: str, **options: Any) -> Iterator[events_pb2.RuntimeEvent]:
        return self._iterate(self._async.answer_interrupt(session_id, interrupt_id, **options))

    def subscribe(
        self, session_id: str, after_seq: int = 0, *, stop_when_idle: bool = False
    ) -> Iterator[events_pb2.RuntimeEvent]:
        return self._iterate(self._async.subscribe(session_id, after_seq, stop_when_idle=stop_when_idle))
