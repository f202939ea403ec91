"""Generate the code for the protos under protos/: Python into clients/python, Go into clients/go.

    python protos/generate.py          # regenerate
    python protos/generate.py --check  # exit 1 when the committed code is stale

Python modules are importable as cogmesh.<area>.v1.<file>_pb2(_grpc); they come from
grpc_tools' bundled protoc (pinned on PyPI). Go packages are cogmesh.dev/go/gen/cogmesh/<area>/v1
(package <area>v1, the `go_package` option every proto must carry); they come from Debian's
protoc, protoc-gen-go and protoc-gen-go-grpc (`make go-toolchain` installs them). Where
those are missing, Go is skipped with the reason, and the rest still runs. The gateway's
API (CONNECT_PROTOS) also gets <file>_connect.py from protoc-gen-connectrpc (Google protobuf
messages): the Connect and gRPC-Web service the browser edge (gateway/web) serves.

Public and internal: the clients ship only the public protos (PUBLIC_PROTOS: common, the
gateway's services, ToolService, HookService), which import nothing else; the services' own APIs
(sessions, runtime, policy, ...) are internal. Python is generated for every proto, because
the servers import the internal stubs from the same `cogmesh` package in this tree, and the
cogmesh-client wheel leaves the internal modules out (clients/python/setup.py reads
PUBLIC_MODULES below); Go (clients/go/gen) and TypeScript (clients/node/buf.gen.yaml) get the
public protos only.

Vendored: VENDORED_PROTOS are other projects' protos kept under protos/ in their own package
(buf/validate/validate.proto: protovalidate's field rules, which the public protos import).
They are generated for every language beside ours: Python as buf.validate.validate_pb2 (the
wheel ships it; the protovalidate package imports it by that name), Go as
cogmesh.dev/go/gen/buf/validate (mapped into our module, so the Go client needs no BSR module),
TypeScript under src/gen/buf/validate.
"""

from __future__ import annotations

import argparse
import filecmp
import fnmatch
import importlib.resources
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "protos"
PACKAGE = "cogmesh"
GO_MODULE = "cogmesh.dev/go"
GO_TOOLS = ("protoc", "protoc-gen-go", "protoc-gen-go-grpc")
CONNECT_PROTOS = ["cogmesh/gateway/v1/gateway.proto", "cogmesh/gateway/v1/agents.proto"]
# What clients get. A public proto imports only public protos and google/*; public_problems()
# fails the generation otherwise. Keep in step with clients/node/buf.gen.yaml and
# tools/buf_breaking.sh, which list the same files.
PUBLIC_PROTOS = [
    "cogmesh/common/v1/*.proto",
    "cogmesh/gateway/v1/*.proto",
    "cogmesh/policy/v1/hooks.proto",
    "cogmesh/tools/v1/tools.proto",
]
# Other projects' protos, vendored unchanged (protos/README.md says from where); no gRPC services.
VENDORED_PROTOS = ["buf/validate/validate.proto"]
VENDORED_GO_PACKAGES = {"buf/validate/validate.proto": f"{GO_MODULE}/gen/buf/validate;validate"}


def connect_plugin() -> str:
    """protoc-gen-connectrpc from this virtualenv (pinned in pyproject's dev extra)."""
    beside = Path(sys.executable).parent / "protoc-gen-connectrpc"
    found = str(beside) if beside.exists() else shutil.which("protoc-gen-connectrpc")
    if found is None:
        raise SystemExit("protoc-gen-connectrpc not found: pip install -e '.[dev]'")
    return found


def proto_files() -> list[str]:
    return sorted(str(p.relative_to(PROTO_ROOT)) for p in (PROTO_ROOT / PACKAGE).rglob("*.proto"))


def is_public(name: str) -> bool:
    """Whether a proto file (path under protos/) is part of the public API."""
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in PUBLIC_PROTOS)


def public_proto_files() -> list[str]:
    return [name for name in proto_files() if is_public(name)]


def public_problems() -> list[str]:
    """Every import of an internal proto by a public one: a client would have to ship it."""
    problems = []
    for name in public_proto_files():
        for imported in re.findall(r'^import\s+(?:public\s+)?"([^"]+)"\s*;', (PROTO_ROOT / name).read_text(), re.M):
            if imported.startswith(f"{PACKAGE}/") and not is_public(imported):
                problems.append(f"protos/{name}: the public API imports the internal {imported}")
    return problems


def public_python_modules() -> list[str]:
    """The generated Python modules of the public protos, as cogmesh/<area>/v1/<file>_pb2 stems."""
    return sorted(name.removesuffix(".proto") + "_pb2" for name in public_proto_files())


