"""cogmesh.gateway.v1.WebhookService on the gateway's port: the caller's tenant, then the sessions service.

Every call is authenticated and rate-limited by the gateway's guard like GatewayService,
and forwarded to the internal WebhookStoreService with the caller's tenant (from its API
key): another tenant's webhook or delivery is NOT_FOUND like a missing one. A key that
pins scope values sees only sessions in its scope, so its webhooks must name such a
session, and it reaches only webhooks narrowed to sessions it sees.
"""

from __future__ import annotations

from typing import Any

from cogmesh.gateway.v1 import webhooks_pb2, webhooks_pb2_grpc
from cogmesh.sessions.v1 import sessions_pb2
from cogmesh.sessions.v1 import webhooks_pb2 as store_pb2
from cogmesh.sessions.v1 import webhooks_pb2_grpc as store_pb2_grpc
from gateway import auth
from services.kit.clients import Clients, call
from services.kit.errors import InvalidArgument, NotFound
from services.sessions.webhooks.model import parse_delivery_id


class WebhookStore:
    """The internal WebhookStoreService stub, on the sessions service's address."""

    def __init__(self, clients: Clients):
        self.clients = clients

    @property
    def stub(self) -> store_pb2_grpc.WebhookStoreServiceStub:
        return self.clients.stub_at(self.clients.settings.sessions_addr, store_pb2_grpc.WebhookStoreServiceStub)

    async def check_session(self, principal: auth.Principal, session_id: str) -> None:
        """The session is the caller's and in its scope; else NOT_FOUND as for a missing one."""
        reply = await call(
            "sessions",
            self.clients.sessions.GetSession,
            sessions_pb2.GetSessionRequest(tenant_id=principal.tenant_id, session_id=session_id),
        )
        principal.check_sees(reply.session)

    async def get(self, principal: auth.Principal, webhook_id: str) -> store_pb2.StoredWebhook:
        reply = await call(
            "sessions",
            self.stub.GetWebhook,
            store_pb2.GetWebhookRequest(tenant_id=principal.tenant_id, webhook_id=webhook_id),
        )
        hook: store_pb2.StoredWebhook = reply.webhook
        if principal.pinned_scope:
            if not hook.webhook.session_id:
                raise NotFound(f"webhook {webhook_id!r} not found", metadata={"webhook_id": webhook_id})
            await self.check_session(principal, hook.webhook.session_id)
        return hook


class GatewayWebhookServicer(webhooks_pb2_grpc.WebhookServiceServicer):
    def __init__(self, clients: Clients):
        self.store = WebhookStore(clients)

    def _caller(self, context: Any) -> auth.Principal:
        """The principal the gateway's guard admitted (gateway/guard.py PROTECTED_PREFIXES)."""
        return auth.current.get()

    async def CreateWebhook(self, request: webhooks_pb2.CreateWebhookRequest, context: Any) -> Any:
        principal = self._caller(context)
        if principal.pinned_scope and not request.session_id:
            raise InvalidArgument([("session_id", "is required: this API key sees only the sessions of its scope")])
        if request.session_id:
            await self.store.check_session(principal, request.session_id)
        reply = await call(
            "sessions",
            self.store.stub.CreateWebhook,
            store_pb2.CreateWebhookRequest(tenant_id=principal.tenant_id, webhook=request),
        )
        return webhooks_pb2.CreateWebhookResponse(webhook=reply.webhook.webhook, secret=reply.secret)

    async def GetWebhook(self, request: webhooks_pb2.GetWebhookRequest, context: Any) -> Any:
        hook = await self.store.get(self._caller(context), request.webhook_id)
        return webhooks_pb2.GetWebhookResponse(webhook=hook.webhook)

    async def ListWebhooks(self, request: webhooks_pb2.ListWebhooksRequest, context: Any) -> Any:
        principal = self._caller(context)
        if principal.pinned_scope:
            if not request.session_id:
                raise InvalidArgument([("session_id", "is required: this API key sees only the sessions of its scope")])
            await self.store.check_session(principal, request.session_id)
        reply = await call(
            "sessions",
            self.store.stub.ListWebhooks,
            store_pb2.ListWebhooksRequest(
                tenant_id=principal.tenant_id,
                session_id=request.session_id,
                page_size=request.page_size,
                page_token=request.page_token,
            ),
        )
        return webhooks_pb2.ListWebhooksResponse(
            webhooks=[h.webhook for h in reply.webhooks], next_page_token=reply.next_page_token
        )

    async def DeleteWebhook(self, request: webhooks_pb2.DeleteWebhookRequest, context: Any) -> Any:
        principal = self._caller(context)
        if principal.pinned_scope:
            await self.store.get(principal, request.webhook_id)
        reply = await call(
            "sessions",
            self.store.stub.DeleteWebhook,
            store_pb2.DeleteWebhookRequest(tenant_id=principal.tenant_id, webhook_id=request.webhook_id),
        )
        return webhooks_pb2.DeleteWebhookResponse(deleted=reply.deleted)

    async def ListWebhookDeliveries(self, request: webhooks_pb2.ListWebhookDeliveriesRequest, context: Any) -> Any:
        principal = self._caller(context)
        if principal.pinned_scope:
            if not request.session_id:
                raise InvalidArgument([("session_id", "is required: this API key sees only the sessions of its scope")])
            await self.store.check_session(principal, request.session_id)
        reply = await call(
            "sessions",
            self.store.stub.ListWebhookDeliveries,
            store_pb2.ListWebhookDeliveriesRequest(tenant_id=principal.tenant_id, query=request),
        )
        return reply.page

    async def RedeliverWebhookDelivery(
        self, request: webhooks_pb2.RedeliverWebhookDeliveryRequest, context: Any
    ) -> Any:
        principal = self._caller(context)
        if principal.pinned_scope:
            named = parse_delivery_id(request.delivery_id)
            if named is None:
                raise NotFound(f"webhook delivery {request.delivery_id!r} not found")
            await self.store.check_session(principal, named[1])
        reply = await call(
            "sessions",
            self.store.stub.RedeliverWebhookDelivery,
            store_pb2.RedeliverWebhookDeliveryRequest(tenant_id=principal.tenant_id, delivery_id=request.delivery_id),
        )
        return webhooks_pb2.RedeliverWebhookDeliveryResponse(delivery=reply.delivery)
