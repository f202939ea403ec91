"""Rendered manifests, once per test session: `kubectl kustomize` of the base and each overlay."""

from __future__ import annotations

from typing import Any

import pytest

from deploy import validate


@pytest.fixture(scope="session")
def rendered() -> dict[str, list[dict[str, Any]]]:
    """Rendered objects by kustomization ("base", "overlays/istio", ...)."""
    return {
        str(directory.relative_to(validate.KUBERNETES)): validate.render(directory)
        for directory in validate.kustomizations()
    }


def objects(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}
