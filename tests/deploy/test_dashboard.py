"""The Grafana dashboard: its PromQL parses and queries only metrics cogmesh exports, and it
shows every signal the issue asks for."""

from __future__ import annotations

import json
from pathlib import Path

from deploy import validate


def test_dashboard_queries_parse_and_use_exported_metrics() -> None:
    assert validate.check_dashboard() == []


def test_dashboard_covers_every_signal() -> None:
    queries = " ".join(validate.dashboard_queries())
    for metric in (
        "grpc_server_handling_seconds_bucket",  # RPC latency by method
        "grpc_server_handling_seconds_count",  # rates and errors by status
        "grpc_server_active_streams",
        "cogmesh_events_total",
        "cogmesh_turn_duration_seconds_bucket",
        "cogmesh_model_tokens_total",
        "cogmesh_model_cost_usd_total",
        "cogmesh_policy_denials_total",
        "cogmesh_circuit_breaker_state",
    ):
        assert metric in queries, metric


def test_dashboard_check_catches_bad_queries(tmp_path: Path) -> None:
    dashboard = json.loads(validate.DASHBOARD.read_text())
    dashboard["panels"][1]["targets"][0]["expr"] = "sum by (outcome (rate(cogmesh_turn_duration_seconds_count[5m]))"
    dashboard["panels"][2]["targets"][0]["expr"] = "rate(cogmesh_turns_started_total[5m])"
    broken = tmp_path / "dashboard.json"
    broken.write_text(json.dumps(dashboard))
    problems = "\n".join(validate.check_dashboard(broken))
    assert "syntax error" in problems
    assert "cogmesh_turns_started_total is not a metric cogmesh exports" in problems
