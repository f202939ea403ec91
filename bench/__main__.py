"""Run every benchmark in one go and collect their tables into BENCHMARKS.md.

    python -m bench                 # all of them (a few minutes)
    python -m bench gateway policy  # some of them
    python -m bench --collect       # only regather the last results

Each module measures its baseline in the same run and writes bench/results/<name>.md;
this runner only sequences them and gathers the results.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
ALL = ["gateway", "runtime", "policy", "context", "sessions", "observability"]


def demote(markdown: str) -> str:
    """Each result's headings go one level down under BENCHMARKS.md's own title."""
    return "\n".join("#" + line if line.startswith("#") else line for line in markdown.strip().splitlines())


def main(names: list[str]) -> int:
    failed = []
    collect_only = names == ["--collect"]  # just regather the last results
    for name in [] if collect_only else names or ALL:
        print(f"== bench.{name}", flush=True)
        started = time.monotonic()
        if subprocess.run([sys.executable, "-m", f"bench.{name}"], cwd=ROOT).returncode != 0:
            failed.append(name)
        print(f"== bench.{name}: {time.monotonic() - started:.0f}s", flush=True)
    sections = [demote((RESULTS / f"{name}.md").read_text()) for name in ALL if (RESULTS / f"{name}.md").exists()]
    header = (
        "# Benchmarks\n\nGathered by `python -m bench` from bench/results/. Every table compares cogmesh with a "
        "baseline measured in the same run on the same machine (2 shared cores): read the ratios, not the "
        "absolute figures.\n"
    )
    (ROOT / "BENCHMARKS.md").write_text(header + "\n" + "\n\n".join(sections) + "\n")
    if failed:
        print("failed: " + ", ".join(failed), file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
