"""The Collector configs in collector/ against the real Collector binary that collector/build.sh builds.

`otelcol validate` unmarshals each config into the built components' own config structs and runs their checks,
so an unknown component, a misspelt key or an invalid value fails here as it would at a user's start-up.
"""

from __future__ import annotations

import re
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from _fleet_fixtures import (
    COLLECTOR,
    FLEET_CONFIG,
    GROUPBYTRACE_OVERLAY,
    K8S_KIT,
    LB_EXPORTER,
    Fleet,
    FleetPorts,
    Proc,
    http_ok,
    local_fleet_config,
    otelcol_binary,
    validate,
    wait_until,
)

pytestmark = pytest.mark.backend

SHIPPED_CONFIGS = [
    COLLECTOR / "otelcol" / "config.yaml",
    FLEET_CONFIG,
    K8S_KIT / "otelcol-fleet.yaml",
]


@pytest.fixture(scope="module")
def otelcol() -> str:
    return otelcol_binary()


def _fleet() -> dict[str, Any]:
    return dict(yaml.safe_load(FLEET_CONFIG.read_text()))


@pytest.mark.parametrize("config", SHIPPED_CONFIGS, ids=lambda p: str(p.relative_to(COLLECTOR)))
def test_the_real_collector_accepts_the_shipped_config(otelcol: str, config: Path) -> None:
    done = validate(otelcol, config)
    assert done.returncode == 0, done.stdout + done.stderr
    # Deprecated component names still validate but warn at every start; the shipped configs use none.
    assert "deprecated" not in (done.stdout + done.stderr).lower(), done.stdout + done.stderr


def test_validate_rejects_what_the_collector_would_reject(otelcol: str, tmp_path: Path) -> None:
    """The check above can fail: a misspelt key and an unknown component are both refused."""
    config = _fleet()
    config["exporters"][LB_EXPORTER]["routing_key"] = "traceId"  # the valid spelling is traceID
    bad = tmp_path / "bad-routing-key.yaml"
    bad.write_text(yaml.safe_dump(config))
    done = validate(otelcol, bad)
    assert done.returncode != 0
    assert "routing_key" in done.stdout + done.stderr

    config = _fleet()
    # A real contrib processor this distribution does not include.
    config["processors"]["k8sattributes"] = {}
    config["service"]["pipelines"]["traces/apps"]["processors"].append("k8sattributes")
    bad = tmp_path / "unknown-component.yaml"
    bad.write_text(yaml.safe_dump(config))
    done = validate(otelcol, bad)
    assert done.returncode != 0
    assert "k8sattributes" in done.stdout + done.stderr


def test_the_binary_has_every_component_the_issue_names(otelcol: str) -> None:
    done = subprocess.run([otelcol, "components"], capture_output=True, text=True, timeout=60, check=True)
    listed = yaml.safe_load(done.stdout)
    names = {kind: {c["name"] for c in listed.get(kind) or []} for kind in ("receivers", "exporters")}
    names["processors"] = {c["name"] for c in listed.get("processors") or []}
    names["extensions"] = {c["name"] for c in listed.get("extensions") or []}
    assert "otlp" in names["receivers"]
    assert {"load_balancing", "otlp_grpc", "otlp_http", "debug", "file", "prometheus"} <= names["exporters"]
    assert {
        "memory_limiter",
        "batch",
        "tail_sampling",
        "transform",
        "attributes",
        "redaction",
        "groupbytrace",
    } <= names["processors"]
    assert {"file_storage", "health_check"} <= names["extensions"]


def test_the_loopback_fleet_config_the_e2e_tests_run_validates(otelcol: str, tmp_path: Path) -> None:
    config = local_fleet_config(FleetPorts(), ["127.0.0.1:14317", "127.0.0.1:14318"], tmp_path)
    path = tmp_path / "fleet-local.yaml"
    path.write_text(yaml.safe_dump(config))
    done = validate(otelcol, path)
    assert done.returncode == 0, done.stdout + done.stderr


