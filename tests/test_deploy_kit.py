"""The Kubernetes kit in collector/deploy/k8s, validated offline against the Kubernetes API schemas
(kubernetes-validate, strict: unknown fields fail) and checked for the wiring the fleet depends on. Its
Collector config is validated by the real Collector in test_otelcol_configs.py."""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from _fleet_fixtures import K8S_KIT, REPO

KUBERNETES_VERSION = "1.33.0"
KUSTOMIZATION = yaml.safe_load((K8S_KIT / "kustomization.yaml").read_text())
NAMESPACE = KUSTOMIZATION["namespace"]


def kit_resources(kit: Path) -> list[dict[str, Any]]:
    """Every manifest a kustomization in `kit` applies, its generated ConfigMaps included."""
    kustomization = yaml.safe_load((kit / "kustomization.yaml").read_text())
    docs: list[dict[str, Any]] = []
    for name in kustomization["resources"]:
        if (kit / name).is_dir():  # another kustomization (../redis, which both kits include)
            docs += kit_resources(kit / name)
            continue
        docs += [d for d in yaml.safe_load_all((kit / name).read_text()) if d]
    # The ConfigMaps kustomize generates, as it generates them (before the name hash suffix).
    for generator in kustomization.get("configMapGenerator", []):
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
        assert (K8S_KIT / name).is_file() or (K8S_KIT / name / "kustomization.yaml").is_file(), name
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
    # Spooled spans go back to the replay receiver, which feeds the load balancer and nothing else, on a
    # volume that outlives a killed container (an emptyDir does; the root filesystem is read-only anyway).
    replay_port = next(p["port"] for p in collector_service["spec"]["ports"] if p["name"] == "replay-grpc")
    assert env["FAITHTRACE_SERVE_REPLAY_ENDPOINT"].endswith(f":{replay_port}")
    config = yaml.safe_load(_one("ConfigMap", "otelcol-fleet")["data"]["config.yaml"])
    assert config["receivers"]["otlp/replay"]["protocols"]["grpc"]["endpoint"].endswith(f":{replay_port}")
    spool = args[args.index("--spool") + 1]
    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == spool)
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    assert "emptyDir" in volume
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


