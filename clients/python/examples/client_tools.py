"""Client-side tools: plain Python functions the model calls, run by the SDK in this process.

The function's signature and docstring become the tool's JSON Schema. When the model
calls it, the turn pauses, the SDK runs the function, sends its result back and
follows the resumed turn, all inside one `run()`.

    python clients/python/examples/client_tools.py --target 127.0.0.1:50051
"""

from __future__ import annotations

import argparse
import asyncio
import platform

from cogmesh.client import GatewayClient, client_tool


def machine_info(detail: str = "system") -> str:
    """Describe the machine this client runs on.

    Args:
        detail: "system" for the operating system, "python" for the Python version.
    """
    return platform.system() if detail == "system" else platform.python_version()


async def read_note(name: str) -> str:
    """Read one of the user's notes by name."""
    notes = {"shopping": "buy milk and bread"}
    if name not in notes:
        raise LookupError(f"no note called {name}")
    return notes[name]


async def main(target: str, api_key: str) -> None:
    print("schema:", client_tool(machine_info).parameters)
    async with GatewayClient(target, api_key=api_key) as client:
        await client.wait_ready(5)
        session = await client.create_session()
        # The built-in model calls a tool named with "@name {json arguments}"; a real model decides itself.
        for message in [
            '@machine_info {"detail": "python"}',
            '@read_note {"name": "shopping"}',
            '@read_note {"name": "diary"}',
        ]:
            result = await client.run(session.session_id, message, tools=[machine_info, read_note])
            print(f"{message} -> {result.text}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default="127.0.0.1:50051", help="gateway address")
    parser.add_argument("--api-key", default="", help="API key (not needed in dev mode)")
    args = parser.parse_args()
    asyncio.run(main(args.target, args.api_key))
