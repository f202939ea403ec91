"""Quickstart: open a session, stream a turn, then run one and take its answer.

cogmesh up                                    # in another terminal
python clients/python/examples/quickstart.py --target 127.0.0.1:50051
"""

from __future__ import annotations

import argparse
import asyncio

from cogmesh.client import GatewayClient, kind


async def main(target: str, api_key: str) -> None:
    async with GatewayClient(target, api_key=api_key) as client:
        await client.wait_ready(5)
        session = await client.create_session(agent="default")
        print(f"session {session.session_id}")

        # Every event of the turn as it happens, in seq order.
        async for event in client.send_message(session.session_id, "What is 17 * 23?"):
            if event.HasField("assistant_delta"):
                print(f"  {event.seq:>3} delta {event.assistant_delta.text!r}")
            elif event.HasField("tool_call_started"):
                print(f"  {event.seq:>3} calls {event.tool_call_started.name}")
            else:
                print(f"  {event.seq:>3} {kind(event)}")

        # Or the whole turn at once.
        result = await client.run(session.session_id, "What is (2 + 3) * 4?")
        print(f"answer: {result.text}")
        print(f"tokens: {result.final.metrics.input_tokens if result.final else 0} in")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default="127.0.0.1:50051", help="gateway address")
    parser.add_argument("--api-key", default="", help="API key (not needed in dev mode)")
    args = parser.parse_args()
    asyncio.run(main(args.target, args.api_key))
