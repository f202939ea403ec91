"""The peer's graph called in-process (no server): run in the peer's virtualenv by bench.peer.

python -m bench.peer.inprocess --turns N   # prints {workload: [[first_event, first_token, full, events], ...]}
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from bench.peer.timing import time_stream

sys.path.insert(0, str(Path(__file__).resolve().parent))  # graph.py, as langgraph.json loads it
from graph import graph

WARMUP = 10


def is_token(event: Any) -> bool:
    return bool(event[0].content)


async def one(text: str) -> list[float]:
    def events() -> AsyncIterator[Any]:
        return graph.astream({"messages": [{"role": "human", "content": text}]}, stream_mode="messages")

    return list(dataclasses.astuple(await time_stream(events, is_token)))


async def main(workloads: dict[str, str], turns: int) -> dict[str, list[list[float]]]:
    out: dict[str, list[list[float]]] = {}
    for name, text in workloads.items():
        for _ in range(WARMUP):
            await one(text)
        out[name] = [await one(text) for _ in range(turns)]
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, required=True)
    parser.add_argument("--workloads", required=True, help="JSON {name: message}")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main(json.loads(args.workloads), args.turns))))
