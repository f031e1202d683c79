"""End to end on the Kafka path: apps -> the real Collector (collector/otelcol/fleet-kafka.yaml: Kafka
exporter, OTLP protobuf keyed by trace ID, persistent queue) -> a real KRaft broker -> 2
`faithtrace serve --kafka` replicas in one consumer group (judge: the fixed-latency stand-in, through
litellm's real client path) -> the Collector -> a sink Collector (the trace backend) writing a file read
back here.

Apps: the decorated app (scoring="remote") and the LlamaIndex and LangChain apps traced by OpenInference
only (mock LLMs). Every RAG trace must come back scored exactly once without faults, against its own root
(or decorated) span and its own answer text; through `kill -9` of a replica, a broker restart and a
Collector SIGKILL, at least once, with the duplicates counted and reported.

The counts are small for a shared 2-core CI; benchmarks/fleet/fleet_kafka.py runs the same scenarios at >= 500
traces each and prints the figures.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from _fleet_fixtures import (
    Proc,
    Run,
    app_traces,
    collect,
    otelcol_binary,
    read_spans,
    serve_available,
    start_app,
    wait_app_done,
    wait_until,
)
from _kafka_fixtures import Broker, KafkaFleet, app_answers, kafka_broker, start_oi_app
from _kafka_fixtures import kafka_fleet as started_kafka_fleet
from faithtrace._telemetry import names

pytestmark = [pytest.mark.backend, pytest.mark.slow, pytest.mark.timeout(900)]

JUDGE_LATENCY_S = 0.05


@pytest.fixture(scope="module")
def otelcol() -> str:
    return otelcol_binary()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    reason = serve_available()
    if reason is not None:
        pytest.skip(reason)
    with kafka_broker(tmp_path_factory.mktemp("kafka")) as b:
        yield b


@pytest.fixture
def kafka_fleet(tmp_path: Path, otelcol: str, broker: Broker) -> Iterator[KafkaFleet]:
    topic = f"spans-{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, partitions=4)
    with started_kafka_fleet(tmp_path, otelcol, broker, topic, JUDGE_LATENCY_S) as group:
        for _ in range(2):
            group.add_consumer(concurrency=16)
        group.wait_scorers_ready()
        group.start_collector()
        yield group


class Apps:
    """The apps of one run and what each must get back: trace ID -> (scored span ID, answer or None)."""

    def __init__(self) -> None:
        self.decorated: list[Proc] = []
        self.openinference: list[Proc] = []

    def expected(self) -> dict[str, tuple[str, str | None]]:
        out: dict[str, tuple[str, str | None]] = {}
        for app in self.decorated:
            out.update({t: (s, None) for t, s in app_traces(app).items()})
        for app in self.openinference:
            out.update(app_answers(app))
        return out

    def wait(self) -> None:
        for app in self.decorated + self.openinference:
            wait_app_done(app, timeout=600)


def start_apps(group: KafkaFleet, count: int, frameworks: tuple[str, ...], **kwargs: Any) -> Apps:
    apps = Apps()
    apps.decorated.append(start_app(group, count, 0.05, **kwargs))
    for framework in frameworks:
        apps.openinference.append(start_oi_app(group, framework, count, 0.05, **kwargs))
    return apps


def check(group: KafkaFleet, apps: Apps, label: str, record_property: Any) -> Run:
    """Every expected trace scored, each evaluation on the right span with the right answer text; returns
    the run (its duplicates are reported, and asserted by the caller)."""
    expected = apps.expected()
    assert expected, "the apps recorded no RAG trace"
    run = collect(group, {t: s for t, (s, _) in expected.items()}, timeout=300)
    stats = group.consumer_stats()
    counted = sum(s["duplicates"] for s in stats)
    line = (
        f"[kafka e2e: {label}] RAG traces {len(expected)}, missing {len(run.missing)}, "
        f"duplicate evaluations {run.duplicates}, duplicates the live replicas counted {counted}, "
        f"redelivered {sum(s['kafka_redelivered'] for s in stats)}"
    )
    print(line)
    record_property("rag_traces", len(expected))
    record_property("duplicates", run.duplicates)
    assert not run.missing, (
        f"{len(run.missing)} of {len(expected)} RAG traces never came back scored, e.g. {run.missing[:3]}\n"
        f"{group.logs()}"
    )
    for evaluation in (s for s in run.spans if s["name"] == names.EVALUATION_SPAN):
        trace_id = evaluation["traceId"]
        assert trace_id in expected, f"an evaluation of a trace no app made: {evaluation['attributes']}"
        span_id, answer = expected[trace_id]
        attributes = evaluation["attributes"]
        assert evaluation.get("parentSpanId") == span_id, (label, attributes.get(names.FUNCTION))
        assert attributes[names.EVAL_OUTCOME] == "scored"
        if answer is not None:
            assert attributes[names.INPUT_VALUE] == answer
    return run


def some_results(group: KafkaFleet) -> None:
    """Mid-run: some evaluations are back, more are coming (the apps have 25 calls each)."""
    assert group.collector is not None

    def scored() -> bool:
        return sum(1 for s in read_spans(group.traces_file) if s["name"] == names.EVALUATION_SPAN) >= 10

    wait_until("some evaluations in the sink", scored, group.collector, 300)


def test_every_rag_trace_of_each_app_is_scored_exactly_once(
    kafka_fleet: KafkaFleet, record_property: Any
) -> None:
    group = kafka_fleet
    apps = start_apps(group, 12, ("llama", "langchain"))
    apps.wait()
    run = check(group, apps, "no faults", record_property)
    assert run.duplicates == 0
    stats = group.consumer_stats()
    assert len(stats) == 2
    assert all(s["kafka_partitions"] >= 1 for s in stats), stats  # both consumed
    wait_until(
        "every message committed (lag 0)",
        lambda: sum(s["kafka_lag"] for s in group.consumer_stats()) == 0,
        group.scorers[0][0],
        60,
    )


def test_a_consumer_killed_mid_run_loses_no_trace(kafka_fleet: KafkaFleet, record_property: Any) -> None:
    group = kafka_fleet
    apps = start_apps(group, 25, ("llama",))
    victim = group.scorers[1][0]
    some_results(group)
    victim.kill9()  # its partitions move to the other replica once its session times out (10 s)
    apps.wait()
    check(group, apps, "consumer SIGKILLed", record_property)


def test_a_broker_restart_mid_run_loses_no_trace(
    kafka_fleet: KafkaFleet, broker: Broker, record_property: Any
) -> None:
    group = kafka_fleet
    apps = start_apps(group, 25, ("llama",))
    some_results(group)
    stopped = time.monotonic()
    broker.restart()
    apps.wait()
    label = f"broker restarted ({time.monotonic() - stopped:.0f} s down and up)"
    run = check(group, apps, label, record_property)
    assert run.duplicates <= len(run.expected)


def test_a_collector_killed_mid_run_loses_no_trace(kafka_fleet: KafkaFleet, record_property: Any) -> None:
    group = kafka_fleet
    assert group.collector is not None
    apps = start_apps(group, 25, ("llama",), export_timeout_s=60)
    some_results(group)
    group.collector.kill9()
    group.start_collector()
    apps.wait()
    check(group, apps, "Collector SIGKILLed", record_property)
