"""End to end: a decorated app's faithfulness drops, a real Prometheus scrapes faithtrace's /metrics and fires
the shipped drop alert, and a real Alertmanager delivers it to a webhook on 127.0.0.1.

Only the judge's replies are scripted (an OpenAI-compatible server on 127.0.0.1, reached through litellm).
The rules are the shipped ones with their windows and ``for:`` shortened (an hour becomes seconds); the
expressions are otherwise untouched, so the rule logic under test is the one users deploy. The Alertmanager
config is the shipped one with the webhook URL and the grouping delays replaced.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from _loopback import serve_in_background
from _ports import free_port
from _prom_fixtures import (
    ALERTMANAGER_CONFIG,
    DRIFTED_ANSWER,
    FAITHFUL_ANSWER,
    RULES_FILE,
    ScriptedJudge,
    app_argv,
    backend_binary,
    serve_scripted_judge,
)

pytestmark = [pytest.mark.backend, pytest.mark.timeout(120)]

SERVICE = "rag-live"  # the scrape job, as a user names it after OTEL_SERVICE_NAME
FUNCTION = "support-bot"
# Range selectors and offsets: the current hour becomes 4 s, "a day earlier" 12 s earlier.
WINDOWS = {"1h": "4s", "1d": "12s", "30m": "4s", "15m": "4s"}
HOLDS = {"30m": "2s", "15m": "2s", "10m": "2s"}
CALLS_PER_SECOND = 10  # the guards want >= 20 evaluations per (shortened) window
# The baseline is the 4 s window ending 12 s ago, so it exists 16 s after the first scrape; the drifted mean
# fills the current window 4 s after the drift. 15 s of good answers make both true together (with margin),
# and the condition then holds until the baseline window reaches the drift, 12 s after it.
GOOD_PHASE_S = 15.0
ALERT_DEADLINE_S = 30.0


# --- a webhook receiver, like the one a user points Alertmanager at ----------------------------------------
@dataclass
class Webhook:
    url: str = ""
    payloads: list[dict[str, Any]] = field(default_factory=list)
    received_at: list[float] = field(default_factory=list)
    cond: threading.Condition = field(default_factory=threading.Condition)

    def first(self, predicate: Callable[[dict[str, Any]], bool]) -> tuple[dict[str, Any], float] | None:
        with self.cond:
            for payload, at in zip(self.payloads, self.received_at, strict=True):
                if predicate(payload):
                    return payload, at
        return None


@contextmanager
def serve_webhook() -> Iterator[Webhook]:
    hook = Webhook()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
            with hook.cond:
                hook.payloads.append(body)
                hook.received_at.append(time.monotonic())
                hook.cond.notify_all()
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    hook.url = f"http://127.0.0.1:{server.server_address[1]}/faithtrace-alerts"
    thread = serve_in_background(server, "alert-webhook")
    try:
        yield hook
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def http_get(url: str, timeout: float = 2.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return bytes(response.read())


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


@dataclass
class BackendProcesses:
    workdir: Path
    procs: list[Proc] = field(default_factory=list)

    def start(self, name: str, argv: list[str], ready_url: str, timeout: float = 20.0) -> Proc:
        log = self.workdir / f"{name}.log"
        with log.open("wb") as out:
            popen = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
            )
        proc = Proc(name, popen, log)
        self.procs.append(proc)
        deadline = time.monotonic() + timeout
        while True:
            if popen.poll() is not None:
                raise AssertionError(f"{name} exited with {popen.returncode}:\n{proc.tail()}")
            try:
                http_get(ready_url, timeout=1.0)
                return proc
            except OSError:
                if time.monotonic() > deadline:
                    raise AssertionError(
                        f"{name} not ready at {ready_url} in {timeout}s:\n{proc.tail()}"
                    ) from None
                time.sleep(0.05)

    def logs(self) -> str:
        return "\n".join(f"--- {p.name} ---\n{p.tail()}" for p in self.procs)

    def stop_all(self) -> None:
        for proc in reversed(self.procs):
            if proc.popen.poll() is None:
                proc.popen.terminate()
        for proc in reversed(self.procs):
            try:
                proc.popen.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.popen.kill()
                proc.popen.wait(timeout=5)


@contextmanager
def backend_processes(workdir: Path) -> Iterator[BackendProcesses]:
    """Processes started through the group are all stopped when the block exits, however it exits."""
    group = BackendProcesses(workdir)
    try:
        yield group
    finally:
        group.stop_all()


def shortened_rules(
    text: str, windows: dict[str, str] | None = None, holds: dict[str, str] | None = None
) -> str:
    """The shipped rules with every duration mapped through ``windows`` / ``holds`` (WINDOWS / HOLDS by
    default; KeyError on an unmapped one)."""
    windows, holds = windows or WINDOWS, holds or HOLDS
    doc = yaml.safe_load(text)
    for group in doc["groups"]:
        group["interval"] = "1s"
        for rule in group["rules"]:
            rule["expr"] = re.sub(
                r"(\[|offset\s+)(\d+[smhdw])",
                lambda m: m.group(1) + windows[m.group(2)],
                rule["expr"],
            )
            rule["for"] = holds[rule["for"]]
    return yaml.safe_dump(doc, sort_keys=False)


def test_shortening_keeps_every_expression_but_its_durations() -> None:
    original = yaml.safe_load(RULES_FILE.read_text())
    short = yaml.safe_load(shortened_rules(RULES_FILE.read_text()))
    pairs = list(zip(original["groups"], short["groups"], strict=True))
    for group, short_group in pairs:
        for rule, short_rule in zip(group["rules"], short_group["rules"], strict=True):
            strip = re.compile(r"\d+[smhdw]")
            assert strip.sub("D", rule["expr"]) == strip.sub("D", short_rule["expr"])
            assert rule["labels"] == short_rule["labels"]
            assert rule["annotations"] == short_rule["annotations"]


def fast_alertmanager_config(webhook_url: str) -> str:
    doc = yaml.safe_load(ALERTMANAGER_CONFIG.read_text())
    doc["route"].update(group_wait="0s", group_interval="1s", repeat_interval="1h")
    for route in doc["route"].get("routes", []):
        route.pop("repeat_interval", None)
    (receiver,) = doc["receivers"]
    (hook,) = receiver["webhook_configs"]
    hook["url"] = webhook_url
    return yaml.safe_dump(doc, sort_keys=False)


# --- fixtures: every server and process is stopped at teardown ---------------------------------------------
@pytest.fixture
def judge() -> Iterator[ScriptedJudge]:
    with serve_scripted_judge() as server:
        yield server


@pytest.fixture
def webhook() -> Iterator[Webhook]:
    with serve_webhook() as hook:
        yield hook


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[BackendProcesses]:
    with backend_processes(tmp_path) as group:
        yield group


def _prometheus_alerts(url: str) -> list[dict[str, Any]]:
    body = json.loads(http_get(f"{url}/api/v1/alerts"))
    return list(body["data"]["alerts"])


def _query(url: str, promql: str) -> Any:
    return json.loads(http_get(f"{url}/api/v1/query?query={urllib.parse.quote(promql)}"))["data"]["result"]


@pytest.mark.slow
def test_score_drop_alert_reaches_the_webhook_naming_the_function(
    tmp_path: Path,
    judge: ScriptedJudge,
    webhook: Webhook,
    processes: BackendProcesses,
) -> None:
    prometheus_bin = backend_binary("prometheus")
    alertmanager_bin = backend_binary("prometheus-alertmanager")
    t0 = time.monotonic()
    timings: dict[str, float] = {}

    def mark(event: str) -> None:
        timings.setdefault(event, round(time.monotonic() - t0, 2))

    # The app: a decorated function in its own process, answering whatever the answer file holds.
    answer_file = tmp_path / "answer.txt"
    _replace(answer_file, FAITHFUL_ANSWER)
    metrics_port = free_port()
    argv = app_argv(
        judge,
        mode="serve",
        port=metrics_port,
        service=SERVICE,
        function=FUNCTION,
        answer_file=str(answer_file),
        rate=CALLS_PER_SECOND,
    )
    processes.start("app", argv, ready_url=f"http://127.0.0.1:{metrics_port}/metrics")
    mark("app ready")

    am_port, prom_port = free_port(), free_port()
    (tmp_path / "alertmanager.yml").write_text(fast_alertmanager_config(webhook.url))
    processes.start(
        "alertmanager",
        [
            alertmanager_bin,
            f"--config.file={tmp_path / 'alertmanager.yml'}",
            f"--storage.path={tmp_path / 'am-data'}",
            f"--web.listen-address=127.0.0.1:{am_port}",
            "--cluster.listen-address=",  # no gossip port on 0.0.0.0
        ],
        ready_url=f"http://127.0.0.1:{am_port}/-/ready",
    )
    mark("alertmanager ready")
    (tmp_path / "rules.yml").write_text(shortened_rules(RULES_FILE.read_text()))
    prometheus_config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(tmp_path / "rules.yml")],
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{am_port}"]}]}]},
        "scrape_configs": [
            {"job_name": SERVICE, "static_configs": [{"targets": [f"127.0.0.1:{metrics_port}"]}]}
        ],
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(prometheus_config))
    prometheus_url = f"http://127.0.0.1:{prom_port}"
    processes.start(
        "prometheus",
        [
            prometheus_bin,
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'prom-data'}",
            f"--web.listen-address=127.0.0.1:{prom_port}",
        ],
        ready_url=f"{prometheus_url}/-/ready",
    )
    mark("prometheus ready")

    def watch_until(deadline: float, stop: Any = None) -> None:
        while time.monotonic() < deadline:
            for alert in _prometheus_alerts(prometheus_url):
                if alert["labels"]["alertname"] == "FaithfulnessScoreDropped":
                    mark(f"rule {alert['state']}")
            if stop is not None and stop():
                return
            time.sleep(0.25)

    def drop_alert_delivered() -> bool:
        return webhook.first(_is_drop_alert) is not None

    # Phase 1: faithful answers (score 1.0) long enough to become the baseline.
    watch_until(time.monotonic() + GOOD_PHASE_S)
    mark("answers drift")
    assert not webhook.payloads, f"an alert fired while every answer was faithful: {webhook.payloads}"
    assert not any(k.startswith("rule ") for k in timings), timings

    # Phase 2: one claim in four contradicted (score 0.75: above the 0.7 floor, 25% below the baseline).
    _replace(answer_file, DRIFTED_ANSWER)
    switched = time.monotonic()
    watch_until(switched + ALERT_DEADLINE_S, stop=drop_alert_delivered)

    found = webhook.first(_is_drop_alert)
    if found is None:
        diagnostics = {
            q: _query(prometheus_url, q)
            for q in (
                "faithtrace_evaluation_score_sum",
                "faithtrace_evaluation_score_count",
                "rate(faithtrace_evaluation_score_sum[4s]) / rate(faithtrace_evaluation_score_count[4s])",
            )
        }
        pytest.fail(
            f"no FaithfulnessScoreDropped at the webhook {ALERT_DEADLINE_S}s after the drift; {timings=}\n"
            f"judge requests={judge.requests}\nqueries={json.dumps(diagnostics)[:3000]}\n"
            f"payloads={webhook.payloads}\n{processes.logs()}"
        )
    payload, received_at = found
    timings["webhook received"] = round(received_at - t0, 2)
    timings["drift to webhook"] = round(received_at - switched, 2)
    print(f"\nlive alert timings (s since start): {json.dumps(timings)}")
    print(f"webhook payload: {json.dumps(payload, indent=2)}")

    assert judge.requests > 0
    assert payload["status"] == "firing"
    assert payload["receiver"] == "faithtrace-webhook"
    assert payload["groupLabels"] == {
        "alertname": "FaithfulnessScoreDropped",
        "job": SERVICE,
        "faithtrace_function": FUNCTION,
    }
    (alert,) = [a for a in payload["alerts"] if a["labels"]["alertname"] == "FaithfulnessScoreDropped"]
    assert alert["labels"]["faithtrace_function"] == FUNCTION
    assert alert["labels"]["job"] == SERVICE
    assert alert["labels"]["severity"] == "warning"
    assert alert["annotations"]["summary"].startswith(f"{FUNCTION}: mean faithfulness fell to 0.7")
    jaeger = urllib.parse.unquote(alert["annotations"]["jaeger_failing_traces"])
    assert f'"faithtrace.function":"{FUNCTION}"' in jaeger
    assert f"service={SERVICE}" in jaeger
    # The mean (0.75) never went under the absolute floor: the floor rule stays silent. Each drifted answer
    # holds a contradicted claim, which labels it fail (fail_on_contradiction), so the fail-share rule may
    # speak too.
    alertnames = {a["labels"]["alertname"] for p in webhook.payloads for a in p["alerts"]}
    assert "FaithfulnessScoreDropped" in alertnames
    assert alertnames <= {"FaithfulnessScoreDropped", "FaithfulnessFailShareHigh"}, alertnames


def _replace(path: Path, text: str) -> None:
    """Atomically, so the app never reads half an answer."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _is_drop_alert(payload: dict[str, Any]) -> bool:
    return payload.get("status") == "firing" and any(
        a["labels"].get("alertname") == "FaithfulnessScoreDropped" for a in payload.get("alerts", [])
    )