def _seconds(duration: str) -> float:
    """A Go duration of whole seconds or milliseconds, as the configs write them ("10s", "200ms")."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s)", duration)
    assert match, duration
    return float(match[1]) / (1000 if match[2] == "ms" else 1)


def test_a_stopping_collector_sheds_its_connections_and_held_traces_before_sigterm() -> None:
    """A Collector pod being deleted leaves the Service at once but keeps its open gRPC connections: its
    preStop wait must outlast the receivers' max_connection_age (gRPC adds up to 10 % jitter) and its grace,
    so that every app and scorer has moved to the other Collector, plus groupbytrace's wait (the overlay's
    held traces are handed on, not dropped at the stop); and leave most of the grace to the stop itself.
    tests/test_fleet_openinference.py runs this rolling restart with the timings scaled down."""
    from _fleet_fixtures import GROUPBYTRACE_OVERLAY, kit_collector_stop

    pre_stop, grace = kit_collector_stop()
    config = yaml.safe_load(_one("ConfigMap", "otelcol-fleet")["data"]["config.yaml"])
    held = _seconds(
        yaml.safe_load(GROUPBYTRACE_OVERLAY.read_text())["processors"]["groupbytrace"]["wait_duration"]
    )
    for name in ("otlp", "otlp/results", "otlp/replay"):
        params = config["receivers"][name]["protocols"]["grpc"]["keepalive"]["server_parameters"]
        age, age_grace = _seconds(params["max_connection_age"]), _seconds(params["max_connection_age_grace"])
        assert pre_stop >= 1.1 * age + age_grace + held, (name, pre_stop, age, age_grace, held)
    # The stop took 0-8.5 s in benchmarks/fleet/fleet.py's restarts (docs/fleet.md).
    assert grace - pre_stop >= 30


def test_kit_names_one_namespace() -> None:
    for doc in RESOURCES:
        assert doc["metadata"].get("namespace") in (None, NAMESPACE), doc["metadata"]
    assert _one("Namespace")["metadata"]["name"] == NAMESPACE


def test_kit_files_are_listed() -> None:
    listed = {r for r in KUSTOMIZATION["resources"] if not (K8S_KIT / r).is_dir()} | {
        e.partition("=")[2] for g in KUSTOMIZATION["configMapGenerator"] for e in g.get("files", [])
    }
    on_disk = {p.name for p in K8S_KIT.glob("*.yaml")} - {"kustomization.yaml"}
    assert on_disk == listed


# --- the HPA's metric pipeline ------------------------------------------------------------------------------
ADAPTER = yaml.safe_load((K8S_KIT / "prometheus-adapter-rules.yaml").read_text())
SCRAPE = yaml.safe_load((K8S_KIT / "prometheus-scrape.yaml").read_text())
# A Kubernetes label value (apimachinery's IsValidLabelValue): the API server refuses any other.
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def _selectors(node: Any) -> list[dict[str, str]]:
    """Every matchLabels map in a manifest."""
    if isinstance(node, dict):
        found = [node["matchLabels"]] if isinstance(node.get("matchLabels"), dict) else []
        return found + [s for v in node.values() for s in _selectors(v)]
    if isinstance(node, list):
        return [s for v in node for s in _selectors(v)]
    return []


def test_every_label_selector_holds_values_the_api_server_accepts() -> None:
    """kubernetes-validate does not check label values; the API server does. The old HPA selected
    exporter=loadbalancing/scorers: a "/" is no label value, so that HPA was refused outright."""
    for doc in RESOURCES:
        for selector in _selectors(doc):
            for key, value in selector.items():
                assert LABEL_VALUE.match(str(value)), (doc["kind"], key, value)
    bad = {"matchLabels": {"exporter": "load_balancing/scorers"}}
    assert not all(LABEL_VALUE.match(v) for s in _selectors(bad) for v in s.values())


def _rule_for(rules: list[dict[str, Any]], served_as: str) -> dict[str, Any]:
    (rule,) = [r for r in rules if r["name"]["as"] == served_as]
    return rule


def _series(query: str) -> tuple[str, dict[str, str]]:
    """A seriesQuery's metric name and its equality matchers."""
    match = re.fullmatch(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{(.*)\}", query.strip())
    assert match, query
    matchers = dict(re.findall(r'([a-zA-Z_]+)="([^"]*)"', match.group(2)))
    return match.group(1), matchers


def test_every_hpa_metric_is_served_by_an_adapter_rule_over_a_scraped_series() -> None:
    hpa = _one("HorizontalPodAutoscaler")
    pods = next(m["pods"] for m in hpa["spec"]["metrics"] if m["type"] == "Pods")
    external = next(m["external"] for m in hpa["spec"]["metrics"] if m["type"] == "External")
    jobs = {job["job_name"]: job for job in SCRAPE["scrape_configs"]}

    pods_rule = _rule_for(ADAPTER["rules"], pods["metric"]["name"])
    name, _ = _series(pods_rule["seriesQuery"])
    assert name == "faithtrace_serve_pending"  # the gauge `faithtrace serve` serves on /metrics
    assert pods_rule["resources"]["overrides"].keys() == {"namespace", "pod"}
    # ... scraped from the scorer pods' OTLP/HTTP port, where /metrics is served, with those labels.
    scorer = jobs["faithtrace-scorer"]
    container = _one("Deployment", "faithtrace-scorer")["spec"]["template"]["spec"]["containers"][0]
    port_name = next(r["regex"] for r in scorer["relabel_configs"] if "container_port_name" in str(r))
    assert port_name in {p["name"] for p in container["ports"]}
    assert {"namespace", "pod"} <= {r.get("target_label") for r in scorer["relabel_configs"]}

    external_rule = _rule_for(ADAPTER["externalRules"], external["metric"]["name"])
    name, matchers = _series(external_rule["seriesQuery"])
    assert name == "otelcol_exporter_queue_size"
    # The Collector labels its exporter metrics with the component ID as configured.
    config = yaml.safe_load(_one("ConfigMap", "otelcol-fleet")["data"]["config.yaml"])
    assert matchers["exporter"] in config["exporters"]
    assert f'exporter="{matchers["exporter"]}"' in external_rule["metricsQuery"]
    assert "selector" not in external["metric"]  # the rule selects; a "/" cannot be in a label selector
    # ... scraped from the Collector's own telemetry port, which the config serves and the pod exposes.
    telemetry = config["service"]["telemetry"]["metrics"]["readers"][0]["pull"]["exporter"]["prometheus"]
    collector = _one("StatefulSet", "otel-collector")["spec"]["template"]["spec"]["containers"][0]
    job = jobs["faithtrace-otel-collector"]
    port_name = next(r["regex"] for r in job["relabel_configs"] if "container_port_name" in str(r))
    assert {p["name"]: p["containerPort"] for p in collector["ports"]}[port_name] == telemetry["port"]


def test_prometheus_accepts_the_scrape_jobs_and_the_adapter_queries(tmp_path: Path) -> None:
    """promtool checks the scrape jobs as Prometheus loads them, and each adapter query, templated the way
    prometheus-adapter fills it in, as a PromQL expression. Debian's Prometheus is built without the
    Kubernetes service discovery, so the jobs are checked with a static target in its place (their
    relabelling included); the discovery block itself must name the pod role in the kit's namespace."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool missing (apt-get install prometheus, or `make backends`)")
    jobs = copy.deepcopy(SCRAPE["scrape_configs"])
    for job in jobs:
        assert job.pop("kubernetes_sd_configs") == [{"role": "pod", "namespaces": {"names": [NAMESPACE]}}]
        job["static_configs"] = [{"targets": ["127.0.0.1:9"]}]
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump({"global": {"scrape_interval": "15s"}, "scrape_configs": jobs}))
    done = subprocess.run([promtool, "check", "config", str(config)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    rules = []
    for i, rule in enumerate(ADAPTER["rules"] + ADAPTER["externalRules"]):
        name, _ = _series(rule["seriesQuery"])
        expr = (
            rule["metricsQuery"]
            .replace("<<.Series>>", name)
            .replace("<<.LabelMatchers>>", 'namespace="faithtrace"')
            .replace("<<.GroupBy>>", "namespace,pod")
        )
        rules.append({"record": f"adapter:rule{i}", "expr": expr})
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "adapter", "rules": rules}]}))
    done = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


# --- the scorer image -------------------------------------------------------------------------------------
DOCKERFILE = K8S_KIT.parent / "Dockerfile.serve"


def _dockerfile() -> list[tuple[str, str]]:
    steps = []
    for line in DOCKERFILE.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            op, _, rest = line.strip().partition(" ")
            steps.append((op.upper(), rest))
    return steps


def test_the_image_installs_with_the_constraints_it_copies() -> None:
    steps = _dockerfile()
    copied = [s for op, rest in steps if op == "COPY" for s in rest.split()[:-1]]
    assert "constraints.txt" in copied
    for source in copied:
        assert (REPO / source).exists(), source
    (install,) = [rest for op, rest in steps if op == "RUN" and "pip install" in rest]
    assert "-c constraints.txt" in install
    assert [op for op, _ in steps].index("USER") > [op for op, _ in steps].index("RUN")  # not root at run


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_images_install_step_gives_a_working_serve(tmp_path: Path) -> None:
    """The Dockerfile's own COPY and RUN steps, in a fresh virtual environment instead of a container (no
    base image can be pulled here; docs/fleet.md says how the image itself was built and smoke-tested with
    buildah): the install resolves with the constraints and `faithtrace serve` starts."""
    steps = _dockerfile()
    work = tmp_path / "src"
    work.mkdir()
    for op, rest in steps:
        if op == "COPY":
            for source in rest.split()[:-1]:  # the destination is WORKDIR (/src), here `work`
                if (REPO / source).is_dir():
                    shutil.copytree(REPO / source, work / Path(source).name)
                else:
                    shutil.copy(REPO / source, work / Path(source).name)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    (install,) = [rest for op, rest in steps if op == "RUN" and "pip install" in rest]
    command = install.split("&&")[0].strip().replace("pip install", f"{venv}/bin/pip install -q", 1)
    # pip byte-compiles every module it installs (thousands: litellm, openai, grpc), most of which `serve`
    # never imports; the step's resolution and the start below are what is checked, and Python compiles the
    # modules `serve` does import as it imports them. (pip reads PIP_NO_COMPILE=1 as --compile.)
    pip_env = dict(os.environ, PIP_COMPILE="0")
    wheels = os.environ.get("FAITHTRACE_SERVE_WHEELS")
    if wheels:
        # `make test` runs the suite without a network (tests/isolated.sh): the step installs from the wheels
        # `make serve-wheels` downloaded for exactly this pyproject and these constraints, and nothing else.
        pip_env.update(PIP_NO_INDEX="1", PIP_FIND_LINKS=wheels)
    elif os.environ.get("FAITHTRACE_REQUIRE_BACKENDS") == "1":
        pytest.fail("FAITHTRACE_SERVE_WHEELS is not set: run `make serve-wheels` (make test does)")
    done = subprocess.run(
        command, shell=True, cwd=work, capture_output=True, text=True, timeout=840, env=pip_env
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    # The image's command, on free ports: it starts and reports ready (the judge is never called).
    ready = tmp_path / "ready.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "FAITHTRACE_"))}
    env.update(
        FAITHTRACE_JUDGE_MODEL="openai/not-called",
        FAITHTRACE_JUDGE_API_BASE="http://127.0.0.1:9/v1",
        FAITHTRACE_JUDGE_API_KEY="x",
        LITELLM_LOCAL_MODEL_COST_MAP="True",
    )
    argv = [
        f"{venv}/bin/faithtrace",
        "serve",
        "--grpc-port",
        "0",
        "--http-port",
        "0",
        "--ready-file",
        str(ready),
    ]
    serve = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while not ready.exists() and serve.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert ready.exists(), (
            serve.stdout.read() if serve.stdout and serve.poll() is not None else "no start"
        )
        port = json.loads(ready.read_text())["http_port"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=10) as response:
            assert response.status == 200
    finally:
        serve.terminate()
        serve.wait(timeout=60)
    freeze = subprocess.run([f"{venv}/bin/pip", "freeze"], capture_output=True, text=True, check=True).stdout
    for pin in (REPO / "constraints.txt").read_text().splitlines():
        name, sep, version = pin.partition("==")
        if sep and name.strip().lower() in freeze.lower():
            assert f"{name.strip().lower()}=={version.strip()}" in freeze.lower(), pin


def test_the_persistent_queues_fit_the_collectors_volume() -> None:
    """Both queues on the file_storage volume are bounded in bytes, and twice their sum (bbolt's compaction
    writes a compacted copy beside each file) plus 1 GiB of overhead fits the volume each pod claims."""
    config = yaml.safe_load(_one("ConfigMap", "otelcol-fleet")["data"]["config.yaml"])
    queues = [
        e["sending_queue"]
        for e in config["exporters"].values()
        if isinstance(e, dict) and e.get("sending_queue", {}).get("storage")
    ]
    assert len(queues) == 2
    assert all(q["sizer"] == "bytes" for q in queues)
    total = sum(int(q["queue_size"]) for q in queues)
    (claim,) = _one("StatefulSet", "otel-collector")["spec"]["volumeClaimTemplates"]
    size = claim["spec"]["resources"]["requests"]["storage"]
    units = {"Gi": 2**30, "Mi": 2**20, "Ti": 2**40}
    volume = int(size[:-2]) * units[size[-2:]]
    assert 2 * total + 2**30 <= volume, (total, size)
