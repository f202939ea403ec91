"""ListSessions filtered by scope vs unfiltered, in one tenant of many sessions, on Redis.

One private redis-server; one tenant holds --sessions sessions, each scoped
{end_user: u<i % users>, project: p<i % 7>}, so one end user holds sessions / users of
them, spread evenly over the tenant's history. Each row is the p50 (and p99) of
--repeats first pages of --page sessions, interleaved so load from elsewhere hits every
row alike, and the session records each page read (HGETALL calls, from INFO commandstats).

- unfiltered: the tenant's newest page (`store.list_sessions`);
- ListSessions path: what the sessions service runs for a `scope_filter`
  (services/sessions/servicer.py `list_scoped`);
- store index: the store's own filtered listing (`list_sessions(..., scope_filter=...)`),
  where the store has one.

    python -m bench.session_scopes [--sessions 10000] [--users 1000] [--page 50] [--repeats 200]
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import os
import platform
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import redis

from bench.harness import percentile, table, write_result
from bench.sessions import private_redis, redis_version
from services.sessions import servicer
from services.sessions.model import NewSession, Page, SessionRecord
from services.sessions.redis_store import RedisSessionStore

TENANT = "bench"
CREATE_BATCH = 200

Listing = Callable[[], Awaitable[Page[SessionRecord]]]


def hgetalls(client: redis.Redis) -> int:
    """HGETALL calls the server has run (scripts' included): one per session record read."""
    stats: Any = client.info("commandstats")
    return int(stats.get("cmdstat_hgetall", {}).get("calls", 0))


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=10_000, help="sessions in the one tenant")
    parser.add_argument("--users", type=int, default=1000, help="distinct end_user values among them")
    parser.add_argument("--page", type=int, default=50, help="page size (ListSessions' default is 50)")
    parser.add_argument("--repeats", type=int, default=200, help="pages measured per row")
    args = parser.parse_args()

    with private_redis() as url:
        admin = redis.Redis.from_url(url)
        store = RedisSessionStore.from_url(url, "scopes:", 0.0, 10.0)
        started = time.perf_counter()
        for first in range(0, args.sessions, CREATE_BATCH):
            await asyncio.gather(
                *(
                    store.create(
                        TENANT,
                        NewSession("", "", "default", scope={"end_user": f"u{i % args.users}", "project": f"p{i % 7}"}),
                    )
                    for i in range(first, min(first + CREATE_BATCH, args.sessions))
                )
            )
        print(f"{args.sessions} sessions created in {time.perf_counter() - started:.1f}s", file=sys.stderr)

        one_user = {"end_user": "u7"}
        two_pairs = {"end_user": "u7", "project": "p0"}
        rows: dict[str, Listing] = {
            "unfiltered": lambda: store.list_sessions(TENANT, None, args.page),
            "ListSessions path, end_user": lambda: servicer.list_scoped(store, TENANT, None, args.page, one_user),
        }
        if "scope_filter" in inspect.signature(store.list_sessions).parameters:
            list_sessions: Any = store.list_sessions
            rows["store index, end_user"] = lambda: list_sessions(TENANT, None, args.page, scope_filter=one_user)
            rows["store index, end_user + project"] = lambda: list_sessions(
                TENANT, None, args.page, scope_filter=two_pairs
            )
        for listing in rows.values():  # warm up: scripts loaded, any one-time index work done
            await listing()
        latencies: dict[str, list[float]] = {name: [] for name in rows}
        reads: dict[str, list[int]] = {name: [] for name in rows}
        found: dict[str, int] = {}
        for _ in range(args.repeats):
            for name, listing in rows.items():
                before = hgetalls(admin)
                t0 = time.perf_counter()
                page = await listing()
                latencies[name].append((time.perf_counter() - t0) * 1000)
                reads[name].append(hgetalls(admin) - before)
                found[name] = len(page.items)
        await store.close()
        admin.close()

    base = percentile(latencies["unfiltered"], 50)
    out = []
    for name in rows:
        p50 = percentile(latencies[name], 50)
        out.append(
            [
                name,
                found[name],
                f"{percentile(reads[name], 50):.0f}",
                f"{p50:.2f}",
                f"{percentile(latencies[name], 99):.2f}",
                f"{p50 / base:.2f}",
            ]
        )
    headers = ["listing", "sessions returned", "records read", "p50 ms", "p99 ms", "p50 vs unfiltered"]
    report = "\n".join(
        [
            "# Sessions: ListSessions filtered by scope vs unfiltered",
            "",
            f"One tenant of {args.sessions} sessions on a private redis-server {redis_version()} (no persistence);"
            f" {args.users} end users, so one holds {args.sessions // args.users}, spread over the tenant's history."
            f" First pages of {args.page}, {args.repeats} of each, interleaved. Machine: {platform.machine()},"
            f" {os.cpu_count()} CPUs (shared), Python {platform.python_version()}, redis-py {redis.__version__}.",
            "",
            table(headers, out),
            "",
        ]
    )
    print(report)
    print(f"written to {write_result('session_scopes', report)}", file=sys.stderr)


if __name__ == "__main__":
    asyncio.run(main())
