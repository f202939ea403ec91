"""Session search through the gateway with the real services: labels set at creation and updated,
ListSessions filtered by labels, status, agent and time, paged; the Python client and the CLI on top.
(Every store and every filter's edge: tests/contract/test_session_search_contract.py.)"""

from __future__ import annotations

import datetime
import json
import uuid
from typing import Any

import pytest
from google.protobuf import field_mask_pb2

from cogmesh.client import GatewayClient
from cogmesh.common.v1 import resources_pb2
from cogmesh.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from services.suite import cli
from services.suite.inprocess import Suite
from tests.integration.conftest import TIMEOUT_S, send

pytestmark = pytest.mark.asyncio(loop_scope="module")

IDLE, RUNNING = resources_pb2.SESSION_STATUS_IDLE, resources_pb2.SESSION_STATUS_RUNNING


async def make(gateway: gateway_pb2_grpc.GatewayServiceStub, **labels: str) -> resources_pb2.Session:
    reply = await gateway.CreateSession(gateway_pb2.CreateSessionRequest(labels=labels), timeout=TIMEOUT_S)
    return reply.session  # type: ignore[no-any-return]


async def every_page(gateway: gateway_pb2_grpc.GatewayServiceStub, **fields: Any) -> tuple[list[str], int]:
    """The ids ListSessions lists, following next_page_token; and how many pages."""
    ids: list[str] = []
    token, pages = "", 0
    while True:
        request = gateway_pb2.ListSessionsRequest(page_token=token, **fields)
        reply = await gateway.ListSessions(request, timeout=TIMEOUT_S)
        ids += [s.session_id for s in reply.sessions]
        pages += 1
        token = reply.next_page_token
        if not token:
            return ids, pages


async def test_labels_filter_and_update_through_the_gateway(gateway: gateway_pb2_grpc.GatewayServiceStub) -> None:
    run = uuid.uuid4().hex[:8]
    a1 = await make(gateway, run=run, team="a")
    await make(gateway, run=run, team="b")
    a2 = await make(gateway, run=run, team="a", env="prod")
    assert dict(a2.labels) == {"run": run, "team": "a", "env": "prod"} and a2.status == IDLE
    ids, pages = await every_page(gateway, page_size=1, label_filter={"run": run, "team": "a"})
    assert ids == [a2.session_id, a1.session_id] and pages >= 2
    # One key set, one removed; the others stay.
    update = gateway_pb2.UpdateSessionRequest(
        session_id=a1.session_id,
        labels={"env": "prod"},
        update_mask=field_mask_pb2.FieldMask(paths=["labels.env", "labels.team"]),
    )
    updated = (await gateway.UpdateSession(update, timeout=TIMEOUT_S)).session
    assert dict(updated.labels) == {"run": run, "env": "prod"}
    got = (await gateway.GetSession(gateway_pb2.GetSessionRequest(session_id=a1.session_id), timeout=TIMEOUT_S)).session
    assert dict(got.labels) == {"run": run, "env": "prod"}
    assert (await every_page(gateway, label_filter={"run": run, "env": "prod"}))[0] == [a2.session_id, a1.session_id]
    assert (await every_page(gateway, label_filter={"run": run, "team": "a"}))[0] == [a2.session_id]


async def test_status_agent_and_time_filters_through_the_gateway(gateway: gateway_pb2_grpc.GatewayServiceStub) -> None:
    run = uuid.uuid4().hex[:8]
    first = await make(gateway, run=run)
    second = await make(gateway, run=run)
    await send(gateway, second.session_id, "What is 2 + 2?")  # a completed turn leaves it idle, and active later
    mine = {"run": run}
    assert (await every_page(gateway, label_filter=mine, statuses=[IDLE]))[0] == [second.session_id, first.session_id]
    assert (await every_page(gateway, label_filter=mine, statuses=[RUNNING]))[0] == []
    assert (await every_page(gateway, label_filter=mine, agent="default"))[0] == [second.session_id, first.session_id]
    assert (await every_page(gateway, label_filter=mine, agent="planner"))[0] == []
    after_first = (await every_page(gateway, label_filter=mine, created_after=second.create_time))[0]
    assert after_first == [second.session_id]
    got = (await gateway.GetSession(gateway_pb2.GetSessionRequest(session_id=second.session_id))).session
    assert got.message_count > 0 and got.update_time.ToNanoseconds() > second.update_time.ToNanoseconds()
    assert (await every_page(gateway, label_filter=mine, active_after=got.update_time))[0] == [second.session_id]
    assert (await every_page(gateway, label_filter=mine, active_before=got.update_time))[0] == [first.session_id]


def printed(capsys: pytest.CaptureFixture[str]) -> Any:
    """The JSON document the CLI printed: the in-process suite's log lines share its stdout."""
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert lines, "the CLI printed no JSON"
    return json.loads(lines[-1])


async def test_the_python_client_and_the_cli_search_sessions(suite: Suite, capsys: pytest.CaptureFixture[str]) -> None:
    run = uuid.uuid4().hex[:8]
    async with GatewayClient(suite.gateway_address) as client:
        made = await client.create_session(labels={"run": run, "team": "x"})
        await client.create_session(labels={"run": run})
        updated = await client.update_labels(made.session_id, {"tier": "gold", "team": None})
        assert dict(updated.labels) == {"run": run, "tier": "gold"}
        hour_ago = datetime.datetime.now(datetime.UTC) - datetime.timedelta(hours=1)
        page = await client.list_sessions(
            labels={"run": run, "tier": "gold"}, statuses=["idle"], agent="default", created_after=hour_ago
        )
        assert [s.session_id for s in page.sessions] == [made.session_id]
        with pytest.raises(ValueError, match="timezone-aware"):
            await client.list_sessions(created_after=datetime.datetime(2030, 1, 1))
        with pytest.raises(ValueError, match="statuses\\[0\\]"):
            await client.list_sessions(statuses=["asleep"])
    gateway = ["--gateway", suite.gateway_address, "--json"]
    args = cli.parse(["sessions", "label", made.session_id, "--set", "cli=yes", "--remove", "tier", *gateway])
    assert await args.run(args) == 0
    assert printed(capsys)["labels"] == {"run": run, "cli": "yes"}
    argv = ["sessions", "list", "--label", f"run={run}", "--label", "cli=yes", "--status", "idle"]
    args = cli.parse([*argv, "--created-after", "1h", *gateway])
    assert await args.run(args) == 0
    assert [s["session_id"] for s in printed(capsys)["sessions"]] == [made.session_id]
