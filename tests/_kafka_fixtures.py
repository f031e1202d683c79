"""A real Apache Kafka broker (KRaft: broker and controller in one JVM, no ZooKeeper) on 127.0.0.1, for tests.

The broker is Kafka's own `kafka.Kafka` from the Maven Central artifacts that collector/fetch-kafka.sh caches
(`make kafka`). Each `Broker` formats its own log directory, listens on free loopback ports and is stopped by
its own PID; `restart()` keeps the ports and the data (a broker restart, not a new cluster).
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from base64 import urlsafe_b64encode
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from _fleet_fixtures import (
    COLLECTOR,
    REPO,
    Fleet,
    FleetPorts,
    Proc,
    _require,
    fake_judge,
    on_loopback,
    start_app,
    tcp_open,
    wait_until,
)
from _ports import free_port

FETCH_SCRIPT = REPO / "collector" / "fetch-kafka.sh"
KAFKA_FLEET_CONFIG = COLLECTOR / "otelcol" / "fleet-kafka.yaml"
KAFKA_EXPORTER = "kafka/scorers"
OI_APP = Path(__file__).resolve().parent / "_fleet_oi_app.py"
HEAP = "-Xmx512m"


def kafka_classpath() -> Path:
    """$FAITHTRACE_KAFKA_LIB, else the folder collector/fetch-kafka.sh cached (never fetches)."""
    path = (
        os.environ.get("FAITHTRACE_KAFKA_LIB")
        or subprocess.run(
            [str(FETCH_SCRIPT), "--print-path"], capture_output=True, text=True, check=True
        ).stdout.strip()
    )
    lib = Path(path)
    if not (lib / ".fetched").exists():
        _require(f"no Kafka classpath at {lib}: run collector/fetch-kafka.sh (make kafka does)")
    if shutil.which("java") is None:
        _require("no `java` on PATH: Kafka's broker needs Java 17+")
    return lib


def confluent_available() -> None:
    try:
        import confluent_kafka  # noqa: F401
    except ImportError:
        _require("confluent-kafka is not installed (pip install 'faithtrace[kafka]')")


PROPERTIES = """\
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:{controller}
listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}
advertised.listeners=PLAINTEXT://127.0.0.1:{port}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs={logs}
num.partitions=4
auto.create.topics.enable=false
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
group.min.session.timeout.ms=1000
log.flush.interval.messages=1
"""


@dataclass
class Broker:
    """One KRaft broker+controller; `bootstrap` is its PLAINTEXT address on loopback."""

    workdir: Path
    lib: Path
    port: int = field(default_factory=free_port)
    controller: int = field(default_factory=free_port)
    proc: Proc | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _java(self, main: str, *args: str) -> list[str]:
        # A small heap and the serial collector: a test broker on 2 shared cores, not a production one. The
        # client JIT only (C1): a start is mostly class loading and first-time compilation, on which C2 spends
        # CPU that a test's few thousand messages never pay back.
        log4j = f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.yaml'}"
        jvm = [HEAP, "-Xms64m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", log4j]
        return ["java", *jvm, "-cp", f"{self.lib}/*", main, *args]

    def format(self) -> None:
        (self.workdir / "log4j2.yaml").write_text(LOG4J)
        logs = self.workdir / "kafka-logs"
        config = self.workdir / "server.properties"
        config.write_text(PROPERTIES.format(port=self.port, controller=self.controller, logs=logs))
        cluster = "-"
        while cluster.startswith("-"):  # as Kafka's own Uuid.randomUuid: "-..." would read as an option
            cluster = urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        done = subprocess.run(
            self._java("kafka.tools.StorageTool", "format", "-t", cluster, "-c", str(config)),
            capture_output=True,
            text=True,
            timeout=120,
            env=self._env(),
        )
        assert done.returncode == 0, f"kafka-storage format failed:\n{done.stdout}\n{done.stderr}"

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("KAFKA_", "JAVA_TOOL"))}
        env["LOG_DIR"] = str(self.workdir)
        return env

    def start(self, timeout: float = 120.0) -> Broker:
        if self.proc is None:
            self.format()
            argv = self._java("kafka.Kafka", str(self.workdir / "server.properties"))
            self.proc = Proc("kafka", argv, self.workdir / "kafka.log", env=self._env())
        self.proc.start()
        wait_until(f"Kafka port {self.port} open", lambda: tcp_open(self.port), self.proc, timeout)
        wait_until("Kafka metadata", self.answers, self.proc, timeout)
        return self

    def answers(self) -> bool:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        try:
            metadata = admin.list_topics(timeout=2)
        except Exception:
            return False
        return bool(metadata.brokers)

    def create_topic(self, name: str, partitions: int) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        futures = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])
        futures[name].result(timeout=30)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            topic = admin.list_topics(name, timeout=5).topics.get(name)
            if topic is not None and topic.error is None and len(topic.partitions) == partitions:
                return
            time.sleep(0.2)
        raise AssertionError(f"topic {name} not ready")

    def stop(self, timeout: float = 60.0) -> None:
        if self.proc is not None:
            self.proc.stop(timeout=timeout)

    def kill9(self) -> None:
        if self.proc is not None:
            self.proc.kill9()

    def restart(self) -> None:
        self.stop()
        self.start()


# Warnings and errors only, to the broker's own log file (stdout is redirected there).
LOG4J = """\
Configuration:
  Appenders:
    Console:
      name: STDOUT
      PatternLayout:
        pattern: "[%d] %p %m (%c)%n"
  Loggers:
    Root:
      level: WARN
      AppenderRef:
        - ref: STDOUT
