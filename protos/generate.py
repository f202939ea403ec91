"""Generate the Python code for every proto under protos/ into clients/python.

    python protos/generate.py          # regenerate
    python protos/generate.py --check  # exit 1 when the committed code is stale

Generated modules are importable as cogmesh.<area>.v1.<file>_pb2(_grpc). The public
API (PUBLIC_PROTOS) also gets <file>_connect.py from protoc-gen-connectrpc (Google
protobuf messages): the Connect and gRPC-Web service the browser edge (gateway/web) serves.
"""

from __future__ import annotations

import argparse
import filecmp
import importlib.resources
import shutil
import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "protos"
OUT_ROOT = ROOT / "clients" / "python"
PACKAGE = "cogmesh"
PUBLIC_PROTOS = ["cogmesh/gateway/v1/gateway.proto"]


def connect_plugin() -> str:
    """protoc-gen-connectrpc from this virtualenv (pinned in pyproject's dev extra)."""
    beside = Path(sys.executable).parent / "protoc-gen-connectrpc"
    found = str(beside) if beside.exists() else shutil.which("protoc-gen-connectrpc")
    if found is None:
        raise SystemExit("protoc-gen-connectrpc not found: pip install -e '.[dev]'")
    return found


def generate(out: Path) -> None:
    protos = sorted(str(p.relative_to(PROTO_ROOT)) for p in (PROTO_ROOT / PACKAGE).rglob("*.proto"))
    well_known = str(importlib.resources.files("grpc_tools") / "_proto")
    args = [
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"-I{well_known}",
        f"--python_out={out}",
        f"--pyi_out={out}",
        f"--grpc_python_out={out}",
        *protos,
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    connect = [
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"-I{well_known}",
        f"--plugin=protoc-gen-connectrpc={connect_plugin()}",
        f"--connectrpc_out=protobuf=google:{out}",
        *PUBLIC_PROTOS,
    ]
    if protoc.main(connect) != 0:
        raise SystemExit("protoc (connectrpc) failed")
    # Every generated folder is a regular package so `cogmesh.<area>.v1` imports cleanly.
    for folder in (out / PACKAGE).rglob("*"):
        if folder.is_dir():
            (folder / "__init__.py").touch()


def generated_files(root: Path) -> set[Path]:
    """Files the generator owns: everything in cogmesh/<area>/v1/ plus each area's marker."""
    owned: set[Path] = set()
    for area in (PROTO_ROOT / PACKAGE).iterdir():
        area_out = root / PACKAGE / area.name
        owned |= {p.relative_to(root) for p in area_out.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    return owned


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="fail if committed generated code is stale")
    opts = parser.parse_args()
    if not opts.check:
        for path in generated_files(OUT_ROOT):
            (OUT_ROOT / path).unlink()
        generate(OUT_ROOT)
        print(f"generated {len(generated_files(OUT_ROOT))} files under {OUT_ROOT.relative_to(ROOT)}")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp)
        generate(fresh)
        want, have = generated_files(fresh), generated_files(OUT_ROOT)
        stale = sorted(str(p) for p in want ^ have)
        stale += sorted(str(p) for p in want & have if not filecmp.cmp(fresh / p, OUT_ROOT / p, shallow=False))
        if stale:
            print("generated code is stale; run `python protos/generate.py`:", *stale, sep="\n  ", file=sys.stderr)
            return 1
    print("generated code is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
