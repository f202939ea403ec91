"""cogmesh client: generated stubs (cogmesh.<area>.v1) and a gateway client (cogmesh.client)."""

__version__ = "0.1.0"
