"""Kubernetes manifests: every overlay renders with kustomize, validates against the Kubernetes
and CRD schemas, and keeps the promises the schemas cannot check."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from deploy import validate
from tests.deploy.conftest import objects

OVERLAYS = ("overlays/istio", "overlays/linkerd", "overlays/no-mesh")


def test_the_base_and_every_overlay_render(rendered: dict[str, list[dict[str, Any]]]) -> None:
    assert set(rendered) == {"base", *OVERLAYS}
    for name, docs in rendered.items():
        kinds = {d["kind"] for d in docs}
        expected = {"Deployment", "Service", "ConfigMap", "Secret", "PodDisruptionBudget", "HorizontalPodAutoscaler"}
        assert expected | {"NetworkPolicy", "Namespace", "ServiceAccount"} <= kinds, name
        assert set(objects(docs, "Deployment")) >= set(validate.SERVICES), name
        assert all(d["metadata"].get("namespace", "cogmesh") == "cogmesh" for d in docs), name


def test_builtin_objects_validate_against_the_kubernetes_schemas(rendered: dict[str, list[dict[str, Any]]]) -> None:
    everything = [doc for docs in rendered.values() for doc in docs]
    assert validate.check_schemas(everything) == []


def test_istio_and_gateway_api_objects_validate_against_their_crds(rendered: dict[str, list[dict[str, Any]]]) -> None:
    custom = [doc for docs in rendered.values() for doc in docs if validate.is_custom(doc)]
    assert {d["kind"] for d in custom} == {
        "PeerAuthentication",
        "AuthorizationPolicy",
        "DestinationRule",
        "VirtualService",
        "GRPCRoute",
    }
    assert validate.check_custom_resources(custom) == []


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_workloads_keep_the_deployment_contract(rendered: dict[str, list[dict[str, Any]]], overlay: str) -> None:
    assert validate.check_workloads(rendered[overlay]) == []
    assert validate.check_mesh_routes(rendered[overlay]) == []


def test_the_base_needs_a_redis_component(rendered: dict[str, list[dict[str, Any]]]) -> None:
    # Without one, pods that keep state fail to start instead of splitting state per replica.
    problems = validate.check_workloads(rendered["base"])
    assert problems and all("cogmesh-redis" in p for p in problems)
    assert {p.split(":")[0] for p in problems} == {
        f"Deployment/{n}" for n in ("gateway", "policy", "sessions", "models", "memory")
    }


def test_only_the_gateway_faces_clients(rendered: dict[str, list[dict[str, Any]]]) -> None:
    policies = objects(rendered["base"], "NetworkPolicy")
    open_to_all = {
        p["spec"]["podSelector"].get("matchLabels", {}).get("app.kubernetes.io/name", "*")
        for p in policies.values()
        for rule in p["spec"].get("ingress", [])
        if not rule.get("from")
    }
    assert open_to_all == {"gateway"}
    assert "default-deny-ingress" in policies
    # The call graph, and nothing more: e.g. policy is reached from the runtime only.
    sources = {
        rule_from["podSelector"]["matchLabels"]["app.kubernetes.io/name"]
        for rule in policies["policy-from-callers"]["spec"]["ingress"]
        for rule_from in rule["from"]
    }
    assert sources == {"runtime"}


def test_secrets_are_mounted_only_where_needed(rendered: dict[str, list[dict[str, Any]]]) -> None:
    deployments = objects(rendered["overlays/istio"], "Deployment")

    def secrets_of(name: str) -> set[str]:
        pod = deployments[name]["spec"]["template"]["spec"]
        names = {v["secret"]["secretName"] for v in pod.get("volumes", []) if "secret" in v}
        for container in pod["containers"]:
            names |= {s["secretRef"]["name"] for s in container.get("envFrom", []) if "secretRef" in s}
            names |= {
                e["valueFrom"]["secretKeyRef"]["name"]
                for e in container.get("env", [])
                if "secretKeyRef" in e.get("valueFrom", {})
            }
        return names

    assert {name: secrets_of(name) for name in validate.SERVICES} == {
        "gateway": {"cogmesh-api-keys", "cogmesh-redis"},
        "runtime": {"cogmesh-provider-keys"},
        "policy": {"cogmesh-redis"},
        "context": set(),
        "sessions": {"cogmesh-redis"},
        "models": {"cogmesh-redis"},
        "memory": {"cogmesh-redis"},
    }


def test_termination_grace_covers_drain_and_stream_grace(rendered: dict[str, list[dict[str, Any]]]) -> None:
    maps = objects(rendered["overlays/istio"], "ConfigMap")
    config = next(m for name, m in maps.items() if name.startswith("cogmesh-config"))
    drain = float(config["data"]["COGMESH_DRAIN_S"])
    assert drain > 0
    for name, deployment in objects(rendered["overlays/istio"], "Deployment").items():
        pod = deployment["spec"]["template"]["spec"]
        env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
        grace = float(env["COGMESH_SHUTDOWN_GRACE_S"])
        assert pod["terminationGracePeriodSeconds"] >= drain + grace + 5, name
        # Rollouts add a ready pod before draining an old one.
        assert deployment["spec"]["strategy"]["rollingUpdate"] == {"maxUnavailable": 0, "maxSurge": 1}, name
        # Liveness must not kill a pod that is draining (NOT_SERVING) before its grace ends.
        liveness = pod["containers"][0]["livenessProbe"]
        assert liveness["periodSeconds"] * liveness["failureThreshold"] > drain + grace, name


def test_istio_requires_mtls_and_routes_every_service(rendered: dict[str, list[dict[str, Any]]]) -> None:
    docs = rendered["overlays/istio"]
    assert objects(docs, "PeerAuthentication")["default"]["spec"]["mtls"]["mode"] == "STRICT"
    rules = objects(docs, "DestinationRule")
    assert set(rules) == set(validate.SERVICES)
    assert all(r["spec"]["trafficPolicy"]["tls"]["mode"] == "ISTIO_MUTUAL" for r in rules.values())
    assert set(objects(docs, "VirtualService")) == set(validate.SERVICES)
    namespace = objects(docs, "Namespace")["cogmesh"]
    assert namespace["metadata"]["labels"]["istio-injection"] == "enabled"


def test_linkerd_injects_and_routes_every_service(rendered: dict[str, list[dict[str, Any]]]) -> None:
    docs = rendered["overlays/linkerd"]
    assert objects(docs, "Namespace")["cogmesh"]["metadata"]["annotations"]["linkerd.io/inject"] == "enabled"
    parents = {p["name"] for r in objects(docs, "GRPCRoute").values() for p in r["spec"]["parentRefs"]}
    assert parents == set(validate.SERVICES)
    for name in validate.SERVICES:
        service = objects(docs, "Service")[name]
        assert service["spec"].get("clusterIP") != "None", "Linkerd routes do not apply to headless Services"


def test_the_no_mesh_overlay_dials_every_pod(rendered: dict[str, list[dict[str, Any]]]) -> None:
    maps = objects(rendered["overlays/no-mesh"], "ConfigMap")
    config = next(m for name, m in maps.items() if name.startswith("cogmesh-config"))
    headless = {
        n for n, s in objects(rendered["overlays/no-mesh"], "Service").items() if s["spec"].get("clusterIP") == "None"
    }
    for name in ("runtime", "policy", "context", "sessions", "models"):
        address = config["data"][f"COGMESH_{name.upper()}_ADDR"]
        assert address == f"dns:///{name}-pods:{validate.PORTS[name]}"
        assert f"{name}-pods" in headless


# --------------------------------------------------------------------------- the validators can fail


def _deployment(docs: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return objects(docs, "Deployment")[name]


def test_schema_validation_rejects_unknown_and_mistyped_fields(rendered: dict[str, list[dict[str, Any]]]) -> None:
    docs = copy.deepcopy(rendered["overlays/istio"])
    runtime = _deployment(docs, "runtime")
    runtime["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["failureThresold"] = 3
    gateway = _deployment(docs, "gateway")
    gateway["spec"]["replicas"] = "two"
    problems = validate.check_schemas([runtime, gateway], versions=["1.37"])
    assert len(problems) == 2
    assert any("failureThresold" in p for p in problems) and any("replicas" in p for p in problems)


def test_crd_validation_rejects_bad_mesh_objects(rendered: dict[str, list[dict[str, Any]]]) -> None:
    rule = copy.deepcopy(objects(rendered["overlays/istio"], "DestinationRule")["runtime"])
    rule["spec"]["trafficPolicy"]["loadBalancer"]["simple"] = "FASTEST"
    route = copy.deepcopy(objects(rendered["overlays/linkerd"], "GRPCRoute")["runtime-reads"])
    route["spec"]["rules"][0]["matches"][0]["method"]["type"] = "Prefix"
    problems = validate.check_custom_resources([rule, route])
    assert len(problems) == 2


def test_contract_checks_catch_missing_probes_limits_and_open_policies(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    docs = copy.deepcopy(rendered["overlays/istio"])
    container = _deployment(docs, "policy")["spec"]["template"]["spec"]["containers"][0]
    del container["readinessProbe"]
    del container["resources"]["limits"]["memory"]
    container["securityContext"]["readOnlyRootFilesystem"] = False
    objects(docs, "NetworkPolicy")["policy-from-callers"]["spec"]["ingress"][0].pop("from")
    docs = [d for d in docs if not (d["kind"] == "PodDisruptionBudget" and d["metadata"]["name"] == "context")]
    problems = "\n".join(validate.check_workloads(docs))
    for expected in (
        "readinessProbe is not a gRPC health probe",
        "no memory limits",
        "root filesystem is not read-only",
        "opens policy to any source",
        "Deployment/context: no PodDisruptionBudget",
    ):
        assert expected in problems


def test_route_checks_catch_a_stream_with_a_mesh_timeout_or_retries(rendered: dict[str, list[dict[str, Any]]]) -> None:
    docs = copy.deepcopy(rendered["overlays/istio"])
    service = objects(docs, "VirtualService")["gateway"]
    service["spec"]["http"][-1]["timeout"] = "30s"  # the catch-all carries SendMessage
    reads = objects(copy.deepcopy(rendered["overlays/linkerd"]), "GRPCRoute")["sessions-reads"]
    reads["spec"]["rules"][0]["matches"][0]["method"]["method"] = "NoSuchRead"
    problems = validate.check_mesh_routes([service, reads])
    assert any("SendMessage lands in route streams-and-others" in p for p in problems)
    assert any("NoSuchRead" in p for p in problems)


@pytest.mark.parametrize("overlay", ["base", *OVERLAYS])
def test_every_service_has_replicas_a_budget_and_a_headless_service(
    rendered: dict[str, list[dict[str, Any]]], overlay: str
) -> None:
    assert validate.check_replicas(rendered[overlay]) == []
    deployments = objects(rendered[overlay], "Deployment")
    assert all(deployments[name]["spec"]["replicas"] >= 2 for name in ("gateway", "runtime"))


def test_replica_checks_catch_one_pod_an_open_budget_and_a_dns_name_without_pods(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    docs = copy.deepcopy(rendered["overlays/no-mesh"])
    _deployment(docs, "runtime")["spec"]["replicas"] = 1
    objects(docs, "PodDisruptionBudget")["gateway"]["spec"]["maxUnavailable"] = "100%"
    docs = [d for d in docs if not (d["kind"] == "Service" and d["metadata"]["name"] == "policy-pods")]
    config = next(m for name, m in objects(docs, "ConfigMap").items() if name.startswith("cogmesh-config"))
    config["data"]["COGMESH_SESSIONS_ADDR"] = "dns:///sessions:50055"  # the ClusterIP: one virtual address
    problems = "\n".join(validate.check_replicas(docs))
    for expected in (
        "Deployment/runtime: 1 replica(s)",
        "PodDisruptionBudget/gateway: lets every pod of gateway go at once",
        "no headless Service policy-pods",
        "COGMESH_POLICY_ADDR=dns:///policy-pods:50053: no headless Service policy-pods",
        "COGMESH_SESSIONS_ADDR=dns:///sessions:50055: Service/sessions is not headless",
    ):
        assert expected in problems, problems
