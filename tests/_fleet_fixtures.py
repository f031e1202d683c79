"""The real OpenTelemetry Collector (built by collector/build.sh) and a scoring fleet around it, for tests.

Everything binds 127.0.0.1. Processes are started in their own sessions and stopped by their own PIDs when the
`Fleet` context exits, however the test ended. The Collector config the fleet runs is the shipped
collector/otelcol/fleet.yaml with only addresses, paths and the trace backend (a `file` exporter the test
reads back) replaced: what is tested is what users deploy.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from faithtrace._telemetry import names

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's root: `benchmarks.*`
from benchmarks._shared.common import fake_judge  # the benchmarks' fixed-latency judge, in its own process

from _ports import free_port

REPO = Path(__file__).resolve().parents[1]
COLLECTOR = REPO / "collector"
BUILD_SCRIPT = COLLECTOR / "build.sh"
FLEET_CONFIG = COLLECTOR / "otelcol" / "fleet.yaml"
GROUPBYTRACE_OVERLAY = COLLECTOR / "otelcol" / "fleet-groupbytrace.yaml"
K8S_KIT = COLLECTOR / "deploy" / "k8s"
EVALUATION_SPAN = names.EVALUATION_SPAN
LB_EXPORTER = "load_balancing/scorers"
TRACE_BACKEND = "otlp_grpc/traces"


def _require(message: str) -> None:
    if os.environ.get("FAITHTRACE_REQUIRE_BACKENDS") == "1":
        pytest.fail(message)
    pytest.skip(message)


def otelcol_binary() -> str:
    """The Collector: $FAITHTRACE_OTELCOL_BIN, else the binary collector/build.sh cached (never builds)."""
    path = (
        os.environ.get("FAITHTRACE_OTELCOL_BIN")
        or subprocess.run(
            [str(BUILD_SCRIPT), "--print-path"], capture_output=True, text=True, check=True
        ).stdout.strip()
    )
    if not os.access(path, os.X_OK):
        _require(f"no Collector binary at {path}: run collector/build.sh (make test does)")
    return path


def validate(binary: str, config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [binary, "validate", f"--config={config}"], capture_output=True, text=True, timeout=60
    )


def faithtrace_command() -> list[str]:
    """`faithtrace` from this interpreter's environment."""
    script = Path(sys.executable).parent / "faithtrace"
    return [str(script)] if script.exists() else [sys.executable, "-m", "faithtrace.cli"]


