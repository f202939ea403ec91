"""Python clients for the cogmesh gateway: `GatewayClient` (asyncio) and `Client` (blocking)."""

from cogmesh.client.gateway import GatewayClient, GatewayError, TurnResult, is_terminal
from cogmesh.client.sync import Client

__all__ = ["Client", "GatewayClient", "GatewayError", "TurnResult", "is_terminal"]
