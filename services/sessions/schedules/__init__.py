"""Schedules and their runs, kept durable for the gateways' schedulers (docs/schedules.md).

`store.py` holds the rules every backend keeps (compare-and-set on versions, the due and
stale indexes) and the in-memory store; `redis_store.py` the Redis one (standalone,
Sentinel or Cluster); `servicer.py` serves them as cogmesh.sessions.v1.ScheduleStoreService.
"""