def serve_available() -> str | None:
    """None when `faithtrace serve` exists here, else why not."""
    try:
        done = subprocess.run(
            [*faithtrace_command(), "serve", "--help"], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"`faithtrace serve --help` could not run: {exc}"
    if done.returncode != 0 or "--grpc-port" not in done.stdout:
        return "`faithtrace serve` is not available in this build (the scorer is not part of it)"
    return None


@pytest.fixture(scope="module")
def otelcol() -> str:
    return otelcol_binary()


@pytest.fixture(scope="module")
def serve_ready() -> None:
    reason = serve_available()
    if reason is not None:
        # Not a backend that may be missing: the scorer is this repository's own code. Skip with the reason.
        pytest.skip(reason)


# --- the Collector config the tests run ------------------------------------------------------------------
@dataclass(frozen=True)
class FleetPorts:
    app_grpc: int = field(default_factory=free_port)
    app_http: int = field(default_factory=free_port)
    results_grpc: int = field(default_factory=free_port)
    results_http: int = field(default_factory=free_port)
    replay_grpc: int = field(default_factory=free_port)
    prometheus: int = field(default_factory=free_port)
    health: int = field(default_factory=free_port)
    telemetry: int = field(default_factory=free_port)
    sink_grpc: int = field(default_factory=free_port)


def kit_collector_stop() -> tuple[float, float]:
    """How the kit's Collector pods are stopped (deploy/k8s/collector.yaml): their preStop sleep and their
    terminationGracePeriodSeconds."""
    docs = [d for d in yaml.safe_load_all((K8S_KIT / "collector.yaml").read_text()) if d]
    pod = next(d for d in docs if d["kind"] == "StatefulSet")["spec"]["template"]["spec"]
    pre_stop = pod["containers"][0].get("lifecycle", {}).get("preStop", {}).get("sleep", {})
    return float(pre_stop.get("seconds", 0)), float(pod["terminationGracePeriodSeconds"])


def sink_config(ports: FleetPorts, workdir: Path) -> dict[str, Any]:
    """The trace backend the tests read: a Collector receiving OTLP/gRPC and writing every request to
    `traces.jsonl` (OTLP JSON, one request per line). It stands for Jaeger or Tempo: it is never killed."""
    return {
        "receivers": {"otlp": {"protocols": {"grpc": {"endpoint": f"127.0.0.1:{ports.sink_grpc}"}}}},
        "exporters": {
            # append: the file is kept across the fleet's restarts and read while it grows.
            "file/sink": {
                "path": str(workdir / "traces.jsonl"),
                "format": "json",
                "append": True,
                "flush_interval": "100ms",
            }
        },
        "service": {
            "telemetry": {"metrics": {"level": "none"}, "logs": {"level": "warn"}},
            "pipelines": {"traces": {"receivers": ["otlp"], "exporters": ["file/sink"]}},
        },
    }


def local_fleet_config(
    ports: FleetPorts, scorers: list[str], workdir: Path, *, retry_max_interval: str = "2s"
) -> dict[str, Any]:
    """fleet.yaml on loopback: static resolver over `scorers`, queue under `workdir`, traces to a file."""
    config: dict[str, Any] = copy.deepcopy(yaml.safe_load(FLEET_CONFIG.read_text()))
    balancer = config["exporters"][LB_EXPORTER]
    balancer["resolver"] = {"static": {"hostnames": scorers}}
    # The shipped back-off caps at 30 s; the tests wait for recovery, so they cap it lower.
    balancer["retry_on_failure"]["max_interval"] = retry_max_interval
    return on_loopback(config, ports, workdir)


def on_loopback(config: dict[str, Any], ports: FleetPorts, workdir: Path) -> dict[str, Any]:
    """A shipped fleet config with its addresses on loopback, its queue under `workdir` and its trace backend
    pointed at the sink Collector (`sink_config`)."""
    loopback = "127.0.0.1:{}".format
    receivers = config["receivers"]
    receivers["otlp"]["protocols"]["grpc"]["endpoint"] = loopback(ports.app_grpc)
    receivers["otlp"]["protocols"]["http"]["endpoint"] = loopback(ports.app_http)
    receivers["otlp/results"]["protocols"]["grpc"]["endpoint"] = loopback(ports.results_grpc)
    receivers["otlp/results"]["protocols"]["http"]["endpoint"] = loopback(ports.results_http)
    if "otlp/replay" in receivers:
        receivers["otlp/replay"]["protocols"]["grpc"]["endpoint"] = loopback(ports.replay_grpc)
    extensions = config["extensions"]
    extensions["health_check"]["endpoint"] = loopback(ports.health)
    queue_dir = workdir / "queue"
    queue_dir.mkdir(parents=True, exist_ok=True)
    extensions["file_storage/queue"]["directory"] = str(queue_dir)
    extensions["file_storage/queue"]["compaction"]["directory"] = str(queue_dir)
    exporters = config["exporters"]
    exporters["prometheus"]["endpoint"] = loopback(ports.prometheus)
    # The trace backend stays the shipped exporter, with its persistent queue; only its address changes, to
    # a sink Collector that no test stops (`Fleet.start_sink`). A `file` exporter inside the fleet Collector
    # answered "exported" once a request was in its write buffer, so a SIGKILL lost what the buffer held:
    # results the persistent queue had already let go of (one accepted trace's evaluation, now and then).
    exporters[TRACE_BACKEND]["endpoint"] = loopback(ports.sink_grpc)
    config["service"]["telemetry"] = {
        "logs": {"level": "info"},
        "metrics": {
            "level": "detailed",
            "readers": [
                {"pull": {"exporter": {"prometheus": {"host": "127.0.0.1", "port": ports.telemetry}}}}
            ],
        },
    }
    return config


# --- processes ---------------------------------------------------------------------------------------------
@dataclass
class Proc:
    name: str
    argv: list[str]
    log: Path
    env: dict[str, str] | None = None
    popen: subprocess.Popen[bytes] | None = None

    def start(self) -> Proc:
        with self.log.open("ab") as out:
            self.popen = subprocess.Popen(
                self.argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                start_new_session=True,
            )
        return self

    @property
    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def kill9(self) -> None:
        """SIGKILL, no goodbye: what an OOM kill or a lost node does."""
        if self.popen is not None and self.alive:
            self.popen.send_signal(signal.SIGKILL)
            self.popen.wait(timeout=10)

    def stop(self, timeout: float = 30.0) -> None:
        if self.popen is None or not self.alive:
            return
        self.popen.send_signal(signal.SIGTERM)
        try:
            self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill9()


def stop_together(procs: list[Proc], timeout: float) -> None:
    """SIGTERM to each live process at once, then wait for all of them; SIGKILL whatever is left at the
    deadline (what Proc.stop does for one)."""
    live = [p for p in procs if p.popen is not None and p.alive]
    for proc in live:
        assert proc.popen is not None
        with contextlib.suppress(ProcessLookupError):
            proc.popen.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for proc in live:
        assert proc.popen is not None
        try:
            proc.popen.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill9()


def http_ok(url: str, timeout: float = 1.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return bool(200 <= response.status < 300)
    except OSError:
        return False


def tcp_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def wait_until(
    what: str, check: Any, proc: Proc, timeout: float = 60.0, *, proc_may_finish: bool = False
) -> None:
    """Polls ``check`` until it holds. ``proc`` exiting first fails the wait, unless ``proc_may_finish`` and
    it exited cleanly: an app that has sent all it had is done, while what it sent may still be on its way
    (a Collector's groupbytrace holds each trace for its wait_duration first)."""
    deadline = time.monotonic() + timeout
    while not check():
        if not proc.alive and not (proc_may_finish and proc.popen is not None and proc.popen.returncode == 0):
            raise AssertionError(f"{proc.name} exited before {what}:\n{proc.tail()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{proc.name}: {what} not within {timeout}s:\n{proc.tail()}")
        time.sleep(0.1)


@dataclass(frozen=True)
class ServicePorts:
    """The Service proxy's (tests/_service_proxy.py) ports: what apps and scorers connect to when the fleet
    runs several Collectors, and its control port."""

    app_grpc: int = field(default_factory=free_port)
    app_http: int = field(default_factory=free_port)
    results_grpc: int = field(default_factory=free_port)
    replay_grpc: int = field(default_factory=free_port)
    control: int = field(default_factory=free_port)


SERVICE_PROXY = Path(__file__).resolve().parent / "_service_proxy.py"


@dataclass
class Fleet:
    """Collectors, scorer replicas and a fixed-latency judge, all on loopback.

    One Collector by default (``ports``). With ``collectors=2``, the kit's StatefulSet of two: each has its
    own ports and persistent-queue directory, both balance over the same scorers and export to the same
    sink, and apps and scorers reach them through a Service proxy (tests/_service_proxy.py), as in
    Kubernetes through the Service."""

    workdir: Path
    otelcol: str
    ports: FleetPorts = field(default_factory=FleetPorts)
    procs: list[Proc] = field(default_factory=list)
    sink: Proc | None = None
    scorers: list[tuple[Proc, int, int]] = field(default_factory=list)
    judge_url: str = ""
    # Config files merged over the loopback fleet.yaml by the Collector itself (--config, in order).
    overlays: list[Path] = field(default_factory=list)
    collectors: int = 1
    # Scorers run with --spool and --replay-endpoint, as the kit's do (False: parts acknowledged before their
    # trace is scored live in memory only: the benchmarks' before/after).
    spool: bool = True
    # The Redis the scorers share (`faithtrace serve --redis`): one judge budget, one record of traces scored.
    redis_url: str | None = None
    # The scorers' OTEL_EXPORTER_OTLP_TIMEOUT in seconds (None: the SDK's 10): how long a scorer tries to
    # hand its results over while no Collector takes them before it answers its requests UNAVAILABLE.
    scorer_export_timeout_s: float | None = None
    # The proxy's flag --no-endpoints: it routes to stopped Collectors too (the tests' check that it matters).
    service_no_endpoints: bool = False
    running: dict[int, Proc] = field(default_factory=dict)  # Collector index -> its process
    service: Proc | None = None
    service_ports: ServicePorts = field(default_factory=ServicePorts)
    _extra_ports: list[FleetPorts] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        # Collectors 1.. get their own ports; the sink is the one every Collector exports to.
        sink = self.ports.sink_grpc
        self._extra_ports = [FleetPorts(sink_grpc=sink) for _ in range(self.collectors - 1)]

    def collector_ports(self, index: int = 0) -> FleetPorts:
        return self.ports if index == 0 else self._extra_ports[index - 1]

    def collector_dir(self, index: int = 0) -> Path:
        """Collector ``index``'s config and persistent queue (``queue/``): its own volume, as in the kit."""
        path = self.workdir if index == 0 else self.workdir / f"otelcol-{index}"
        path.mkdir(parents=True, exist_ok=True)
        return path

    @property
    def collector(self) -> Proc | None:
        return self.running.get(0)

    @property
    def app_port(self) -> int:
        """Where apps send OTLP/gRPC: the Collector, or the Service proxy in front of several."""
        return self.service_ports.app_grpc if self.collectors > 1 else self.ports.app_grpc

    @property
    def app_http_port(self) -> int:
        """Where apps send OTLP/HTTP: likewise."""
        return self.service_ports.app_http if self.collectors > 1 else self.ports.app_http

    @property
    def results_port(self) -> int:
        """Where scorers send their results: likewise."""
        return self.service_ports.results_grpc if self.collectors > 1 else self.ports.results_grpc

    @property
    def replay_port(self) -> int:
        """Where scorers send their spooled spans back (``faithtrace serve --replay-endpoint``): likewise."""
        return self.service_ports.replay_grpc if self.collectors > 1 else self.ports.replay_grpc

    def judge_requests(self) -> int:
        with urllib.request.urlopen(self.judge_url.removesuffix("/v1") + "/stats", timeout=5) as response:
            return int(json.loads(response.read())["requests"])

    # -- scorers
    def scorer_env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "FAITHTRACE_"))}
        env.update(
            FAITHTRACE_JUDGE_MODEL="openai/fake-judge",
            FAITHTRACE_JUDGE_API_BASE=self.judge_url,
            FAITHTRACE_JUDGE_API_KEY="sk-test-not-a-key",
            OTEL_SERVICE_NAME="faithtrace-scorer",
            OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{self.results_port}",
            OTEL_EXPORTER_OTLP_PROTOCOL="grpc",
            OTEL_BSP_SCHEDULE_DELAY="200",
            OTEL_METRIC_EXPORT_INTERVAL="1000",
            LITELLM_LOCAL_MODEL_COST_MAP="True",
        )
        if self.redis_url:
            env["FAITHTRACE_SERVE_REDIS"] = self.redis_url
        if self.scorer_export_timeout_s is not None:
            env["OTEL_EXPORTER_OTLP_TIMEOUT"] = str(
                self.scorer_export_timeout_s
            )  # seconds, as the SDK reads it
        return env

    def add_scorer(
        self, concurrency: int = 16, extra: tuple[str, ...] = (), name: str = "scorer"
    ) -> tuple[Proc, int, int]:
        """A `faithtrace serve` replica on free loopback ports; `extra` flags after the common ones."""
        grpc_port, http_port = free_port(), free_port()
        index = len(self.scorers)
        argv = [
            *faithtrace_command(),
            "serve",
            "--host",
            "127.0.0.1",
            "--grpc-port",
            str(grpc_port),
            "--http-port",
            str(http_port),
            "--concurrency",
            str(concurrency),
            # As the kit runs them: a spool that outlives the process, sent back through the Collector.
            *(self._spool_flags(f"{name}-{index}") if self.spool else ()),
            *extra,
        ]
        proc = Proc(f"{name}-{index}", argv, self.workdir / f"{name}-{index}.log", env=self.scorer_env())
        self.procs.append(proc.start())
        self.scorers.append((proc, grpc_port, http_port))
        return self.scorers[-1]

    def _spool_flags(self, scorer: str) -> tuple[str, ...]:
        spool = self.workdir / f"spool-{scorer}"
        return ("--spool", str(spool), "--replay-endpoint", f"http://127.0.0.1:{self.replay_port}")

    def wait_scorers_ready(self, timeout: float = 120.0) -> None:
        for proc, grpc_port, http_port in self.scorers:
            wait_until(f"gRPC port {grpc_port} open", lambda p=grpc_port: tcp_open(p), proc, timeout)
            ready = f"http://127.0.0.1:{http_port}/readyz"
            wait_until("/readyz OK", lambda u=ready: http_ok(u), proc, timeout)

    def restart_scorer(self, index: int) -> None:
        proc, grpc_port, http_port = self.scorers[index]
        proc.start()
        wait_until(f"gRPC port {grpc_port} open", lambda: tcp_open(grpc_port), proc, 120.0)
        wait_until("/readyz OK", lambda: http_ok(f"http://127.0.0.1:{http_port}/readyz"), proc, 120.0)

    # -- Collector
    def write_collector_config(self, index: int = 0) -> Path:
        hostnames = [f"127.0.0.1:{grpc}" for _, grpc, _ in self.scorers]
        workdir = self.collector_dir(index)
        config = local_fleet_config(self.collector_ports(index), hostnames, workdir)
        path = workdir / "otelcol.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        return path

    def start_sink(self) -> Proc:
        """The trace backend (`sink_config`), started once, before the first Collector, and stopped last."""
        if self.sink is None:
            path = self.workdir / "sink.yaml"
            path.write_text(yaml.safe_dump(sink_config(self.ports, self.workdir), sort_keys=False))
            self.sink = Proc("sink", [self.otelcol, f"--config={path}"], self.workdir / "sink.log")
            self.procs.append(self.sink.start())
            port = self.ports.sink_grpc
            wait_until(f"sink port {port} open", lambda: tcp_open(port), self.sink, 60.0)
        return self.sink

    def start_collector(self, index: int | None = None) -> Proc:
        """Start Collector ``index`` (again, on its queue, if it ran before) and wait for its health check;
        None: every Collector, then the Service proxy in front of them if there are several. Returns the
        (first) Collector."""
        self.start_sink()
        if index is None:
            for i in range(self.collectors):
                self.start_collector(i)
            if self.collectors > 1 and self.service is None:
                self.start_service()
            return self.running[0]
        proc = self.running.get(index)
        if proc is None:
            config = self.write_collector_config(index)
            argv = [self.otelcol, f"--config={config}", *(f"--config={o}" for o in self.overlays)]
            name = "otelcol" if index == 0 else f"otelcol-{index}"
            proc = self.running[index] = Proc(name, argv, self.workdir / f"{name}.log")
            self.procs.append(proc)
        proc.start()
        health = f"http://127.0.0.1:{self.collector_ports(index).health}/"
        wait_until("health check OK", lambda: http_ok(health), proc, 60.0)
        if self.service is not None:
            self.service_command(f"started {index}")
            wait_until(
                f"the Service routes to Collector {index}",
                lambda: self.service_state()[index]["ready"],
                self.service,
                30.0,
            )
        return proc

    # -- the Service in front of several Collectors
    def start_service(self) -> Proc:
        collectors = [self.collector_ports(i) for i in range(self.collectors)]
        argv = [sys.executable, str(SERVICE_PROXY), "--control", str(self.service_ports.control)]
        argv += ["--health", ",".join(f"127.0.0.1:{p.health}" for p in collectors)]
        for listen, ports in (
            (self.service_ports.app_grpc, [p.app_grpc for p in collectors]),
            (self.service_ports.app_http, [p.app_http for p in collectors]),
            (self.service_ports.results_grpc, [p.results_grpc for p in collectors]),
            (self.service_ports.replay_grpc, [p.replay_grpc for p in collectors]),
        ):
            argv += ["--route", f"{listen}={','.join(str(p) for p in ports)}"]
        if self.service_no_endpoints:
            argv.append("--no-endpoints")
        self.service = Proc("service", argv, self.workdir / "service.log")
        self.procs.append(self.service.start())
        port = self.service_ports.control
        wait_until("control port open", lambda: tcp_open(port), self.service, 30.0)
        wait_until("every Collector ready", self._service_ready, self.service)
        return self.service

    def _service_ready(self) -> bool:
        return all(b["ready"] for b in self.service_state())

    def service_command(self, line: str) -> dict[str, Any]:
        with socket.create_connection(("127.0.0.1", self.service_ports.control), timeout=5) as sock:
            sock.sendall(line.encode() + b"\n")
            answer: dict[str, Any] = json.loads(sock.makefile().readline())
        return answer

    def service_state(self) -> list[dict[str, Any]]:
        """Each Collector as the Service sees it: ready, terminating, connections routed to it."""
        backends: list[dict[str, Any]] = self.service_command("stats")["backends"]
        return backends

    def stop_collector(self, index: int, grace_s: float, pre_stop_s: float = 0.0) -> tuple[float, bool]:
        """Stop Collector ``index`` as Kubernetes stops a pod: the Service routes no new connection to it
        from then on; its preStop hook waits ``pre_stop_s`` (it keeps serving the connections it has); then
        SIGTERM, and SIGKILL once ``grace_s`` (terminationGracePeriodSeconds, counted from the start) is
        over. Returns how long it took to exit after SIGTERM and whether it had to be killed."""
        proc = self.running[index]
        assert proc.popen is not None
        if self.service is not None:
            self.service_command(f"terminating {index}")
        time.sleep(pre_stop_s)
        started = time.monotonic()
        proc.stop(timeout=grace_s - pre_stop_s)
        return time.monotonic() - started, proc.popen.returncode == -signal.SIGKILL

    def collector_metric(self, name: str, index: int = 0) -> float:
        """Sum of one of a Collector's own metrics (e.g. otelcol_exporter_queue_size) over its series."""
        url = f"http://127.0.0.1:{self.collector_ports(index).telemetry}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            text = response.read().decode()
        total = 0.0
        for line in text.splitlines():
            if line.startswith(name + "{") or line.startswith(name + " "):
                total += float(line.rsplit(" ", 1)[1])
        return total

    @property
    def traces_file(self) -> Path:
        return self.workdir / "traces.jsonl"

    def logs(self) -> str:
        return "\n".join(f"--- {p.name} ---\n{p.tail()}" for p in self.procs)

    def stop_all(self, timeout: float = 20.0) -> None:
        """Stop every process this fleet started, senders first: the apps and scorers while the Collectors
        still take what they flush on the way out (a scorer stopped after its Collector spends its export
        timeout there: 40 s of every test's tear-down), then the Collectors and the Service in front of them,
        the sink last. The processes of one tier are signalled together and waited for together."""
        receivers = {id(p) for p in self.running.values()} | {id(self.service)}
        tiers = [
            [p for p in self.procs if id(p) not in receivers and p is not self.sink],
            [p for p in self.procs if id(p) in receivers],
            [p for p in self.procs if p is self.sink],
        ]
        for tier in tiers:
            stop_together(tier, timeout)


