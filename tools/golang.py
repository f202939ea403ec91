"""Go for clients/go: Debian's toolchain, installed on demand, and builds in module mode offline.

    python -m tools.golang install   # apt-get install what is missing of PACKAGES (as root); else say why not
    python -m tools.golang check     # gofmt, go vet and go test over every package of clients/go
    python -m tools.golang replace DIR  # point DIR/go.mod at clients/go and Debian's Go sources (offline)

clients/go is the module cogmesh.dev/go; its committed go.mod is what `go get` reads
(requirements at the versions Debian 12 carries, no replace directives). Here it builds
with nothing downloaded: `go` runs with GOFLAGS="-mod=mod -modfile=.tools/go/offline/go.mod",
a copy of that go.mod plus a replace directive for every module of its requirement graph:
to the module's source under /usr/share/gocode/src, where Debian's golang-*-dev packages
put grpc-go, protobuf-go, genproto and golang.org/x; or, for a module Debian does not
carry (go-control-plane, x/tools, ...: grpc-go's and genproto's go.mod list them, and no
package built here imports them), to an empty module that only ends the graph there.
GOPROXY=off makes any other lookup an error. Build cache and module cache are under .tools/go.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLIENT = ROOT / "clients" / "go"
WORK = ROOT / ".tools" / "go"
OFFLINE = WORK / "offline"  # the generated go.mod with replace directives, and the empty modules
SYSTEM_SOURCES = Path("/usr/share/gocode/src")

# From Debian's archive (bookworm: Go 1.19, grpc-go 1.33, protobuf-go 1.28).
PACKAGES = (
    "golang-go",
    "protobuf-compiler",
    "protoc-gen-go",  # protobuf-go's generator; golang-goprotobuf-dev's older one rejects proto3 `optional`
    "protoc-gen-go-grpc",
    "golang-google-grpc-dev",
    "golang-google-protobuf-dev",
    "golang-google-genproto-dev",  # google.golang.org/genproto/googleapis/rpc/errdetails
    # grpc-go's codec goes through github.com/golang/protobuf: 1.5 wraps protobuf-go, 1.3 panics on its messages.
    "golang-github-golang-protobuf-1-5-dev",
)

_MODULE = re.compile(r"^module\s+(\S+)", re.MULTILINE)
_REQUIRE_BLOCK = re.compile(r"^require\s*\(\n(.*?)^\)", re.MULTILINE | re.DOTALL)
_REQUIRE_LINE = re.compile(r"^require\s+([^\s(]+)\s+\S+", re.MULTILINE)


def module_path(go_mod: Path) -> str:
    found = _MODULE.search(go_mod.read_text())
    if found is None:
        raise SystemExit(f"{go_mod}: no module line")
    return found.group(1)


IMPORT_ROOT = module_path(CLIENT / "go.mod")  # protos/generate.py's GO_MODULE: every proto's go_package prefix


def requirements(go_mod: Path) -> list[str]:
    """The module paths a go.mod requires (its replace and exclude lines do not matter here)."""
    text = go_mod.read_text()
    paths = [line.split()[0] for block in _REQUIRE_BLOCK.findall(text) for line in block.splitlines() if line.strip()]
    return [path for path in paths + _REQUIRE_LINE.findall(text) if not path.startswith("//")]


def replacements(go_mod: Path) -> dict[str, Path]:
    """Where each module of go_mod's requirement graph comes from offline: Debian's source or an empty module.

    The graph is walked through the go.mod files Debian ships (Go loads every go.mod of a
    graph whose modules predate go 1.17). A module without a go.mod in Debian's tree (glog)
    counts as absent: a replacement folder needs one.
    """
    found: dict[str, Path] = {}
    pending = requirements(go_mod)
    while pending:
        path = pending.pop()
        if path in found:
            continue
        source = SYSTEM_SOURCES / path
        if (source / "go.mod").is_file():
            found[path] = source
            pending.extend(requirements(source / "go.mod"))
        else:
            found[path] = OFFLINE / "absent" / path
    return found


def _write(path: Path, text: str) -> None:
    """Write atomically (concurrent builds never read half a file), and only when it changed."""
    if path.is_file() and path.read_text() == text:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    temporary.write_text(text)
    temporary.replace(path)


def replace_directives(go_mod: Path, extra: dict[str, Path] | None = None) -> str:
    """The replace block for go_mod's graph (and `extra`), creating the empty modules it names."""
    targets = replacements(go_mod) | (extra or {})
    for path, target in targets.items():
        if target.is_relative_to(OFFLINE / "absent"):
            _write(
                target / "go.mod", f"// Not in Debian's Go sources; nothing built offline imports it.\nmodule {path}\n"
            )
    lines = "".join(f"\t{path} => {target}\n" for path, target in sorted(targets.items()))
    return f"\n// Offline: Debian's Go sources (tools/golang.py).\nreplace (\n{lines})\n"


def offline_modfile() -> Path:
    """clients/go/go.mod with the replace directives of its whole graph, for `-modfile`."""
    committed = CLIENT / "go.mod"
    modfile = OFFLINE / "go.mod"
    _write(modfile, committed.read_text() + replace_directives(committed))
    return modfile


def missing_packages() -> list[str]:
    """The PACKAGES not installed; all of them where dpkg is unknown (not Debian)."""
    if shutil.which("dpkg-query") is None:
        return list(PACKAGES)
    result = subprocess.run(
        ["dpkg-query", "-W", "-f=${Package} ${db:Status-Status}\n", *PACKAGES], capture_output=True, text=True
    )
    installed = {line.split()[0] for line in result.stdout.splitlines() if line.endswith(" installed")}
    return [name for name in PACKAGES if name not in installed]