# --- the fleet config's delivery contract, structurally ----------------------------------------------------
def test_fleet_balances_by_trace_id_through_one_persistent_queue() -> None:
    config = _fleet()
    balancer = config["exporters"][LB_EXPORTER]
    assert balancer["routing_key"] == "traceID"
    queue = balancer["sending_queue"]
    assert queue["enabled"] is True
    storage = queue["storage"]
    assert storage in config["extensions"]
    assert storage.startswith("file_storage")
    assert storage in config["service"]["extensions"]
    assert config["extensions"][storage]["fsync"] is True
    # Queued requests go out in parts of a few spans, many at once: the load balancer sends one request to its
    # backends one after another, each answering once it has scored its share, so whole app batches had the
    # replicas take turns (benchmarks/fleet/fleet.py). Nothing waits to be merged.
    batch = queue["batch"]
    assert batch["sizer"] == "items"
    assert 0 < batch["max_size"] <= 64
    assert batch["min_size"] == 0
    assert queue["num_consumers"] >= 8
    # Retries never give up: a trace not yet scored stays in the queue until a scorer answers.
    retry = balancer["retry_on_failure"]
    assert retry["enabled"] is True
    assert retry["max_elapsed_time"] == 0
    # The per-backend queue is off (a persistent one there broke routing) and so are per-backend retries:
    # a failed request goes back to the top-level queue and is re-hashed onto the current ring.
    otlp = balancer["protocol"]["otlp"]
    assert otlp["sending_queue"]["enabled"] is False
    assert otlp["retry_on_failure"]["enabled"] is False
    assert otlp["tls"]["insecure"] is True
    # The request timeout covers the scorer's worst case (it answers only after scoring).
    assert _seconds(balancer["timeout"]) > _seconds(otlp["timeout"]) >= 60
    assert "static" in balancer["resolver"]


def test_nothing_batches_between_the_app_and_the_persistent_queue() -> None:
    """A batch processor would hold accepted spans in memory, where a killed Collector loses them."""
    pipelines = _fleet()["service"]["pipelines"]
    assert pipelines["traces/apps"]["processors"] == ["memory_limiter"]
    assert LB_EXPORTER in pipelines["traces/apps"]["exporters"]


def test_results_never_loop_back_into_the_load_balancer() -> None:
    config = _fleet()
    pipelines = config["service"]["pipelines"]
    results = [p for p in pipelines.values() if "otlp/results" in p["receivers"]]
    assert results
    for pipeline in results:
        assert LB_EXPORTER not in pipeline["exporters"]
    app_ports = {_port(e) for e in config["receivers"]["otlp"]["protocols"].values()}
    result_ports = {_port(e) for e in config["receivers"]["otlp/results"]["protocols"].values()}
    assert not app_ports & result_ports
    # Both the app's spans and the scorers' results reach the trace backend; both signals' metrics Prometheus.
    assert "otlp_grpc/traces" in pipelines["traces/apps"]["exporters"]
    assert pipelines["metrics"]["receivers"] == ["otlp", "otlp/results"]
    assert pipelines["metrics"]["exporters"] == ["prometheus"]


def test_replayed_spans_go_to_the_load_balancer_alone() -> None:
    """A scorer's spooled spans (faithtrace serve --spool) come back on their own receiver: routed to the
    replica that owns the trace now, and not sent to the trace backend a second time."""
    config = _fleet()
    pipelines = config["service"]["pipelines"]
    replay = [p for p in pipelines.values() if "otlp/replay" in p["receivers"]]
    assert [p["exporters"] for p in replay] == [[LB_EXPORTER]]
    assert replay[0]["processors"] == ["memory_limiter"]  # nothing held in memory on the way
    ports = {
        name: {_port(e) for e in config["receivers"][name]["protocols"].values()}
        for name in ("otlp", "otlp/results", "otlp/replay")
    }
    assert not ports["otlp/replay"] & (ports["otlp"] | ports["otlp/results"])


def test_the_k8s_kit_runs_the_fleet_config_with_the_k8s_resolver() -> None:
    """The kit's Collector config is fleet.yaml but for the resolver: the two cannot drift apart."""
    fleet, kit = _fleet(), yaml.safe_load((K8S_KIT / "otelcol-fleet.yaml").read_text())
    kit_resolver = kit["exporters"][LB_EXPORTER].pop("resolver")
    del fleet["exporters"][LB_EXPORTER]["resolver"]
    assert kit == fleet
    k8s = kit_resolver["k8s"]
    scorer_service = next(
        d
        for d in yaml.safe_load_all((K8S_KIT / "scorer.yaml").read_text())
        if d["kind"] == "Service" and d["spec"].get("clusterIP") == "None"
    )
    assert k8s["service"] == f"{scorer_service['metadata']['name']}.faithtrace"
    grpc_port = next(p["port"] for p in scorer_service["spec"]["ports"] if p["name"] == "otlp-grpc")
    assert k8s["ports"] == [grpc_port]