@contextmanager
def fleet(
    workdir: Path, otelcol: str, judge_latency_s: float = 0.2, collectors: int = 1, **kwargs: Any
) -> Iterator[Fleet]:
    """A fleet around the benchmarks' fixed-latency judge; every process it started is stopped on exit."""
    with fake_judge(judge_latency_s, max_seconds=1800) as judge_url:
        group = Fleet(workdir, otelcol, judge_url=judge_url, collectors=collectors, **kwargs)
        try:
            yield group
        finally:
            group.stop_all()


# --- the app -----------------------------------------------------------------------------------------------
APP_SERVICE = "fleet-app"
FUNCTION = "fleet_answer"
CONTEXTS = [
    "The Eiffel Tower is 330 metres tall.",
    "It was completed in 1889 for the World's Fair in Paris.",
]

# The decorated app's answer to every call: the text each evaluation must have judged. Three sentences, three
# claims, none contained word for word in the contexts (such a claim is proven in code and never asked): the
# stand-in judge answers three verdicts (its --items default).
APP_ANSWER = "The tower rises 330 metres. Builders finished it in 1889. Paris is its home."

# The app: decorated, remote scoring, sending OTLP/gRPC to the Collector; one RAG trace and one plain
# (non-RAG) trace per round. It prints each RAG span's IDs: the traces that must come back scored.
APP_SCRIPT = """
import json, sys, time
from opentelemetry import trace
import faithtrace
from faithtrace import trace_faithfulness

count, interval = int(sys.argv[1]), float(sys.argv[2])
contexts, function, ANSWER = json.loads(sys.argv[3]), sys.argv[4], sys.argv[5]
faithtrace.configure(scoring="remote")

@trace_faithfulness(name=function)
def answer(question: str, contexts: list[str]) -> str:
    ctx = trace.get_current_span().get_span_context()
    print(json.dumps({"trace_id": f"{ctx.trace_id:032x}", "span_id": f"{ctx.span_id:016x}"}), flush=True)
    return ANSWER

plain = trace.get_tracer("fleet-app.plain")
for i in range(count):
    answer(f"question {i}: how tall is the Eiffel Tower?", contexts)
    print(json.dumps({"ended_ns": time.time_ns()}), flush=True)  # the RAG span has just ended
    with plain.start_as_current_span("GET /health"):
        pass
    time.sleep(interval)
faithtrace.shutdown(60)
print("DONE", flush=True)
"""


