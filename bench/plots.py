"""PNG plots of the benchmark results, drawn from bench/results/ (*.json, and gateway.md's tables).

    python -m bench.plots   # after the benches; `python -m bench` runs it last

A plot whose results are missing is skipped, so any subset of the benches can be plotted.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt
import matplotlib.ticker

from bench import harness

# The gateway issue's targets.
FANOUT_TARGET = 200_000.0  # aggregate events/s to 100 subscribers
LAG_TARGET_MS = 50.0  # p99 lag
TTFE_TARGETS_MS = {"p50": 3.0, "p99": 10.0}
HOTPATH_IDEAL_MS = 1180.0  # 200 ms to the first token, then 49 gaps of 20 ms
HOTPATH_TTFE_TARGET_MS = 200.0
SYSTEM_COLOURS = {
    "cogmesh": "tab:blue",
    "in-process": "tab:green",
    "langgraph": "tab:red",
    "langgraph in-process": "tab:orange",
}


def number(cell: str) -> float:
    try:
        return float(cell.replace(",", "").rstrip("x"))
    except ValueError:
        return math.nan


def gateway_tables() -> tuple[list[dict[str, str]], list[dict[str, str]]] | None:
    """(fan-out rows, latency rows) from gateway.md, whose bench writes only markdown."""
    path = harness.RESULTS / "gateway.md"
    if not path.exists():
        return None
    tables = harness.parse_tables(path.read_text())
    fan = next((t for t in tables if t and "subscribers" in t[0]), None)
    latency = next((t for t in tables if t and "metric" in t[0]), None)
    return (fan, latency) if fan is not None and latency is not None else None


def save(figure: Any, name: str) -> Path:
    path = harness.RESULTS / f"{name}.png"
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def plot_latency() -> Path | None:
    """Time to first event and full turn, p50 and p99: cogmesh vs in-process vs the LangGraph peer."""
    data = harness.read_data("peer")
    if data is None:
        return None
    workloads: dict[str, dict[str, dict[str, float]]] = data["systems"]
    figure, axes = plt.subplots(1, len(workloads), figsize=(6 * len(workloads), 4.5), squeeze=False)
    metrics = ["ttfe_p50_ms", "ttfe_p99_ms", "full_p50_ms", "full_p99_ms"]
    for ax, (workload, systems) in zip(axes[0], workloads.items(), strict=True):
        width = 0.8 / len(systems)
        for i, (name, figures) in enumerate(systems.items()):
            xs = [m + i * width for m in range(len(metrics))]
            ax.bar(xs, [figures[m] for m in metrics], width, label=name, color=SYSTEM_COLOURS.get(name))
        ax.set_xticks([m + 0.4 - width / 2 for m in range(len(metrics))])
        ax.set_xticklabels(["TTFE p50", "TTFE p99", "full p50", "full p99"])
        ax.set_yscale("log")
        ax.set_ylabel("ms (log scale)")
        ax.set_title(
            {"tokens": "100 streamed tokens", "tool": "one tool call, then the answer"}.get(workload, workload)
        )
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8)
    return save(figure, "latency")


def plot_fanout() -> Path | None:
    """Aggregate throughput and p99 lag against subscribers: cogmesh vs a bare grpc.aio stream."""
    tables = gateway_tables()
    if tables is None:
        return None
    rows = tables[0]
    subscribers = [number(r["subscribers"]) for r in rows]
    column = {
        key: next((k for k in rows[0] if key in k), "")
        for key in ("cogmesh events", "raw grpc", "cogmesh p99", "raw p99")
    }
    figure, (rate, lag) = plt.subplots(1, 2, figsize=(11, 4.5))
    rate.plot(subscribers, [number(r[column["cogmesh events"]]) for r in rows], "o-", label="cogmesh")
    rate.plot(subscribers, [number(r[column["raw grpc"]]) for r in rows], "s--", label="raw grpc.aio")
    rate.axhline(FANOUT_TARGET, color="grey", linestyle=":", label="target (100 subscribers)")
    rate.set(
        xscale="log", yscale="log", xlabel="subscribers", ylabel="events/s (aggregate)", title="Fan-out throughput"
    )
    lag.plot(subscribers, [number(r[column["cogmesh p99"]]) for r in rows], "o-", label="cogmesh")
    lag.plot(subscribers, [number(r[column["raw p99"]]) for r in rows], "s--", label="raw grpc.aio")
    lag.axhline(LAG_TARGET_MS, color="grey", linestyle=":", label="target")
    lag.set(xscale="log", xlabel="subscribers", ylabel="p99 lag ms", title="Fan-out p99 lag")
    for ax in (rate, lag):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    return save(figure, "fanout")


def plot_concurrency() -> Path | None:
    """p99 time to first event and memory per session against concurrent sessions, memory vs Redis stores."""
    data = harness.read_data("concurrency")
    if data is None:
        return None
    modes: dict[str, list[dict[str, Any]]] = data["modes"]
    figure, (ttfe, memory) = plt.subplots(1, 2, figsize=(11, 4.5))
    for mode, levels in modes.items():
        sessions = [s["sessions"] for s in levels]
        ttfe.plot(sessions, [s["ttfe_p99_ms"] for s in levels], "o-", label=f"{mode} stores: p99")
        ttfe.plot(sessions, [s["ttfe_p50_ms"] for s in levels], "x:", label=f"{mode} stores: p50")
        memory.plot(sessions, [s["session_kb"]["all services"] for s in levels], "o-", label=f"{mode}: RSS/session")
        memory.plot(sessions, [s["subscriber_kb"] for s in levels], "x:", label=f"{mode}: gateway RSS/subscriber")
        if mode == "redis":
            memory.plot(sessions, [s["redis_session_kb"] for s in levels], "s--", label="redis: Redis/session")
    ttfe.set(xscale="log", yscale="log", xlabel="concurrent sessions", ylabel="ms", title="Time to first event")
    memory.set(xscale="log", xlabel="concurrent sessions", ylabel="KB", title="Memory per session / subscriber")
    for ax in (ttfe, memory):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    return save(figure, "concurrency")


HOTPATH_COLOURS = {"sdk": "tab:green", "langgraph": "tab:orange", "cogmesh": "tab:blue", "cogmesh+redis": "tab:purple"}
HOTPATH_PROCESSES = ["client", "gateway", "runtime", "sessions", "context", "policy", "models", "redis"]


def plot_hotpath() -> Path | None:
    """Paced turns against sessions at once (full turn, first event), and CPU per turn by process."""
    data = harness.read_data("hotpath")
    if data is None:
        return None
    rows: list[dict[str, Any]] = data["rows"]
    figure, (full, first, cpu) = plt.subplots(1, 3, figsize=(17, 4.8))
    for system, colour in HOTPATH_COLOURS.items():
        paced = sorted(
            (r for r in rows if r["workload"] == "paced" and r["system"] == system), key=lambda r: r["concurrency"]
        )
        if not paced:
            continue
        levels = [r["concurrency"] for r in paced]
        full.plot(levels, [r["ms"]["full_p50"] for r in paced], "o-", color=colour, label=f"{system} p50")
        full.plot(levels, [r["ms"]["full_p99"] for r in paced], "x:", color=colour, label=f"{system} p99")
        first.plot(levels, [r["ms"]["ttfe_p99"] for r in paced], "o-", color=colour, label=f"{system} p99")
    full.axhline(HOTPATH_IDEAL_MS, color="grey", linestyle=":", label="ideal (the model's pace)")
    first.axhline(HOTPATH_TTFE_TARGET_MS, color="grey", linestyle=":", label="target at 1,000 sessions")
    full.set(xscale="log", yscale="log", xlabel="sessions at once", ylabel="ms", title="Paced turn: full turn")
    first.set(xscale="log", yscale="log", xlabel="sessions at once", ylabel="ms", title="Paced turn: first event p99")
    # CPU per turn: one group of bars per measurement, one bar per system, stacked by process.
    groups = [
        ("tokens", 1, "100 tokens\none at a time"),
        ("paced", 1, "paced\none at a time"),
        ("paced", 200, "paced\n200 at once"),
    ]
    systems = [s for s in HOTPATH_COLOURS if any(r["system"] == s for r in rows)]
    width = 0.8 / max(1, len(systems))
    tallest = 0.0
    shades = plt.get_cmap("Set3").colors  # services: pastel, apart from the systems' own colours
    for g, (workload, level, _) in enumerate(groups):
        for i, system in enumerate(systems):
            row = next(
                (r for r in rows if (r["workload"], r["concurrency"], r["system"]) == (workload, level, system)), None
            )
            if row is None:
                continue
            bottom = 0.0
            for k, process in enumerate(HOTPATH_PROCESSES):
                value = row["cpu_ms"].get(process, 0.0)
                colour = HOTPATH_COLOURS[system] if process == "client" else shades[k % len(shades)]
                cpu.bar(g + i * width, value, width, bottom=bottom, color=colour, edgecolor="white", linewidth=0.5)
                bottom += value
            cpu.text(g + i * width, bottom, system, rotation=90, ha="center", va="bottom", fontsize=7)
            tallest = max(tallest, bottom)
    cpu.set_ylim(0, tallest * 1.35)  # room for the labels above the bars
    cpu.set_xticks([g + 0.4 - width / 2 for g in range(len(groups))])
    cpu.set_xticklabels([label for _, _, label in groups])
    cpu.set(ylabel="CPU ms per turn (all processes)", title="CPU per turn (client, then each service)")
    cpu.legend(
        handles=[plt.Rectangle((0, 0), 1, 1, color=shades[k % len(shades)]) for k in range(1, len(HOTPATH_PROCESSES))]
        + [plt.Rectangle((0, 0), 1, 1, color="black")],
        labels=[*HOTPATH_PROCESSES[1:], "client (the system's colour)"],
        fontsize=7,
    )
    for ax in (full, first):
        ax.set_xticks(sorted({r["concurrency"] for r in rows if r["workload"] == "paced"}))
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
            axis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    cpu.grid(axis="y", alpha=0.3)
    return save(figure, "hotpath")


def main() -> list[Path]:
    harness.RESULTS.mkdir(parents=True, exist_ok=True)
    drawn = (plot_latency(), plot_fanout(), plot_concurrency(), plot_hotpath())
    written = [p for p in drawn if p is not None]
    for path in written:
        print(f"written {path}")
    return written


if __name__ == "__main__":
    main()
