"""A generated document: written by its tool, or checked against the committed copy (`--check`, in make check)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(description: str | None, output: Path, render: Callable[[], str], tool: str) -> int:
    """Parse `--check`; write `output` from `render()`, or exit 1 when the committed one differs."""
    shown = output.relative_to(ROOT)
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help=f"fail if {shown} is stale")
    opts = parser.parse_args()
    text = render()
    if opts.check:
        if not output.exists() or output.read_text() != text:
            print(f"{shown} is stale; run `python {tool}`", file=sys.stderr)
            return 1
        print(f"{shown} is up to date")
        return 0
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text)
    print(f"wrote {shown} ({text.count(chr(10))} lines)")
    return 0
