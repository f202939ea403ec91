"""Services share code only through services/kit and services/lib, never through another service's package.

Every module under services/<name>/ (except kit, the boot kit, which imports nothing above itself;
lib, the libraries a control plane and a data plane share, and suite, which wires all services into one
process) may import from services.kit, services.lib and its own package, but not
from services.<other>. A library imports only services.kit and services.lib.
The gateway (gateway/, the public edge) is a service too: it imports services.kit,
services.lib and itself, and no service but suite imports it; the exceptions that
exist today are listed below, so a new one fails here.
Imports anywhere in a module count, including function-local and TYPE_CHECKING ones.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path

import pytest

SERVICES = Path(__file__).resolve().parents[2] / "services"
GATEWAY = SERVICES.parent / "gateway"
SHARED = {"kit", "lib"}  # importable by every service
EXEMPT = SHARED | {"suite"}


def _service_names() -> set[str]:
    return {p.name for p in SERVICES.iterdir() if p.is_dir() and (p / "__init__.py").exists()}


def _module_name(path: Path) -> list[str]:
    parts = list(path.relative_to(SERVICES.parent).with_suffix("").parts)
    return parts[:-1] if parts[-1] == "__init__" else parts


def _package(path: Path) -> list[str]:
    """The package a module's relative imports resolve against."""
    return _module_name(path) if path.name == "__init__.py" else _module_name(path)[:-1]


def _imported_modules(source: str, package: list[str]) -> list[tuple[int, str]]:
    """(line, absolute dotted name) of everything ``source`` imports; ``from a import b`` yields a.b too."""
    tree = ast.parse(source)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            found.append((node.lineno, module))
            found.extend((node.lineno, f"{module}.{alias.name}") for alias in node.names)
    return found


def _other_service(module: str, service: str, services: set[str]) -> str | None:
    """The other service's package ``module`` belongs to, if any (kit belongs to every service)."""
    parts = module.split(".")
    if len(parts) >= 2 and parts[0] == "services" and parts[1] in services - {service} - SHARED:
        return f"services.{parts[1]}"
    return None


def _violations(service: str, services: set[str]) -> list[str]:
    problems: list[str] = []
    for path in sorted((SERVICES / service).rglob("*.py")):
        for line, module in _imported_modules(path.read_text(encoding="utf-8"), _package(path)):
            if target := _other_service(module, service, services):
                problems.append(f"{path.relative_to(SERVICES.parent)}:{line} imports {module} (from {target})")
    return sorted(set(problems))


SERVICE_NAMES = sorted(_service_names() - EXEMPT)


def test_the_walk_finds_the_services() -> None:
    assert {"context", "policy", "runtime", "sessions", "models"} <= set(SERVICE_NAMES)


@pytest.mark.parametrize("service", SERVICE_NAMES)
def test_a_service_imports_no_other_service(service: str) -> None:
    problems = _violations(service, _service_names())
    assert not problems, (
        f"services/{service} imports another service's package; share the code through services/kit "
        "instead:\n  " + "\n  ".join(problems)
    )


def test_a_library_imports_only_the_kit_and_other_libraries() -> None:
    problems = _violations("lib", _service_names() | {"lib"})
    assert not problems, "services/lib imports a service:\n  " + "\n  ".join(problems)


def test_the_kit_imports_no_library_service_or_gateway() -> None:
    # The kit is the bottom layer (configuration, logging, tracing, errors, server, clients, protobuf and
    # Redis helpers): domain code that it would need belongs in services/lib or its one owner.
    found = _crossings(
        SERVICES / "kit",
        lambda module: (
            module.split(".")[0] == "gateway"
            or (module.startswith("services.") and module.split(".")[1] != "kit" and module != "services.kit")
        ),
    )
    assert not found, "services/kit imports above itself:\n  " + "\n  ".join(
        f"{f} imports {m}" for f, m in sorted(found)
    )


