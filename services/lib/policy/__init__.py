"""The policy engine: configuration, tool policy, hooks, interceptors and the proto API.

The policy service serves it over gRPC and publishes its configuration as snapshots;
the runtime builds the same engine from a snapshot and decides locally.
"""
