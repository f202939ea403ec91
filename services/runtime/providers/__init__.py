"""Model provider adapters: one per wire protocol, each through the provider's official SDK."""
