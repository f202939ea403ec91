"""The public WebhookService (servicer.py) over the sessions service's WebhookStoreService."""