"""


@contextmanager
def kafka_broker(workdir: Path) -> Iterator[Broker]:
    """A started broker; stopped (by its PID) however the caller ends."""
    confluent_available()
    workdir.mkdir(parents=True, exist_ok=True)
    broker = Broker(workdir, kafka_classpath())
    try:
        yield broker.start()
    finally:
        broker.stop()


# --- the Kafka path: Collector -> topic -> `faithtrace serve --kafka` replicas ------------------------------
def local_kafka_fleet_config(
    ports: FleetPorts, bootstrap: str, topic: str, workdir: Path, *, retry_max_interval: str = "2s"
) -> dict[str, Any]:
    """fleet-kafka.yaml on loopback: the exporter writes `topic` on `bootstrap`, traces to a file."""
    config: dict[str, Any] = copy.deepcopy(yaml.safe_load(KAFKA_FLEET_CONFIG.read_text()))
    exporter = config["exporters"][KAFKA_EXPORTER]
    exporter["brokers"] = [bootstrap]
    exporter["traces"]["topic"] = topic
    # The shipped back-off caps at 30 s; the tests wait for recovery, so they cap it lower.
    exporter["retry_on_failure"]["max_interval"] = retry_max_interval
    return on_loopback(config, ports, workdir)


# For the tests that kill a consumer: its partitions move once its group session times out, 10 s by serve's
# default; the test broker (group.min.session.timeout.ms above) lets a test's consumers ask for 4 s. Failover
# is what those tests check, not how long the shipped timeout is.
FAST_FAILOVER = (
    "--kafka-option",
    "session.timeout.ms=4000",
    "--kafka-option",
    "heartbeat.interval.ms=1000",
)


@dataclass
class KafkaFleet(Fleet):
    """A Collector writing to a topic of a real broker; `faithtrace serve --kafka` consumers of one group."""

    broker: Broker | None = None
    topic: str = "otlp_spans"
    group: str = "faithtrace-serve"
    # A consumer commits a message only once its traces are whole and scored: nothing to spool, and the
    # Kafka Collector config has no replay receiver.
    spool: bool = False

    def add_consumer(self, concurrency: int = 16, *extra: str) -> tuple[Proc, int, int]:
        assert self.broker is not None
        kafka = ("--kafka", self.broker.bootstrap, "--kafka-topic", self.topic, "--kafka-group", self.group)
        return self.add_scorer(concurrency, (*kafka, *extra), name="consumer")

    def write_collector_config(self, index: int = 0) -> Path:
        assert self.broker is not None
        workdir = self.collector_dir(index)
        ports = self.collector_ports(index)
        config = local_kafka_fleet_config(ports, self.broker.bootstrap, self.topic, workdir)
        path = workdir / "otelcol.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        return path

    def consumer_stats(self) -> list[dict[str, Any]]:
        import urllib.request

        out = []
        for proc, _, http_port in self.scorers:
            if not proc.alive:
                continue
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/stats", timeout=5) as response:
                    out.append(json.loads(response.read()))
            except OSError:
                continue
        return out


@contextmanager
def kafka_fleet(
    workdir: Path, otelcol: str, broker: Broker, topic: str, judge_latency_s: float, max_seconds: float = 1800
) -> Iterator[KafkaFleet]:
    """A Kafka fleet on ``topic`` (its consumer group named after it) around the benchmarks' fixed-latency
    judge, nothing started yet; every process it started is stopped on exit."""
    with fake_judge(judge_latency_s, max_seconds=max_seconds) as judge_url:
        group = KafkaFleet(workdir, otelcol, judge_url=judge_url, broker=broker, topic=topic, group=topic)
        try:
            yield group
        finally:
            group.stop_all()


def start_oi_app(group: Fleet, framework: str, count: int, interval: float, **kwargs: Any) -> Proc:
    """The LlamaIndex or LangChain app (tests/_fleet_oi_app.py), sending to the Collector."""
    argv = [sys.executable, str(OI_APP), framework, str(count), str(interval)]
    return start_app(group, count, interval, argv=argv, **kwargs)


def app_answers(app: Proc) -> dict[str, tuple[str, str]]:
    """Trace ID -> (root span ID, answer text) of every call the OpenInference app made."""
    out: dict[str, tuple[str, str]] = {}
    for line in app.log.read_text().splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            if record.get("answer"):
                out[record["trace_id"]] = (record["span_id"], record["answer"])
    return out
