"""Libraries shared by services: each imports only services.kit and services.lib."""
