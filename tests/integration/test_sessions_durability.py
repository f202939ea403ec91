"""Durability with real processes: `python -m services.sessions` on Redis.

- kill -9 of the sessions service and a restart lose nothing (Redis holds it all);
- two replicas appending to one session concurrently keep one order, and only one
  turn at a time gets the lease whichever replica it asks;
- Redis dying mid-call (kill -9) gives UNAVAILABLE with retryable=true, never a hang
  and never a partial write: after Redis restarts (AOF, fsync always) every batch is
  whole, and a failed batch retried with its request_id is stored exactly once.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from cogmesh.common.v1 import events_pb2, messages_pb2
from cogmesh.sessions.v1 import sessions_pb2 as S
from cogmesh.sessions.v1 import sessions_pb2_grpc
from services.kit.protos import dict_to_struct
from tests.integration.conftest import status_details
from tests.support.redis_server import RedisServer, free_port

ROOT = Path(__file__).resolve().parents[2]
TENANT = "acme"
CALL_S = 5.0  # no single call of these tests may take longer
START_S = 20.0


class SessionsProcess:
    """One sessions-service replica as its own OS process."""

    def __init__(self, redis_url: str, prefix: str, port: int | None = None):
        self.port = port or free_port()
        self.env = os.environ | {
            "COGMESH_REDIS_URL": redis_url,
            "COGMESH_REDIS_KEY_PREFIX": prefix,
            "COGMESH_REDIS_TIMEOUT_S": "0.5",
            "COGMESH_LOG_LEVEL": "warning",
        }
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self) -> SessionsProcess:
        self.process = subprocess.Popen(  # noqa: ASYNC220 - fork/exec returns at once
            [sys.executable, "-m", "services.sessions", "--listen", self.address],
            cwd=ROOT,
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + START_S
        async with grpc.aio.insecure_channel(self.address) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            while True:
                if self.process.poll() is not None:
                    raise RuntimeError(f"sessions exited: {self.process.stderr.read().decode()[-2000:]}")  # type: ignore[union-attr]
                with contextlib.suppress(grpc.aio.AioRpcError):
                    reply = await health.Check(health_pb2.HealthCheckRequest(), timeout=0.5)
                    if reply.status == health_pb2.HealthCheckResponse.SERVING:
                        return self
                if time.monotonic() > deadline:
                    raise RuntimeError("sessions service did not become SERVING")
                await asyncio.sleep(0.05)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()

    def close(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process is not None and self.process.stderr is not None:
            self.process.stderr.close()


@pytest.fixture
def processes() -> Iterator[list[SessionsProcess]]:
    """Every process a test starts is registered here and stopped afterwards, whatever happens."""
    started: list[SessionsProcess] = []
    yield started
    for process in started:
        process.close()


@contextlib.asynccontextmanager
async def client(address: str) -> AsyncIterator[Any]:
    async with grpc.aio.insecure_channel(address) as channel:
        yield sessions_pb2_grpc.SessionsServiceStub(channel)


def message(text: str) -> messages_pb2.Message:
    return messages_pb2.Message(role=messages_pb2.ROLE_ASSISTANT, content=text)


def contents(reply: Any) -> list[str]:
    return [m.content for m in reply.messages]


async def all_messages(stub: Any, session_id: str) -> list[str]:
    texts: list[str] = []
    token = ""
    while True:
        reply = await stub.ListMessages(
            S.ListMessagesRequest(tenant_id=TENANT, session_id=session_id, page_size=1000, page_token=token),
            timeout=CALL_S,
        )
        texts += contents(reply)
        token = reply.next_page_token
        if not token:
            return texts


async def test_killing_and_restarting_the_service_loses_nothing(
    redis_url: str, redis_prefix: str, processes: list[SessionsProcess]
) -> None:
    replica = SessionsProcess(redis_url, redis_prefix)
    processes.append(replica)
    await replica.start()
    async with client(replica.address) as stub:
        created = await stub.CreateSession(
            S.CreateSessionRequest(
                tenant_id=TENANT, user_id="u1", topic_id="t1", agent="default", role_id="coach", active_skill_ids=["a"]
            ),
            timeout=CALL_S,
        )
        sid = created.session.session_id
        lease = await stub.AcquireTurnLease(
            S.AcquireTurnLeaseRequest(tenant_id=TENANT, session_id=sid, turn_id="turn-1"), timeout=CALL_S
        )
        token = lease.lease_token
        await stub.AppendMessages(
            S.AppendMessagesRequest(
                tenant_id=TENANT, session_id=sid, lease_token=token, messages=[message(f"m{i}") for i in range(4)]
            ),
            timeout=CALL_S,
        )
        await stub.UpdateSummary(
            S.UpdateSummaryRequest(tenant_id=TENANT, session_id=sid, text="so far", covered_message_count=2),
            timeout=CALL_S,
        )
        await stub.SaveGoal(
            S.SaveGoalRequest(tenant_id=TENANT, session_id=sid, goal=S.Goal(goal_id="g", text="Open a deposit")),
            timeout=CALL_S,
        )
        await stub.SetPhase(
            S.SetPhaseRequest(tenant_id=TENANT, session_id=sid, phase=S.PhaseState(phase="discovery")),
            timeout=CALL_S,
        )
        await stub.WriteCheckpoint(
            S.WriteCheckpointRequest(
                tenant_id=TENANT,
                session_id=sid,
                lease_token=token,
                checkpoint=S.Checkpoint(
                    interrupt_id="int-1",
                    turn_id="turn-1",
                    approval=events_pb2.ApprovalRequired(action_name="transfer", arguments=dict_to_struct({"x": 1})),
                    payload=b"snapshot",
                ),
            ),
            timeout=CALL_S,
        )

    replica.kill()  # kill -9: no graceful shutdown, nothing flushed by the service
    restarted = SessionsProcess(redis_url, redis_prefix, port=replica.port)
    processes.append(restarted)
    await restarted.start()
    async with client(restarted.address) as stub:
        got = await stub.GetSession(S.GetSessionRequest(tenant_id=TENANT, session_id=sid), timeout=CALL_S)
        assert (got.session.role_id, list(got.session.active_skill_ids)) == ("coach", ["a"])
        assert got.session.message_count == 4 and got.session.active_turn_id == "turn-1"
        assert list(got.state.pending_interrupt_ids) == ["int-1"]
        found = await stub.LookupSession(S.LookupSessionRequest(tenant_id=TENANT, user_id="u1", topic_id="t1"))
        assert found.session.session_id == sid
        payload = await stub.GetRehydrationPayload(
            S.GetRehydrationPayloadRequest(tenant_id=TENANT, session_id=sid), timeout=CALL_S
        )
        assert (payload.summary.text, payload.goal.text, payload.phase.phase) == (
            "so far",
            "Open a deposit",
            "discovery",
        )
        assert contents(S.ListMessagesResponse(messages=payload.last_messages)) == ["m0", "m1", "m2", "m3"]
        # The lease survived too: its holder keeps writing with the same token, others are still fenced out.
        await stub.AppendMessages(
            S.AppendMessagesRequest(tenant_id=TENANT, session_id=sid, lease_token=token, messages=[message("m4")]),
            timeout=CALL_S,
        )
        with pytest.raises(grpc.aio.AioRpcError) as busy:
            await stub.AcquireTurnLease(
                S.AcquireTurnLeaseRequest(tenant_id=TENANT, session_id=sid, turn_id="turn-2"), timeout=CALL_S
            )
        assert busy.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        await stub.DecideCheckpoint(
            S.DecideCheckpointRequest(
                tenant_id=TENANT,
                session_id=sid,
                interrupt_id="int-1",
                decision=S.CheckpointDecision(approval=events_pb2.APPROVAL_DECISION_APPROVE),
            ),
            timeout=CALL_S,
        )
        resumed = await stub.ConsumeCheckpoint(
            S.ConsumeCheckpointRequest(tenant_id=TENANT, session_id=sid, interrupt_id="int-1", lease_token=token),
            timeout=CALL_S,
        )
        assert resumed.checkpoint.payload == b"snapshot" and resumed.checkpoint.approval.action_name == "transfer"
        assert await all_messages(stub, sid) == ["m0", "m1", "m2", "m3", "m4"]


async def test_two_replicas_keep_one_order_and_one_turn(
    redis_url: str, redis_prefix: str, processes: list[SessionsProcess]
) -> None:
    a, b = SessionsProcess(redis_url, redis_prefix), SessionsProcess(redis_url, redis_prefix)
    processes += [a, b]
    await asyncio.gather(a.start(), b.start())
    async with client(a.address) as stub_a, client(b.address) as stub_b:
        sid = (
            await stub_a.CreateSession(S.CreateSessionRequest(tenant_id=TENANT, agent="default"), timeout=CALL_S)
        ).session.session_id

        # Twenty turns race for the lease through both replicas: exactly one wins.
        async def race(i: int) -> tuple[bool, str]:
            stub = stub_a if i % 2 else stub_b
            try:
                reply = await stub.AcquireTurnLease(
                    S.AcquireTurnLeaseRequest(tenant_id=TENANT, session_id=sid, turn_id=f"turn-{i}"), timeout=CALL_S
                )
                return True, str(reply.lease_token)
            except grpc.aio.AioRpcError as err:
                assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
                info, _ = status_details(err)
                assert info is not None
                return False, info.metadata["turn_id"]

        results = await asyncio.gather(*(race(i) for i in range(20)))
        winners = [i for i, (won, _) in enumerate(results) if won]
        assert len(winners) == 1
        assert {holder for won, holder in results if not won} == {f"turn-{winners[0]}"}
        token = int(results[winners[0]][1])

        # Forty batches of five, half through each replica, all at once.
        async def append(batch: int) -> None:
            stub = stub_a if batch % 2 else stub_b
            await stub.AppendMessages(
                S.AppendMessagesRequest(
                    tenant_id=TENANT,
                    session_id=sid,
                    lease_token=token,
                    messages=[message(f"{batch}:{i}") for i in range(5)],
                ),
                timeout=CALL_S,
            )

        await asyncio.gather(*(append(batch) for batch in range(40)))
        seen_a, seen_b = await all_messages(stub_a, sid), await all_messages(stub_b, sid)
        assert seen_a == seen_b, "both replicas read one order"
        assert len(seen_a) == 200
        chunks = [seen_a[i : i + 5] for i in range(0, 200, 5)]
        assert all(len({m.split(":")[0] for m in chunk}) == 1 for chunk in chunks), "a batch was interleaved"
        assert sorted(chunk[0].split(":")[0] for chunk in chunks) == sorted(str(b) for b in range(40))

        # A turn queued on replica B starts as soon as replica A releases the lease.
        async def queued_on_b() -> Any:
            return await stub_b.AcquireTurnLease(
                S.AcquireTurnLeaseRequest(
                    tenant_id=TENANT, session_id=sid, turn_id="queued", strategy=S.MULTITASK_STRATEGY_ENQUEUE
                ),
                timeout=CALL_S,
            )

        waiting = asyncio.create_task(queued_on_b())
        await asyncio.sleep(0.3)
        assert not waiting.done()
        released_at = time.monotonic()
        await stub_a.ReleaseTurnLease(
            S.ReleaseTurnLeaseRequest(tenant_id=TENANT, session_id=sid, lease_token=token), timeout=CALL_S
        )
        granted = await asyncio.wait_for(waiting, CALL_S)
        assert granted.lease_token == token + 1
        assert time.monotonic() - released_at < 1.0


async def test_redis_dying_mid_call_is_unavailable_and_never_a_partial_or_double_write(
    processes: list[SessionsProcess], tmp_path: Path
) -> None:
    with RedisServer(directory=tmp_path, appendonly=True) as redis_server:
        replica = SessionsProcess(redis_server.url, "durability:")
        processes.append(replica)
        await replica.start()
        async with client(replica.address) as stub:
            sid = (
                await stub.CreateSession(S.CreateSessionRequest(tenant_id=TENANT, agent="default"), timeout=CALL_S)
            ).session.session_id
            token = (
                await stub.AcquireTurnLease(
                    S.AcquireTurnLeaseRequest(tenant_id=TENANT, session_id=sid, turn_id="turn-1"), timeout=CALL_S
                )
            ).lease_token
            acknowledged: set[str] = set()
            failures: list[grpc.StatusCode] = []
            stop = asyncio.Event()
            # A retry is recognised among the session's last REMEMBERED_APPENDS appends: no writer starts a new
            # batch while another one's failed batch waits for its retry (a lease holder writes one append at a
            # time; here, concurrent writers must not push an unlucky retrier's id out of that window).
            retrying: set[str] = set()
            calm = asyncio.Event()
            calm.set()

            async def writer(name: str) -> None:
                """Appends batch after batch; a failed batch is retried with its request_id until stored."""
                n = 0
                while not stop.is_set():
                    await calm.wait()
                    batch = f"{name}-{n}"
                    while True:
                        try:
                            await stub.AppendMessages(
                                S.AppendMessagesRequest(
                                    tenant_id=TENANT,
                                    session_id=sid,
                                    lease_token=token,
                                    request_id=batch,
                                    messages=[message(f"{batch}/{i}") for i in range(3)],
                                ),
                                timeout=CALL_S,
                            )
                            acknowledged.add(batch)
                            retrying.discard(batch)
                            if not retrying:
                                calm.set()
                            break
                        except grpc.aio.AioRpcError as err:
                            failures.append(err.code())
                            info, _ = status_details(err)
                            assert err.code() == grpc.StatusCode.UNAVAILABLE, err.details()
                            assert info is not None and info.metadata["retryable"] == "true"
                            retrying.add(batch)
                            calm.clear()
                            await asyncio.sleep(0.05)
                    n += 1

            writers = [asyncio.create_task(writer(f"w{i}")) for i in range(4)]
            await asyncio.sleep(0.5)
            redis_server.kill()  # in the middle of the writers' calls
            await asyncio.sleep(0.5)
            redis_server.start()  # replays its append-only file
            await asyncio.sleep(0.5)
            stop.set()
            await asyncio.wait_for(asyncio.gather(*writers), CALL_S * 2)
            assert failures, "some calls must have met the dead Redis"

            stored = await all_messages(stub, sid)
            batches = [stored[i : i + 3] for i in range(0, len(stored), 3)]
            assert len(stored) % 3 == 0
            for chunk in batches:
                name = chunk[0].split("/")[0]
                assert chunk == [f"{name}/{i}" for i in range(3)], f"a partial or interleaved batch: {chunk}"
            kept = [chunk[0].split("/")[0] for chunk in batches]
            assert len(set(kept)) == len(kept), "a retried batch landed twice"
            assert set(kept) == acknowledged, f"lost: {sorted(acknowledged - set(kept))}"


async def test_a_retried_append_lands_exactly_once_across_a_redis_crash(
    processes: list[SessionsProcess], tmp_path: Path
) -> None:
    with RedisServer(directory=tmp_path, appendonly=True) as redis_server:
        replica = SessionsProcess(redis_server.url, "exactly-once:")
        processes.append(replica)
        await replica.start()
        async with client(replica.address) as stub:
            sid = (
                await stub.CreateSession(S.CreateSessionRequest(tenant_id=TENANT, agent="default"), timeout=CALL_S)
            ).session.session_id
            token = (
                await stub.AcquireTurnLease(
                    S.AcquireTurnLeaseRequest(tenant_id=TENANT, session_id=sid, turn_id="turn-1"), timeout=CALL_S
                )
            ).lease_token

            async def append_until_stored(batch: int) -> int:
                """What a turn does: retry a retryable failure with the same request_id."""
                attempts = 0
                while True:
                    attempts += 1
                    try:
                        await stub.AppendMessages(
                            S.AppendMessagesRequest(
                                tenant_id=TENANT,
                                session_id=sid,
                                lease_token=token,
                                request_id=f"batch-{batch}",
                                messages=[message(f"{batch}/{i}") for i in range(2)],
                            ),
                            timeout=CALL_S,
                        )
                        return attempts
                    except grpc.aio.AioRpcError as err:
                        assert err.code() == grpc.StatusCode.UNAVAILABLE, err.details()
                        await asyncio.sleep(0.1)

            async def crash_and_recover() -> None:
                await asyncio.sleep(0.3)
                redis_server.kill()
                await asyncio.sleep(0.6)
                redis_server.start()

            async def turn() -> int:
                retried = 0
                for batch in range(60):
                    retried += await append_until_stored(batch) - 1
                    await asyncio.sleep(0.02)
                return retried

            retried, _ = await asyncio.wait_for(asyncio.gather(turn(), crash_and_recover()), 30)
            assert retried > 0, "the crash must have failed some appends"
            stored = await all_messages(stub, sid)
            assert stored == [f"{batch}/{i}" for batch in range(60) for i in range(2)]
