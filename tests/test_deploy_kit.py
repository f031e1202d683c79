"""The Kubernetes kit in collector/deploy/k8s, validated offline against the Kubernetes API schemas
(kubernetes-validate, strict: unknown fields fail) and checked for the wiring the fleet depends on. Its
Collector config is validated by the real Collector in test_otelcol_configs.py."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from _fleet_fixtures import K8S_KIT

KUBERNETES_VERSION = "1.33.0"
KUSTOMIZATION = yaml.safe_load((K8S_KIT / "kustomization.yaml").read_text())
NAMESPACE = KUSTOMIZATION["namespace"]


def kit_resources(kit: Path) -> list[dict[str, Any]]:
    """Every manifest a kustomization in `kit` applies, its generated ConfigMaps included."""
    kustomization = yaml.safe_load((kit / "kustomization.yaml").read_text())
    docs: list[dict[str, Any]] = []
    for name in kustomization["resources"]:
        docs += [d for d in yaml.safe_load_all((kit / name).read_text()) if d]
    # The ConfigMaps kustomize generates, as it generates them (before the name hash suffix).
    for generator in kustomization["configMapGenerator"]:
        data: dict[str, str] = {}
        for entry in generator.get("files", []):
            key, _, source = entry.partition("=")
            data[key] = (kit / source).read_text()
        for literal in generator.get("literals", []):
            key, _, value = literal.partition("=")
            data[key] = value
        docs.append(
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": generator["name"]}, "data": data}
        )
    return docs


RESOURCES = kit_resources(K8S_KIT)


def _one(kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for d in RESOURCES if d["kind"] == kind and name in (None, d["metadata"]["name"])]
    assert len(found) == 1, (kind, name, len(found))
    return found[0]


@pytest.mark.parametrize("doc", RESOURCES, ids=lambda d: f"{d['kind']}/{d['metadata']['name']}")
def test_every_manifest_matches_the_kubernetes_schema(doc: dict[str, Any]) -> None:
    kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_the_schema_check_can_fail() -> None:
    deployment = copy.deepcopy(_one("Deployment", "faithtrace-scorer"))
    deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbes"] = {}  # misspelt
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)


def test_every_kustomize_file_exists() -> None:
    for name in KUSTOMIZATION["resources"]:
        assert (K8S_KIT / name).is_file(), name
    for generator in KUSTOMIZATION["configMapGenerator"]:
        for entry in generator.get("files", []):
            assert (K8S_KIT / entry.partition("=")[2]).is_file(), entry
    assert (K8S_KIT.parent / "Dockerfile.serve").is_file()


def test_scorer_deployment_has_probes_resources_and_the_serve_command() -> None:
    deployment = _one("Deployment", "faithtrace-scorer")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    args = container["args"]
    assert args[0] == "serve"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert args[args.index("--grpc-port") + 1] == str(ports["otlp-grpc"])
    assert args[args.index("--http-port") + 1] == str(ports["otlp-http"])
    assert args[args.index("--host") + 1] == "0.0.0.0"  # inside a pod, the Collector connects from outside
    assert "--concurrency" in args
    assert container["readinessProbe"]
    assert container["livenessProbe"]
    assert {"cpu", "memory"} <= set(container["resources"]["requests"])
    assert "memory" in container["resources"]["limits"]
    # Results go back to the Collector's results receiver, never to the apps' one (that would loop).
    env = _one("ConfigMap", "faithtrace-scorer")["data"]
    collector_service = _one("Service", "otel-collector")
    results_port = next(p["port"] for p in collector_service["spec"]["ports"] if p["name"] == "results-grpc")
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"].endswith(f":{results_port}")
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"].startswith(f"http://otel-collector.{NAMESPACE}.")
    assert env["OTEL_EXPORTER_OTLP_PROTOCOL"] == "grpc"
    # A stopping scorer may hold requests up to the load balancer's timeout.
    config = yaml.safe_load(_one("ConfigMap", "otelcol-fleet")["data"]["config.yaml"])
    timeout = int(config["exporters"]["load_balancing/scorers"]["protocol"]["otlp"]["timeout"].rstrip("s"))
    assert pod["terminationGracePeriodSeconds"] >= timeout


def test_headless_service_selects_the_scorers() -> None:
    service = _one("Service", "faithtrace-scorer")
    assert service["spec"]["clusterIP"] == "None"
    labels = _one("Deployment", "faithtrace-scorer")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()


def test_hpa_scales_the_scorer_deployment() -> None:
    hpa = _one("HorizontalPodAutoscaler")
    target = hpa["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", "faithtrace-scorer")
    assert 1 <= hpa["spec"]["minReplicas"] < hpa["spec"]["maxReplicas"]
    kinds = {m["type"] for m in hpa["spec"]["metrics"]}
    assert {"Pods", "External", "Resource"} <= kinds
    pods = next(m["pods"] for m in hpa["spec"]["metrics"] if m["type"] == "Pods")
    assert pods["metric"]["name"] == "faithtrace_serve_pending"  # what `faithtrace serve` exports on /metrics


def test_collector_rbac_grants_exactly_what_the_k8s_resolver_needs() -> None:
    role = _one("Role")
    assert role["rules"] == [
        {
            "apiGroups": ["discovery.k8s.io"],
            "resources": ["endpointslices"],
            "verbs": ["get", "list", "watch"],
        }
    ]
    binding = _one("RoleBinding")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    account = _one("ServiceAccount")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": NAMESPACE}
    ]
    statefulset = _one("StatefulSet", "otel-collector")
    assert statefulset["spec"]["template"]["spec"]["serviceAccountName"] == account["metadata"]["name"]


def test_collector_keeps_its_persistent_queue_on_a_volume_per_pod() -> None:
    statefulset = _one("StatefulSet", "otel-collector")
    pod = statefulset["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    claims = {c["metadata"]["name"] for c in statefulset["spec"]["volumeClaimTemplates"]}
    config = yaml.safe_load(_one("ConfigMap", "otelcol-fleet")["data"]["config.yaml"])
    queue_dir = config["extensions"]["file_storage/queue"]["directory"]
    (volume,) = [name for name, path in mounts.items() if path == queue_dir]
    assert volume in claims
    # The config the container reads is the generated ConfigMap.
    config_volume = next(v for v in pod["volumes"] if v["name"] == "config")
    assert config_volume["configMap"]["name"] == "otelcol-fleet"
    assert f"--config={mounts['config']}/config.yaml" in container["args"]
    # Every port the config listens on is a container port and a Service port.
    listens = {
        int(p["endpoint"].rsplit(":", 1)[1])
        for r in config["receivers"].values()
        for p in r["protocols"].values()
    }
    listens.add(int(config["exporters"]["prometheus"]["endpoint"].rsplit(":", 1)[1]))
    assert listens <= {p["containerPort"] for p in container["ports"]}
    assert listens <= {p["port"] for p in _one("Service", "otel-collector")["spec"]["ports"]}


def test_kit_names_one_namespace() -> None:
    for doc in RESOURCES:
        assert doc["metadata"].get("namespace") in (None, NAMESPACE), doc["metadata"]
    assert _one("Namespace")["metadata"]["name"] == NAMESPACE


def test_kit_files_are_listed() -> None:
    listed = set(KUSTOMIZATION["resources"]) | {
        e.partition("=")[2] for g in KUSTOMIZATION["configMapGenerator"] for e in g.get("files", [])
    }
    on_disk = {p.name for p in K8S_KIT.glob("*.yaml")} - {"kustomization.yaml"}
    assert on_disk == listed
