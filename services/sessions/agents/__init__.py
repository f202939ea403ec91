"""The tenants' versioned agents: `store.py` keeps them (memory, or Redis in `redis_store.py`: standalone,
Sentinel or Cluster); `servicer.py` serves them as cogmesh.sessions.v1.AgentStoreService."""
