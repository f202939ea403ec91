"""The durable-turns fault suite (issue 16): turns under kill -9 of runtimes, gateways and Redis.

Redis (appendonly, fsync everysec), two runtime and two gateway replicas and the other
services run as processes; a counting ToolService runs in this process. Turns of three
kinds run a few at a time, each in a session of its own:

- tool: "@counter_add {"n": k}": the tool server applies one side effect per idempotency
  key (and counts every execution, to show what was run again);
- stream: a plain message answered with REPLY_TOKENS streamed tokens;
- approval: "@counter_approved {"n": k}", which pauses for an approval that the driver
  grants through a random gateway, then runs like a tool turn.

Meanwhile a killer SIGKILLs a random runtime or gateway at random moments and starts it
again (one replica of each kind is always up or starting); with `redis_restarts`, Redis
is killed and restarted as well. A caller whose stream broke resumes with Subscribe from
its last seq on any gateway; a watcher per turn follows the session from seq 0 the same
way. Checked for every turn: it completed with the right answer; its side effect
happened exactly once; the caller's and the watcher's seq lists are gap-free,
duplicate-free and equal (events included) to a final replay. Measured: the takeover
time (a runtime's kill to the `taken over` status of a turn it held) and the resume time
of callers whose gateway died (the kill to their next event).

    python -m tests.reliability.chaos --turns 50 [--redis-restarts 3] [--seed 7]

prints a report and writes it as JSON (--out); tests/reliability/test_durable_chaos.py
runs a small version of it in `make test`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import grpc

from cogmesh.common.v1 import events_pb2, messages_pb2
from cogmesh.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from cogmesh.sessions.v1 import sessions_pb2, sessions_pb2_grpc
from cogmesh.tools.v1 import tools_pb2, tools_pb2_grpc
from services.lib.agents import DEFAULT_AGENTS_DIR
from tests.support.redis_server import RedisServer
from tests.support.replica_processes import GATEWAYS, RUNTIMES, ReplicaProcesses

REPLY_TOKENS = 300  # a stream turn's answer: tok0 .. tok299, 15 ms apart (4.5 s of streaming)
TOOL_S = 3.0  # a counter call takes this long after applying its effect: kills land mid-call
TURN_BOUND_S = 120.0  # every turn ends well within this, takeovers included
AGENT = """
name: chaos
prompts_dir: default
model: local
tools: [counter_add, counter_approved]
default_role: assistant
interrupt_on: {counter_approved: true}
"""
COUNTER_SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
RETRYABLE = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED, grpc.StatusCode.DEADLINE_EXCEEDED}
Event = events_pb2.RuntimeEvent


def payload(event: Event) -> str:
    return event.WhichOneof("payload") or ""


class Counter(tools_pb2_grpc.ToolServiceServicer):
    """Two tools with one side effect each per idempotency key; every execution is counted."""

    def __init__(self) -> None:
        self.effects: dict[str, tuple[str, int]] = {}  # idempotency key -> (turn, n)
        self.executions: dict[str, int] = {}  # idempotency key -> times run
        self.keyless = 0

    async def ListTools(self, request: Any, context: Any) -> tools_pb2.ListToolsResponse:
        tools = []
        for name in ("counter_add", "counter_approved"):
            spec = messages_pb2.ToolSpec(name=name, description="adds n to the counter, once per call")
            spec.parameters.update(COUNTER_SCHEMA)  # type: ignore[arg-type]
            tools.append(spec)
        return tools_pb2.ListToolsResponse(tools=tools)

    async def CallTool(self, request: tools_pb2.CallToolRequest, context: Any) -> tools_pb2.CallToolResponse:
        key, n = request.idempotency_key, int(request.arguments.fields["n"].number_value)
        if not key:
            self.keyless += 1
        self.executions[key] = self.executions.get(key, 0) + 1
        self.effects.setdefault(key, (request.turn_id, n))  # the side effect, once per key
        await asyncio.sleep(TOOL_S)
        return tools_pb2.CallToolResponse(content=f"added {self.effects[key][1]}")

    def effects_of(self, turn_id: str) -> int:
        return sum(1 for turn, _ in self.effects.values() if turn == turn_id)

    def executions_of(self, turn_id: str) -> int:
        return sum(self.executions[key] for key, (turn, _) in self.effects.items() if turn == turn_id)


@dataclass
class Kill:
    at: float
    victim: str


@dataclass
class TurnReport:
    index: int
    kind: str
    session_id: str = ""
    turn_id: str = ""
    ok: bool = False
    problems: list[str] = field(default_factory=list)
    effects: int = 0
    executions: int = 0
    caller_breaks: int = 0
    takeovers: int = 0
    takeover_s: list[float] = field(default_factory=list)
    resume_s: list[float] = field(default_factory=list)
    seconds: float = 0.0


class Stage:
    """The processes, the tool server, and the kills so far."""

    def __init__(self, processes: ReplicaProcesses, redis: RedisServer, counter: Counter):
        self.processes, self.redis, self.counter = processes, redis, counter
        self.kills: list[Kill] = []
        self.down: set[str] = set()

    def gateway(self) -> str:
        up = [g for g in GATEWAYS if g not in self.down] or GATEWAYS
        return self.processes.addresses[random.choice(up)]

    def last_kill_before(self, at: float, victims: list[str]) -> Kill | None:
        earlier = [k for k in self.kills if k.victim in victims and k.at <= at]
        return earlier[-1] if earlier else None


@contextlib.asynccontextmanager
async def stub_at(address: str) -> AsyncIterator[gateway_pb2_grpc.GatewayServiceStub]:
    async with grpc.aio.insecure_channel(address) as channel:
        yield gateway_pb2_grpc.GatewayServiceStub(channel)  # type: ignore[no-untyped-call]


async def retried(stage: Stage, what: Any, bound_s: float = 60.0) -> Any:
    """`what(stub)` on some gateway, again on UNAVAILABLE (a gateway down) until it goes through."""
    deadline = time.monotonic() + bound_s
    while True:
        try:
            async with stub_at(stage.gateway()) as stub:
                return await what(stub)
        except grpc.aio.AioRpcError as exc:
            if exc.code() not in RETRYABLE or time.monotonic() > deadline:
                raise
        await asyncio.sleep(0.1)


class Follower:
    """A stream of one session's events that survives its gateway: on a break it subscribes
    again from its last seq on any gateway. Arrival times are kept for the timings."""

    def __init__(self, stage: Stage, session_id: str, after_seq: int = 0):
        self.stage, self.session_id, self.cursor = stage, session_id, after_seq
        self.events: list[Event] = []
        self.arrivals: list[float] = []
        self.breaks: list[float] = []  # when a stream broke
        self.resumes: list[float] = []  # the first event after each break

    def take(self, events: Any) -> None:
        now = time.monotonic()
        for event in events:
            if len(self.resumes) < len(self.breaks):
                self.resumes.append(now)
            self.events.append(event)
            self.arrivals.append(now)
            self.cursor = event.seq

    async def read(self, call: Any, until: Any) -> bool:
        """Read `call` until `until(events)`; False when the stream broke (retryable) or ended first."""
        try:
            async for message in call:
                self.take(message.events)
                if until(self.events):
                    call.cancel()
                    return True
        except grpc.aio.AioRpcError as exc:
            if exc.code() not in RETRYABLE:
                raise
            self.breaks.append(time.monotonic())
            return False
        return bool(until(self.events))

    async def follow(self, until: Any) -> None:
        """Subscribe (again and again) from the cursor until `until(events)`."""
        while not until(self.events):
            try:
                async with stub_at(self.stage.gateway()) as stub:
                    request = gateway_pb2.SubscribeRequest(session_id=self.session_id, after_seq=self.cursor)
                    if await self.read(stub.Subscribe(request), until):
                        return
            except grpc.aio.AioRpcError as exc:
                if exc.code() not in RETRYABLE:
                    raise
                self.breaks.append(time.monotonic())
            await asyncio.sleep(0.1)


def ended(turn_id: str) -> Any:
    return lambda events: any(e.turn_id == turn_id and payload(e) in ("final", "error") for e in events)


def paused(events: list[Event]) -> bool:
    return bool(events) and payload(events[-1]) == "status" and events[-1].status.state == events_pb2.TURN_STATE_PAUSED


async def run_turn(stage: Stage, index: int, kind: str) -> TurnReport:
    report = TurnReport(index, kind)
    started = time.monotonic()
    n = index + 1
    content = {
        "tool": f'@counter_add {{"n": {n}}}',
        "approval": f'@counter_approved {{"n": {n}}}',
        "stream": "talk to me",
    }[kind]

    async def create(stub: Any) -> str:
        reply = await stub.CreateSession(gateway_pb2.CreateSessionRequest(agent="chaos"), timeout=10)
        return str(reply.session.session_id)

    session_id = report.session_id = await retried(stage, create)
    watcher = Follower(stage, session_id)
    caller = Follower(stage, session_id)
    turn_id = ""

    def first_turn_end(events: list[Event]) -> bool:
        return bool(turn_id) and ended(turn_id)(events)

    watching = asyncio.create_task(watcher.follow(lambda events: first_turn_end(events)))
    try:
        async with asyncio.timeout(TURN_BOUND_S):
            # The caller: SendMessage until the turn ends or pauses, resuming from its seq on a break.
            await send(stage, caller, session_id, content)
            turn_id = report.turn_id = caller.events[0].turn_id
            await caller.follow(lambda events: paused(events) or ended(turn_id)(events))
            while paused(caller.events):
                approval = next(e for e in reversed(caller.events) if payload(e) == "approval_required")
                until = resumed_until(approval.seq + 1, turn_id)
                await approve(stage, caller, session_id, approval.approval_required.interrupt_id, until)
            await watching
        await check(stage, report, caller, watcher, kind, n)
    except Exception as exc:  # noqa: BLE001 - a turn's failure is a finding of the report
        report.problems.append(f"{type(exc).__name__}: {exc}")
        watching.cancel()
        await diagnose(stage, report, caller)
    report.seconds = time.monotonic() - started
    report.ok = not report.problems
    return report


def resumed_until(pause_seq: int, turn_id: str) -> Any:
    """The resumed turn's next pause or its end: events after the pause's status at `pause_seq`."""
    return lambda events: events[-1].seq > pause_seq and (paused(events) or ended(turn_id)(events))


async def send(stage: Stage, caller: Follower, session_id: str, content: str) -> None:
    """SendMessage once: again while no gateway took it; an attempt that was taken though its reply
    was lost shows as the session busy (FAILED_PRECONDITION), and the caller follows that turn."""
    taken = False
    while not caller.events and not taken:
        try:
            async with stub_at(stage.gateway()) as stub:
                call = stub.SendMessage(gateway_pb2.SendMessageRequest(session_id=session_id, content=content))
                await caller.read(call, lambda events: paused(events) or ended(events[0].turn_id)(events))
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.FAILED_PRECONDITION:
                raise
            taken = True
        if not caller.events and not taken:
            await asyncio.sleep(0.1)
    if not caller.events:
        await caller.follow(bool)


async def approve(stage: Stage, caller: Follower, session_id: str, interrupt_id: str, until: Any) -> None:
    """Grant the approval through some gateway and read the resumed turn as a client does: when the
    call breaks before the turn went on, send the same answer again (the same answer is idempotent);
    NOT_FOUND means an earlier attempt resumed the turn already."""
    request = gateway_pb2.ResolveApprovalRequest(
        session_id=session_id, interrupt_id=interrupt_id, decision=events_pb2.APPROVAL_DECISION_APPROVE
    )
    before = len(caller.events)
    while len(caller.events) == before:
        try:
            async with stub_at(stage.gateway()) as stub:
                await caller.read(stub.ResolveApproval(request, timeout=TURN_BOUND_S), until)
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.NOT_FOUND:
                raise
            break
        if len(caller.events) == before:
            await asyncio.sleep(0.1)
    await caller.follow(until)


async def diagnose(stage: Stage, report: TurnReport, caller: Follower) -> None:
    """What a stuck turn's session looks like: its last events, lease and checkpoints."""
    said = [f"{e.seq}:{payload(e)}:{e.status.text if payload(e) == 'status' else ''}" for e in caller.events[-4:]]
    report.problems.append("last events: " + ", ".join(said))
    with contextlib.suppress(grpc.aio.AioRpcError):
        async with grpc.aio.insecure_channel(stage.processes.addresses["sessions"]) as channel:
            stub = sessions_pb2_grpc.SessionsServiceStub(channel)  # type: ignore[no-untyped-call]
            ask = {"tenant_id": "default", "session_id": report.session_id}
            lease = await stub.GetTurnLease(sessions_pb2.GetTurnLeaseRequest(**ask), timeout=5)
            points = await stub.ListCheckpoints(sessions_pb2.ListCheckpointsRequest(**ask), timeout=5)
            report.problems.append(f"lease: {lease.lease}".replace("\n", " "))
            report.problems.append(f"checkpoints: {list(points.checkpoints)}".replace("\n", " "))


