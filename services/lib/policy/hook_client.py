"""Remote hooks: a HookService, in any language, reached over gRPC."""

from __future__ import annotations

import grpc

from cogmesh.policy.v1 import hooks_pb2, hooks_pb2_grpc
from services.kit.clients import PEER_CHANNEL_OPTIONS
from services.kit.protos import dict_to_struct, struct_to_dict
from services.lib.policy.hooks import HookError, HookEvent, HookPayload, HookReply


class HookChannels:
    """One channel per hook server address, shared by every hook that names it."""

    def __init__(self) -> None:
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._stubs: dict[str, hooks_pb2_grpc.HookServiceStub] = {}

    def stub(self, address: str) -> hooks_pb2_grpc.HookServiceStub:
        stub = self._stubs.get(address)
        if stub is None:
            channel = grpc.aio.insecure_channel(address, options=PEER_CHANNEL_OPTIONS)
            self._channels[address] = channel
            stub = self._stubs[address] = hooks_pb2_grpc.HookServiceStub(channel)  # type: ignore[no-untyped-call]
        return stub

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()
        self._stubs.clear()


class RemoteHook:
    """Calls one HookService; the hook's timeout is also the call's deadline."""

    def __init__(self, channels: HookChannels, address: str, timeout_s: float):
        self.channels = channels
        self.address = address
        self.timeout_s = timeout_s
        self.__name__ = address

    async def __call__(self, event: HookEvent, payload: HookPayload) -> HookReply | None:
        stub = self.channels.stub(self.address)
        s = payload.scope
        context = hooks_pb2.HookContext(
            tenant_id=s.tenant_id,
            session_id=s.session_id,
            turn_id=s.turn_id,
            agent=s.agent,
            role_id=s.role_id,
            session_scope=s.session_scope,
        )
        try:
            match event:
                case HookEvent.PRE_TOOL_USE:
                    pre = await stub.PreToolUse(
                        hooks_pb2.PreToolUseRequest(
                            context=context,
                            tool_name=payload.tool_name,
                            tool_input=dict_to_struct(payload.tool_input),
                            tool_call_id=payload.tool_call_id,
                        ),
                        timeout=self.timeout_s,
                    )
                    updated = struct_to_dict(pre.updated_input) if pre.HasField("updated_input") else None
                    return HookReply(deny=pre.deny, reason=pre.reason, updated_input=updated)
                case HookEvent.POST_TOOL_USE:
                    post = await stub.PostToolUse(
                        hooks_pb2.PostToolUseRequest(
                            context=context,
                            tool_name=payload.tool_name,
                            tool_input=dict_to_struct(payload.tool_input),
                            result=payload.result,
                            is_error=payload.is_error,
                            tool_call_id=payload.tool_call_id,
                        ),
                        timeout=self.timeout_s,
                    )
                    return HookReply(updated_result=post.updated_result if post.replace else None)
                case HookEvent.USER_PROMPT_SUBMIT:
                    prompt = await stub.UserPromptSubmit(
                        hooks_pb2.UserPromptSubmitRequest(context=context, prompt=payload.prompt),
                        timeout=self.timeout_s,
                    )
                    return HookReply(deny=prompt.block, reason=prompt.reason)
                case HookEvent.STOP:
                    await stub.Stop(
                        hooks_pb2.StopRequest(context=context, final_text=payload.final_text), timeout=self.timeout_s
                    )
                    return None
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                raise HookError(f"timed out after {self.timeout_s * 1000:.0f} ms") from exc
            raise HookError(f"hook server {self.address} answered {exc.code().name}: {exc.details()}") from exc
