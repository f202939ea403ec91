"""Schedule fire-time drift: 1,000 schedules in one tenant, on the real clock.

The suite runs in this process (memory stores, one runtime, two gateways: both schedulers
race for every tick, as replicas do). --schedules cron schedules fire every minute, spread
over its seconds (`* * * * * S`, S = i mod 60: about 17 ticks a second); after --minutes
minutes every run of a tick that fell in the window is read back. Drift is a run's
`start_time` (its turn accepted) minus its tick: the claim and the turn's start (a scheduler
sleeps until the earliest next fire time it read, not for a whole COGMESH_SCHEDULER_TICK_S; the
second gateway learns of the schedules, all made through the first, at its first look, within
30 s). The burst row puts every schedule on the same
second of the minute (`* * * * * 0`): 1,000 turns asked for at once.

    python -m bench.schedules [--schedules 1000] [--minutes 2] [--no-burst]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import time
from typing import Any

import grpc

from bench.harness import percentile, table, write_data, write_result
from cogmesh.gateway.v1 import schedules_pb2 as api
from cogmesh.gateway.v1 import schedules_pb2_grpc
from gateway import main as gateway_main
from services.kit.server import start
from services.suite.inprocess import start_suite
from services.suite.settings import SuiteSettings


async def patiently(rpc: Any, request: Any) -> Any:
    """A call the loaded suite may time out: tried again, a few times."""
    for attempt in range(10):
        try:
            return await rpc(request, timeout=30)
        except grpc.aio.AioRpcError as exc:
            if exc.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED) or attempt == 9:
                raise
            await asyncio.sleep(1)


async def scenario(schedules: int, minutes: float, second: int | None) -> dict[str, Any]:
    settings = SuiteSettings(log_level="warning", tenant_rate_per_s=10_000, tenant_burst=10_000)
    suite = await start_suite(settings)
    assert suite.settings is not None
    second_gateway = await start(gateway_main.build, suite.settings, "127.0.0.1:0")
    channel = grpc.aio.insecure_channel(suite.gateway_address)
    stub = schedules_pb2_grpc.ScheduleServiceStub(channel)
    try:
        ids = []
        for i in range(schedules):
            s = i % 60 if second is None else second
            spec = api.ScheduleSpec(cron=api.Cron(expression=f"* * * * * {s}"), message=f"tick {i}")
            created = await patiently(stub.CreateSchedule, api.CreateScheduleRequest(spec=spec))
            ids.append(created.schedule.schedule_id)
        begin = time.time()
        await asyncio.sleep(minutes * 60)
        end = time.time()
        for schedule_id in ids:
            await patiently(stub.PauseSchedule, api.PauseScheduleRequest(schedule_id=schedule_id))
        runs: list[api.ScheduleRun] = []
        deadline = time.monotonic() + 120
        while True:  # every run of the window ended (or two minutes passed)
            runs = []
            for schedule_id in ids:
                reply = await stub.ListScheduleRuns(
                    api.ListScheduleRunsRequest(schedule_id=schedule_id, page_size=1000)
                )
                runs += [r for r in reply.runs if begin <= r.fire_time.ToNanoseconds() / 1e9 <= end]
            if all(r.outcome >= api.SCHEDULE_RUN_OUTCOME_COMPLETED for r in runs) or time.monotonic() > deadline:
                break
            await asyncio.sleep(1)
    finally:
        await channel.close()
        await second_gateway.stop(0)
        await suite.stop(0)
    drift = [(r.start_time.ToNanoseconds() - r.fire_time.ToNanoseconds()) / 1e6 for r in runs if r.start_time.seconds]
    ticks = {(r.schedule_id, r.run_id) for r in runs}
    expected = sum(
        1
        for i in range(schedules)
        for m in range(int(begin // 60), int(end // 60) + 1)
        if begin <= m * 60 + (i % 60 if second is None else second) <= end
    )
    return {
        "schedules": schedules,
        "window_s": round(end - begin, 1),
        "ticks_expected": expected,
        "runs": len(runs),
        "duplicate_runs": len(runs) - len(ticks),
        "completed": sum(r.outcome == api.SCHEDULE_RUN_OUTCOME_COMPLETED for r in runs),
        "drift_ms_p50": round(percentile(drift, 50), 1),
        "drift_ms_p99": round(percentile(drift, 99), 1),
        "drift_ms_max": round(max(drift, default=float("nan")), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--schedules", type=int, default=1000)
    parser.add_argument("--minutes", type=float, default=2.0)
    parser.add_argument("--no-burst", action="store_true", help="skip the row with every schedule on one second")
    args = parser.parse_args()
    rows = {"spread": asyncio.run(scenario(args.schedules, args.minutes, None))}
    report(args, rows)
    if not args.no_burst:
        rows["burst"] = asyncio.run(scenario(args.schedules, args.minutes, 0))
        report(args, rows)


def report(args: argparse.Namespace, rows: dict[str, dict[str, Any]]) -> None:
    headers = ["ticks", "schedules", "window s", "ticks due", "runs", "duplicates", "completed", "drift p50 ms"]
    headers += ["drift p99 ms", "drift max ms"]
    body = [[name, *row.values()] for name, row in rows.items()]
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    text = "\n".join(
        [
            "# Schedule fire-time drift",
            "",
            f"`python -m bench.schedules --schedules {args.schedules} --minutes {args.minutes:g}` on {machine}.",
            "One tenant, memory stores, the suite in one process with two gateways (both schedulers claim) and one",
            "runtime; scheduler tick 1 s (COGMESH_SCHEDULER_TICK_S). Drift: the turn accepted minus its tick.",
            "spread: every minute at second i mod 60 (about 17 ticks a second); burst: every schedule at second 0.",
            "",
            table(headers, body),
            "",
        ]
    )
    print(text)
    write_result("schedules", text)
    write_data("schedules", {"rows": rows, "machine": machine})


if __name__ == "__main__":
    main()
