"""bench.capacity at a tiny scale: every figure docs/capacity.md uses is there, finite and of the right sign.

No assertion on speed: the figures of a quick run on a loaded machine mean nothing, only their presence does.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from tests.support.bench import run_bench_module

# Processes that do work in every turn; policy, models, context and memory may round to 0 ticks in a tiny run.
BUSY = ["client", "gateway", "runtime", "sessions", "redis"]


def positive(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(value) and value > 0


def finite(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(value) and value >= 0


@pytest.mark.timeout(600)
def test_the_capacity_bench_measures_every_input_of_the_model(tmp_path: Path) -> None:
    run_bench_module("bench.capacity", "--quick", results=tmp_path)
    data = json.loads((tmp_path / "capacity.json").read_text())

    # (a), (b): CPU of every process and Redis traffic, per turn of each workload.
    assert set(data["turns"]) == {"tool", "tokens50"}
    for name, turn in data["turns"].items():
        for process in BUSY:
            assert positive(turn["cpu_ms"][process]), (name, process, turn["cpu_ms"])
        assert all(finite(v) for v in turn["cpu_ms"].values()), turn["cpu_ms"]
        assert positive(turn["cpu_ms_total"]) and positive(turn["turns_per_s"]) and positive(turn["cores_busy"])
        for figure in ("commands", "bytes_in", "bytes_out"):
            assert positive(turn["redis"][figure]), (name, figure, turn["redis"])
        assert positive(turn["redis"]["by_command"]["evalsha"])  # sessions writes through its Lua scripts
        assert positive(turn["events_logged"]) and positive(turn["commands_per_event"])
    # 50 streamed tokens leave more events in the log than the tool turn's handful.
    assert data["turns"]["tokens50"]["events_logged"] > data["turns"]["tool"]["events_logged"]
    assert positive(sum(data["create_session"]["cpu_ms"].values()))
    assert positive(data["create_session"]["redis"]["commands"])

    # (b), (c): memory per session, per turn and event kept, per subscriber; the idle cost.
    memory = data["memory"]
    for figure in ("redis_bytes_per_session", "redis_bytes_per_turn_kept", "redis_bytes_per_event_kept"):
        assert positive(memory[figure]), (figure, memory)
    assert all(math.isfinite(v) for v in memory["rss_per_session"].values())  # RSS may shrink: only finite
    subscribers = data["subscribers"]
    assert subscribers["count"] == memory["sessions"]
    assert positive(subscribers["rss_per_subscriber"]["gateway"]), subscribers
    assert all(finite(v) for v in subscribers["idle_cpu_ms_per_s"].values())
    assert finite(subscribers["idle_redis_commands_per_s"])
    assert all(finite(v) for v in data["idle"]["cpu_ms_per_s"].values())

    # A lease renewal, measured on its own (the model adds a TURN_S turn's renewals at this cost): one script
    # on the session, in a batch as a runtime worker sends them.
    renewal = data["renewal"]
    assert renewal["renewals"] == renewal["batch"] * 20 and renewal["batch"] > 0
    # (a takeover poll may fall in the window: about one script each, not exactly)
    assert renewal["redis"]["by_command"]["evalsha"] == pytest.approx(1.0, abs=0.2), renewal["redis"]
    assert positive(renewal["redis"]["commands"]) and all(finite(v) for v in renewal["cpu_ms"].values())
    assert "each renewal as measured in a batch of open leases" in (tmp_path / "capacity.md").read_text()

    # (d): each configuration once per round, its ratio to 1 gateway + 1 runtime.
    rows = data["replicas"]
    assert [(r["gateways"], r["runtimes"]) for r in rows] == [(1, 1), (1, 2), (2, 2)]
    assert rows[0]["ratio"] == 1.0
    for row in rows:
        for figure in ("turns_per_s", "cores_busy", "turns_per_cpu_s", "turns_per_cpu_s_services", "ratio"):
            assert positive(row[figure]), (figure, row)
        assert row["within_tolerance"] == (abs(row["ratio"] - 1) <= data["tolerance"])
    assert data["tolerance"] == 0.15
    report = (tmp_path / "capacity.md").read_text()
    assert "| configuration | turns/s | cores busy | turns per CPU-s | ratio |" in report
