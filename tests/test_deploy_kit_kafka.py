"""The Kafka path's Kubernetes kit in collector/deploy/k8s-kafka: core manifests validated offline against the
Kubernetes API schemas (kubernetes-validate, strict), KEDA's ScaledObject checked field by field (a CRD the
schemas do not carry), and the wiring between the topic, the scorers, KEDA and the Collector config."""

from __future__ import annotations

import copy
from typing import Any

import kubernetes_validate
import pytest
import yaml

from _fleet_fixtures import COLLECTOR
from _kafka_fixtures import KAFKA_EXPORTER, KAFKA_FLEET_CONFIG
from test_deploy_kit import kit_resources

KIT = COLLECTOR / "deploy" / "k8s-kafka"
KUBERNETES_VERSION = "1.33.0"
KUSTOMIZATION = yaml.safe_load((KIT / "kustomization.yaml").read_text())
CORE_KINDS = {"Namespace", "Deployment", "PodDisruptionBudget", "Job", "ConfigMap", "Service"}


RESOURCES = kit_resources(KIT)


def _one(kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for d in RESOURCES if d["kind"] == kind and name in (None, d["metadata"]["name"])]
    assert len(found) == 1, (kind, name, len(found))
    return found[0]


def _flag(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def _options(args: list[str]) -> dict[str, str]:
    return dict(args[i + 1].split("=", 1) for i, a in enumerate(args) if a == "--kafka-option")


@pytest.mark.parametrize(
    "doc",
    [d for d in RESOURCES if d["kind"] in CORE_KINDS],
    ids=lambda d: f"{d['kind']}/{d['metadata']['name']}",
)
def test_every_core_manifest_matches_the_kubernetes_schema(doc: dict[str, Any]) -> None:
    kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_every_kind_is_checked() -> None:
    assert {d["kind"] for d in RESOURCES} == CORE_KINDS | {"ScaledObject"}
    on_disk = {p.name for p in KIT.glob("*.yaml")} - {"kustomization.yaml"}
    listed = {r for r in KUSTOMIZATION["resources"] if not (KIT / r).is_dir()} | {
        e.partition("=")[2] for g in KUSTOMIZATION["configMapGenerator"] for e in g.get("files", [])
    }
    assert on_disk == listed


def _scaled_object_errors(doc: dict[str, Any]) -> list[str]:
    """The ScaledObject against KEDA's documented shape (keda.sh/v1alpha1, trigger `kafka`)."""
    errors = []
    if doc.get("apiVersion") != "keda.sh/v1alpha1":
        errors.append("apiVersion")
    spec = doc.get("spec", {})
    allowed = {
        "scaleTargetRef", "minReplicaCount", "maxReplicaCount", "pollingInterval", "cooldownPeriod",
        "idleReplicaCount", "advanced", "triggers", "fallback",
    }  # fmt: skip
    errors += [f"unknown spec field {k}" for k in set(spec) - allowed]
    target = spec.get("scaleTargetRef", {})
    if not {"name"} <= set(target) or set(target) - {"apiVersion", "kind", "name", "envSourceContainerName"}:
        errors.append("scaleTargetRef")
    for key in ("minReplicaCount", "maxReplicaCount", "pollingInterval", "cooldownPeriod"):
        if not isinstance(spec.get(key), int):
            errors.append(f"{key} is not an integer")
    known = {
        "bootstrapServers", "consumerGroup", "topic", "lagThreshold", "activationLagThreshold",
        "offsetResetPolicy", "allowIdleConsumers", "scaleToZeroOnInvalidOffset", "excludePersistentLag",
        "limitToPartitionsWithLag", "partitionLimitation", "sasl", "tls", "version",
    }  # fmt: skip
    for trigger in spec.get("triggers", []):
        if trigger.get("type") != "kafka":
            errors.append(f"trigger type {trigger.get('type')}")
        metadata = trigger.get("metadata", {})
        errors += [f"unknown trigger field {k}" for k in set(metadata) - known]
        errors += [f"{k} is not a string" for k, v in metadata.items() if not isinstance(v, str)]
        if not {"bootstrapServers", "consumerGroup", "topic"} <= set(metadata):
            errors.append("trigger lacks bootstrapServers, consumerGroup or topic")
    return errors


def test_the_scaled_object_has_keda_s_shape_and_the_check_can_fail() -> None:
    scaled = _one("ScaledObject")
    assert _scaled_object_errors(scaled) == []
    broken = copy.deepcopy(scaled)
    broken["spec"]["triggers"][0]["metadata"]["lagTreshold"] = "5"  # misspelt
    broken["spec"]["maxReplicaCount"] = "24"
    assert len(_scaled_object_errors(broken)) >= 2


def test_keda_scales_the_kafka_scorers_on_their_group_s_lag() -> None:
    scaled = _one("ScaledObject")
    deployment = _one("Deployment", "faithtrace-scorer-kafka")
    target = scaled["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", deployment["metadata"]["name"])
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    (trigger,) = scaled["spec"]["triggers"]
    metadata = trigger["metadata"]
    assert metadata["bootstrapServers"] == _flag(args, "--kafka")
    assert metadata["consumerGroup"] == _flag(args, "--kafka-group")
    assert metadata["topic"] == _flag(args, "--kafka-topic")
    assert metadata["offsetResetPolicy"] == "earliest"  # as the scorers' own auto.offset.reset
    assert int(metadata["lagThreshold"]) > 0
    # Never more replicas than partitions: the others would sit idle in the group.
    job_args = _one("Job")["spec"]["template"]["spec"]["containers"][0]["command"]
    assert 1 <= scaled["spec"]["minReplicaCount"] < scaled["spec"]["maxReplicaCount"]
    assert scaled["spec"]["maxReplicaCount"] <= int(_flag(job_args, "--partitions"))
    assert metadata["allowIdleConsumers"] == "false"


def test_the_topic_is_the_one_the_collector_writes_and_the_scorers_read() -> None:
    job_args = _one("Job")["spec"]["template"]["spec"]["containers"][0]["command"]
    config = yaml.safe_load(_one("ConfigMap", "otelcol-fleet")["data"]["config.yaml"])
    exporter = config["exporters"][KAFKA_EXPORTER]
    args = _one("Deployment", "faithtrace-scorer-kafka")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert _flag(job_args, "--topic") == exporter["traces"]["topic"] == _flag(args, "--kafka-topic")
    assert _flag(job_args, "--bootstrap-server") in exporter["brokers"]
    assert _flag(args, "--kafka") in exporter["brokers"]
    assert exporter["partition_traces_by_id"] is True
    assert exporter["traces"]["encoding"] == "otlp_proto"
    # An acknowledged batch survives one broker: acks from every in-sync replica, at least 2 of them.
    configs = dict(job_args[i + 1].split("=", 1) for i, a in enumerate(job_args) if a == "--config")
    assert exporter["producer"]["required_acks"] == -1
    assert int(configs["min.insync.replicas"]) >= 2
    assert int(_flag(job_args, "--replication-factor")) > int(configs["min.insync.replicas"])
    assert int(configs["max.message.bytes"]) >= exporter["producer"]["max_message_bytes"]


def test_the_kit_s_collector_config_is_fleet_kafka_yaml_but_for_the_brokers() -> None:
    kit = yaml.safe_load((KIT / "otelcol-fleet-kafka.yaml").read_text())
    shipped = yaml.safe_load(KAFKA_FLEET_CONFIG.read_text())
    del kit["exporters"][KAFKA_EXPORTER]["brokers"], shipped["exporters"][KAFKA_EXPORTER]["brokers"]
    assert kit == shipped


def test_a_stopping_scorer_may_finish_its_messages_and_results_go_to_the_results_receiver() -> None:
    deployment = _one("Deployment", "faithtrace-scorer-kafka")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    args = container["args"]
    assert args[0] == "serve"
    assert pod["terminationGracePeriodSeconds"] > float(_flag(args, "--shutdown-timeout"))
    options = _options(args)
    assert int(options["session.timeout.ms"]) < int(options["max.poll.interval.ms"])
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert "memory" in container["resources"]["limits"]
    env = _one("ConfigMap", "faithtrace-scorer-kafka")["data"]
    config = yaml.safe_load(_one("ConfigMap", "otelcol-fleet")["data"]["config.yaml"])
    results_port = config["receivers"]["otlp/results"]["protocols"]["grpc"]["endpoint"].rsplit(":", 1)[1]
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"].endswith(f":{results_port}")
