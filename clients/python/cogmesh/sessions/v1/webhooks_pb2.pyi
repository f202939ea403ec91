from buf.validate import validate_pb2 as _validate_pb2
from cogmesh.gateway.v1 import webhooks_pb2 as _webhooks_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class WebhookFormat(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    WEBHOOK_FORMAT_UNSPECIFIED: _ClassVar[WebhookFormat]
    WEBHOOK_FORMAT_COGMESH: _ClassVar[WebhookFormat]
    WEBHOOK_FORMAT_A2A: _ClassVar[WebhookFormat]
WEBHOOK_FORMAT_UNSPECIFIED: WebhookFormat
WEBHOOK_FORMAT_COGMESH: WebhookFormat
WEBHOOK_FORMAT_A2A: WebhookFormat

class A2APush(_message.Message):
    __slots__ = ("task_id", "config_id", "token", "auth_scheme", "auth_credentials")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    CONFIG_ID_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    AUTH_SCHEME_FIELD_NUMBER: _ClassVar[int]
    AUTH_CREDENTIALS_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    config_id: str
    token: str
    auth_scheme: str
    auth_credentials: str
    def __init__(self, task_id: _Optional[str] = ..., config_id: _Optional[str] = ..., token: _Optional[str] = ..., auth_scheme: _Optional[str] = ..., auth_credentials: _Optional[str] = ...) -> None: ...

class StoredWebhook(_message.Message):
    __slots__ = ("webhook", "format", "a2a")
    WEBHOOK_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    A2A_FIELD_NUMBER: _ClassVar[int]
    webhook: _webhooks_pb2.Webhook
    format: WebhookFormat
    a2a: A2APush
    def __init__(self, webhook: _Optional[_Union[_webhooks_pb2.Webhook, _Mapping]] = ..., format: _Optional[_Union[WebhookFormat, str]] = ..., a2a: _Optional[_Union[A2APush, _Mapping]] = ...) -> None: ...

class CreateWebhookRequest(_message.Message):
    __slots__ = ("tenant_id", "webhook", "format", "a2a")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    WEBHOOK_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    A2A_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    webhook: _webhooks_pb2.CreateWebhookRequest
    format: WebhookFormat
    a2a: A2APush
    def __init__(self, tenant_id: _Optional[str] = ..., webhook: _Optional[_Union[_webhooks_pb2.CreateWebhookRequest, _Mapping]] = ..., format: _Optional[_Union[WebhookFormat, str]] = ..., a2a: _Optional[_Union[A2APush, _Mapping]] = ...) -> None: ...

class CreateWebhookResponse(_message.Message):
    __slots__ = ("webhook", "secret")
    WEBHOOK_FIELD_NUMBER: _ClassVar[int]
    SECRET_FIELD_NUMBER: _ClassVar[int]
    webhook: StoredWebhook
    secret: str
    def __init__(self, webhook: _Optional[_Union[StoredWebhook, _Mapping]] = ..., secret: _Optional[str] = ...) -> None: ...

class GetWebhookRequest(_message.Message):
    __slots__ = ("tenant_id", "webhook_id")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    WEBHOOK_ID_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    webhook_id: str
    def __init__(self, tenant_id: _Optional[str] = ..., webhook_id: _Optional[str] = ...) -> None: ...

class GetWebhookResponse(_message.Message):
    __slots__ = ("webhook",)
    WEBHOOK_FIELD_NUMBER: _ClassVar[int]
    webhook: StoredWebhook
    def __init__(self, webhook: _Optional[_Union[StoredWebhook, _Mapping]] = ...) -> None: ...

class ListWebhooksRequest(_message.Message):
    __slots__ = ("tenant_id", "session_id", "turn_id", "format", "page_size", "page_token")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    session_id: str
    turn_id: str
    format: WebhookFormat
    page_size: int
    page_token: str
    def __init__(self, tenant_id: _Optional[str] = ..., session_id: _Optional[str] = ..., turn_id: _Optional[str] = ..., format: _Optional[_Union[WebhookFormat, str]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListWebhooksResponse(_message.Message):
    __slots__ = ("webhooks", "next_page_token")
    WEBHOOKS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    webhooks: _containers.RepeatedCompositeFieldContainer[StoredWebhook]
    next_page_token: str
    def __init__(self, webhooks: _Optional[_Iterable[_Union[StoredWebhook, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class DeleteWebhookRequest(_message.Message):
    __slots__ = ("tenant_id", "webhook_id")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    WEBHOOK_ID_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    webhook_id: str
    def __init__(self, tenant_id: _Optional[str] = ..., webhook_id: _Optional[str] = ...) -> None: ...

class DeleteWebhookResponse(_message.Message):
    __slots__ = ("deleted",)
    DELETED_FIELD_NUMBER: _ClassVar[int]
    deleted: bool
    def __init__(self, deleted: _Optional[bool] = ...) -> None: ...

class ListWebhookDeliveriesRequest(_message.Message):
    __slots__ = ("tenant_id", "query")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    query: _webhooks_pb2.ListWebhookDeliveriesRequest
    def __init__(self, tenant_id: _Optional[str] = ..., query: _Optional[_Union[_webhooks_pb2.ListWebhookDeliveriesRequest, _Mapping]] = ...) -> None: ...

class ListWebhookDeliveriesResponse(_message.Message):
    __slots__ = ("page",)
    PAGE_FIELD_NUMBER: _ClassVar[int]
    page: _webhooks_pb2.ListWebhookDeliveriesResponse
    def __init__(self, page: _Optional[_Union[_webhooks_pb2.ListWebhookDeliveriesResponse, _Mapping]] = ...) -> None: ...

class RedeliverWebhookDeliveryRequest(_message.Message):
    __slots__ = ("tenant_id", "delivery_id")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_ID_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    delivery_id: str
    def __init__(self, tenant_id: _Optional[str] = ..., delivery_id: _Optional[str] = ...) -> None: ...

class RedeliverWebhookDeliveryResponse(_message.Message):
    __slots__ = ("delivery",)
    DELIVERY_FIELD_NUMBER: _ClassVar[int]
    delivery: _webhooks_pb2.WebhookDelivery
    def __init__(self, delivery: _Optional[_Union[_webhooks_pb2.WebhookDelivery, _Mapping]] = ...) -> None: ...
