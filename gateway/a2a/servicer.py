"""`lf.a2a.v1.A2AService` over the gateway's own parts: thin, no task store of its own.

A message starts a turn with the gateway's Turns (in a new session of the chosen
agent, or in the session named by context_id); a message naming an input-required
task answers the paused turn and resumes it. Every task read (GetTask, SubscribeToTask,
the streams) is a replay of the turn's events from the shared event log, so it works
on any gateway replica. Tenancy is the session's: another tenant's task is NOT_FOUND.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator
from importlib import metadata
from typing import Any

import grpc
from a2a.types import a2a_pb2, a2a_pb2_grpc
from google.protobuf import empty_pb2
from google.rpc import error_details_pb2

from cogmesh.common.v1 import errors_pb2, events_pb2, resources_pb2
from cogmesh.gateway.v1 import webhooks_pb2 as public_webhooks
from cogmesh.sessions.v1 import sessions_pb2, webhooks_pb2
from gateway import answers, auth
from gateway.a2a import mapping
from gateway.a2a.errors import (
    InvalidParams,
    TaskNotCancelable,
    TaskNotFound,
    UnsupportedOperation,
)
from gateway.a2a.mapping import SendInput, TaskRef, TaskView
from gateway.settings import GatewaySettings
from gateway.turns import Turns
from services.kit.clients import Clients
from services.kit.dependencies import SessionsClient, WebhookStoreClient
from services.kit.errors import CogmeshError, NotFound
from services.kit.logging import bind_request
from services.lib.agents import AgentDefinition, AgentRegistry
from services.lib.event_log import EventLogReader, ends_stream

CANCEL_WAIT_S = 5.0  # how long CancelTask waits for the turn to end before answering with its state


def _violations(error: CogmeshError) -> list[tuple[str, str]]:
    """The field violations of an INVALID_ARGUMENT passed through from another service."""
    found: list[tuple[str, str]] = []
    for detail in error.to_status().details:
        if detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            found += [(v.field, v.description) for v in bad.field_violations]
    return found or [("url", error.message)]


def _version() -> str:
    try:
        return metadata.version("cogmesh")
    except metadata.PackageNotFoundError:  # running from a checkout that is not installed
        return "0"


class A2AServicer(a2a_pb2_grpc.A2AServiceServicer):
    def __init__(
        self,
        settings: GatewaySettings,
        clients: Clients,
        agents: AgentRegistry,
        events: EventLogReader,
        turns: Turns,
        *,
        secured: bool,
        card_url: str,
    ):
        self.settings, self.clients, self.agents, self.events, self.turns = settings, clients, agents, events, turns
        self.sessions, self.webhooks = SessionsClient.of(clients), WebhookStoreClient.of(clients)
        self.secured = secured
        self.card_url = card_url  # the gRPC address the card advertises
        self.version = _version()

    # ------------------------------------------------------------------ helpers

    @staticmethod
    def _caller(context: Any) -> auth.Principal:
        """The principal the gateway guard set for this RPC; also checks the A2A-Version header."""
        header = next((v for k, v in context.invocation_metadata() or () if k == "a2a-version"), "")
        mapping.check_version(header.decode() if isinstance(header, bytes) else header)
        return auth.current.get()

    def _exposed(self) -> list[AgentDefinition]:
        return mapping.exposed(self.agents.list(include_hidden=True))

    def _pick_agent(self, name: str) -> AgentDefinition:
        exposed = self._exposed()
        if name:
            found = next((a for a in exposed if a.name == name), None)
            if found is None:  # unknown and not exposed look the same
                raise NotFound(
                    f"no A2A-exposed agent {name!r}; exposed: {', '.join(a.name for a in exposed) or '(none)'}",
                    reason=errors_pb2.ERROR_REASON_AGENT_NOT_FOUND,
                    metadata={"agent": name},
                )
            return found
        if not exposed:
            raise NotFound("no agent is exposed through A2A", reason=errors_pb2.ERROR_REASON_AGENT_NOT_FOUND)
        return next((a for a in exposed if a.name == "default"), exposed[0])

    async def _session(self, tenant: str, session_id: str) -> resources_pb2.Session:
        """The session if this tenant owns it and its agent is exposed; else NOT_FOUND (no leak)."""
        reply = await self.sessions.GetSession(sessions_pb2.GetSessionRequest(tenant_id=tenant, session_id=session_id))
        if reply.session.agent not in {a.name for a in self._exposed()}:
            raise auth.session_not_found(session_id)
        return auth.current.get().check_sees(reply.session)

    async def _task_ref(self, tenant: str, task_id: str) -> TaskRef:
        ref = TaskRef.parse(task_id)
        if ref is None:
            raise TaskNotFound(task_id, "not a task id of this server")
        try:
            await self._session(tenant, ref.session_id)
        except CogmeshError as exc:
            if exc.code == grpc.StatusCode.NOT_FOUND:
                raise TaskNotFound(task_id) from exc
            raise
        return ref

    async def _replay(self, ref: TaskRef) -> TaskView:
        """The task as its events in the log say now."""
        view = TaskView(ref)
        async with contextlib.aclosing(self._read(ref, snapshot_only=True)) as batches:
            async for mine in batches:
                for event in mine:
                    view.apply(event)
        if not view.seen:
            raise TaskNotFound(ref.task_id)
        return view

    async def _read(self, ref: TaskRef, snapshot_only: bool = False) -> AsyncGenerator[list[events_pb2.RuntimeEvent]]:
        """The turn's events after `ref.start_seq`, batch by batch; with `snapshot_only`, those logged so far.

        Yields an empty list once when it has caught up with what was logged at the start.
        """
        last = await self.events.last_seq(ref.session_id)
        if last <= ref.start_seq:
            raise TaskNotFound(ref.task_id)
        try:
            caught_up = False
            async for batch in self.events.read(ref.session_id, ref.start_seq, self.settings.heartbeat_s, log_end=last):
                if batch is None:
                    continue  # HTTP/2 keepalive covers idle streams
                mine = [e for e in batch if e.turn_id == ref.turn_id]
                if mine:
                    yield mine
                if not caught_up and batch[-1].seq >= last:
                    caught_up = True
                    if snapshot_only:
                        return
                    yield []
        except CogmeshError as exc:
            if exc.code == grpc.StatusCode.OUT_OF_RANGE:  # the turn's events are past retention
                raise TaskNotFound(ref.task_id, "its events are no longer retained") from exc
            raise

    # ------------------------------------------------------------------ sending

    async def _start(self, tenant: str, given: SendInput, deadline_s: float | None) -> tuple[TaskRef, int]:
        """Start the turn the message asks for (or resume the paused one it answers).

        Returns the task and the seq after which its events are news to this caller.
        """
        if given.task_id:
            return await self._answer(tenant, given, deadline_s)
        if given.context_id:
            session = await self._session(tenant, given.context_id)
            if given.agent and given.agent != session.agent:
                raise InvalidParams(
                    [("metadata.agent", f"context {given.context_id!r} belongs to agent {session.agent!r}")]
                )
            session_id = session.session_id  # a paused turn there makes the driver refuse, naming it
        else:
            agent = self._pick_agent(given.agent)
            reply = await self.sessions.CreateSession(
                sessions_pb2.CreateSessionRequest(
                    tenant_id=tenant,
                    agent=agent.name,
                    role_id=agent.default_role,
                    scope=auth.current.get().pinned_scope,
                )
            )
            session_id = reply.session.session_id
        turn_id, start_seq = await self.turns.start(tenant, session_id, given.content, "", deadline_s)
        return TaskRef(session_id, turn_id, start_seq), start_seq

    async def _answer(self, tenant: str, given: SendInput, deadline_s: float | None) -> tuple[TaskRef, int]:
        """A message to an input-required task answers its pause and resumes the turn (same task id)."""
        ref = await self._task_ref(tenant, given.task_id)
        if given.context_id and given.context_id != ref.session_id:
            raise InvalidParams([("message.context_id", f"must be empty or the task's context {ref.session_id!r}")])
        checkpoint = await self.turns.paused(tenant, ref.session_id, ref.turn_id)
        if checkpoint is None:
            state = a2a_pb2.TaskState.Name((await self._replay(ref)).state)
            raise UnsupportedOperation(
                f"task {ref.task_id!r} is {state}: only an input-required task takes a follow-up message",
                {"task_id": ref.task_id},
            )
        kind = checkpoint.WhichOneof("request") or ""
        if kind not in answers.A2A_RESUMABLE:
            raise UnsupportedOperation(
                f"task {ref.task_id!r} waits for a client-side tool result, which A2A cannot carry; "
                "answer it through the gateway's AnswerInterrupt",
                {"task_id": ref.task_id},
            )
        decision = answers.from_a2a(kind, given.content)
        if decision is None:
            raise InvalidParams([("message.parts", "the task waits for an approval: reply 'approve' or 'reject'")])
        decision.decided_by = auth.current.get().name
        _, resumed_at = await self.turns.resume(
            tenant, ref.session_id, checkpoint.interrupt_id, decision, deadline_s, given="message.parts"
        )
        return ref, resumed_at

    async def _send(self, request: a2a_pb2.SendMessageRequest, context: Any) -> tuple[TaskRef, int]:
        principal = self._caller(context)
        given = mapping.parse_send(request, principal.tenant_id)
        # A blocking call's deadline bounds the turn, as on the gateway; a detached one runs to turn_timeout_s.
        deadline = None if given.return_immediately else context.time_remaining()
        ref, news_after = await self._start(principal.tenant_id, given, deadline)
        bind_request(session_id=ref.session_id, turn_id=ref.turn_id)
        if given.push is not None:
            await self._set_push(principal.tenant_id, ref, given.push, "configuration.task_push_notification_config.")
        return ref, news_after

    async def SendMessage(self, request: a2a_pb2.SendMessageRequest, context: Any) -> a2a_pb2.SendMessageResponse:
        ref, news_after = await self._send(request, context)
        view = TaskView(ref)
        async with contextlib.aclosing(self._read(ref)) as batches:
            async for mine in batches:
                for event in mine:
                    view.apply(event)
                news = [e for e in mine if e.seq > news_after]
                # Blocking: to the end or the pause; return_immediately: as soon as the task has news.
                if any(ends_stream(e) for e in news) or (news and request.configuration.return_immediately):
                    break
        return a2a_pb2.SendMessageResponse(task=view.task())

    async def SendStreamingMessage(
        self, request: a2a_pb2.SendMessageRequest, context: Any
    ) -> AsyncIterator[a2a_pb2.StreamResponse]:
        ref, news_after = await self._send(request, context)
        # The task as it stands first, then an update per event, to its end or pause. Events up to
        # `news_after` (a resumed task's earlier life) only build that first snapshot.
        view = TaskView(ref)
        sent_task = False
        async with contextlib.aclosing(self._read(ref)) as batches:
            async for mine in batches:
                for event in mine:
                    updates = view.apply(event)
                    if event.seq <= news_after:
                        continue
                    if not sent_task:  # the first live event: the task as it stands, itself included
                        sent_task = True
                        yield a2a_pb2.StreamResponse(task=view.task())
                    else:
                        for update in updates:
                            yield update
                    if ends_stream(event):
                        return

    # ------------------------------------------------------------------ tasks

    async def GetTask(self, request: a2a_pb2.GetTaskRequest, context: Any) -> a2a_pb2.Task:
        principal = self._caller(context)
        problems: list[tuple[str, str]] = []
        mapping.check_tenant(request.tenant, principal.tenant_id, problems)
        if not request.id.strip():
            problems.append(("id", "is required"))
        if request.history_length < 0:
            problems.append(("history_length", "must be >= 0"))
        if problems:
            raise InvalidParams(problems)
        ref = await self._task_ref(principal.tenant_id, request.id)
        return (await self._replay(ref)).task()

    async def CancelTask(self, request: a2a_pb2.CancelTaskRequest, context: Any) -> a2a_pb2.Task:
        principal = self._caller(context)
        problems: list[tuple[str, str]] = []
        mapping.check_tenant(request.tenant, principal.tenant_id, problems)
        if not request.id.strip():
            problems.append(("id", "is required"))
        if problems:
            raise InvalidParams(problems)
        ref = await self._task_ref(principal.tenant_id, request.id)
        view = await self._replay(ref)
        if view.terminal:
            raise TaskNotCancelable(
                f"task {ref.task_id!r} is already {a2a_pb2.TaskState.Name(view.state)}", {"task_id": ref.task_id}
            )
        # Running on a runtime replica (cancelled there) or paused (abandoned): Turns knows which.
        await self.turns.cancel(ref.session_id, ref.turn_id, principal.tenant_id)
        # Answer with the canceled task: wait (briefly, within the caller's deadline) for its last event.
        remaining = context.time_remaining()
        wait_s = CANCEL_WAIT_S if remaining is None else max(min(CANCEL_WAIT_S, remaining - 0.2), 0.0)
        view = TaskView(ref)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(wait_s), contextlib.aclosing(self._read(ref)) as batches:
                async for mine in batches:
                    for event in mine:
                        view.apply(event)
                    if view.terminal:
                        break
        return view.task() if view.seen else (await self._replay(ref)).task()

    async def SubscribeToTask(
        self, request: a2a_pb2.SubscribeToTaskRequest, context: Any
    ) -> AsyncIterator[a2a_pb2.StreamResponse]:
        principal = self._caller(context)
        problems: list[tuple[str, str]] = []
        mapping.check_tenant(request.tenant, principal.tenant_id, problems)
        if not request.id.strip():
            problems.append(("id", "is required"))
        if problems:
            raise InvalidParams(problems)
        ref = await self._task_ref(principal.tenant_id, request.id)
        bind_request(session_id=ref.session_id, turn_id=ref.turn_id)
        view = TaskView(ref)
        sent_task = False
        async with contextlib.aclosing(self._read(ref)) as batches:
            async for mine in batches:
                updates = [u for e in mine for u in view.apply(e)]
                if sent_task:
                    for update in updates:
                        yield update
                    if any(ends_stream(e) for e in mine):
                        return
                elif not mine:  # caught up with the log: the task as it stands comes first
                    if view.terminal:
                        raise UnsupportedOperation(
                            f"task {ref.task_id!r} is {a2a_pb2.TaskState.Name(view.state)}: nothing left to follow; "
                            "GetTask returns it",
                            {"task_id": ref.task_id},
                        )
                    sent_task = True
                    yield a2a_pb2.StreamResponse(task=view.task())
                    if view.state == a2a_pb2.TASK_STATE_INPUT_REQUIRED:
                        return  # an interrupted task's stream ends there, as the send stream did

    async def ListTasks(self, request: a2a_pb2.ListTasksRequest, context: Any) -> a2a_pb2.ListTasksResponse:
        self._caller(context)
        raise UnsupportedOperation("ListTasks is not supported: keep the task ids SendMessage returns")

    async def GetExtendedAgentCard(
        self, request: a2a_pb2.GetExtendedAgentCardRequest, context: Any
    ) -> a2a_pb2.AgentCard:
        principal = self._caller(context)
        problems: list[tuple[str, str]] = []
        mapping.check_tenant(request.tenant, principal.tenant_id, problems)
        if problems:
            raise InvalidParams(problems)
        return mapping.agent_card(self.agents.list(include_hidden=True), self.card_url, self.secured, self.version)

    # Push notifications: webhooks of the A2A format, one per config, narrowed to the task's turn.

    async def _push_configs(self, tenant: str, ref: TaskRef) -> list[webhooks_pb2.StoredWebhook]:
        configs: list[webhooks_pb2.StoredWebhook] = []
        token = ""
        while True:
            reply = await self.webhooks.ListWebhooks(
                webhooks_pb2.ListWebhooksRequest(
                    tenant_id=tenant,
                    session_id=ref.session_id,
                    turn_id=ref.turn_id,
                    format=webhooks_pb2.WEBHOOK_FORMAT_A2A,
                    page_size=500,
                    page_token=token,
                )
            )
            configs += [h for h in reply.webhooks if h.a2a.task_id == ref.task_id]
            token = reply.next_page_token
            if not token:
                return configs

    async def _push_config(self, tenant: str, ref: TaskRef, config_id: str) -> webhooks_pb2.StoredWebhook:
        found = next((h for h in await self._push_configs(tenant, ref) if h.a2a.config_id == config_id), None)
        if found is None:
            raise TaskNotFound(ref.task_id, f"it has no push notification config {config_id!r}")
        return found

    async def _set_push(self, tenant: str, ref: TaskRef, config: a2a_pb2.TaskPushNotificationConfig, where: str) -> Any:
        """Store the config as a webhook of the turn; outcomes logged before it are delivered too."""
        auth_info = config.authentication if config.HasField("authentication") else None
        request = webhooks_pb2.CreateWebhookRequest(
            tenant_id=tenant,
            webhook=public_webhooks.CreateWebhookRequest(
                url=config.url, session_id=ref.session_id, turn_id=ref.turn_id
            ),
            format=webhooks_pb2.WEBHOOK_FORMAT_A2A,
            a2a=webhooks_pb2.A2APush(
                task_id=ref.task_id,
                config_id=config.id,
                token=config.token,
                auth_scheme=auth_info.scheme if auth_info else "",
                auth_credentials=auth_info.credentials if auth_info else "",
            ),
        )
        try:
            reply = await self.webhooks.CreateWebhook(request)
        except CogmeshError as exc:
            if exc.code != grpc.StatusCode.INVALID_ARGUMENT:
                raise
            raise InvalidParams([(f"{where}{name}", why) for name, why in _violations(exc)]) from exc
        return mapping.push_config(reply.webhook)

    def _check_task(self, tenant: str, caller_tenant: str, task_id: str, name: str = "task_id") -> None:
        problems: list[tuple[str, str]] = []
        mapping.check_tenant(tenant, caller_tenant, problems)
        if not task_id.strip():
            problems.append((name, "is required"))
        if problems:
            raise InvalidParams(problems)

    async def CreateTaskPushNotificationConfig(
        self, request: a2a_pb2.TaskPushNotificationConfig, context: Any
    ) -> a2a_pb2.TaskPushNotificationConfig:
        principal = self._caller(context)
        self._check_task(request.tenant, principal.tenant_id, request.task_id)
        if not request.url:
            raise InvalidParams([("url", "is required")])
        ref = await self._task_ref(principal.tenant_id, request.task_id)
        return await self._set_push(principal.tenant_id, ref, request, "")  # type: ignore[no-any-return]

    async def GetTaskPushNotificationConfig(
        self, request: a2a_pb2.GetTaskPushNotificationConfigRequest, context: Any
    ) -> a2a_pb2.TaskPushNotificationConfig:
        principal = self._caller(context)
        self._check_task(request.tenant, principal.tenant_id, request.task_id)
        ref = await self._task_ref(principal.tenant_id, request.task_id)
        return mapping.push_config(await self._push_config(principal.tenant_id, ref, request.id))

    async def ListTaskPushNotificationConfigs(
        self, request: a2a_pb2.ListTaskPushNotificationConfigsRequest, context: Any
    ) -> a2a_pb2.ListTaskPushNotificationConfigsResponse:
        principal = self._caller(context)
        self._check_task(request.tenant, principal.tenant_id, request.task_id)
        ref = await self._task_ref(principal.tenant_id, request.task_id)
        configs = [mapping.push_config(h) for h in await self._push_configs(principal.tenant_id, ref)]
        return a2a_pb2.ListTaskPushNotificationConfigsResponse(configs=configs)

    async def DeleteTaskPushNotificationConfig(
        self, request: a2a_pb2.DeleteTaskPushNotificationConfigRequest, context: Any
    ) -> empty_pb2.Empty:
        principal = self._caller(context)
        self._check_task(request.tenant, principal.tenant_id, request.task_id)
        ref = await self._task_ref(principal.tenant_id, request.task_id)
        found = await self._push_config(principal.tenant_id, ref, request.id)
        await self.webhooks.DeleteWebhook(
            webhooks_pb2.DeleteWebhookRequest(tenant_id=principal.tenant_id, webhook_id=found.webhook.webhook_id)
        )
        return empty_pb2.Empty()