async def check(stage: Stage, report: TurnReport, caller: Follower, watcher: Follower, kind: str, n: int) -> None:
    problems = report.problems
    turn = [e for e in caller.events if e.turn_id == report.turn_id]
    end = turn[-1] if turn else None
    if end is None or payload(end) != "final":
        problems.append(f"ended with {payload(end) if end else 'nothing'}: {end}")
    else:
        expected = " ".join(f"tok{i}" for i in range(REPLY_TOKENS)) if kind == "stream" else f"added {n}"
        if expected not in end.final.text:
            problems.append(f"wrong answer: {end.final.text[:120]!r}")
    if kind != "stream":
        report.effects = stage.counter.effects_of(report.turn_id)
        report.executions = stage.counter.executions_of(report.turn_id)
        if report.effects != 1:
            problems.append(f"{report.effects} side effects")

    async def replay(stub: Any) -> list[Event]:
        request = gateway_pb2.SubscribeRequest(session_id=report.session_id, stop_when_idle=True)
        return [e async for message in stub.Subscribe(request, timeout=30) for e in message.events]

    whole = [e for e in await retried(stage, replay) if e.seq <= (end.seq if end else 0)]
    seqs = [e.seq for e in whole]
    if seqs != list(range(1, len(seqs) + 1)):
        problems.append(f"the replay is not gap-free from 1: {seqs[:5]}...")
    for who, follower in (("watcher", watcher), ("caller", caller)):
        got = [e for e in follower.events if e.seq <= (end.seq if end else 0)]
        first = got[0].seq if got else 1
        if [e.seq for e in got] != list(range(first, first + len(got))):
            problems.append(f"the {who}'s seqs have a gap or a duplicate")
        replayed = whole[first - 1 :]
        # Compared as messages: a map (a notice's metadata) may encode its entries in any order.
        differ = [(a, b) for a, b in zip(got, replayed, strict=False) if a != b]
        if differ or len(got) != len(replayed):
            at = f"seq {differ[0][0].seq}: {differ[0][0]} vs {differ[0][1]}" if differ else "length"
            problems.append(f"the {who}'s events differ from the replay ({len(differ)} of {len(got)}; first at {at})")

    report.caller_breaks = len(caller.breaks)
    report.resume_s = [r - b for b, r in zip(caller.breaks, caller.resumes, strict=False)]
    for event, at in zip(watcher.events, watcher.arrivals, strict=True):
        if payload(event) == "status" and event.status.text == "taken over":
            report.takeovers += 1
            kill = stage.last_kill_before(at, [*RUNTIMES, "redis"])
            if kill is not None:
                report.takeover_s.append(at - kill.at)


