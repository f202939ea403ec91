"""Approvals and user input: the `careful` agent asks a human before every calculation.

The turn pauses; `result.pause` says what it waits for, and approve / edit / reject /
answer resume it. Uses the blocking `Client`.

    python clients/python/examples/approvals.py --target 127.0.0.1:50051 --decision approve
    python clients/python/examples/approvals.py --decision reject --reason "not today"
"""

from __future__ import annotations

import argparse

from cogmesh.client import Client, TurnResult


def settle(client: Client, result: TurnResult, decision: str, reason: str, answer: str) -> TurnResult:
    """Answer pauses until the turn ends, the way a reviewer would."""
    while result.pause is not None:
        pause = result.pause
        if pause.kind == "approval":
            print(f"approval needed: {pause.tool_name} {pause.arguments} -> {decision}")
            if decision == "approve":
                result = client.approve(pause)
            elif decision == "edit":
                result = client.edit(pause, {"expression": "6 * 7"})
            else:
                result = client.reject(pause, reason)
        elif pause.kind == "user_input":
            print(f"question: {pause.prompt} -> {answer}")
            result = client.answer(pause, answer)
        else:
            raise SystemExit(f"unexpected pause: {pause.kind}")
    return result


def main(target: str, api_key: str, decision: str, reason: str, answer: str) -> None:
    with Client(target, api_key=api_key) as client:
        client.wait_ready(5)
        session = client.create_session(agent="careful")
        result = client.run(session.session_id, "What is 12 * 12?")
        print(f"paused: {result.paused}")
        result = settle(client, result, decision, reason, answer)
        print(f"answer: {result.text}")
        result = settle(client, client.run(session.session_id, "@ask_user Which unit?"), decision, reason, answer)
        print(f"answer: {result.text}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default="127.0.0.1:50051", help="gateway address")
    parser.add_argument("--api-key", default="", help="API key (not needed in dev mode)")
    parser.add_argument("--decision", choices=["approve", "edit", "reject"], default="approve")
    parser.add_argument("--reason", default="a human said no", help="why, when rejecting")
    parser.add_argument("--answer", default="centimetres", help="the answer to the agent's question")
    args = parser.parse_args()
    main(args.target, args.api_key, args.decision, args.reason, args.answer)
