"""PolicyService over gRPC: the library's proto API (services/lib/policy/api.py) plus WatchPolicy."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from cogmesh.policy.v1 import policy_pb2, policy_pb2_grpc
from services.kit.snapshots import SnapshotFeed
from services.lib.policy.api import PolicyAPI
from services.lib.policy.engine import PolicyEngine


# PolicyAPI first: its methods answer, not the generated base's UNIMPLEMENTED ones.
class PolicyServicer(PolicyAPI, policy_pb2_grpc.PolicyServiceServicer):
    def __init__(self, engine: PolicyEngine, feed: SnapshotFeed[policy_pb2.PolicySnapshot]):
        super().__init__(engine)
        self.feed = feed
        self._watches: set[asyncio.Task[Any]] = set()

    async def WatchPolicy(
        self, request: policy_pb2.WatchPolicyRequest, context: Any
    ) -> AsyncIterator[policy_pb2.WatchPolicyResponse]:
        task = asyncio.current_task()
        if task is not None:
            self._watches.add(task)
        try:
            async for snapshot in self.feed.watch(request.known_version):
                yield policy_pb2.WatchPolicyResponse(snapshot=snapshot)
        finally:
            if task is not None:
                self._watches.discard(task)

    async def end_watches(self) -> None:
        """End the open watches (their runtimes reopen them on another replica) so a drained
        server need not wait out the grace period for streams that never end by themselves."""
        for task in list(self._watches):
            task.cancel()