def _seconds(duration: str) -> float:
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    for unit in sorted(units, key=len, reverse=True):
        if duration.endswith(unit):
            return float(duration[: -len(unit)]) * units[unit]
    raise ValueError(duration)


def _port(protocol: dict[str, Any]) -> int:
    return int(str(protocol["endpoint"]).rsplit(":", 1)[1])


# --- the groupbytrace overlay ----------------------------------------------------------------------------
def test_the_groupbytrace_overlay_validates_over_the_fleet_config(otelcol: str, tmp_path: Path) -> None:
    local = tmp_path / "fleet-local.yaml"
    local.write_text(yaml.safe_dump(local_fleet_config(FleetPorts(), ["127.0.0.1:14317"], tmp_path)))
    for base in (FLEET_CONFIG, K8S_KIT / "otelcol-fleet.yaml", local):
        done = subprocess.run(
            [otelcol, "validate", f"--config={base}", f"--config={GROUPBYTRACE_OVERLAY}"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stdout + done.stderr


def test_the_overlay_groups_traces_before_the_load_balancer_and_never_cuts_them() -> None:
    overlay = yaml.safe_load(GROUPBYTRACE_OVERLAY.read_text())
    assert overlay["service"]["pipelines"]["traces/apps"]["processors"] == ["memory_limiter", "groupbytrace"]
    assert _seconds(overlay["processors"]["groupbytrace"]["wait_duration"]) <= 5
    # A part of the load balancer's queue holds a whole OpenInference trace (tens of spans).
    assert overlay["exporters"][LB_EXPORTER]["sending_queue"]["batch"]["max_size"] >= 500
    # Everything else is fleet.yaml's: the overlay touches only these keys.
    assert set(overlay) == {"processors", "exporters", "service"}


def test_the_hpa_backlog_series_is_one_the_real_collector_serves(otelcol: str, tmp_path: Path) -> None:
    """The adapter rule behind the HPA's External metric selects a series by name and exporter label; the
    real Collector, running the shipped telemetry settings (only the address is loopback), serves it. The
    kit once asked for exporter=loadbalancing/scorers, a label no Collector of this release reports."""
    shipped = _fleet()["service"]["telemetry"]["metrics"]
    group = Fleet(tmp_path, otelcol)
    group.scorers.append((Proc("none", [], tmp_path / "none.log"), 14999, 0))  # a backend never dialled here
    path = group.write_collector_config()
    config = yaml.safe_load(path.read_text())
    config["service"]["telemetry"]["metrics"] = shipped
    reader = shipped["readers"][0]["pull"]["exporter"]["prometheus"]
    reader.update(host="127.0.0.1", port=group.ports.telemetry)
    path.write_text(yaml.safe_dump(config))
    proc = Proc("otelcol", [otelcol, f"--config={path}"], tmp_path / "otelcol.log").start()
    try:
        url = f"http://127.0.0.1:{group.ports.telemetry}/metrics"
        wait_until("telemetry served", lambda: http_ok(url), proc, 60.0)
        time.sleep(1.0)
        with urllib.request.urlopen(url, timeout=5) as response:
            served = response.read().decode()
    finally:
        proc.stop()
    adapter = yaml.safe_load((K8S_KIT / "prometheus-adapter-rules.yaml").read_text())
    (rule,) = adapter["externalRules"]
    name, _, matchers = rule["seriesQuery"].partition("{")
    exporter = re.search(r'exporter="([^"]+)"', matchers)
    assert exporter is not None
    wanted = f'exporter="{exporter.group(1)}"'
    assert any(line.startswith(name + "{") and wanted in line for line in served.splitlines()), served[:3000]
    assert 'exporter="loadbalancing/scorers"' not in served


@pytest.mark.parametrize("config", [FLEET_CONFIG, K8S_KIT / "otelcol-fleet.yaml"], ids=["fleet", "k8s"])
def test_scorer_results_are_answered_from_the_persistent_queue_not_a_batch(config: Path) -> None:
    """A batch processor in front of the results' exporter answers the scorer from memory: a SIGKILLed
    Collector then loses results whose requests the scorer already finished (seen as a flaky kill -9 test)."""
    pipeline = yaml.safe_load(config.read_text())["service"]["pipelines"]["traces/results"]
    assert "batch" not in pipeline["processors"]
