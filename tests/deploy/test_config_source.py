"""One source of configuration: the pods run the agents, catalogue and policy shipped in the
image (services/defaults, what `cogmesh up` reads), and an overlay changes them only through
override ConfigMaps that the image's entry point layers on top. Anything that would put a
drifting copy in their place fails `python -m deploy.validate`."""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

from deploy import validate
from services.lib.agents import AgentRegistry
from tests.deploy.conftest import objects

layer_config = validate._entrypoint().layer_config


def test_every_kustomization_runs_the_shipped_defaults(rendered: dict[str, list[dict[str, Any]]]) -> None:
    for label, docs in rendered.items():
        assert validate.check_config_source(docs, label) == [], label
        assert validate.check_config(docs, label) == [], label
        for config in objects(docs, "ConfigMap").values():
            assert not set(config.get("data", {})) & set(validate.CONFIG_VARIABLES), label
    assert validate.check_no_copies() == []
    # So Kubernetes serves the same agents as `cogmesh up`, a2a_exposed and subagents included.
    shipped = AgentRegistry.default()
    assert {"default", "arithmetic", "careful", "planner"} <= set(shipped.names())
    assert shipped.get("default").a2a_exposed


def test_the_old_layout_fails(rendered: dict[str, list[dict[str, Any]]], tmp_path: Path) -> None:
    # The old base pointed the services at a ConfigMap copy of the defaults, which drifted.
    docs = copy.deepcopy(rendered["base"])
    config = next(d for name, d in objects(docs, "ConfigMap").items() if name.startswith("cogmesh-config"))
    config["data"]["COGMESH_AGENTS_DIR"] = "/etc/cogmesh/agents"
    assert any("sets COGMESH_AGENTS_DIR" in p for p in validate.check_config_source(docs))
    docs = copy.deepcopy(rendered["overlays/istio"])
    container = objects(docs, "Deployment")["runtime"]["spec"]["template"]["spec"]["containers"][0]
    container["env"].append({"name": "COGMESH_POLICY_DIR", "value": "/etc/cogmesh/policy"})
    assert validate.check_config_source(docs, "overlays/istio") == [
        "overlays/istio: Deployment/runtime: runtime sets COGMESH_POLICY_DIR: use an override ConfigMap instead"
    ]
    # A file copied from services/defaults into the manifests fails too, with where it came from.
    copied = tmp_path / "base" / "config" / "agents" / "default" / "identity.md"
    copied.parent.mkdir(parents=True)
    copied.write_bytes((validate.DEFAULTS / "agents" / "default" / "identity.md").read_bytes())
    (tmp_path / "base" / "kustomization.yaml").write_text("kind: Kustomization\n")
    [problem] = validate.check_no_copies(tmp_path)
    assert "is a copy of services/defaults/agents/default/identity.md" in problem