def missing() -> str | None:
    """Why Go cannot build clients/go here, or None when it can."""
    absent = missing_packages()
    if absent:
        return f"the Go toolchain is not installed (Debian packages {' '.join(absent)}; `make go-toolchain` as root)"
    return None


def install() -> int:
    absent = missing_packages()
    if not absent:
        print("Go toolchain: installed")
        return 0
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        print(f"Go toolchain: SKIPPED, needs root and apt-get to install {' '.join(absent)}", file=sys.stderr)
        return 0
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    # Wait for a dpkg lock another install holds instead of failing at once.
    apt = ["apt-get", "-o", "DPkg::Lock::Timeout=600", "-y", "-q"]
    command = [*apt, "install", "--no-install-recommends", *absent]
    if subprocess.run(command, env=env).returncode != 0:
        # A fresh machine (a container image) may have no package lists yet.
        subprocess.run([*apt, "update"], env=env)
        if subprocess.run(command, env=env).returncode != 0:
            print(f"Go toolchain: `{' '.join(command)}` failed (see above)", file=sys.stderr)
            return 1
    print(f"Go toolchain: installed {' '.join(absent)}")
    return 0


def offline_environment() -> dict[str, str]:
    """Module mode with no download: any module not replaced is an error, not a fetch."""
    return dict(
        os.environ,
        GO111MODULE="on",
        GOPROXY="off",
        GOSUMDB="off",
        GOTOOLCHAIN="local",  # Go 1.21+ would otherwise fetch the toolchain a go.mod asks for
        GOFLAGS="-mod=mod",
        GOPATH=str(WORK / "path"),  # the module cache, kept out of the user's home
        GOCACHE=str(WORK / "cache"),
        CGO_ENABLED="0",  # pure Go: no C compiler needed
    )


def environment() -> dict[str, str]:
    """The environment for `go` in clients/go: offline module mode over the generated modfile."""
    env = offline_environment()
    env["GOFLAGS"] += f" -modfile={offline_modfile()}"
    return env


def go(*args: str, cwd: Path = CLIENT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["go", *args], cwd=cwd, env=environment(), capture_output=True, text=True)


def tidy_problem() -> str | None:
    """What `go mod tidy` would change in clients/go/go.mod, or None.

    -mod=mod quietly adds a missing requirement to the generated modfile, so the build
    alone would not notice a committed go.mod that `go get` users cannot build with.
    """
    modfile = offline_modfile()
    scratch = modfile.with_name(f"tidy.{os.getpid()}.mod")
    scratch.write_text(modfile.read_text())
    try:
        result = subprocess.run(
            ["go", "mod", "tidy", f"-modfile={scratch}"],
            cwd=CLIENT,
            env=offline_environment(),
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            return f"go mod tidy failed:\n{result.stdout}{result.stderr}"
        if scratch.read_text() != modfile.read_text():
            diff = subprocess.run(["diff", str(modfile), str(scratch)], capture_output=True, text=True).stdout
            return f"clients/go/go.mod is not tidy; `go mod tidy` would change its requirements:\n{diff}"
        return None
    finally:
        scratch.unlink(missing_ok=True)
        scratch.with_suffix(".sum").unlink(missing_ok=True)


def check() -> int:
    reason = missing()
    if reason is not None:
        print(f"go-check: SKIPPED, {reason}", file=sys.stderr)
        return 0
    unformatted = subprocess.run(["gofmt", "-l", str(CLIENT)], capture_output=True, text=True, check=True).stdout
    if unformatted.strip():
        print("not gofmt-formatted (run `gofmt -w clients/go`):", unformatted, sep="\n", file=sys.stderr)
        return 1
    untidy = tidy_problem()
    if untidy is not None:
        print(untidy, file=sys.stderr)
        return 1
    for step in (("vet", "./..."), ("test", "-count=1", "./...")):  # the end-to-end tests skip without a suite
        result = go(*step)
        if result.returncode != 0:
            print(f"go {' '.join(step)}:", result.stdout, result.stderr, sep="\n", file=sys.stderr)
            return 1
    listed = go("list", "./...")
    print(f"go-check: {len(listed.stdout.split())} packages of {IMPORT_ROOT} gofmt-clean, vetted and tested")
    return 0


def replace(folder: Path) -> int:
    """Append to folder/go.mod the replace directives that build it offline against clients/go."""
    go_mod = folder / "go.mod"
    if not go_mod.is_file():
        print(f"{go_mod}: not found (`go mod init` first)", file=sys.stderr)
        return 1
    text = go_mod.read_text()
    if f"{IMPORT_ROOT} =>" in text:
        print(f"{go_mod}: already has the offline replace directives", file=sys.stderr)
        return 1
    directives = replace_directives(CLIENT / "go.mod", {IMPORT_ROOT: CLIENT})
    go_mod.write_text(text + directives)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["install", "check", "replace"])
    parser.add_argument("folder", nargs="?", type=Path, help="replace: the folder of the go.mod to edit")
    args = parser.parse_args()
    if args.command == "replace":
        if args.folder is None:
            parser.error("replace needs the folder of a go.mod")
        return replace(args.folder)
    return install() if args.command == "install" else check()


if __name__ == "__main__":
    sys.exit(main())