def test_the_check_resolves_absolute_relative_and_package_imports() -> None:
    # The detector itself: each spelling of a cross-service import is caught, kit and own-package ones are not.
    source = "\n".join(
        [
            "import services.context.tokens",
            "from services.runtime.llm import ChatModel",
            "from services import sessions",
            "from ...context import builder",
            "from services.lib.tokens import TokenCounter",
            "from services.policy import engine",
            "from . import sibling",
            "def later():",
            "    from services.models import x",
        ]
    )
    package = _package(SERVICES / "policy" / "interceptors" / "probe.py")
    assert package == ["services", "policy", "interceptors"]
    services = _service_names()
    offending = {
        (line, _other_service(module, "policy", services)) for line, module in _imported_modules(source, package)
    }
    assert {line for line, target in offending if target} == {1, 2, 3, 4, 9}
    assert {target for _, target in offending if target} == {
        "services.context",
        "services.runtime",
        "services.sessions",
        "services.models",
    }


# --------------------------------------------------------------------------- the gateway

# Known crossings between the gateway and a service's package: (importing file, imported module).
# Move the shared code to services/lib and drop the line; a new crossing is not to be added here.
GATEWAY_IMPORTS_OF_SERVICES = {
    ("gateway/webhooks/servicer.py", "services.sessions.webhooks.model"),  # parse_delivery_id
}
SERVICE_IMPORTS_OF_GATEWAY = {
    ("services/sessions/webhooks/a2a.py", "gateway.a2a.mapping"),  # TaskRef, TaskView
}


def _crossings(root: Path, crosses: Callable[[str], bool]) -> set[tuple[str, str]]:
    """(file, module) of every import under ``root`` that ``crosses`` says leaves its side (``from a import b``: a)."""
    found: set[tuple[str, str]] = set()
    for path in sorted(root.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        for _, module in _imported_modules(source, _package(path)):
            if crosses(module):
                found.add((path.relative_to(SERVICES.parent).as_posix(), module))
    # `from a import b` yields a and a.b: keep the module named in the statement.
    return {(file, module) for file, module in found if (file, module.rsplit(".", 1)[0]) not in found}


def _service_package(module: str) -> bool:
    parts = module.split(".")
    return len(parts) >= 2 and parts[0] == "services" and parts[1] not in SHARED


def test_the_gateway_imports_only_the_kit_the_libraries_and_itself() -> None:
    found = _crossings(GATEWAY, _service_package)
    new = sorted(found - GATEWAY_IMPORTS_OF_SERVICES)
    assert not new, "gateway imports a service's package; share the code through services/lib:\n  " + "\n  ".join(
        f"{file} imports {module}" for file, module in new
    )
    assert found >= GATEWAY_IMPORTS_OF_SERVICES, (
        f"gone, drop them from GATEWAY_IMPORTS_OF_SERVICES: {sorted(GATEWAY_IMPORTS_OF_SERVICES - found)}"
    )


def test_no_service_but_suite_imports_the_gateway() -> None:
    found: set[tuple[str, str]] = set()
    for name in sorted(_service_names() - {"suite"}):
        found |= _crossings(SERVICES / name, lambda module: module.split(".")[0] == "gateway")
    new = sorted(found - SERVICE_IMPORTS_OF_GATEWAY)
    assert not new, "a service imports the gateway; share the code through services/lib:\n  " + "\n  ".join(
        f"{file} imports {module}" for file, module in new
    )
    assert found >= SERVICE_IMPORTS_OF_GATEWAY, (
        f"gone, drop them from SERVICE_IMPORTS_OF_GATEWAY: {sorted(SERVICE_IMPORTS_OF_GATEWAY - found)}"
    )


def test_the_gateway_check_catches_each_spelling() -> None:
    source = "\n".join(
        [
            "import services.runtime.llm",
            "from services.context import builder",
            "from services import sessions",
            "from services.kit.clients import Clients",
            "from services.lib.models.watch import CatalogWatcher",
            "from gateway import auth",
            "from ..a2a import mapping",
            "def later():",
            "    from services.policy.api import x",
        ]
    )
    package = _package(GATEWAY / "webhooks" / "probe.py")
    assert package == ["gateway", "webhooks"]
    imported = _imported_modules(source, package)
    assert {line for line, module in imported if _service_package(module)} == {1, 2, 3, 9}
    assert "gateway.a2a.mapping" in {module for _, module in imported}  # its own package: allowed