async def killer(stage: Stage, stop: asyncio.Event, every_s: tuple[float, float], redis_restarts: int) -> None:
    """SIGKILL a random runtime or gateway every few seconds and start it again; Redis now and then."""
    victims = RUNTIMES * 3 + GATEWAYS * 2  # runtimes more often: their turns are the ones taken over
    redis_due = {2 + 4 * k for k in range(redis_restarts)}  # every fourth kill, from the second
    round_ = 0
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), random.uniform(*every_s))
            return
        round_ += 1
        if round_ in redis_due:
            stage.kills.append(Kill(time.monotonic(), "redis"))
            stage.redis.kill()
            await asyncio.to_thread(stage.redis.start)
            continue
        victim = random.choice(victims)
        stage.kills.append(Kill(time.monotonic(), victim))
        stage.down.add(victim)
        stage.processes.kill(victim)
        await asyncio.to_thread(stage.processes.start, victim)
        stage.down.discard(victim)


def summary(reports: list[TurnReport], stage: Stage, wall_s: float) -> dict[str, Any]:
    takeover = [s for r in reports for s in r.takeover_s]
    resume = [s for r in reports for s in r.resume_s]

    def spread(values: list[float]) -> dict[str, float]:
        if not values:
            return {}
        return {"p50": statistics.median(values), "max": max(values), "n": len(values)}

    kills: dict[str, int] = {}
    for kill in stage.kills:
        kills[kill.victim] = kills.get(kill.victim, 0) + 1
    tool_turns = [r for r in reports if r.kind != "stream"]
    return {
        "turns": len(reports),
        "by_kind": {k: sum(r.kind == k for r in reports) for k in ("tool", "stream", "approval")},
        "completed_right": sum(r.ok for r in reports),
        "side_effects_exactly_once": sum(r.effects == 1 for r in tool_turns),
        "tool_turns": len(tool_turns),
        "tool_executions": sum(r.executions for r in tool_turns),
        "tool_calls_without_key": stage.counter.keyless,
        "kills": kills,
        "turns_taken_over": sum(r.takeovers > 0 for r in reports),
        "callers_whose_stream_broke": sum(r.caller_breaks > 0 for r in reports),
        "takeover_s": spread(takeover),
        "caller_resume_s": spread(resume),
        "wall_s": wall_s,
        "failures": [asdict(r) for r in reports if not r.ok],
    }


