"""Run every benchmark in one go, then write BENCHMARKS.md (tables) and PNG plots.

    python -m bench                 # all of them (the LangGraph peer's venv is created on first use)
    python -m bench gateway peer    # some of them
    python -m bench --collect       # only regather the last results and redraw the plots
    python -m bench --quick         # small sizes, no peer, into bench/out/quick: the plumbing, in about a minute

Each module measures its baseline in the same run and writes <results>/<name>.md (and
<name>.json for the plots); this runner only sequences them, draws the plots, states
where each of the gateway issue's targets stands and gathers everything.
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ALL = [
    "gateway",
    "runtime",
    "policy",
    "context",
    "sessions",
    "memory",
    "observability",
    "sdk",
    "peer",
    "concurrency",
    "hotpath",
    "hops",
    "journal",
    "capacity",
    "memory_pack",
    "large_payloads",
    "session_scopes",
    "edges",
    "idle",
]
# Runs with a command of their own (`python -m bench.soak`, `bench.schedules`: minutes of wall clock;
# `bench.webhooks`, `bench.session_search`: tens of thousands of sessions): collected, never run by default.
COLLECTED_ONLY = ["soak", "schedules", "webhooks", "session_search"]
# Small sizes that exercise every code path; the peer is left out (its venv install is minutes).
QUICK = {
    "gateway": ["--subscribers", "1,4", "--words", "150", "--turns", "10"],
    "peer": ["--no-peer", "--turns", "8", "--rounds", "1", "--warmup", "2"],
    "concurrency": ["--levels", "4,12", "--warmup", "2", "--settle", "0.2"],
    "memory": ["--sizes", "1000", "--queries", "30"],
    "journal": ["--turns", "5", "--rounds", "1", "--concurrency", "1"],
    "capacity": ["--quick"],
    "hops": ["--calls", "200", "--rounds", "1"],
    "memory_pack": ["--turns", "10", "--memories", "50"],
    "hotpath": [
        "--no-peer",
        "--levels",
        "1,4",
        "--turns",
        "4",
        "--paced-turns",
        "1",
        "--level-turns",
        "4",
        "--warmup",
        "2",
        "--idle",
        "0.5",
    ],
}
PLOTS = {
    "latency": "TTFE and full turn",
    "fanout": "fan-out",
    "concurrency": "concurrency",
    "hotpath": "hot path: cogmesh vs LangGraph vs the openai SDK",
}


def demote(markdown: str) -> str:
    """Each result's headings go one level down under BENCHMARKS.md's own title."""
    return "\n".join("#" + line if line.startswith("#") else line for line in markdown.strip().splitlines())


def shown(value: float, unit: str = "", digits: int = 2) -> str:
    return "-" if math.isnan(value) else f"{value:,.{digits}f}{unit}"


def verdict(value: float, target: float, below: bool = True) -> str:
    if math.isnan(value):
        return "not measured"
    return "**met**" if (value < target if below else value >= target) else "**not met**"


def targets(results: Path) -> str:
    """The gateway issue's numbers and where each stands in these results."""
    from bench import harness, plots

    rows = []
    gateway = plots.gateway_tables() if (results / "gateway.md").exists() else None
    fan = {int(plots.number(r["subscribers"])): r for r in gateway[0]} if gateway else {}
    row = fan.get(100)
    # Columns found by name: the gateway bench owns its table's layout.
    rate = plots.number(next((v for k, v in row.items() if "cogmesh events" in k), "nan")) if row else math.nan
    lag = plots.number(next((v for k, v in row.items() if "cogmesh p99" in k), "nan")) if row else math.nan
    rows.append(
        [
            "fan-out to 100 subscribers, aggregate",
            ">= 200,000 events/s",
            shown(rate, " events/s", 0),
            verdict(rate, 2e5, False),
        ]
    )
    rows.append(["fan-out p99 lag, 100 subscribers (burst)", "< 50 ms", shown(lag, " ms"), verdict(lag, 50)])
    # The second fan-out table is the paced one (events at a steady rate): there lag means latency.
    text = (results / "gateway.md").read_text() if (results / "gateway.md").exists() else ""
    fan_tables = [t for t in harness.parse_tables(text) if t and "subscribers" in t[0]]
    paced = {int(plots.number(r["subscribers"])): r for r in fan_tables[1]} if len(fan_tables) > 1 else {}
    if prow := paced.get(100):
        plag = plots.number(next((v for k, v in prow.items() if "cogmesh p99" in k), "nan"))
        rows.append(["fan-out p99 lag, 100 subscribers (paced)", "< 50 ms", shown(plag, " ms"), verdict(plag, 50)])
    # Time to first event: the gateway bench's own measurement (turn after turn, nothing else
    # running), then the peer comparison's (a new session per turn, LangGraph's server alongside).
    latency = {r["metric"]: r for r in gateway[1]} if gateway else {}
    first = latency.get("time to first event", {})
    p50, p99 = plots.number(first.get("p50 ms", "nan")), plots.number(first.get("p99 ms", "nan"))
    rows.append(["time to first event p50 (new turn, suite)", "< 3 ms", shown(p50, " ms"), verdict(p50, 3)])
    rows.append(["time to first event p99 (new turn, suite)", "< 10 ms", shown(p99, " ms"), verdict(p99, 10)])
    peer = harness.read_data("peer")
    tokens = peer["systems"]["tokens"]["cogmesh"] if peer else {}
    p50, p99 = tokens.get("ttfe_p50_ms", math.nan), tokens.get("ttfe_p99_ms", math.nan)
    rows.append(
        ["time to first event p50 (peer run: new session, 100 tokens)", "< 3 ms", shown(p50, " ms"), verdict(p50, 3)]
    )
    rows.append(
        ["time to first event p99 (peer run: new session, 100 tokens)", "< 10 ms", shown(p99, " ms"), verdict(p99, 10)]
    )
    return (
        "# Targets (gateway issue)\n\n"
        + harness.table(["what", "target", "measured", "status"], rows)
        + "\n\nFan-out and the first time-to-first-event pair from the Gateway section; the second pair from the "
        "peer comparison (cogmesh row), where the LangGraph server runs on the same 2 cores.\n"
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", help=f"benches to run (default: all of {', '.join(ALL)})")
    parser.add_argument("--collect", action="store_true", help="run nothing; regather results and redraw plots")
    parser.add_argument("--quick", action="store_true", help="small sizes, no peer, results in bench/out/quick")
    parser.add_argument("--out", type=Path, help="results folder (default bench/results, or bench/out/quick)")
    args = parser.parse_args(argv)
    if unknown := [n for n in args.names if n not in ALL]:
        parser.error(f"unknown bench(es): {', '.join(unknown)} (choose from {', '.join(ALL)})")
    names = [] if args.collect else args.names or (list(QUICK) if args.quick else ALL)
    out = args.out or (ROOT / "bench" / "out" / "quick" if args.quick else None)
    results = (out or ROOT / "bench" / "results").resolve()
    results.mkdir(parents=True, exist_ok=True)
    # The benches (subprocesses) and the plots (this process) read the results folder from here.
    os.environ["COGMESH_BENCH_RESULTS"] = str(results)
    failed = []
    for name in names:
        print(f"== bench.{name}", flush=True)
        started = time.monotonic()
        extra = QUICK.get(name, []) if args.quick else []
        if subprocess.run([sys.executable, "-m", f"bench.{name}", *extra], cwd=ROOT).returncode != 0:
            failed.append(name)
        print(f"== bench.{name}: {time.monotonic() - started:.0f}s", flush=True)

    from bench import plots

    drawn = {path.stem for path in plots.main()}
    markdown = ROOT / "BENCHMARKS.md" if out is None else results / "BENCHMARKS.md"
    links = [
        f"![{title}]({os.path.relpath(results / f'{stem}.png', markdown.parent)})"
        for stem, title in PLOTS.items()
        if stem in drawn
    ]
    # <name>.notes.md: what a person wrote about a bench's figures (what limits them), kept across reruns.
    sections = [
        demote(
            "\n\n".join(
                path.read_text() for path in (results / f"{name}.md", results / f"{name}.notes.md") if path.exists()
            )
        )
        for name in [*ALL, *COLLECTED_ONLY]
        if (results / f"{name}.md").exists()
    ]
    header = (
        "# Benchmarks\n\nGathered by `python -m bench` from "
        f"{os.path.relpath(results, ROOT)}/. Every table compares cogmesh with a baseline measured in the same run "
        "on the same machine (2 shared cores): read the ratios, not the absolute figures."
    )
    body = [header, demote(targets(results)), *(["## Plots\n\n" + "\n\n".join(links)] if links else []), *sections]
    markdown.write_text("\n\n".join(body) + "\n")
    print(f"written {markdown}")
    if failed:
        print("failed: " + ", ".join(failed), file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
