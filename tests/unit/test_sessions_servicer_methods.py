"""Each unary method of SessionsServicer answers from its own row of RPCS: the methods are written
out (so grep finds them), and a method that named another RPC's row would answer the wrong call."""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf.message import Message

from services.sessions.servicer import RPCS, Rpc, SessionsServicer
from services.sessions.store import MemorySessionStore, SessionStore


@pytest.mark.parametrize("name", list(RPCS))
async def test_each_method_answers_from_the_row_of_its_name(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    used: list[Rpc] = []

    async def handle(row: Rpc, store: SessionStore, request: Message, context: Any) -> Message:
        used.append(row)
        return request

    monkeypatch.setattr(Rpc, "handle", handle)
    request = RPCS[name].request()
    assert await getattr(SessionsServicer(MemorySessionStore()), name)(request, None) is request
    assert len(used) == 1 and used[0] is RPCS[name], f"SessionsServicer.{name} answers from another RPC's row"
