"""The cogmesh-client wheel carries the stubs of the public protos only.

The generated code of every proto lives in this package's tree, because cogmesh's servers
import their internal stubs (cogmesh.sessions.v1, cogmesh.runtime.v1, ...) from it in a
checkout. A client needs none of them: the wheel keeps the public API (common, the gateway,
ToolService, HookService: protos/generate.py's PUBLIC_PROTOS, which
tests/unit/test_public_protos.py holds this list to) and the hand-written cogmesh.client,
plus buf.validate (the vendored protovalidate rules the public protos import and annotate
their fields with: protos/generate.py's VENDORED_PROTOS).

COGMESH_CLIENT_STUBS=all builds the servers' variant with every stub (the server image,
deploy/docker/Dockerfile, installs that one).
"""

from __future__ import annotations

import fnmatch
import os

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

# Generated modules a client gets, as paths under this folder without the suffix.
PUBLIC_STUBS = (
    "cogmesh/common/v1/*",
    "cogmesh/gateway/v1/*",
    "cogmesh/policy/v1/hooks_pb2*",
    "cogmesh/tools/v1/*",
)
PUBLIC_AREAS = {pattern.split("/")[1] for pattern in PUBLIC_STUBS}


def every_stub() -> bool:
    return os.environ.get("COGMESH_CLIENT_STUBS") == "all"


def shipped(path: str) -> bool:
    """Whether a file of the package tree goes into the wheel: all but internal stubs."""
    parts = path.replace(os.sep, "/").split("/")
    if every_stub() or parts[0] != "cogmesh" or len(parts) < 3 or parts[1] == "client":
        return True
    if parts[1] not in PUBLIC_AREAS:
        return False
    if len(parts) != 4 or parts[2] != "v1" or parts[3] == "__init__.py":
        return True
    stem = "/".join(parts).rsplit(".", 1)[0]
    return any(fnmatch.fnmatchcase(stem, pattern) for pattern in PUBLIC_STUBS)


def packages() -> list[str]:
    """cogmesh, cogmesh.client, the areas with a public proto (all areas for the servers) and buf.validate."""
    found = find_packages(include=["cogmesh", "cogmesh.*"])
    vendored = find_packages(include=["buf", "buf.*"])
    if every_stub():
        return found + vendored
    return [p for p in found if p == "cogmesh" or p.split(".")[1] in PUBLIC_AREAS | {"client"}] + vendored


class PublicBuildPy(build_py):  # type: ignore[misc]
    """build_py that leaves the internal stubs (modules and their .pyi) out of the wheel."""

    def find_package_modules(self, package: str, package_dir: str) -> list[tuple[str, str, str]]:
        return [m for m in super().find_package_modules(package, package_dir) if shipped(m[2])]

    def find_data_files(self, package: str, src_dir: str) -> list[str]:
        return [f for f in super().find_data_files(package, src_dir) if shipped(f)]


if __name__ == "__main__":  # as setuptools runs it (tests import the rule without building)
    setup(packages=packages(), cmdclass={"build_py": PublicBuildPy})
