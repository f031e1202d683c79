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

import json
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from _fleet_fixtures import (
    Proc,
    Run,
    app_traces,
    collect,
    otelcol_binary,
    rag_of,
    read_spans,
    serve_available,
    start_app,
    wait_app_done,
    wait_until,
)
from _kafka_fixtures import FAST_FAILOVER, Broker, KafkaFleet, app_answers, kafka_broker, start_oi_app
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


@contextmanager
def running_kafka_fleet(tmp_path: Path, otelcol: str, broker: Broker, *consumer: str) -> Iterator[KafkaFleet]:
    """2 consumers (with the `consumer` flags) and the Collector on a topic of their own, all started."""
    topic = f"spans-{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, partitions=4)
    with started_kafka_fleet(tmp_path, otelcol, broker, topic, JUDGE_LATENCY_S) as group:
        for _ in range(2):
            group.add_consumer(16, *consumer)
        group.wait_scorers_ready()
        group.start_collector()
        yield group


@pytest.fixture
def kafka_fleet(tmp_path: Path, otelcol: str, broker: Broker) -> Iterator[KafkaFleet]:
    with running_kafka_fleet(tmp_path, otelcol, broker) as group:
        yield group


@pytest.fixture
def kafka_fleet_fast_failover(tmp_path: Path, otelcol: str, broker: Broker) -> Iterator[KafkaFleet]:
    """Consumers whose group session is 4 s: a killed one's partitions move sooner (`FAST_FAILOVER`)."""
    with running_kafka_fleet(tmp_path, otelcol, broker, *FAST_FAILOVER) as group:
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
        trace_id, scored_span = rag_of(evaluation)
        assert trace_id in expected, f"an evaluation of a trace no app made: {evaluation['attributes']}"
        span_id, answer = expected[trace_id]
        attributes = evaluation["attributes"]
        assert scored_span == span_id, (label, attributes.get(names.FUNCTION))
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


def test_a_consumer_killed_mid_run_loses_no_trace(
    kafka_fleet_fast_failover: KafkaFleet, record_property: Any
) -> None:
    group = kafka_fleet_fast_failover
    apps = start_apps(group, 25, ("llama",))
    victim = group.scorers[1][0]
    some_results(group)
    victim.kill9()  # its partitions move to the other replica once its session times out (4 s here)
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


# The alert rules with every window long enough to hold the whole run and no `for:` wait: what they compute
# from the series a run with a crash leaves behind.
RUN_WINDOWS = {w: "10m" for w in ("15m", "30m", "1h", "1d")}
RUN_HOLDS = {h: "0s" for h in ("10m", "15m", "30m")}


