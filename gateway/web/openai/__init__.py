"""An OpenAI-compatible API on the browser edge: Chat Completions, Responses and Models over cogmesh agents.

    POST /v1/chat/completions       a turn as a chat completion (stream: chat.completion.chunk events)
    POST /v1/responses              a turn as a Response (stream: the Responses streaming events)
    GET  /v1/responses/{id}         a response rebuilt from the session's event log
    GET  /v1/models, /v1/models/{id} the agents a session can be opened with

`model` names an agent. Every call goes to the gateway's GatewayService with the caller's
`Authorization: Bearer <key>`, so keys, tenancy, scopes, limits and errors are the gateway's own;
docs/openai.md has the mapping.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from cogmesh.common.v1 import resources_pb2
from cogmesh.gateway.v1 import gateway_pb2
from gateway.web.openai import chat, responses
from gateway.web.openai.errors import OpenAIError
from gateway.web.openai.turns import Gateway, Refused

ChannelGetter = Callable[[], grpc.aio.Channel | None]
Handler = Callable[[Request, Gateway], Awaitable[Response]]


def models_list(agents: list[resources_pb2.Agent]) -> list[dict[str, Any]]:
    """The agents a session can be opened with (subagents only run inside another agent's turn)."""
    return [
        {"id": agent.name, "object": "model", "created": 0, "owned_by": "cogmesh", "description": agent.description}
        for agent in agents
        if agent.mode != resources_pb2.AGENT_MODE_SUBAGENT
    ]


async def list_models(request: Request, gateway: Gateway) -> Response:
    reply = await gateway.call("ListAgents", gateway_pb2.ListAgentsRequest())
    return JSONResponse({"object": "list", "data": models_list(list(reply.agents))})


async def get_model(request: Request, gateway: Gateway) -> Response:
    name = request.path_params["model"]
    reply = await gateway.call("ListAgents", gateway_pb2.ListAgentsRequest())
    for model in models_list(list(reply.agents)):
        if model["id"] == name:
            return JSONResponse(model)
    raise OpenAIError(404, f"agent {name!r} not found", param="model", code="model_not_found")


async def create_chat_completion(request: Request, gateway: Gateway) -> Response:
    return await chat.create(request, gateway, chat.parse_json(await request.body()))


async def create_response(request: Request, gateway: Gateway) -> Response:
    return await responses.create(request, gateway, chat.parse_json(await request.body()))


async def get_response(request: Request, gateway: Gateway) -> Response:
    return await responses.retrieve(gateway, request.path_params["response_id"])


def routes(channel: ChannelGetter) -> list[BaseRoute]:
    """The API's routes; `channel` returns the edge's channel to the gateway (None while not connected)."""

    def endpoint(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        async def run(request: Request) -> Response:
            try:
                return await handler(request, Gateway(channel(), request))
            except OpenAIError as error:
                return error.response()
            except Refused as refused:
                return refused.openai().response()

        return run

    return [
        Route("/v1/chat/completions", endpoint(create_chat_completion), methods=["POST"]),
        Route("/v1/responses", endpoint(create_response), methods=["POST"]),
        Route("/v1/responses/{response_id}", endpoint(get_response), methods=["GET"]),
        Route("/v1/models", endpoint(list_models), methods=["GET"]),
        Route("/v1/models/{model:path}", endpoint(get_model), methods=["GET"]),
    ]
