"""Resume: read a session's event log, stop halfway, come back later from the last seq.

Every event carries its seq; `subscribe(session, after_seq)` replays what came after
it and then follows live events. The SDK does this by itself when a stream breaks;
this shows the same cursor in your own hands (say, across a process restart).

    python clients/python/examples/resume.py --target 127.0.0.1:50051
"""

from __future__ import annotations

import argparse
import asyncio

from cogmesh.client import GatewayClient, kind


async def main(target: str, api_key: str) -> None:
    async with GatewayClient(target, api_key=api_key) as client:
        await client.wait_ready(5)
        session = await client.create_session()
        for question in ("What is 17 * 23?", "What is 2 ** 10?"):
            await client.run(session.session_id, question)

        # First reader: takes a few events, then goes away, remembering its cursor.
        cursor = 0
        async for event in client.subscribe(session.session_id, stop_when_idle=True):
            print(f"first reader  seq {event.seq:>2} {kind(event)}")
            cursor = event.seq
            if event.seq == 5:
                break

        # Later: carry on from the cursor. Nothing is missed, nothing comes twice.
        seen = [cursor]
        async for event in client.subscribe(session.session_id, cursor, stop_when_idle=True):
            print(f"second reader seq {event.seq:>2} {kind(event)}")
            seen.append(event.seq)
        assert seen == list(range(cursor, cursor + len(seen))), seen
        print(f"resumed after seq {cursor}: {len(seen) - 1} more events, none missed")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default="127.0.0.1:50051", help="gateway address")
    parser.add_argument("--api-key", default="", help="API key (not needed in dev mode)")
    args = parser.parse_args()
    asyncio.run(main(args.target, args.api_key))