def _prometheus(workdir: Path, scrape_port: int) -> tuple[Proc, str]:
    """A real Prometheus scraping the fleet Collector's Prometheus exporter, with the shipped alert rules."""
    import yaml

    from _fleet_fixtures import http_ok
    from _ports import free_port
    from _prom_fixtures import RULES_FILE, backend_binary
    from test_alerts_live import shortened_rules

    binary = backend_binary("prometheus")
    port = free_port()
    (workdir / "rules.yml").write_text(shortened_rules(RULES_FILE.read_text(), RUN_WINDOWS, RUN_HOLDS))
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(workdir / "rules.yml")],
        # As the shipped prometheus.yml: honor_labels keeps job / instance from service.name and the replica.
        "scrape_configs": [
            {
                "job_name": "otel-collector",
                "honor_labels": True,
                "static_configs": [{"targets": [f"127.0.0.1:{scrape_port}"]}],
            }
        ],
    }
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
    argv = [
        binary,
        f"--config.file={workdir / 'prometheus.yml'}",
        f"--storage.tsdb.path={workdir / 'prom-data'}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    proc = Proc("prometheus", argv, workdir / "prometheus.log").start()
    url = f"http://127.0.0.1:{port}"
    wait_until("Prometheus ready", lambda: http_ok(f"{url}/-/ready"), proc, 60)
    return proc, url


def _query(url: str, promql: str) -> float:
    import json
    import urllib.parse
    import urllib.request

    with urllib.request.urlopen(f"{url}/api/v1/query?query={urllib.parse.quote(promql)}", timeout=5) as r:
        result = json.loads(r.read())["data"]["result"]
    return sum(float(item["value"][1]) for item in result)


def test_a_replica_killed_mid_run_judges_no_scored_trace_again_and_the_alerts_count_each_once(
    tmp_path: Path, otelcol: str, broker: Broker, record_property: Any
) -> None:
    """The replicas share a Redis (`--redis`): the one that takes the killed replica's partitions finds the
    traces it had scored in the record and judges none of them again. A real Prometheus scrapes the
    results' metrics through the Collector, and the shipped alert rules (windows widened to the run) read
    every evaluation once: the counters and the score histogram hold no more evaluations than there were
    traces, the rules' means and shares are the judged ones."""
    from _redis_fixtures import redis_server

    topic = f"spans-{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, partitions=4)
    with (
        redis_server(tmp_path / "redis") as redis,
        # A slow judge: evaluations are still running when the replica is killed.
        started_kafka_fleet(tmp_path, otelcol, broker, topic, 0.5) as group,
    ):
        group.redis_url = redis.url
        victim_concurrency = 16
        # The record is skipped while a call to Redis takes over --redis-timeout (0.5 s): on a loaded 2-core
        # machine the survivor's takeover burst (all the victim had read, at once) can take that long.
        patient = ("--redis-timeout", "5")
        group.add_consumer(victim_concurrency, *FAST_FAILOVER, *patient)
        # The replica to kill commits nothing before it dies, so every trace it scored is read again, whole,
        # by its partitions' next owner. With commits every 0.5 s, whether a scored trace's span lies past
        # the last commit at the kill is timing: under load it can be none (nothing to find in the record).
        group.add_consumer(victim_concurrency, *FAST_FAILOVER, *patient, "--kafka-commit-interval", "3600")
        group.wait_scorers_ready()
        group.start_collector()
        prometheus, url = _prometheus(tmp_path, group.ports.prometheus)
        group.procs.append(prometheus)
        apps = start_apps(group, 100, ())
        victim, _, victim_http = group.scorers[1]

        at_kill: dict[str, Any] = {}

        def busy() -> bool:  # scoring, with more in flight; what it finished is not committed
            at_kill.update(
                json.loads(urllib.request.urlopen(f"http://127.0.0.1:{victim_http}/stats", timeout=5).read())
            )
            return bool(at_kill["scored"] >= 10 and at_kill["pending"] >= 2 and at_kill["kafka_uncommitted"])

        wait_until("the replica to kill busy", busy, victim, 120)
        victim.kill9()
        print(
            f"killed: scored {at_kill['scored']}, finished and not committed {at_kill['kafka_uncommitted']}, "
            f"not recorded (the store did not answer) {at_kill['store_unrecorded']}"
        )
        apps.wait()
        run = check(group, apps, "consumer SIGKILLed, shared record", record_property)
        traces = len(run.expected)
        # The window left: evaluations whose export was under way, or accepted and not yet recorded, when
        # their replica died. An export takes milliseconds against the judge's 0.5 s, so few of the victim's
        # in-flight evaluations (16 judging at most) are ever there: runs gave 0 to 4 of 100, and 3 was too
        # tight a bound. Without the record every scored trace not yet committed is read again; `elsewhere`
        # below (the record's hits) is what shows the record works.
        assert run.duplicates <= victim_concurrency, run.duplicates
        stats = group.consumer_stats()
        elsewhere = sum(s["scored_elsewhere"] for s in stats)
        unchecked = sum(s["store_unchecked"] for s in stats)
        print(
            f"scored elsewhere: {elsewhere}, judged unchecked {unchecked}, "
            f"judge requests {group.judge_requests()}"
        )
        assert elsewhere >= 1  # the surviving replica did read traces the killed one had scored

        scored = 'sum(faithtrace_evaluations_total{job="fleet-app",faithtrace_outcome="scored"})'
        histogram = 'sum(faithtrace_evaluation_score_count{job="fleet-app"})'
        # The replicas export every second and Prometheus scrapes every second: wait for a value that has held
        # for 3 s (what is checked here is that it stops growing).
        counted, since, deadline = -1.0, time.monotonic(), time.monotonic() + 60
        while True:
            now = _query(url, scored)
            if now != counted or now == 0:
                counted, since = now, time.monotonic()
            elif time.monotonic() - since >= 3.0:
                break
            assert time.monotonic() < deadline, f"the evaluation counters never settled: {counted}"
            time.sleep(0.25)
        counted, in_histogram = _query(url, scored), _query(url, histogram)
        print(
            f"[alerts] traces {traces}, evaluations counted {counted}, in the score histogram {in_histogram}"
        )
        # Never more than one count per trace. Fewer by what the killed replica had counted and not yet
        # exported: a replica that records its evaluations exports their metrics within 0.1 s (not at its
        # export interval), so that is its last fraction of a second (up to a tenth of this short run).
        assert counted <= traces
        assert in_histogram <= traces
        assert counted >= 0.8 * traces

        alerts: dict[str, float] = {}
        wait_until("the quality rules firing", lambda: len(_firing(url, alerts)) >= 2, prometheus, 60)
        # The stand-in judge finds one claim of three supported in every answer: mean 1/3, every one failing.
        assert set(alerts) == {"FaithfulnessScoreBelowFloor", "FaithfulnessFailShareHigh"}, alerts
        assert abs(alerts["FaithfulnessScoreBelowFloor"] - 1 / 3) < 0.01
        assert alerts["FaithfulnessFailShareHigh"] == 1.0


def _firing(url: str, into: dict[str, float]) -> dict[str, float]:
    import json
    import urllib.request

    with urllib.request.urlopen(f"{url}/api/v1/alerts", timeout=5) as r:
        for alert in json.loads(r.read())["data"]["alerts"]:
            if alert["state"] == "firing":
                into[alert["labels"]["alertname"]] = float(alert["value"])
    return into
