"""A2A push notifications through the gateway, set with the real a2a-sdk client: the receiver gets the task
as the sdk's own push sender would post it, with the config's token, at each pause and at the end."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator

import grpc
import pytest
import pytest_asyncio
from a2a.client import Client, ClientCallContext, ClientConfig, ClientFactory, minimal_agent_card
from a2a.types import a2a_pb2
from a2a.utils.errors import InvalidParamsError
from google.protobuf import json_format

from tests.integration.conftest import TIMEOUT_S
from tests.integration.test_webhooks import FAST, Env, Receiver, webhook_suite

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def env() -> AsyncIterator[Env]:
    async with webhook_suite(**FAST) as found:
        yield found


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def client(env: Env) -> AsyncIterator[Client]:
    config = ClientConfig(
        streaming=False, supported_protocol_bindings=["GRPC"], grpc_channel_factory=grpc.aio.insecure_channel
    )
    made = ClientFactory(config).create(minimal_agent_card(env.suite.servers["gateway"].address, ["GRPC"]))
    yield made
    await made.close()


def deadline() -> ClientCallContext:
    return ClientCallContext(timeout=TIMEOUT_S)


def message(text: str, task_id: str = "", **metadata: str) -> a2a_pb2.SendMessageRequest:
    request = a2a_pb2.SendMessageRequest(
        message=a2a_pb2.Message(
            message_id=uuid.uuid4().hex, role=a2a_pb2.ROLE_USER, parts=[a2a_pb2.Part(text=text)], task_id=task_id
        )
    )
    request.metadata.update(metadata)
    return request


async def task_of(client: Client, request: a2a_pb2.SendMessageRequest) -> a2a_pb2.Task:
    (response,) = [r async for r in client.send_message(request, context=deadline())]
    return response.task


async def pushed(receiver: Receiver, path: str, count: int) -> list[tuple[dict[str, str], a2a_pb2.Task]]:
    """The POSTs to `path` once there are `count`, each read back as the a2a-sdk's StreamResponse JSON."""
    await receiver.wait(path, count)
    found = []
    for p, headers, body in receiver.seen:
        if p == path:
            update = json_format.ParseDict(json.loads(body), a2a_pb2.StreamResponse())
            found.append((headers, update.task))
    return found


async def test_a_push_config_sent_with_the_message_gets_the_finished_task(env: Env, client: Client) -> None:
    request = message("hello")
    push = request.configuration.task_push_notification_config
    push.url, push.token = env.receiver.url + "/a2a-send", "token-1"
    task = await task_of(client, request)
    assert task.status.state == a2a_pb2.TASK_STATE_COMPLETED
    ((headers, sent),) = await pushed(env.receiver, "/a2a-send", 1)
    assert headers["x-a2a-notification-token"] == "token-1"
    assert sent.id == task.id and sent.context_id == task.context_id
    assert sent.status.state == a2a_pb2.TASK_STATE_COMPLETED and sent.artifacts == task.artifacts


async def test_a_config_set_on_a_paused_task_pushes_the_pause_and_the_end(env: Env, client: Client) -> None:
    paused = await task_of(client, message("What is 6 * 7?", agent="careful"))
    assert paused.status.state == a2a_pb2.TASK_STATE_INPUT_REQUIRED
    config = a2a_pb2.TaskPushNotificationConfig(
        task_id=paused.id, id="mine", url=env.receiver.url + "/a2a-task", token="token-2"
    )
    config.authentication.scheme, config.authentication.credentials = "Bearer", "receiver-key"
    made = await client.create_task_push_notification_config(config, context=deadline())
    assert (made.id, made.task_id, made.url, made.token) == ("mine", paused.id, config.url, "")
    # The pause was logged before the config existed: it is pushed all the same.
    ((headers, first),) = await pushed(env.receiver, "/a2a-task", 1)
    assert first.status.state == a2a_pb2.TASK_STATE_INPUT_REQUIRED and "approve" in first.status.message.parts[0].text
    assert headers["x-a2a-notification-token"] == "token-2" and headers["authorization"] == "Bearer receiver-key"

    listed = await client.list_task_push_notification_configs(
        a2a_pb2.ListTaskPushNotificationConfigsRequest(task_id=paused.id), context=deadline()
    )
    assert [c.id for c in listed.configs] == ["mine"]
    got = await client.get_task_push_notification_config(
        a2a_pb2.GetTaskPushNotificationConfigRequest(task_id=paused.id, id="mine"), context=deadline()
    )
    assert got.url == config.url and got.authentication.scheme == "Bearer" and not got.authentication.credentials

    done = await task_of(client, message("approve", task_id=paused.id))
    assert done.status.state == a2a_pb2.TASK_STATE_COMPLETED
    tasks = [task for _, task in await pushed(env.receiver, "/a2a-task", 2)]
    assert [t.status.state for t in tasks] == [a2a_pb2.TASK_STATE_INPUT_REQUIRED, a2a_pb2.TASK_STATE_COMPLETED]
    assert tasks[1].artifacts == done.artifacts and tasks[1].id == paused.id

    await client.delete_task_push_notification_config(
        a2a_pb2.DeleteTaskPushNotificationConfigRequest(task_id=paused.id, id="mine"), context=deadline()
    )
    listed = await client.list_task_push_notification_configs(
        a2a_pb2.ListTaskPushNotificationConfigsRequest(task_id=paused.id), context=deadline()
    )
    assert list(listed.configs) == []


async def test_a_push_url_the_server_may_not_reach_is_invalid_params(client: Client) -> None:
    async with webhook_suite() as strict:  # private targets refused
        config = ClientConfig(
            streaming=False, supported_protocol_bindings=["GRPC"], grpc_channel_factory=grpc.aio.insecure_channel
        )
        other = ClientFactory(config).create(minimal_agent_card(strict.suite.servers["gateway"].address, ["GRPC"]))
        try:
            request = message("hello")
            request.configuration.task_push_notification_config.url = "http://169.254.169.254/hook"
            with pytest.raises(InvalidParamsError) as caught:
                await task_of(other, request)
            assert "link-local" in str(caught.value)
        finally:
            await other.close()
