"""GatewayClient: sessions, turns and event streams with plain Python calls.

- Auth: `api_key` is sent as `authorization: Bearer <key>`; `root_certificates` turns on TLS.
- Deadlines: every unary call has `timeout_s`; turn streams take their own (`timeout_s=`).
- Retries: idempotent calls are retried on UNAVAILABLE by gRPC itself (service config).
- Rate limits: a call the gateway refuses with RESOURCE_EXHAUSTED and a RetryInfo delay
  waits that delay and tries again (`rate_limit_attempts`, `rate_limit_wait_s`): reads
  always, CreateSession and a turn's stream only when refused at admission, before
  anything started (retry.py).
- Agents: a tenant's agents as versioned resources (`create_agent`, `update_agent`, `get_agent`,
  `list_agent_versions`, `set_agent_alias`...); sessions open on "name", "name@7" or
  "name@prod" and `move_session` moves one to another version.
- Resume: when a stream breaks, the client reconnects (to the next address, if several
  are given) with its last seq and hands each event over exactly once.
- Pauses: a turn that waits for an approval, the user's input or a client tool ends its
  stream with a paused status; `TurnResult.pause` says what it waits for and
  `approve` / `reject` / `edit` / `answer` / `send_tool_result` resume it. Client tools
  given as Python functions (`run(..., tools=[fn])`) are run by the SDK itself.

Errors surface as GatewayError subclasses (errors.py) carrying the gRPC code, the
message, the ErrorInfo reason and metadata, BadRequest field violations and RetryInfo.
Arguments of the wrong type raise TypeError / ValueError naming them before any call.
"""

from __future__ import annotations

import asyncio
import datetime
import json
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any

import grpc
from google.protobuf import field_mask_pb2, timestamp_pb2

from cogmesh.client import options
from cogmesh.client.errors import ClientClosed, GatewayError, Unavailable
from cogmesh.client.results import Pause, TurnResult, is_terminal
from cogmesh.client.retry import RateLimitRetry
from cogmesh.client.tools import ClientTool
from cogmesh.common.v1 import events_pb2, messages_pb2, resources_pb2, turns_pb2
from cogmesh.gateway.v1 import agents_pb2, agents_pb2_grpc, gateway_pb2, gateway_pb2_grpc

DEFAULT_ADDRESS = "127.0.0.1:50051"


