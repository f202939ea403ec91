"""Go for clients/go: Debian's toolchain, installed on demand, and builds in GOPATH mode.

    python -m tools.golang install   # apt-get install what is missing of PACKAGES (as root); else say why not
    python -m tools.golang check     # gofmt and go vet over every package of clients/go

Go builds with GO111MODULE=off and downloads nothing: GOPATH is .tools/go/path, whose
src/cogmesh.dev/go links to clients/go, followed by /usr/share/gocode, where Debian's
golang-*-dev packages put grpc-go, protobuf-go and genproto. The build cache is
.tools/go/cache; binaries go wherever the caller says (a temporary folder in the tests).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLIENT = ROOT / "clients" / "go"
IMPORT_ROOT = "cogmesh.dev/go"  # protos/generate.py's GO_MODULE: the go_package prefix of every proto
WORK = ROOT / ".tools" / "go"
SYSTEM_GOPATH = Path("/usr/share/gocode")

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


def environment() -> dict[str, str]:
    """The environment for `go`: GOPATH mode over clients/go and the system's Go sources, no network."""
    link = WORK / "path" / "src" / IMPORT_ROOT
    if not (link.is_symlink() and link.resolve() == CLIENT):
        link.parent.mkdir(parents=True, exist_ok=True)
        temporary = link.with_name(f".{link.name}.{os.getpid()}")
        temporary.unlink(missing_ok=True)
        temporary.symlink_to(CLIENT)
        temporary.replace(link)  # atomic: concurrent builds never see it half made
    return dict(
        os.environ,
        GO111MODULE="off",
        GOPATH=f"{WORK / 'path'}{os.pathsep}{SYSTEM_GOPATH}",
        GOCACHE=str(WORK / "cache"),
        GOFLAGS="",
        GOPROXY="off",
        CGO_ENABLED="0",  # pure Go: no C compiler needed
    )


def packages() -> list[str]:
    """Import paths of every Go package under clients/go (`...` patterns skip the GOPATH link)."""
    folders = {path.parent for path in CLIENT.rglob("*.go") if "testdata" not in path.parts}
    return sorted(f"{IMPORT_ROOT}/{folder.relative_to(CLIENT).as_posix()}".rstrip("/.") for folder in folders)


def go(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["go", *args], cwd=cwd, env=environment(), capture_output=True, text=True)


def check() -> int:
    reason = missing()
    if reason is not None:
        print(f"go-check: SKIPPED, {reason}", file=sys.stderr)
        return 0
    unformatted = subprocess.run(["gofmt", "-l", str(CLIENT)], capture_output=True, text=True, check=True).stdout
    if unformatted.strip():
        print("not gofmt-formatted (run `gofmt -w clients/go`):", unformatted, sep="\n", file=sys.stderr)
        return 1
    vet = go("vet", *packages())
    if vet.returncode != 0:
        print(vet.stdout, vet.stderr, sep="", file=sys.stderr)
        return 1
    print(f"go-check: {len(packages())} packages gofmt-clean and vetted")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["install", "check"])
    return install() if parser.parse_args().command == "install" else check()


if __name__ == "__main__":
    sys.exit(main())