def start_app(
    group: Fleet,
    count: int,
    interval: float,
    endpoint_port: int | None = None,
    export_timeout_s: float | None = None,
    argv: list[str] | None = None,
) -> Proc:
    """The app, sending to the Collector's app receiver (or straight to `endpoint_port`); `argv` runs
    another app than the decorated one (it prints the same JSON lines).

    `export_timeout_s` sets OTEL_EXPORTER_OTLP_TIMEOUT: how long the app's SDK may spend on one batch while no
    Collector answers (the SDK's default is 10 s, and it gives up after 6 tries whatever the timeout)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "FAITHTRACE_"))}
    env.update(
        OTEL_SERVICE_NAME=APP_SERVICE,
        OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{endpoint_port or group.app_port}",
        OTEL_EXPORTER_OTLP_PROTOCOL="grpc",
        OTEL_BSP_SCHEDULE_DELAY="200",
        OTEL_METRIC_EXPORT_INTERVAL="1000",
    )
    if export_timeout_s is not None:
        # Seconds: the Python SDK reads it so (the specification says milliseconds).
        env["OTEL_EXPORTER_OTLP_TIMEOUT"] = str(export_timeout_s)
    if argv is None:
        argv = [sys.executable, "-c", APP_SCRIPT, str(count), str(interval), json.dumps(CONTEXTS), FUNCTION]
        argv.append(APP_ANSWER)
    # One log per app run: app_traces() reads the trace IDs of this run only.
    index = sum(1 for p in group.procs if p.name.startswith("app"))
    app = Proc(f"app-{index}", argv, group.workdir / f"app-{index}.log", env=env)
    group.procs.append(app)
    return app.start()


def app_traces(app: Proc) -> dict[str, str]:
    """Trace ID -> RAG span ID of every RAG call the app made."""
    return {t: s for t, (s, _) in app_calls(app).items()}


def app_calls(app: Proc) -> dict[str, tuple[str, int]]:
    """Trace ID -> (RAG span ID, when the call returned in ns since the epoch)."""
    calls: dict[str, tuple[str, int]] = {}
    last = ""
    for line in app.log.read_text().splitlines():
        if not line.startswith("{"):
            continue
        record = json.loads(line)
        if "trace_id" in record:
            last = record["trace_id"]
            calls[last] = (record["span_id"], 0)
        elif last:
            calls[last] = (calls[last][0], int(record["ended_ns"]))
    return calls


def wait_app_done(app: Proc, timeout: float = 180.0) -> None:
    assert app.popen is not None
    app.popen.wait(timeout=timeout)
    assert app.popen.returncode == 0, app.tail()
    assert "DONE" in app.log.read_text(), app.tail()


# --- reading the sink back ---------------------------------------------------------------------------------
def _value(any_value: dict[str, Any]) -> Any:
    for key in ("stringValue", "boolValue", "doubleValue"):
        if key in any_value:
            return any_value[key]
    if "intValue" in any_value:
        return int(any_value["intValue"])
    if "arrayValue" in any_value:
        return [_value(v) for v in any_value["arrayValue"].get("values", [])]
    return None


def attributes(items: list[dict[str, Any]] | None) -> dict[str, Any]:
    return {a["key"]: _value(a.get("value", {})) for a in items or []}


def read_spans(path: Path) -> list[dict[str, Any]]:
    """Every span the `file` exporter wrote, flattened, with its resource's attributes under "resource"."""
    spans: list[dict[str, Any]] = []
    if not path.exists():
        return spans
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        try:
            request = json.loads(line)
        except ValueError:  # a line being written right now
            continue
        for resource_spans in request.get("resourceSpans", []):
            resource = attributes(resource_spans.get("resource", {}).get("attributes"))
            for scope_spans in resource_spans.get("scopeSpans", []):
                for span in scope_spans.get("spans", []):
                    spans.append(
                        {
                            **span,
                            "resource": resource,
                            "attributes": attributes(span.get("attributes")),
                            "events": [
                                {**e, "attributes": attributes(e.get("attributes"))}
                                for e in span.get("events", [])
                            ],
                        }
                    )
    return spans