def _labels(name: str, labels: Mapping[str, str] | None) -> dict[str, str]:
    if labels is None:
        return {}
    if not isinstance(labels, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
        raise TypeError(f"{name}: expected a dict of str to str")
    return dict(labels)


def _stamp(name: str, value: datetime.datetime | None) -> timestamp_pb2.Timestamp | None:
    """A timezone-aware datetime as a Timestamp (a naive one would be read in whatever zone the host has)."""
    if value is None:
        return None
    if not isinstance(value, datetime.datetime):
        raise TypeError(f"{name}: expected a datetime, got {type(value).__name__}")
    if value.tzinfo is None:
        raise ValueError(f"{name}: must be timezone-aware, e.g. datetime.now(timezone.utc)")
    stamp = timestamp_pb2.Timestamp()
    stamp.FromDatetime(value)
    return stamp


SERVICE = "cogmesh.gateway.v1.GatewayService"
AGENT_SERVICE = "cogmesh.gateway.v1.AgentService"
# UpdateSession sets labels to given values: repeating it changes nothing more.
IDEMPOTENT = [
    "GetSession",
    "ListSessions",
    "UpdateSession",
    "DeleteSession",
    "CancelTurn",
    "ListAgents",
    "ListModels",
    "ListTurns",
    "ListMessages",
]
# AgentService's reads; its writes each store a new version or move an alias, so they are sent once.
AGENT_READS = ["GetAgent", "ListAgentVersions"]
SERVICE_CONFIG = json.dumps(
    {
        "methodConfig": [
            {
                "name": [{"service": SERVICE, "method": m} for m in IDEMPOTENT]
                + [{"service": AGENT_SERVICE, "method": m} for m in AGENT_READS],
                "retryPolicy": {
                    "maxAttempts": 4,
                    "initialBackoff": "0.1s",
                    "maxBackoff": "2s",
                    "backoffMultiplier": 2,
                    "retryableStatusCodes": ["UNAVAILABLE"],
                },
            }
        ]
    }
)
TURN_TIMEOUT_S = 300.0
RETIRE_GRACE_S = 30.0  # calls still on a channel failed over from get this long before it closes

# What `tools=` accepts: plain functions, ClientTools, or bare ToolSpecs the caller answers itself.
Tools = Sequence[Callable[..., Any] | ClientTool | messages_pb2.ToolSpec]


class GatewayClient:
    """Async client; use as `async with GatewayClient(address) as client:`.

    `address` may list several gateways ("host1:50051,host2:50051"): streams that break
    resume on the next one.
    """

    def __init__(
        self,
        address: str | Sequence[str] = DEFAULT_ADDRESS,
        *,
        api_key: str = "",
        root_certificates: bytes | None = None,
        timeout_s: float = 10.0,
        max_resumes: int = 5,
        rate_limit_attempts: int = 3,
        rate_limit_wait_s: float = 10.0,
    ):
        if isinstance(address, str):
            addresses = address.split(",")
        elif isinstance(address, Sequence) and all(isinstance(a, str) for a in address):
            addresses = list(address)
        else:
            raise TypeError(f"address: expected 'host:port' or a list of them, got {type(address).__name__}")
        self.addresses = [a.strip() for a in addresses if a.strip()]
        if not self.addresses:
            raise ValueError("address: give at least one gateway address")
        options.text("api_key", api_key)
        if root_certificates is not None and not isinstance(root_certificates, bytes):
            raise TypeError(f"root_certificates: expected PEM bytes, got {type(root_certificates).__name__}")
        self.timeout_s = float(options.seconds("timeout_s", timeout_s) or 0)
        self.max_resumes = options.count("max_resumes", max_resumes)
        attempts = options.count("rate_limit_attempts", rate_limit_attempts)
        if attempts < 1:
            raise ValueError("rate_limit_attempts: must be at least 1 (1 never waits), got 0")
        self.rate_limit = RateLimitRetry(attempts, float(options.seconds("rate_limit_wait_s", rate_limit_wait_s) or 0))
        self._metadata = (("authorization", f"Bearer {api_key}"),) if api_key else ()
        self._credentials = grpc.ssl_channel_credentials(root_certificates) if root_certificates else None
        self._current = 0
        self._closed = False
        self._turn_tools: dict[str, dict[str, ClientTool]] = {}  # paused turns' runnable client tools
        self._retired: set[grpc.aio.Channel] = set()  # channels failed over from, closing once their calls end
        self._channel, self._stub = self._connect(0)
        self._agent_stub, self._agent_channel = agents_pb2_grpc.AgentServiceStub(self._channel), self._channel

    @property
    def address(self) -> str:
        return self.addresses[self._current]

    def _connect(self, index: int) -> tuple[grpc.aio.Channel, Any]:
        channel_options = [("grpc.service_config", SERVICE_CONFIG), ("grpc.enable_retries", 1)]
        target = self.addresses[index]
        channel = (
            grpc.aio.secure_channel(target, self._credentials, options=channel_options)
            if self._credentials
            else grpc.aio.insecure_channel(target, options=channel_options)
        )
        return channel, gateway_pb2_grpc.GatewayServiceStub(channel)

    @property
    def _agents(self) -> Any:
        """The AgentService stub on the current channel (a failover replaces the channel)."""
        if self._agent_channel is not self._channel:
            self._agent_stub, self._agent_channel = agents_pb2_grpc.AgentServiceStub(self._channel), self._channel
        return self._agent_stub

    async def _failover(self, failed: Any) -> None:
        """Move to the next gateway (the same one when only one is known), once per failed channel.

        `failed` is the stub the failing call used: when another call moved on already, there is
        nothing to do. The old channel is not closed at once (that would cancel every other call
        still on it, healthy streams included): it gets RETIRE_GRACE_S to finish them first."""
        if failed is not self._stub:
            return
        old = self._channel
        self._current = (self._current + 1) % len(self.addresses)
        self._channel, self._stub = self._connect(self._current)
        self._retired.add(old)
        closing = asyncio.create_task(old.close(grace=RETIRE_GRACE_S))
        closing.add_done_callback(lambda _: self._retired.discard(old))

    async def __aenter__(self) -> GatewayClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the channel; streams still open end with ClientClosed."""
        self._closed = True
        for old in list(self._retired):
            await old.close()
        await self._channel.close()

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosed("the GatewayClient is closed; open a new one")

    def _error(self, err: grpc.aio.AioRpcError) -> Exception:
        if self._closed and err.code() == grpc.StatusCode.CANCELLED:
            return ClientClosed("the GatewayClient was closed while the call was in flight")
        return GatewayError.from_rpc(err)

    def _closed_under(self) -> bool:
        """grpc.aio cancels calls in flight when the channel closes; tell that from our task being cancelled."""
        return self._closed and self._cancelled_underneath()

    @staticmethod
    def _cancelled_underneath() -> bool:
        """A CancelledError that is not our task's: gRPC cancelled the call (its channel closed)."""
        task = asyncio.current_task()
        return task is None or task.cancelling() == 0

    async def _unary(self, method: str, request: Any, *, agents: bool = False) -> Any:
        """One unary call of GatewayService (or, with `agents`, of AgentService)."""
        waiter = self.rate_limit.start()
        idempotent = method in (AGENT_READS if agents else IDEMPOTENT)
        while True:
            self._check_open()
            stub = self._agents if agents else self._stub
            try:
                return await getattr(stub, method)(request, timeout=self.timeout_s, metadata=self._metadata)
            except grpc.aio.AioRpcError as err:
                error = self._error(err)
                # CreateSession is not idempotent: it is sent again only when the gateway refused it at the door.
                delay = waiter.delay(error, idempotent=idempotent)
                if delay is None:
                    raise error from err
            except asyncio.CancelledError:
                if self._closed_under():
                    raise ClientClosed("the GatewayClient was closed while the call was in flight") from None
                raise
            await asyncio.sleep(delay)

    async def wait_ready(self, timeout_s: float) -> None:
        """Wait until the gateway accepts connections, or raise Unavailable."""
        options.seconds("timeout_s", timeout_s)
        self._check_open()
        try:
            await asyncio.wait_for(self._channel.channel_ready(), timeout_s)
        except TimeoutError as exc:
            raise Unavailable(grpc.StatusCode.UNAVAILABLE, f"cannot reach the gateway at {self.address}") from exc

    # ------------------------------------------------------------------ sessions and catalogue

    async def create_session(
        self,
        agent: str = "",
        user_id: str = "",
        topic_id: str = "",
        scope: Mapping[str, str] | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> resources_pb2.Session:
        """`scope`: on whose behalf the session runs (`{"end_user": "u_42"}`); the API key decides what may be set.
        `labels`: the application's tags to find the session by (`list_sessions(labels=...)`), changeable later."""
        request = gateway_pb2.CreateSessionRequest(
            agent=options.text("agent", agent),
            user_id=options.text("user_id", user_id),
            topic_id=options.text("topic_id", topic_id),
            scope=dict(scope or {}),
            labels=_labels("labels", labels),
        )
        return (await self._unary("CreateSession", request)).session  # type: ignore[no-any-return]

    async def update_labels(
        self, session_id: str, labels: Mapping[str, str | None], *, replace: bool = False
    ) -> resources_pb2.Session:
        """Set labels (a value) or remove them (None), leaving the session's other labels; with `replace`, the
        session's labels become exactly `labels` (None values left out). Returns the updated session."""
        if not isinstance(labels, Mapping):
            raise TypeError(f"labels: expected a dict of str to str or None, got {type(labels).__name__}")
        kept = {k: v for k, v in labels.items() if v is not None}
        paths = ["labels"] if replace else [f"labels.{key}" for key in labels]
        if not paths:
            raise ValueError("labels: name at least one label to change (or replace=True to clear them all)")
        request = gateway_pb2.UpdateSessionRequest(
            session_id=options.text("session_id", session_id),
            labels=_labels("labels", kept),
            update_mask=field_mask_pb2.FieldMask(paths=paths),
        )
        return (await self._unary("UpdateSession", request)).session  # type: ignore[no-any-return]

    async def move_session(self, session_id: str, agent: str) -> resources_pb2.Session:
        """Run the session on another agent or version from its next turn on: `agent` as create_session takes
        it ("name", "name@7", "name@prod"), resolved to a version now (`Session.agent_version`). A running
        turn keeps the definition it started with."""
        request = gateway_pb2.UpdateSessionRequest(
            session_id=options.text("session_id", session_id),
            agent=options.text("agent", agent, required=True),
            update_mask=field_mask_pb2.FieldMask(paths=["agent"]),
        )
        return (await self._unary("UpdateSession", request)).session  # type: ignore[no-any-return]

    async def get_session(self, session_id: str) -> resources_pb2.Session:
        request = gateway_pb2.GetSessionRequest(session_id=options.text("session_id", session_id))
        return (await self._unary("GetSession", request)).session  # type: ignore[no-any-return]

    async def list_sessions(
        self,
        page_size: int = 50,
        page_token: str = "",
        scope_filter: Mapping[str, str] | None = None,
        *,
        labels: Mapping[str, str] | None = None,
        statuses: Iterable[str | int] = (),
        agent: str = "",
        created_after: datetime.datetime | None = None,
        created_before: datetime.datetime | None = None,
        active_after: datetime.datetime | None = None,
        active_before: datetime.datetime | None = None,
        forked_from: str = "",
        agent_version: int = 0,
    ) -> gateway_pb2.ListSessionsResponse:
        """One page, newest first, of the sessions every given filter matches: `labels` (all of them),
        `statuses` (any of "idle", "running", "paused", "failed"), `agent` (with `agent_version`, the
        sessions on that version of it), [after, before) ranges of creation and last activity
        (timezone-aware datetimes), and `forked_from` (the forks of a session).
        A filtered page may be short, even empty, with a next_page_token: keep paging until it is empty."""
        request = gateway_pb2.ListSessionsRequest(
            page_size=options.count("page_size", page_size),
            page_token=options.text("page_token", page_token),
            scope_filter=dict(scope_filter or {}),
            label_filter=_labels("labels", labels),
            statuses=[
                resources_pb2.SessionStatus.Name(
                    options.enum_value(f"statuses[{i}]", s, resources_pb2.SessionStatus, "SESSION_STATUS_")
                )
                for i, s in enumerate(statuses)
            ],
            agent=options.text("agent", agent),
            created_after=_stamp("created_after", created_after),
            created_before=_stamp("created_before", created_before),
            active_after=_stamp("active_after", active_after),
            active_before=_stamp("active_before", active_before),
            forked_from=options.text("forked_from", forked_from),
            agent_version=options.count("agent_version", agent_version),
        )
        return await self._unary("ListSessions", request)  # type: ignore[no-any-return]

    async def delete_session(self, session_id: str) -> bool:
        request = gateway_pb2.DeleteSessionRequest(session_id=options.text("session_id", session_id))
        return bool((await self._unary("DeleteSession", request)).deleted)

    async def cancel_turn(self, session_id: str, turn_id: str = "") -> str:
        """Cancel the running turn (or give up a paused one); returns the turn signalled, or "" when none."""
        request = gateway_pb2.CancelTurnRequest(
            session_id=options.text("session_id", session_id), turn_id=options.text("turn_id", turn_id)
        )
        reply = await self._unary("CancelTurn", request)
        return str(reply.turn_id) if reply.cancelled else ""

    # ------------------------------------------------------------------ history: turns, forks, rewinds

    def list_turns(
        self, session_id: str, *, include_steps: bool = False, page_size: int = 50
    ) -> AsyncIterator[turns_pb2.TurnRecord]:
        """The session's turns, oldest first, page after page (`page_size` a page, 1..200): the message that
        started each, how it ended, the seq range of its events and, with `include_steps`, its recorded steps."""
        request = gateway_pb2.ListTurnsRequest(
            session_id=options.text("session_id", session_id),
            page_size=options.count("page_size", page_size),
            include_steps=options.flag("include_steps", include_steps),
        )
        return self._pages("ListTurns", request, "turns")

    def list_messages(
        self, session_id: str, *, through_turn_id: str = "", page_size: int = 100
    ) -> AsyncIterator[messages_pb2.Message]:
        """The session's conversation, oldest first, page after page (`page_size` a page, 1..1000); with
        `through_turn_id`, as it was after that turn."""
        request = gateway_pb2.ListMessagesRequest(
            session_id=options.text("session_id", session_id),
            page_size=options.count("page_size", page_size),
            through_turn_id=options.text("through_turn_id", through_turn_id),
        )
        return self._pages("ListMessages", request, "messages")

    async def _pages(self, method: str, request: Any, items: str, *, agents: bool = False) -> AsyncIterator[Any]:
        """Every item of a paged list, asking for the next page only once the caller has read this one's."""
        while True:
            page = await self._unary(method, request, agents=agents)
            for item in getattr(page, items):
                yield item
            if not page.next_page_token:
                return
            request.page_token = page.next_page_token

    async def fork_session(
        self,
        session_id: str,
        turn_id: str = "",
        *,
        before: bool = False,
        agent: str = "",
        labels: Mapping[str, str] | None = None,
    ) -> gateway_pb2.ForkSessionResponse:
        """A new session holding this one's conversation up to `turn_id` (its last turn when empty), or up
        to just before it (`before=True`: send that turn again, edited or to another `agent`, on the fork).
        The original is untouched; the fork's `forked_from` names it. Returns the fork and its message count."""
        request = gateway_pb2.ForkSessionRequest(
            session_id=options.text("session_id", session_id),
            turn_id=options.text("turn_id", turn_id),
            before_turn=options.flag("before", before),
            agent=options.text("agent", agent),
            labels=_labels("labels", labels),
        )
        return await self._unary("ForkSession", request)  # type: ignore[no-any-return]

    async def rewind_session(self, session_id: str, turn_id: str) -> gateway_pb2.RewindSessionResponse:
        """Drop `turn_id` and every later turn from the conversation. Returns the session and the `rewound`
        event logged; watchers drop the events in its void range (`voided`). FailedPrecondition while a
        turn runs or is paused."""
        request = gateway_pb2.RewindSessionRequest(
            session_id=options.text("session_id", session_id), turn_id=options.text("turn_id", turn_id)
        )
        return await self._unary("RewindSession", request)  # type: ignore[no-any-return]

    async def list_models(self, provider: str = "") -> gateway_pb2.ListModelsResponse:
        request = gateway_pb2.ListModelsRequest(provider=options.text("provider", provider))
        return await self._unary("ListModels", request)  # type: ignore[no-any-return]

    async def list_agents(self) -> gateway_pb2.ListAgentsResponse:
        return await self._unary("ListAgents", gateway_pb2.ListAgentsRequest())  # type: ignore[no-any-return]

    # ------------------------------------------------------------------ agents as versioned resources

    async def create_agent(self, name: str, definition: Mapping[str, Any]) -> agents_pb2.AgentVersion:
        """Store version 1 of a new agent. `definition`: an agent file's fields without `name` (docs/agents.md),
        the prompt inline in `system_prompt`. AlreadyExists when the tenant (or a built-in) has the name;
        InvalidArgument naming each bad field (`definition.mode`...); writes need the key's `agents:write`."""
        request = agents_pb2.CreateAgentRequest(
            name=options.text("name", name, required=True), definition=options.struct("definition", definition)
        )
        return (await self._unary("CreateAgent", request, agents=True)).agent  # type: ignore[no-any-return]

    async def update_agent(
        self, name: str, definition: Mapping[str, Any], *, expected_version: int = 0
    ) -> agents_pb2.AgentVersion:
        """Store the whole `definition` as the agent's next version (earlier ones stay readable). With
        `expected_version` (the latest version you read), Aborted when another change came first."""
        request = agents_pb2.UpdateAgentRequest(
            name=options.text("name", name, required=True),
            definition=options.struct("definition", definition),
            expected_version=options.count("expected_version", expected_version),
        )
        return (await self._unary("UpdateAgent", request, agents=True)).agent  # type: ignore[no-any-return]

    async def get_agent(self, ref: str, *, version: int = 0, alias: str = "") -> agents_pb2.AgentVersion:
        """An agent's latest version; "name@7" or `version=7` a given one, "name@prod" or `alias="prod"` the
        one an alias points at. A built-in reads as version 0, `native`."""
        request = agents_pb2.GetAgentRequest(
            name=options.text("ref", ref, required=True),
            version=options.count("version", version),
            alias=options.text("alias", alias),
        )
        return (await self._unary("GetAgent", request, agents=True)).agent  # type: ignore[no-any-return]

    def list_agent_versions(self, name: str, *, page_size: int = 50) -> AsyncIterator[agents_pb2.AgentVersion]:
        """An agent's versions, newest first, page after page (`page_size` a page, 1..200); each carries the
        aliases pointing at it."""
        request = agents_pb2.ListAgentVersionsRequest(
            name=options.text("name", name, required=True), page_size=options.count("page_size", page_size)
        )
        return self._pages("ListAgentVersions", request, "versions", agents=True)

    async def delete_agent(self, name: str) -> int:
        """Delete an agent with every version and alias; returns how many versions went."""
        request = agents_pb2.DeleteAgentRequest(name=options.text("name", name, required=True))
        return int((await self._unary("DeleteAgent", request, agents=True)).deleted_versions)

    async def set_agent_alias(self, name: str, alias: str, version: int) -> agents_pb2.SetAgentAliasResponse:
        """Point `alias` ("prod", "canary"...) at `version`, creating or moving it. Returns the version with its
        aliases and `previous_version` (0 when the alias is new)."""
        request = agents_pb2.SetAgentAliasRequest(
            name=options.text("name", name, required=True),
            alias=options.text("alias", alias, required=True),
            version=options.count("version", version),
        )
        return await self._unary("SetAgentAlias", request, agents=True)  # type: ignore[no-any-return]

    async def delete_agent_alias(self, name: str, alias: str) -> int:
        """Remove an alias; returns the version it pointed at."""
        request = agents_pb2.DeleteAgentAliasRequest(
            name=options.text("name", name, required=True), alias=options.text("alias", alias, required=True)
        )
        return int((await self._unary("DeleteAgentAlias", request, agents=True)).previous_version)

    # ------------------------------------------------------------------ turns

    def send_message(
        self,
        session_id: str,
        content: str,
        *,
        model: str = "",
        runtime: str = "",
        output_schema: Mapping[str, Any] | None = None,
        limits: Mapping[str, int] | turns_pb2.TurnLimits | None = None,
        cost_budget: Mapping[str, Any] | turns_pb2.CostBudget | None = None,
        client_tools: Tools = (),
        multitask_strategy: str | int = "",
        cancel_on_disconnect: bool = False,
        timeout_s: float | None = TURN_TIMEOUT_S,
    ) -> AsyncIterator[events_pb2.RuntimeEvent]:
        """Start a turn and yield its events until it ends (final or error) or pauses.

        If the stream breaks after the turn started, the client follows the session from
        its last seq until the turn ends; the turn itself keeps running server-side.
        `client_tools` are only declared here: answer their calls with send_tool_result
        (or use `run(..., tools=...)`, which runs them).
        """
        request, _ = self._message_request(
            session_id,
            content,
            model=model,
            runtime=runtime,
            output_schema=output_schema,
            limits=limits,
            cost_budget=cost_budget,
            tools=client_tools,
            multitask_strategy=multitask_strategy,
            cancel_on_disconnect=cancel_on_disconnect,
        )
        return self._turn_stream("SendMessage", request, options.seconds("timeout_s", timeout_s, optional=True))

    async def run(
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
        """Run one turn until it ends or waits for a human, and collect it: `(await client.run(sid, "hi")).text`.

        `tools` are client-side tools (plain functions): when the model calls one, the SDK
        runs it, sends its result and follows the resumed turn, all within this call. A
        turn that waits for an approval or the user's input comes back with `.pause` set.
        """
        request, runnable = self._message_request(
            session_id,
            content,
            model=model,
            runtime=runtime,
            output_schema=output_schema,
            limits=limits,
            cost_budget=cost_budget,
            tools=tools,
            multitask_strategy=multitask_strategy,
            cancel_on_disconnect=cancel_on_disconnect,
        )
        timeout = options.seconds("timeout_s", timeout_s, optional=True)
        return await self._collect(self._turn_stream("SendMessage", request, timeout), runnable, timeout)

    def _message_request(
        self,
        session_id: str,
        content: str,
        *,
        model: str,
        runtime: str,
        output_schema: Mapping[str, Any] | None,
        limits: Mapping[str, int] | turns_pb2.TurnLimits | None,
        cost_budget: Mapping[str, Any] | turns_pb2.CostBudget | None,
        tools: Tools,
        multitask_strategy: str | int,
        cancel_on_disconnect: bool,
    ) -> tuple[gateway_pb2.SendMessageRequest, dict[str, ClientTool]]:
        specs, runnable = options.tools(tools)
        request = gateway_pb2.SendMessageRequest(
            session_id=options.text("session_id", session_id),
            content=options.text("content", content),
            model=options.text("model", model),
            runtime=options.text("runtime", runtime),
            cancel_on_disconnect=options.flag("cancel_on_disconnect", cancel_on_disconnect),
            client_tools=specs,
        )
        if output_schema is not None:
            request.output_schema.CopyFrom(options.struct("output_schema", output_schema))
        if limits is not None:
            request.limits.CopyFrom(options.limits(limits))
        if cost_budget is not None:
            request.cost_budget.CopyFrom(options.cost_budget(cost_budget))
        if multitask_strategy != "":
            request.multitask_strategy = options.multitask(multitask_strategy)  # type: ignore[assignment]
        return request, runnable

    # ------------------------------------------------------------------ answering a paused turn

    def resolve_approval(
        self,
        session_id: str,
        interrupt_id: str,
        decision: str | int,
        *,
        edited_arguments: Mapping[str, Any] | None = None,
        reason: str = "",
        timeout_s: float | None = TURN_TIMEOUT_S,
    ) -> AsyncIterator[events_pb2.RuntimeEvent]:
        """Decide on a tool call waiting for approval ("approve", "edit" or "reject") and stream the resumed turn."""
        request = gateway_pb2.ResolveApprovalRequest(
            session_id=options.text("session_id", session_id),
            interrupt_id=options.text("interrupt_id", interrupt_id),
            decision=options.decision(decision),  # type: ignore[arg-type]
            reason=options.text("reason", reason),
        )
        if edited_arguments is not None:
            request.edited_arguments.CopyFrom(options.struct("edited_arguments", edited_arguments))
        return self._turn_stream("ResolveApproval", request, options.seconds("timeout_s", timeout_s, optional=True))

    def answer_interrupt(
        self,
        session_id: str,
        interrupt_id: str,
        *,
        user_input: str | None = None,
        tool_result: str | None = None,
        is_error: bool = False,
        timeout_s: float | None = TURN_TIMEOUT_S,
    ) -> AsyncIterator[events_pb2.RuntimeEvent]:
        """Send the user's input or a client tool's result (exactly one) and stream the resumed turn."""
        request = gateway_pb2.AnswerInterruptRequest(
            session_id=options.text("session_id", session_id), interrupt_id=options.text("interrupt_id", interrupt_id)
        )
        if (user_input is None) == (tool_result is None):
            raise ValueError("answer_interrupt: give exactly one of user_input and tool_result")
        if user_input is not None:
            request.user_input = options.text("user_input", user_input)
        else:
            content = options.text("tool_result", tool_result)
            request.tool_result.CopyFrom(
                turns_pb2.ClientToolResult(content=content, is_error=options.flag("is_error", is_error))
            )
        return self._turn_stream("AnswerInterrupt", request, options.seconds("timeout_s", timeout_s, optional=True))

    async def approve(self, pause: Pause, *, timeout_s: float | None = TURN_TIMEOUT_S) -> TurnResult:
        """Run the tool call as proposed; returns the resumed turn (it may pause again)."""
        self._expect(pause, "approve", "approval")
        stream = self.resolve_approval(pause.session_id, pause.interrupt_id, "approve", timeout_s=timeout_s)
        return await self._collect(stream, self._turn_tools.get(pause.turn_id, {}), timeout_s)

    async def edit(
        self, pause: Pause, arguments: Mapping[str, Any], *, timeout_s: float | None = TURN_TIMEOUT_S
    ) -> TurnResult:
        """Run the tool call with these arguments instead."""
        self._expect(pause, "edit", "approval")
        stream = self.resolve_approval(
            pause.session_id, pause.interrupt_id, "edit", edited_arguments=arguments, timeout_s=timeout_s
        )
        return await self._collect(stream, self._turn_tools.get(pause.turn_id, {}), timeout_s)

    async def reject(self, pause: Pause, reason: str = "", *, timeout_s: float | None = TURN_TIMEOUT_S) -> TurnResult:
        """Do not run the tool call; the model reads `reason`."""
        self._expect(pause, "reject", "approval")
        stream = self.resolve_approval(
            pause.session_id, pause.interrupt_id, "reject", reason=reason, timeout_s=timeout_s
        )
        return await self._collect(stream, self._turn_tools.get(pause.turn_id, {}), timeout_s)

    async def answer(self, pause: Pause, text: str, *, timeout_s: float | None = TURN_TIMEOUT_S) -> TurnResult:
        """Answer the question of a user_input pause."""
        self._expect(pause, "answer", "user_input")
        stream = self.answer_interrupt(pause.session_id, pause.interrupt_id, user_input=text, timeout_s=timeout_s)
        return await self._collect(stream, self._turn_tools.get(pause.turn_id, {}), timeout_s)

    async def send_tool_result(
        self, pause: Pause, content: str, *, is_error: bool = False, timeout_s: float | None = TURN_TIMEOUT_S
    ) -> TurnResult:
        """Send what a client tool returned (for tools declared as bare ToolSpecs)."""
        self._expect(pause, "send_tool_result", "client_tool")
        stream = self.answer_interrupt(
            pause.session_id, pause.interrupt_id, tool_result=content, is_error=is_error, timeout_s=timeout_s
        )
        return await self._collect(stream, self._turn_tools.get(pause.turn_id, {}), timeout_s)

    @staticmethod
    def _expect(pause: object, method: str, kind: str) -> None:
        if not isinstance(pause, Pause):
            raise TypeError(
                f"{method}: expected the Pause of a paused turn (TurnResult.pause), got {type(pause).__name__}"
            )
        if pause.kind != kind:
            raise ValueError(
                f"{method}: the turn waits for {pause.kind.replace('_', ' ')}, not for {kind.replace('_', ' ')}"
            )

    async def _collect(
        self,
        stream: AsyncIterator[events_pb2.RuntimeEvent],
        tools: Mapping[str, ClientTool],
        timeout_s: float | None,
    ) -> TurnResult:
        """Gather a turn's events; run the client tools it calls and follow it on until it ends or waits for a human."""
        result = TurnResult()
        while True:
            async for event in stream:
                result.events.append(event)
            pause = result.pause
            if pause is None or pause.kind != "client_tool" or pause.tool_name not in tools:
                break
            content, is_error = await tools[pause.tool_name].call(pause.arguments)
            stream = self.answer_interrupt(
                pause.session_id, pause.interrupt_id, tool_result=content, is_error=is_error, timeout_s=timeout_s
            )
        if result.paused and tools:  # approve() and friends run this turn's tools after it resumes
            self._turn_tools[result.turn_id] = dict(tools)
        else:
            self._turn_tools.pop(result.turn_id, None)
        return result

    # ------------------------------------------------------------------ streams

    async def _turn_stream(
        self, method: str, request: Any, timeout_s: float | None
    ) -> AsyncIterator[events_pb2.RuntimeEvent]:
        """A turn's events from SendMessage, ResolveApproval or AnswerInterrupt; resumed by seq if it breaks."""
        cursor, turn_id = 0, ""
        waiter = self.rate_limit.start()
        while True:
            self._check_open()
            try:
                call = getattr(self._stub, method)(request, timeout=timeout_s, metadata=self._metadata)
                async for response in call:
                    for event in response.events:
                        cursor, turn_id = event.seq, event.turn_id
                        yield event
                        if is_terminal(event):
                            return
                if not turn_id:
                    return
                break
            except asyncio.CancelledError:
                if self._closed_under():
                    raise ClientClosed("the GatewayClient was closed while the stream was open") from None
                if not turn_id or not self._cancelled_underneath():
                    raise
                break  # its channel was retired after a failover: follow the turn by seq
            except grpc.aio.AioRpcError as err:
                error = self._error(err)
                # Before the first event we cannot know whether the turn started: retrying could run it twice,
                # unless the gateway refused the call at admission (rate limits), before any handler ran.
                if not turn_id:
                    delay = waiter.delay(error, idempotent=False)
                    if delay is None:
                        raise error from err
                elif not isinstance(error, GatewayError) or not error.resumable:
                    raise error from err
                else:
                    break
            await asyncio.sleep(delay)
        async for event in self.subscribe(request.session_id, cursor):
            if event.turn_id == turn_id:
                yield event
                if is_terminal(event):
                    return

    async def subscribe(
        self, session_id: str, after_seq: int = 0, *, stop_when_idle: bool = False
    ) -> AsyncIterator[events_pb2.RuntimeEvent]:
        """Replay the session's events after `after_seq`, then follow live ones.

        Heartbeats are absorbed; a broken stream is resumed from the last seq seen, so each
        event is handed over once, in order.
        """
        options.text("session_id", session_id)
        cursor = options.count("after_seq", after_seq)
        options.flag("stop_when_idle", stop_when_idle)
        self._check_open()
        resumes = 0
        waiter = self.rate_limit.start()
        while True:
            request = gateway_pb2.SubscribeRequest(
                session_id=session_id, after_seq=cursor, stop_when_idle=stop_when_idle
            )
            stub = self._stub
            try:
                async for response in stub.Subscribe(request, metadata=self._metadata):
                    resumes = 0
                    waiter.reset()
                    for event in response.events:
                        if event.seq > cursor:
                            cursor = event.seq
                            yield event
                return
            except asyncio.CancelledError:
                if self._closed_under():
                    raise ClientClosed("the GatewayClient was closed while the stream was open") from None
                if not self._cancelled_underneath() or resumes >= self.max_resumes:
                    raise
                resumes += 1  # its channel was retired after a failover: resume from the cursor
                continue
            except grpc.aio.AioRpcError as err:
                error = self._error(err)
                delay = waiter.delay(error, idempotent=True)
                if delay is not None:  # over the tenant's rate or stream cap: come back when told
                    await asyncio.sleep(delay)
                    self._check_open()
                    continue
                if not isinstance(error, GatewayError) or not error.resumable or resumes >= self.max_resumes:
                    raise error from err
                resumes += 1
                await asyncio.sleep(min(0.1 * 2**resumes, 2.0))
                if error.code == grpc.StatusCode.UNAVAILABLE:
                    await self._failover(stub)
