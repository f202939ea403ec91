"""Local stand-ins for outside services (model providers, tool servers) that speak their real wire formats."""