def rag_of(evaluation: dict[str, Any]) -> tuple[str, str]:
    """(trace ID, span ID) of the RAG span an evaluation span scores: the span it links to (the fleet puts
    evaluations in a trace of their own), else its parent (placement child)."""
    for link in evaluation.get("links", []):
        return link["traceId"], link["spanId"]
    return evaluation["traceId"], evaluation.get("parentSpanId", "")


def evaluations_per_trace(spans: list[dict[str, Any]], evaluation_span: str) -> dict[str, int]:
    """How many evaluation spans each trace got (by its own trace ID or by a link to the scored span)."""
    counts: dict[str, int] = {}
    for span in spans:
        if span.get("name") != evaluation_span:
            continue
        traces = {span["traceId"]} | {link["traceId"] for link in span.get("links", [])}
        for trace_id in traces:
            counts[trace_id] = counts.get(trace_id, 0) + 1
    return counts


@dataclass
class Run:
    expected: dict[str, str]  # trace ID -> RAG span ID
    per_trace: dict[str, int]
    spans: list[dict[str, Any]]

    @property
    def missing(self) -> list[str]:
        return [t for t in self.expected if self.per_trace.get(t, 0) == 0]

    @property
    def accepted(self) -> set[str]:
        """RAG traces the Collector accepted: their RAG span reached the trace sink."""
        seen = {(s["traceId"], s["spanId"]) for s in self.spans}
        return {t for t, s in self.expected.items() if (t, s) in seen}

    @property
    def accepted_missing(self) -> list[str]:
        return [t for t in self.accepted if self.per_trace.get(t, 0) == 0]

    @property
    def duplicates(self) -> int:
        return sum(max(0, self.per_trace.get(t, 0) - 1) for t in self.expected)


def collect(
    group: Fleet,
    expected: dict[str, str],
    timeout: float = 240.0,
    evaluation_span: str = EVALUATION_SPAN,
    accepted_only: bool = False,
) -> Run:
    """Wait until every expected trace (or, with `accepted_only`, every one the Collector accepted: call it
    once the app is done) has an evaluation span in the sink, or the timeout; then a moment more so that late
    duplicates are counted too."""
    deadline = time.monotonic() + timeout
    while True:
        spans = read_spans(group.traces_file)
        per_trace = evaluations_per_trace(spans, evaluation_span)
        run = Run(expected, per_trace, spans)
        waiting = run.accepted_missing if accepted_only else run.missing
        if not waiting or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    time.sleep(3.0)
    spans = read_spans(group.traces_file)
    return Run(expected, evaluations_per_trace(spans, evaluation_span), spans)
