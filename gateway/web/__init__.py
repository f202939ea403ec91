"""The browser edge: GatewayService over Connect and gRPC-Web, and the web console (docs/web.md)."""
