"""Structural checks of what cannot run here (no Docker, no otelcol, no Grafana): the Collector config, the
compose file, the Grafana provisioning and the dashboard. Names are checked against faithtrace's names."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from _prom_fixtures import (
    COLLECTOR,
    COMPOSE_FILE,
    GRAFANA,
    OTELCOL_CONFIG,
    PROMETHEUS_CONFIG,
    metric_constants,
    prom_name,
    promql_refs,
)
from faithtrace._telemetry import names

SERVICES = {"otel-collector", "jaeger", "prometheus", "alertmanager", "grafana"}


def _yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


@pytest.fixture(scope="module")
def otelcol() -> dict[str, Any]:
    return dict(_yaml(OTELCOL_CONFIG))


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return dict(_yaml(COMPOSE_FILE))


def _dashboards() -> list[Path]:
    return sorted((GRAFANA / "dashboards").glob("*.json"))


def _panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


# --- Collector -------------------------------------------------------------------------------------------
def test_collector_pipelines_reference_defined_components(otelcol: dict[str, Any]) -> None:
    pipelines = otelcol["service"]["pipelines"]
    assert set(pipelines) == {"traces", "metrics"}
    for name, pipeline in pipelines.items():
        for kind in ("receivers", "processors", "exporters"):
            for component in pipeline[kind]:
                assert component in otelcol[kind], f"{name}: {kind[:-1]} {component} is not defined"
        # memory_limiter first (refuse data before running out of memory), batch last (after sampling).
        assert pipeline["processors"][0] == "memory_limiter"
        assert pipeline["processors"][-1] == "batch"
        assert pipeline["receivers"] == ["otlp"]
    assert set(otelcol["service"]["extensions"]) <= set(otelcol["extensions"])


def test_collector_alternative_pipeline_in_comment_is_valid(otelcol: dict[str, Any]) -> None:
    """The commented 'without raw text' processor list must name defined processors in a valid order."""
    lines = [ln for ln in OTELCOL_CONFIG.read_text().splitlines() if re.match(r"\s*#\s*processors:", ln)]
    assert len(lines) == 1
    alternative = yaml.safe_load(lines[0].split("#", 1)[1])["processors"]
    assert all(p in otelcol["processors"] for p in alternative)
    assert alternative[0] == "memory_limiter"
    assert alternative[-2:] == ["tail_sampling", "batch"]
    assert {"attributes/drop-content", "transform/drop-event-text"} <= set(alternative)


def test_collector_receives_otlp_on_both_protocols(otelcol: dict[str, Any]) -> None:
    protocols = otelcol["receivers"]["otlp"]["protocols"]
    assert protocols["grpc"]["endpoint"].endswith(":4317")
    assert protocols["http"]["endpoint"].endswith(":4318")


def test_collector_exports_to_jaeger_and_prometheus(otelcol: dict[str, Any]) -> None:
    pipelines = otelcol["service"]["pipelines"]
    (trace_exporter,) = pipelines["traces"]["exporters"]
    assert trace_exporter.startswith("otlp")
    host, port = otelcol["exporters"][trace_exporter]["endpoint"].rsplit(":", 1)
    assert (host, port) == ("jaeger", "4317")
    assert pipelines["metrics"]["exporters"] == ["prometheus"]
    exporter_port = otelcol["exporters"]["prometheus"]["endpoint"].rsplit(":", 1)[1]
    # Prometheus scrapes exactly that exporter, keeping the job/instance it derives from the resource.
    scrape = _yaml(PROMETHEUS_CONFIG)["scrape_configs"][0]
    assert scrape["honor_labels"] is True
    assert scrape["static_configs"][0]["targets"] == [f"otel-collector:{exporter_port}"]


def test_tail_sampling_keeps_every_failing_answer(otelcol: dict[str, Any]) -> None:
    sampling = otelcol["processors"]["tail_sampling"]
    policies = {p["type"]: p for p in sampling["policies"]}
    keep = policies["string_attribute"]["string_attribute"]
    assert keep["key"] == names.GEN_AI_EVALUATION_SCORE_LABEL
    assert keep["values"] == [names.LABEL_FAIL]
    assert "invert_match" not in keep
    assert 0 < policies["probabilistic"]["probabilistic"]["sampling_percentage"] < 100
    # The evaluation span arrives after scoring: the decision must wait for it.
    assert int(sampling["decision_wait"].rstrip("s")) >= 30
    assert "tail_sampling" in otelcol["service"]["pipelines"]["traces"]["processors"]


def test_scrubbing_processors_name_faithtrace_s_real_content_attributes(otelcol: dict[str, Any]) -> None:
    attribute_names = {v for v in vars(names).values() if isinstance(v, str)}
    actions = otelcol["processors"]["attributes/drop-content"]["actions"]
    assert all(a["action"] == "delete" for a in actions)
    keys = {a["key"] for a in actions if "key" in a}
    assert keys == {
        names.INPUT_VALUE,
        names.OUTPUT_VALUE,
        names.GEN_AI_INPUT_MESSAGES,
        names.GEN_AI_OUTPUT_MESSAGES,
    }
    documents, messages = [a["pattern"] for a in actions if "pattern" in a]
    assert re.fullmatch(documents, names.RETRIEVAL_DOCUMENT_CONTENT.format(index=7))
    assert re.fullmatch(messages, names.LLM_INPUT_MESSAGE_CONTENT.format(index=3))
    assert re.fullmatch(messages, names.LLM_OUTPUT_MESSAGE_CONTENT.format(index=0))
    for pattern in (documents, messages):
        assert not re.fullmatch(pattern, names.CONTEXTS_COUNT)
        assert not re.fullmatch(pattern, names.LLM_INPUT_MESSAGE_ROLE.format(index=0))

    statements = [
        s
        for block in otelcol["processors"]["transform/drop-event-text"]["trace_statements"]
        for s in block["statements"]
    ]
    deleted = set()
    claim_events = [names.claim_event(i, status) for i in (0, 9) for status in ("supported", "not_confirmed")]
    for statement in statements:
        match = re.fullmatch(
            r'delete_key\(attributes, "([^"]+)"\) where (?:name == "([^"]+)"|IsMatch\(name, "([^"]+)"\))',
            statement,
        )
        assert match, statement
        key, event, pattern = match.groups()
        assert key in attribute_names
        if event is not None:
            assert event == names.GEN_AI_EVALUATION_RESULT_EVENT
        else:  # the claim events are named per claim: matched by their prefix (OTTL's string escapes undone)
            regex = re.compile(pattern.replace("\\\\", "\\"))
            assert all(regex.match(name) for name in claim_events), pattern
            assert not regex.match(names.step_event("claims"))
            assert not regex.match(names.GEN_AI_EVALUATION_RESULT_EVENT)
        deleted.add(key)
    assert deleted == {names.CLAIM_TEXT, names.CLAIM_REASON, names.GEN_AI_EVALUATION_EXPLANATION}
    # Whatever is scrubbed, the attributes that sampling, alerts and searches rely on are never touched.
    untouchable = {names.GEN_AI_EVALUATION_SCORE_LABEL, names.FUNCTION, names.EVAL_FAITHFULNESS}
    assert not untouchable & (keys | deleted)


def test_redaction_patterns_are_valid_and_mask_what_they_claim(otelcol: dict[str, Any]) -> None:
    redaction = otelcol["processors"]["redaction/pii"]
    assert redaction["allow_all_keys"] is True
    # Python's re agrees with Go's RE2 on these constructs (classes, \b, bounded repeats).
    patterns = [re.compile(p) for p in redaction["blocked_values"]]
    samples = ["mail jane.doe@example.com now", "card 4111 1111 1111 1111", "key sk-abcdefghijklmnop1234"]
    for sample in samples:
        assert any(p.search(sample) for p in patterns), sample
    assert not any(p.search("The Eiffel Tower is 330 metres tall and opened in 1889.") for p in patterns)


# --- compose -----------------------------------------------------------------------------------------------
def test_compose_runs_the_five_services_with_pinned_images(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) == SERVICES
    for name, service in services.items():
        image = service["image"]
        repository, _, tag = image.rpartition(":")
        assert "/" in repository, f"{name}: {image}"
        assert re.fullmatch(r"v?\d+\.\d+\.\d+", tag), f"{name}: image {image} is not pinned to a version"
        assert "latest" not in image


def test_compose_publishes_ports_on_loopback_only(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port} beyond this host"


def test_compose_mounts_files_that_exist(compose: dict[str, Any]) -> None:
    named_volumes = set(compose.get("volumes") or {})
    for name, service in compose["services"].items():
        for volume in service.get("volumes", []):
            source, target = volume.split(":")[:2]
            if source in named_volumes:
                continue
            assert (COLLECTOR / source).exists(), f"{name} mounts missing {source}"
            assert target.startswith("/")
        for dependency in service.get("depends_on", []):
            assert dependency in compose["services"]


def _mount_target(compose: dict[str, Any], service: str, source: str) -> str:
    for volume in compose["services"][service]["volumes"]:
        src, target = volume.split(":")[:2]
        if src == source:
            return target
    raise AssertionError(f"{service} does not mount {source}")


def test_compose_wires_the_configs_to_the_paths_each_service_reads(compose: dict[str, Any]) -> None:
    services = compose["services"]
    config_flag = next(a for a in services["otel-collector"]["command"] if a.startswith("--config="))
    assert config_flag == "--config=" + _mount_target(compose, "otel-collector", "./otelcol/config.yaml")
    prometheus_config = _mount_target(compose, "prometheus", "./prometheus/prometheus.yml")
    assert f"--config.file={prometheus_config}" in services["prometheus"]["command"]
    rule_glob = _yaml(PROMETHEUS_CONFIG)["rule_files"][0]
    rules_dir = _mount_target(compose, "prometheus", "./prometheus/rules")
    assert str(Path(prometheus_config).parent / rule_glob).startswith(rules_dir + "/")
    am_config = _mount_target(compose, "alertmanager", "./alertmanager/alertmanager.yml")
    assert f"--config.file={am_config}" in services["alertmanager"]["command"]
    alertmanagers = _yaml(PROMETHEUS_CONFIG)["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"]
    assert alertmanagers == ["alertmanager:9093"]
    assert _mount_target(compose, "grafana", "./grafana/provisioning") == "/etc/grafana/provisioning"
    provider = _yaml(GRAFANA / "provisioning" / "dashboards" / "dashboards.yaml")["providers"][0]
    assert provider["options"]["path"] == _mount_target(compose, "grafana", "./grafana/dashboards")
    home = services["grafana"]["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert Path(home).name in {p.name for p in _dashboards()}


# --- Grafana ---------------------------------------------------------------------------------------------
def _datasources() -> dict[str, dict[str, Any]]:
    provisioned = _yaml(GRAFANA / "provisioning" / "datasources" / "datasources.yaml")["datasources"]
    return {ds["uid"]: ds for ds in provisioned}


def test_datasources_point_at_compose_services(compose: dict[str, Any]) -> None:
    datasources = _datasources()
    assert {ds["type"] for ds in datasources.values()} >= {"prometheus", "jaeger"}
    for ds in datasources.values():
        host = re.match(r"https?://([^:/]+)", ds["url"])
        assert host, ds["url"]
        assert host.group(1) in compose["services"], ds["url"]


def _datasource_refs(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        ref = node.get("datasource")
        if isinstance(ref, dict):
            yield ref
        elif ref is not None:
            yield {"uid": ref}
        for value in node.values():
            yield from _datasource_refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _datasource_refs(value)


@pytest.mark.parametrize("path", _dashboards(), ids=lambda p: p.name)
def test_every_datasource_reference_resolves(path: Path) -> None:
    dashboard = json.loads(path.read_text())
    datasources = _datasources()
    refs = list(_datasource_refs(dashboard))
    assert refs
    for ref in refs:
        if ref.get("uid") == "-- Grafana --":
            continue  # Grafana's built-in annotation source
        assert ref.get("uid") in datasources, f"unknown datasource {ref}"
        if "type" in ref:
            assert ref["type"] == datasources[ref["uid"]]["type"], ref


@pytest.mark.parametrize("path", _dashboards(), ids=lambda p: p.name)
def test_dashboard_structure(path: Path) -> None:
    dashboard = json.loads(path.read_text())
    panels = list(_panels(dashboard))
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    assert dashboard["uid"] == "faithtrace"  # the alert annotations link to /d/faithtrace
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    # Grafana's own variables ($__range, $__interval, ...) start with two underscores.
    used = {u for u in re.findall(r"\$(\w+)", json.dumps(dashboard)) if not u.startswith("__")}
    assert used <= variables, f"undefined dashboard variables: {used - variables}"
    boxes = [p["gridPos"] for p in panels]
    for i, a in enumerate(boxes):
        assert a["x"] + a["w"] <= 24
        for b in boxes[i + 1 :]:
            overlap = a["x"] < b["x"] + b["w"] and b["x"] < a["x"] + a["w"]
            overlap = overlap and a["y"] < b["y"] + b["h"] and b["y"] < a["y"] + a["h"]
            assert not overlap, (a, b)
    for panel in panels:
        if panel["type"] != "row":
            assert panel["title"], panel
            assert panel.get("description"), panel["title"]
            assert panel["targets"], panel["title"]


def test_dashboard_covers_what_the_issue_asks_for() -> None:
    dashboard = json.loads((GRAFANA / "dashboards" / "faithtrace.json").read_text())
    titles = " | ".join(p["title"].lower() for p in _panels(dashboard))
    for wanted in (
        "score over time, per function",
        "score distribution",
        "fail rate",
        "claims per answer",
        "verdict mix",
        "judge tokens per hour",
        "judge cost per hour",
        "evaluation latency",
        "drops and errors",
        "failing answers (jaeger)",
    ):
        assert wanted in titles, wanted


def test_dashboard_shows_every_metric_faithtrace_emits() -> None:
    dashboard = json.loads((GRAFANA / "dashboards" / "faithtrace.json").read_text())
    used: set[str] = set()
    for panel in _panels(dashboard):
        for target in panel.get("targets", []):
            if "expr" in target:
                used |= promql_refs(target["expr"]).metrics
    for const, otel_name in metric_constants().items():
        base = prom_name(otel_name)
        assert any(m == base or m.startswith(base + "_") for m in used), (
            f"{const} ({otel_name}) is on no panel"
        )


def test_failing_answers_panel_searches_jaeger_by_the_label_attribute() -> None:
    dashboard = json.loads((GRAFANA / "dashboards" / "faithtrace.json").read_text())
    (panel,) = [p for p in _panels(dashboard) if p.get("datasource", {}).get("type") == "jaeger"]
    (query,) = panel["targets"]
    assert query["queryType"] == "search"
    # Any span of the service labelled fail: the RAG spans carrying their evaluation.
    assert "operation" not in query
    assert query["tags"] == f"{names.GEN_AI_EVALUATION_SCORE_LABEL}={names.LABEL_FAIL}"
    # The per-function panels link there too, and the dashboard has a link to the same search.
    links = [
        link["url"]
        for p in _panels(dashboard)
        for link in p.get("fieldConfig", {}).get("defaults", {}).get("links", [])
    ]
    links += [link["url"] for link in dashboard["links"]]
    encoded_label = f"%22{names.GEN_AI_EVALUATION_SCORE_LABEL}%22%3A%22{names.LABEL_FAIL}%22"
    assert sum(1 for url in links if encoded_label in url) >= 3
