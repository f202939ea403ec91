"""A Redis Cluster primary killed (SIGKILL) while turns run: what clients see, how long until
turns succeed again, and which acknowledged writes the failover lost.

The suite runs as processes on a private 6-node cluster (3 primaries with a replica each,
`cluster-node-timeout` 1.5 s, `appendonly yes` + `appendfsync everysec`: replication is
asynchronous). Clients keep running short turns (one calculator call: four stored
messages and about ten events each) on sessions spread over the three shards, and a
writer in this process appends messages straight through the session store as fast as
it can, each append retried with its request id until it is acknowledged: one writer as
configured by default, one with COGMESH_REDIS_WAIT_REPLICAS=1 (WAIT 1 after each write).
Then the primary of one session's slot is killed; the cluster promotes its replica.

Measured per run and printed (`-s`): the turns' outcomes and errors, the time from the
kill to the cluster's failover and to the first turn that succeeds on the killed shard,
and what was lost: acknowledged events missing from the logs (or replaced by others at
the same seq), acknowledged messages missing from the sessions. Asserted: no turn hangs,
every failure is a clear retryable one, turns succeed again within RECOVERY_BOUND_S, and
nothing is corrupted (each log reads back gap-free). Loss is measured, not asserted:
RELIABILITY.md has the figures and what `COGMESH_REDIS_WAIT_REPLICAS` does about them.

The quick variant kills one primary; COGMESH_RELIABILITY_FULL=1 repeats it RUNS_FULL
times, bringing each killed node back as a replica before the next run.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest

from cogmesh.common.v1 import events_pb2
from cogmesh.gateway.v1 import gateway_pb2
from services.kit.redis_pool import ReplicaWait
from services.lib.redis_keys import SessionKeys
from services.sessions.model import NewSession, StoreUnavailable, Strategy
from services.sessions.redis_store import RedisSessionStore
from tests.reliability.cluster import Cluster, base_env
from tests.reliability.conftest import FULL
from tests.reliability.helpers import TENANT, Event, calc_request, gateway, kind, messages, new_session
from tests.support.redis_cluster import RedisClusterServers, wait_until

NODE_TIMEOUT_MS = 1500
PREFIX = "cogmesh-failover:"
SESSIONS_PER_SHARD = 2
RUNS_FULL = 5
TURN_TIMEOUT_S = 60.0  # a turn that takes longer than this counts as a hang
RECOVERY_BOUND_S = 45.0  # kill -> a turn succeeds on the killed shard: node timeout + election + retries, loaded
WARM_TURNS = 2  # successful turns per session before the kill
CALC_MESSAGES = 4  # user, assistant tool call, tool result, answer
WRITER_SESSIONS = 12  # sessions each direct writer appends to at once


@dataclass
class Turn:
    session_id: str
    started: float
    ended: float
    outcome: str  # "final", "error:<kind>" (an error event ended it) or "rpc:<code>" (the call failed)
    detail: str
    retryable: bool
    events: list[Event] = field(default_factory=list)


@dataclass
class Failover:
    servers: RedisClusterServers
    cluster: Cluster
    shard_of: dict[str, int]  # session -> port of the primary serving it when the run starts
    prefix: str = PREFIX

    def primary_port(self, session_id: str) -> int:
        return self.servers.primary_of(SessionKeys(self.prefix, session_id).key("s")).port


@pytest.fixture(scope="module")
def failover(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Failover]:
    tmp = tmp_path_factory.mktemp("redis-cluster-failover")
    servers = RedisClusterServers(node_timeout_ms=NODE_TIMEOUT_MS, appendfsync="everysec").start()
    env = base_env(servers.url, PREFIX, call_timeout_s="3", turn_lease_ttl_s="10", turn_lease_renew_s="2")
    cluster = Cluster(env, tmp)
    try:
        cluster.start_all()
        yield Failover(servers, cluster, {})
    finally:
        cluster.stop()
        servers.close()


async def sessions_on_every_shard(failover: Failover) -> list[str]:
    """New sessions until each primary serves SESSIONS_PER_SHARD of them."""
    chosen: dict[int, list[str]] = {s.port: [] for s in failover.servers.primaries()}
    for _ in range(200):
        if all(len(ids) >= SESSIONS_PER_SHARD for ids in chosen.values()):
            break
        session_id = await new_session(failover.cluster, agent="default")
        ids = chosen[failover.primary_port(session_id)]
        if len(ids) < SESSIONS_PER_SHARD:
            ids.append(session_id)
    assert all(len(ids) >= SESSIONS_PER_SHARD for ids in chosen.values()), chosen
    failover.shard_of = {sid: port for port, ids in chosen.items() for sid in ids}
    return list(failover.shard_of)


async def keep_turning(failover: Failover, session_id: str, stop: asyncio.Event, turns: list[Turn]) -> None:
    """What a client does: send a turn, and after a retryable failure send it again a moment later."""
    async with gateway(failover.cluster) as stub:
        while not stop.is_set():
            started = time.monotonic()
            events: list[Event] = []
            try:
                call = stub.SendMessage(calc_request(session_id), timeout=TURN_TIMEOUT_S)
                async for response in call:
                    events.extend(response.events)
                last = events[-1]
                outcome = "final" if kind(last) == "final" else f"error:{events_pb2.ErrorKind.Name(last.error.kind)}"
                detail, retryable = last.error.message, last.error.retryable
            except grpc.aio.AioRpcError as exc:
                outcome, detail = f"rpc:{exc.code().name}", exc.details() or ""
                retryable = exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.ABORTED)
            turn = Turn(session_id, started, time.monotonic(), outcome, detail, retryable, events)
            turns.append(turn)
            if turn.outcome != "final":
                await asyncio.sleep(0.2)  # a client's pause before it sends again


@dataclass
class Writer:
    """Appends straight through the session store, each append retried with its id until acknowledged."""

    store: RedisSessionStore
    sessions: dict[str, int]  # session -> lease token
    acknowledged: dict[str, list[bytes]] = field(default_factory=dict)
    failures: Counter[str] = field(default_factory=Counter)

    @property
    def count(self) -> int:
        return sum(len(sent) for sent in self.acknowledged.values())

    async def run(self, session_id: str, stop: asyncio.Event) -> None:
        sent = self.acknowledged.setdefault(session_id, [])
        while not stop.is_set():
            payload = f"{session_id}:{len(sent)}".encode()
            while True:  # the same request id until it is acknowledged: never stored twice
                try:
                    token = self.sessions[session_id]
                    await self.store.append_messages(TENANT, session_id, [payload], token, payload.decode())
                    break
                except StoreUnavailable as exc:
                    self.failures[exc.detail.split(":")[0][:60]] += 1
                    if stop.is_set():
                        return
                    await asyncio.sleep(0.05)
            sent.append(payload)

    async def lost(self) -> int:
        missing = 0
        for session_id, sent in self.acknowledged.items():
            stored = set((await self.store.list_messages(TENANT, session_id, 0, 1_000_000)).items)
            missing += sum(1 for payload in sent if payload not in stored)
        return missing


async def start_writer(failover: Failover, wait: ReplicaWait | None) -> Writer:
    """A writer on WRITER_SESSIONS sessions of its own, spread over the three shards."""
    store = RedisSessionStore.from_url(failover.servers.url, PREFIX, 0.0, 2.0, wait=wait)
    tokens: dict[str, int] = {}
    while len({failover.primary_port(s) for s in tokens}) < 3 or len(tokens) < WRITER_SESSIONS:
        record, _ = await store.create(TENANT, NewSession("", "", "default"))
        grant = await store.try_acquire(TENANT, record.session_id, "writer", 3600, Strategy.REJECT)
        tokens[record.session_id] = grant.token  # type: ignore[union-attr]
    return Writer(store, tokens)


async def read_back(failover: Failover, session_id: str) -> list[Event]:
    async with gateway(failover.cluster) as stub:
        request = gateway_pb2.SubscribeRequest(session_id=session_id, stop_when_idle=True)
        call = stub.Subscribe(request, timeout=30)
        return [event async for response in call for event in response.events]


def lost_events(turns: list[Turn], log: list[Event]) -> tuple[int, int]:
    """Acknowledged events (seen by a client) now missing from the log, and those replaced at their seq."""
    held = {event.seq: (event.turn_id, kind(event)) for event in log}
    missing = replaced = 0
    for turn in turns:
        for event in turn.events:
            found = held.get(event.seq)
            if found is None:
                missing += 1
            elif found != (event.turn_id, kind(event)):
                replaced += 1
    return missing, replaced


def clear(turn: Turn) -> bool:
    """A failure a client can act on: retryable and saying what was away, or "busy" naming the turn that runs.

    A SendMessage whose own read of the event log failed answers UNAVAILABLE while its turn
    goes on; the client's resend then meets that turn's lease (FAILED_PRECONDITION) until it ends.
    """
    text = turn.detail.lower()
    if turn.outcome == "rpc:FAILED_PRECONDITION":
        return "is busy with turn" in text
    return turn.retryable and any(word in text for word in ("redis", "unavailable", "store", "lease", "event log"))


async def one_run(failover: Failover, run: int) -> dict[str, object]:
    session_ids = await sessions_on_every_shard(failover)
    writers = {"plain": await start_writer(failover, None), "wait1": await start_writer(failover, ReplicaWait(1, 1000))}
    turns: list[Turn] = []
    stop = asyncio.Event()
    tasks = [asyncio.create_task(keep_turning(failover, sid, stop, turns)) for sid in session_ids]
    tasks += [asyncio.create_task(w.run(sid, stop)) for w in writers.values() for sid in w.sessions]
    started = time.monotonic()
    try:

        def finals_since(since: float, sid: str) -> list[Turn]:
            return [t for t in turns if t.session_id == sid and t.outcome == "final" and t.started >= since]

        async def until(condition: Callable[[], bool], bound_s: float) -> None:
            async with asyncio.timeout(bound_s):
                while not condition():  # noqa: ASYNC110 - the condition is the clients' records, no event to wait on
                    await asyncio.sleep(0.05)

        await until(lambda: all(len(finals_since(0, s)) >= WARM_TURNS for s in session_ids), 120)
        victim_port = failover.shard_of[session_ids[0]]
        victim = next(s for s in failover.servers.servers if s.port == victim_port)
        on_victim = [s for s, port in failover.shard_of.items() if port == victim_port]
        rates = {name: w.count / (time.monotonic() - started) for name, w in writers.items()}
        killed_at = time.monotonic()
        victim.kill()
        await until(lambda: all(finals_since(killed_at, s) for s in session_ids), RECOVERY_BOUND_S)
        recovered_s = max(min(t.ended for t in finals_since(killed_at, s)) for s in on_victim) - killed_at
        failover_s = time.monotonic() - killed_at + await asyncio.to_thread(failover.servers.wait_failover, victim, 60)
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks), TURN_TIMEOUT_S + 10)
    finally:
        stop.set()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    missing_events = replaced_events = missing_messages = 0
    for session_id in session_ids:
        log = await read_back(failover, session_id)
        assert [e.seq for e in log] == list(range(1, len(log) + 1)), f"gaps or repeats in {session_id}'s log"
        own = [t for t in turns if t.session_id == session_id]
        missing, replaced = lost_events(own, log)
        missing_events, replaced_events = missing_events + missing, replaced_events + replaced
        stored = len(await messages(failover.cluster, session_id))
        missing_messages += max(0, CALC_MESSAGES * sum(1 for t in own if t.outcome == "final") - stored)
    lost = {name: await w.lost() for name, w in writers.items()}
    for w in writers.values():
        await w.store.close()

    failed = [t for t in turns if t.outcome != "final"]
    summary: dict[str, object] = {
        "run": run,
        "turns": len(turns),
        "outcomes": dict(Counter(t.outcome for t in turns)),
        "errors": sorted({f"{t.outcome}: {t.detail[:120]}" for t in failed}),
        "failover_s": round(failover_s, 2),
        "recovered_s": round(recovered_s, 2),
        "acknowledged_events": sum(len(t.events) for t in turns),
        "missing_events": missing_events,
        "replaced_events": replaced_events,
        "missing_messages": missing_messages,
        "writers": {
            name: {
                "acknowledged": w.count,
                "lost": lost[name],
                "appends_per_s_before_kill": round(rates[name], 1),
                "failures": dict(w.failures),
            }
            for name, w in writers.items()
        },
    }
    print(json.dumps(summary))
    assert all(t.outcome != "rpc:DEADLINE_EXCEEDED" for t in turns), "a turn hung"
    unclear = [t for t in failed if not clear(t)]
    assert not unclear, [(t.outcome, t.detail) for t in unclear]
    assert recovered_s < RECOVERY_BOUND_S
    return summary


def bring_back(failover: Failover) -> None:
    """Start every killed node again: it rejoins as a replica of the primary that replaced it."""
    for server in failover.servers.servers:
        if server.process is None or server.process.poll() is not None:
            server.start()
    failover.servers.wait_healthy()
    wait_until(lambda: len(failover.servers.primaries()) == 3, 60, "three primaries")


async def test_a_primary_killed_mid_turns_fails_over_and_turns_go_on(failover: Failover, tmp_path: Path) -> None:
    summaries = []
    for run in range(RUNS_FULL if FULL else 1):
        if run:
            await asyncio.to_thread(bring_back, failover)
        summaries.append(await one_run(failover, run))
    report = Path(tmp_path) / "failover.json"
    report.write_text(json.dumps(summaries, indent=1))
    totals = Counter[str]()
    for summary in summaries:
        for key in ("missing_events", "replaced_events", "missing_messages"):
            totals[key] += int(summary[key])  # type: ignore[call-overload]
        for name, writer in summary["writers"].items():  # type: ignore[attr-defined]
            totals[f"{name}_acknowledged"] += writer["acknowledged"]
            totals[f"{name}_lost"] += writer["lost"]
    print("totals over", len(summaries), "runs:", dict(totals))
