"""collector/otelcol/fleet-kafka.yaml (and the Kubernetes kit's copy) against the real Collector binary, and
its delivery contract structurally: traces keyed by trace ID, a persistent queue that retries forever, acks
from every in-sync replica, nothing batching in front of the exporter, results never looping into the
topic."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from _fleet_fixtures import COLLECTOR, FleetPorts, otelcol_binary, validate
from _kafka_fixtures import KAFKA_EXPORTER, KAFKA_FLEET_CONFIG, local_kafka_fleet_config

CONFIGS = [KAFKA_FLEET_CONFIG, COLLECTOR / "deploy" / "k8s-kafka" / "otelcol-fleet-kafka.yaml"]


def _config() -> dict[str, Any]:
    return dict(yaml.safe_load(KAFKA_FLEET_CONFIG.read_text()))


@pytest.mark.backend
@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: str(p.relative_to(COLLECTOR)))
def test_the_real_collector_accepts_the_kafka_config(config: Path) -> None:
    done = validate(otelcol_binary(), config)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "deprecated" not in (done.stdout + done.stderr).lower(), done.stdout + done.stderr


@pytest.mark.backend
def test_a_misspelt_kafka_key_is_refused_and_the_loopback_config_validates(tmp_path: Path) -> None:
    otelcol = otelcol_binary()
    config = _config()
    config["exporters"][KAFKA_EXPORTER]["partition_traces_by_trace_id"] = True  # not the key's name
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(config))
    done = validate(otelcol, bad)
    assert done.returncode != 0
    assert "partition_traces_by_trace_id" in done.stdout + done.stderr

    local = tmp_path / "local.yaml"
    local.write_text(yaml.safe_dump(local_kafka_fleet_config(FleetPorts(), "127.0.0.1:19092", "t", tmp_path)))
    done = validate(otelcol, local)
    assert done.returncode == 0, done.stdout + done.stderr


def test_traces_are_keyed_by_trace_id_through_a_persistent_queue_that_never_gives_up() -> None:
    config = _config()
    exporter = config["exporters"][KAFKA_EXPORTER]
    assert exporter["partition_traces_by_id"] is True
    assert exporter["traces"]["encoding"] == "otlp_proto"  # what `serve --kafka` decodes
    assert exporter["producer"]["required_acks"] == -1
    queue = exporter["sending_queue"]
    assert queue["enabled"] is True
    assert queue["storage"] in config["extensions"]
    assert config["extensions"][queue["storage"]]["fsync"] is True
    assert exporter["retry_on_failure"]["max_elapsed_time"] == 0
    assert queue["storage"] in config["service"]["extensions"]


def test_nothing_batches_in_front_of_the_exporter_and_results_never_reach_the_topic() -> None:
    pipelines = _config()["service"]["pipelines"]
    apps = pipelines["traces/apps"]
    assert KAFKA_EXPORTER in apps["exporters"]
    assert "batch" not in apps["processors"]
    for name, pipeline in pipelines.items():
        if name != "traces/apps":
            assert KAFKA_EXPORTER not in pipeline["exporters"], name
    assert pipelines["traces/results"]["receivers"] == ["otlp/results"]
    assert "otlp/results" not in apps["receivers"]
    # A scorer commits once its results were accepted: they go straight into a persistent queue.
    assert "batch" not in pipelines["traces/results"]["processors"]
    config = _config()
    for name in pipelines["traces/results"]["exporters"]:
        assert config["exporters"][name]["sending_queue"]["storage"] == "file_storage/queue"