def _overlay(tmp_path: Path, files: dict[str, str], namespace: bool = True) -> list[dict[str, Any]]:
    """A team's overlay on no-mesh that overrides agents."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    base = os.path.relpath(validate.KUBERNETES / "overlays" / "no-mesh", tmp_path)
    listed = "".join(f"      - {name}\n" for name in files)
    (tmp_path / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        + ("namespace: cogmesh\n" if namespace else "")
        + f"resources:\n  - {base}\nconfigMapGenerator:\n  - name: cogmesh-agent-overrides\n    files:\n{listed}"
    )
    return validate.render(tmp_path)


def test_an_overlay_overrides_one_agent_and_keeps_the_others(tmp_path: Path) -> None:
    docs = _overlay(tmp_path, {"careful.md": "---\ndescription: ours\nmodel: local\nmode: primary\n---\nBe careful.\n"})
    assert validate.check_config_source(docs, "team") == []
    assert validate.check_config(docs, "team") == []
    [override] = [d for name, d in objects(docs, "ConfigMap").items() if name.startswith("cogmesh-agent-overrides")]
    for name in ("gateway", "runtime", "policy", "context"):
        volumes = objects(docs, "Deployment")[name]["spec"]["template"]["spec"]["volumes"]
        assert {"name": override["metadata"]["name"], "optional": True} in [v.get("configMap") for v in volumes]
    # What the pods' entry point builds: careful.md replaces careful.yaml, the rest as shipped.
    overrides = tmp_path / "mounted" / "agents"
    overrides.mkdir(parents=True)
    (overrides / "careful.md").write_text(override["data"]["careful.md"])
    variables = layer_config({}, overrides=overrides.parent, defaults=validate.DEFAULTS, into=tmp_path / "run")
    registry = AgentRegistry.load_dir(variables["COGMESH_AGENTS_DIR"])
    assert registry.errors == ()
    assert registry.get("careful").description == "ours"
    assert registry.names() == AgentRegistry.default().names()
    assert set(variables) == {"COGMESH_AGENTS_DIR"}


def test_a_broken_or_unmounted_override_fails(tmp_path: Path) -> None:
    docs = _overlay(tmp_path / "typo", {"default.yaml": "name: default\nmodel: local\ntemprature: 0.2\n"})
    assert any("team: agents:" in p and "temprature" in p for p in validate.check_config(docs, "team"))
    docs = _overlay(tmp_path / "readme", {"README.txt": "notes\n"})
    assert any("key README.txt is not a agents file" in p for p in validate.check_config(docs, "team"))
    docs = _overlay(tmp_path / "no-namespace", {"careful.md": "---\nmodel: local\n---\nHi.\n"}, namespace=False)
    assert any("is mounted by no pod" in p for p in validate.check_config_source(docs, "team"))


def test_the_entry_point_layers_only_what_is_mounted(tmp_path: Path) -> None:
    assert layer_config({}, overrides=tmp_path / "none", defaults=validate.DEFAULTS, into=tmp_path / "run") == {}
    overrides = tmp_path / "overrides"
    for folder, name, text in (
        ("agents", "planner.yaml", "name: planner\nmodel: local\n"),
        ("agents", "..data", ""),  # a ConfigMap volume's own entries are not overrides
        ("policy", "policy.yaml", (validate.DEFAULTS / "policy" / "policy.yaml").read_text() + "\n"),
        ("models", "models.yaml", (validate.DEFAULTS / "models.yaml").read_text()),
    ):
        (overrides / folder).mkdir(parents=True, exist_ok=True)
        (overrides / folder / name).write_text(text)
    variables = layer_config({}, overrides=overrides, defaults=validate.DEFAULTS, into=tmp_path / "run")
    assert variables == {
        "COGMESH_AGENTS_DIR": str(tmp_path / "run" / "agents"),
        "COGMESH_POLICY_DIR": str(tmp_path / "run" / "policy"),
        "COGMESH_MODELS_FILE": str(overrides / "models" / "models.yaml"),
    }
    assert not (tmp_path / "run" / "agents" / "..data").exists()
    assert sorted(p.name for p in (tmp_path / "run" / "policy").iterdir()) == sorted(
        p.name for p in (validate.DEFAULTS / "policy").iterdir()
    )
    # A variable the deployment sets itself wins over the layering.
    assert "COGMESH_AGENTS_DIR" not in layer_config(
        {"COGMESH_AGENTS_DIR": "/elsewhere"}, overrides=overrides, defaults=validate.DEFAULTS, into=tmp_path / "run"
    )


def test_every_service_mounts_the_overrides_of_what_it_reads(rendered: dict[str, list[dict[str, Any]]]) -> None:
    assert str(validate._entrypoint().OVERRIDES) == validate.OVERRIDES
    docs = copy.deepcopy(rendered["overlays/linkerd"])
    context = objects(docs, "Deployment")["context"]["spec"]["template"]["spec"]
    context["volumes"] = [v for v in context["volumes"] if v["name"] != "agent-overrides"]
    policy = objects(docs, "Deployment")["policy"]["spec"]["template"]["spec"]
    next(v for v in policy["volumes"] if v["name"] == "policy-overrides")["configMap"].pop("optional")
    assert set(validate.check_config_source(docs, "overlays/linkerd")) == {
        "overlays/linkerd: Deployment/policy: ConfigMap cogmesh-policy-overrides must be optional: "
        "without overrides the shipped defaults serve",
        "overlays/linkerd: Deployment/context: does not mount ConfigMap cogmesh-agent-overrides at "
        "/etc/cogmesh/overrides/agents: it would miss an overlay's agents changes",
    }


def test_the_image_carries_every_shipped_default(tmp_path: Path) -> None:
    assert validate.check_image_ships_defaults() == []
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[tool.setuptools.package-data]\nservices = ["defaults/*.yaml", "defaults/**/*.yaml"]\n')
    dockerignore = tmp_path / ".dockerignore"
    dockerignore.write_text("**/.git\n# the planner is ours\nservices/defaults/agents/planner*\n")
    problems = validate.check_image_ships_defaults(pyproject, dockerignore)
    assert (
        "services/defaults/agents/arithmetic.md is not in the image: no package-data pattern of pyproject.toml "
        "covers it" in problems
    )
    assert (
        "Dockerfile.dockerignore: services/defaults/agents/planner* keeps services/defaults/agents/planner.yaml "
        "out of the image" in problems
    )
    assert not any("careful.yaml" in p for p in problems)