async def run(
    turns: int,
    concurrency: int = 6,
    redis_restarts: int = 0,
    seed: int = 7,
    every_s: tuple[float, float] = (1.0, 3.0),
    workdir: Path | None = None,
    appendfsync: str = "everysec",
) -> dict[str, Any]:
    random.seed(seed)
    tmp = Path(workdir or tempfile.mkdtemp(prefix="cogmesh-chaos-"))
    shutil.copytree(DEFAULT_AGENTS_DIR, tmp / "agents", dirs_exist_ok=True)
    (tmp / "agents" / "chaos.yaml").write_text(AGENT)

    counter = Counter()
    tool_server = grpc.aio.server()
    tools_pb2_grpc.add_ToolServiceServicer_to_server(counter, tool_server)  # type: ignore[no-untyped-call]
    tool_port = tool_server.add_insecure_port("127.0.0.1:0")
    await tool_server.start()
    (tmp / "tools.yaml").write_text(
        f"servers:\n  counter:\n    transport: grpc\n    address: 127.0.0.1:{tool_port}\n    prefix: ''\n"
    )
    redis = RedisServer(directory=tmp, appendonly=True, appendfsync=appendfsync).start()
    processes = ReplicaProcesses.on(
        redis.url,
        "cogmesh-chaos:",
        tmp,
        agents_dir=str(tmp / "agents"),
        tool_servers_file=str(tmp / "tools.yaml"),
        local_reply_tokens=str(REPLY_TOKENS),
        local_delay_ms="15",
        # A runtime dies every few seconds here and a stream turn's 4.5 s model step starts over after each
        # takeover: four in a row at that step is a matter of luck on a loaded machine (CI run 40), not the
        # poison turn the default limit of 3 is for (tests/unit/test_runner_leases.py tests that limit).
        max_takeovers="12",
        log_level="info",  # takeovers and hand-overs in the logs of a failed run
    )
    stage = Stage(processes, redis, counter)
    try:
        await asyncio.to_thread(processes.start_all)
        kinds = ["tool", "stream", "approval"]
        gate = asyncio.Semaphore(concurrency)

        async def one(index: int) -> TurnReport:
            async with gate:
                return await run_turn(stage, index, kinds[index % len(kinds)])

        stop = asyncio.Event()
        started = time.monotonic()
        killing = asyncio.create_task(killer(stage, stop, every_s, redis_restarts))
        reports = await asyncio.gather(*(one(i) for i in range(turns)))
        stop.set()
        await killing
        return summary(list(reports), stage, time.monotonic() - started) | {"logs": str(tmp)}
    finally:
        processes.stop()
        redis.close()
        await tool_server.stop(0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--concurrency", type=int, default=6)
    parser.add_argument("--redis-restarts", type=int, default=0)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--appendfsync", choices=["everysec", "always"], default="everysec")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    result = asyncio.run(
        run(args.turns, args.concurrency, args.redis_restarts, args.seed, appendfsync=args.appendfsync)
    )
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    sys.exit(0 if result["completed_right"] == result["turns"] else 1)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