def generate_python(out: Path) -> None:
    well_known = str(importlib.resources.files("grpc_tools") / "_proto")
    args = [
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"-I{well_known}",
        f"--python_out={out}",
        f"--pyi_out={out}",
        f"--grpc_python_out={out}",
        *proto_files(),
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    vendored = ["grpc_tools.protoc", f"-I{PROTO_ROOT}", f"-I{well_known}", f"--python_out={out}", f"--pyi_out={out}"]
    if protoc.main([*vendored, *VENDORED_PROTOS]) != 0:
        raise SystemExit("protoc failed for the vendored protos")
    connect = [
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"-I{well_known}",
        f"--plugin=protoc-gen-connectrpc={connect_plugin()}",
        f"--connectrpc_out=protobuf=google:{out}",
        *CONNECT_PROTOS,
    ]
    if protoc.main(connect) != 0:
        raise SystemExit("protoc (connectrpc) failed")
    # Every generated folder is a regular package so `cogmesh.<area>.v1` (and `buf.validate`) import cleanly.
    # (cogmesh/__init__.py itself is hand-written: it is not the generator's.)
    folders = [f for top in (PACKAGE, *vendored_roots()) for f in (out / top).rglob("*") if f.is_dir()]
    for folder in [*folders, *(out / top for top in vendored_roots())]:
        (folder / "__init__.py").touch()
    for top in vendored_roots():  # typed (PEP 561) like cogmesh: the public stubs' .pyi import it
        (out / top / "py.typed").touch()


def vendored_roots() -> list[str]:
    """The top-level folders of the vendored protos ("buf"): the generator owns them whole."""
    return sorted({name.split("/", 1)[0] for name in VENDORED_PROTOS})


def python_files(root: Path) -> set[Path]:
    """Files the generator owns: everything in cogmesh/<area>/v1/ plus each area's marker, and the vendored trees."""
    folders = [root / PACKAGE / area.name for area in (PROTO_ROOT / PACKAGE).iterdir()]
    folders += [root / top for top in vendored_roots()]
    return {p.relative_to(root) for f in folders for p in f.rglob("*") if p.is_file() and "__pycache__" not in p.parts}


def go_package(proto_package: str) -> str:
    """The go_package of a proto package: cogmesh.gateway.v1 -> cogmesh.dev/go/gen/cogmesh/gateway/v1;gatewayv1."""
    parts = proto_package.split(".")
    return f"{GO_MODULE}/gen/{'/'.join(parts)};{''.join(parts[1:])}"


def go_package_problems() -> list[str]:
    """Every proto file whose go_package option is missing or not the one its package implies."""
    problems = []
    for name in proto_files():
        text = (PROTO_ROOT / name).read_text()
        package = re.search(r"^package\s+([\w.]+)\s*;", text, re.MULTILINE)
        option = re.search(r'^option\s+go_package\s*=\s*"([^"]*)"\s*;', text, re.MULTILINE)
        if package is None:
            problems.append(f"protos/{name}: no package statement")
            continue
        want = go_package(package.group(1))
        if option is None or option.group(1) != want:
            have = f'has "{option.group(1)}"' if option else "has none"
            problems.append(f'protos/{name}: needs `option go_package = "{want}";` ({have})')
    return problems


def go_tools_missing() -> str | None:
    absent = [tool for tool in GO_TOOLS if shutil.which(tool) is None]
    if absent:
        return f"{', '.join(absent)} not on PATH (`make go-toolchain` installs them from Debian's packages)"
    return None


def generate_go(out: Path) -> None:
    problems = go_package_problems()
    if problems:
        raise SystemExit("\n".join(problems))
    out.mkdir(parents=True, exist_ok=True)
    module = f"module={GO_MODULE}"  # files land under out/gen/..., as the import path says
    # The vendored protos' own go_package points at the BSR; map them into this module instead.
    mapped = [f"M{name}={package}" for name, package in VENDORED_GO_PACKAGES.items()]
    args = ["protoc", f"-I{PROTO_ROOT}", f"--go_out={out}", *(f"--go_opt={o}" for o in (module, *mapped))]
    args += [f"--go-grpc_out={out}", *(f"--go-grpc_opt={o}" for o in (module, *mapped))]
    args += [*public_proto_files(), *VENDORED_PROTOS]
    if subprocess.run(args, cwd=PROTO_ROOT).returncode != 0:
        raise SystemExit("protoc failed for Go")


def go_files(root: Path) -> set[Path]:
    """Everything under gen/ is generated."""
    return {p.relative_to(root) for p in (root / "gen").rglob("*") if p.is_file()}


@dataclass(frozen=True)
class Target:
    language: str
    out: Path
    generate: Callable[[Path], None]
    owned: Callable[[Path], set[Path]]
    missing: Callable[[], str | None] = lambda: None  # why it cannot run here, or None


TARGETS = [
    Target("Python", ROOT / "clients" / "python", generate_python, python_files),
    # Go exists only as the client module: public protos only.
    Target("Go", ROOT / "clients" / "go", generate_go, go_files, go_tools_missing),
]


def regenerate(target: Target) -> None:
    for path in target.owned(target.out):
        (target.out / path).unlink()
    target.generate(target.out)
    print(f"{target.language}: generated {len(target.owned(target.out))} files under {target.out.relative_to(ROOT)}")


def stale_files(target: Target) -> list[str]:
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp)
        target.generate(fresh)
        want, have = target.owned(fresh), target.owned(target.out)
        stale = sorted(str(p) for p in want ^ have)
        stale += sorted(str(p) for p in want & have if not filecmp.cmp(fresh / p, target.out / p, shallow=False))
    return stale


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="fail if committed generated code is stale")
    opts = parser.parse_args()
    # A proto without its go_package, or a public proto importing an internal one, fails
    # everywhere, not only where Go is installed.
    problems = go_package_problems() + public_problems()
    if problems:
        print(*problems, sep="\n", file=sys.stderr)
        return 1
    failed = False
    for target in TARGETS:
        reason = target.missing()
        if reason is not None:
            print(f"{target.language}: SKIPPED, {reason}", file=sys.stderr)
            continue
        if not opts.check:
            regenerate(target)
            continue
        stale = stale_files(target)
        if stale:
            print(f"{target.language}: generated code is stale; run `python protos/generate.py`:", file=sys.stderr)
            print(*(f"  {target.out.relative_to(ROOT) / p}" for p in stale), sep="\n", file=sys.stderr)
            failed = True
        else:
            print(f"{target.language}: generated code is up to date")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
