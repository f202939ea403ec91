"""The gateway's A2A binding: exposed agents reachable through the A2A protocol's gRPC service.

`mapping` is plain code (requests, events and tasks; no gRPC), `servicer` the thin
`lf.a2a.v1.A2AService`, `guard` puts it behind the gateway's auth. See docs/a2a.md.
"""
