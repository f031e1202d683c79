# ruff: noqa: F811  (the fixtures are imported into this module by name, see tests/_trace_fixtures.py)
"""Phoenix annotations, against a stdlib HTTP receiver that speaks Phoenix's ``POST /v1/span_annotations``:
what is written for a scored RAG span, batching, retries, failures counted, bounded queue and deadlines.
(The real Phoenix and a real browser check the same thing end to end in test_phoenix_browser.py.)"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from _fake_judge import MODEL, fake_judge  # noqa: F401  (fixture)
from _loopback import serve_in_background
from _trace_fixtures import CONTEXT, QUESTION, clean_env, ft, judge_root_of, point  # noqa: F401
from faithtrace import CaptureOptions, trace_faithfulness
from faithtrace._config.settings import build_settings
from faithtrace._telemetry import annotations
from faithtrace._telemetry import names as n
from faithtrace.testing import FaithtraceCapture

# One supported claim, one contradicted, one unverifiable (the fake judge's script): fails at 0.7.
ANSWER = "Paris is the capital of France. The Seine never flows through Paris. Paris has a famous museum."


class Receiver:
    """Answers each POST with the next scripted status (then 200) and keeps the bodies it accepted."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.requests = 0
        self.statuses: list[int] = []
        self.delay_s = 0.0
        # The annotation config's requests (method, path, body), answered from their own script.
        self.configs: list[tuple[str, str, Any]] = []
        self.config_statuses: list[int] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_PUT(self) -> None:
                self.do_POST()

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                time.sleep(receiver.delay_s)
                if "annotation_configs" in self.path:
                    receiver.configs.append((self.command, self.path, json.loads(body) if body else None))
                    status = receiver.config_statuses.pop(0) if receiver.config_statuses else 200
                    self.send_response(status)
                    self.end_headers()
                    self.wfile.write(b'{"data": {}}')
                    return
                receiver.requests += 1
                status = receiver.statuses.pop(0) if receiver.statuses else 200
                if status == 200:
                    receiver.bodies.append({"path": self.path, "auth": self.headers.get("Authorization")})
                    receiver.bodies[-1].update(json.loads(body))
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b'{"data": []}' if status == 200 else b'{"detail": "nope"}')

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        serve_in_background(self.server)

    @property
    def items(self) -> list[dict[str, Any]]:
        return [item for body in self.bodies for item in body["data"]]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.server.shutdown()
    r.server.server_close()


@pytest.fixture(autouse=True)
def fresh_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(annotations, "counts", {"sent": 0, "failed": 0, "dropped": 0, "config_failed": 0})
    monkeypatch.setattr(annotations, "BATCH_WAIT_S", 0.05)


def test_a_scored_call_writes_one_faithfulness_annotation_on_its_rag_span(
    ft: FaithtraceCapture, fake_judge: Any, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PHOENIX_API_KEY", "phx-test-key")
    ft.configure(judge=fake_judge.settings(), annotations="phoenix", phoenix_endpoint=receiver.url + "/")

    @trace_faithfulness(name="support-bot")
    def answer(question: str, contexts: list[str]) -> str:
        return ANSWER

    assert answer(QUESTION, [CONTEXT]) == ANSWER
    assert ft.flush()  # flush() waits for the annotation too
    (rag,) = ft.spans("support-bot")
    (evaluation,) = ft.evaluation_spans()
    assert evaluation is rag  # the evaluation is on the RAG span; the judge's calls in a trace of their own
    judge = judge_root_of(ft, rag)
    bodies = {b["path"]: b for b in receiver.bodies}
    assert sorted(bodies) == ["/v1/span_annotations", "/v1/trace_annotations"]  # no ?sync: Phoenix holds an
    assert {b["auth"] for b in receiver.bodies} == {"Bearer phx-test-key"}  # early one until its span lands
    (item,) = bodies["/v1/span_annotations"]["data"]
    assert item["span_id"] == f"{rag.context.span_id:016x}"
    assert (item["name"], item["annotator_kind"], item["identifier"]) == ("faithfulness", "LLM", "faithtrace")
    (result,) = [e for e in evaluation.events if e.name == n.GEN_AI_EVALUATION_RESULT_EVENT]
    explanation = result.attributes[n.GEN_AI_EVALUATION_EXPLANATION]
    assert "contradicted" in explanation
    assert item["result"] == {"label": "fail", "score": pytest.approx(1 / 3), "explanation": explanation}
    assert item["metadata"] == {
        "outcome": "scored",
        "threshold": 0.7,
        "claims": 3,
        "supported": 1,
        "contradicted": 1,
        "unverifiable": 1,
        "unjudged": 0,
        "judge_model": MODEL,
        "evaluation_span_id": f"{judge.context.span_id:016x}",
        "evaluation_trace_id": f"{judge.context.trace_id:032x}",
    }
    # The same on the trace (Phoenix charts trace annotations), one per RAG span of the trace.
    (on_trace,) = bodies["/v1/trace_annotations"]["data"]
    assert on_trace["trace_id"] == f"{rag.context.trace_id:032x}"
    assert on_trace["identifier"] == f"faithtrace:{item['span_id']}"
    assert on_trace["result"] == item["result"]
    assert on_trace["metadata"] == {**item["metadata"], "span_id": item["span_id"]}
    assert point(ft, n.METRIC_ANNOTATIONS, **{n.ANNOTATION_STATUS: "sent"}).value == 2


def test_a_long_explanation_is_cut_between_words_within_the_cap(
    ft: FaithtraceCapture, fake_judge: Any, receiver: Receiver
) -> None:
    @trace_faithfulness(name="support-bot")
    def answer(question: str, contexts: list[str]) -> str:
        return ANSWER

    explanations = []
    for cap in (4096, 70):
        ft.configure(
            judge=fake_judge.settings(),
            annotations="phoenix",
            phoenix_endpoint=receiver.url,
            capture=CaptureOptions(max_attribute_chars=cap),
        )
        answer(QUESTION, [CONTEXT])
        assert ft.flush()
        spans = [b for b in receiver.bodies if b["path"] == "/v1/span_annotations"]
        explanations.append(spans[-1]["data"][0]["result"]["explanation"])
    full, shown = explanations
    assert len(full) > 70
    assert len(shown) <= 70, shown
    assert shown.endswith("…"), shown
    head = shown[:-1].rstrip()
    assert full.startswith(head), shown
    assert not full[len(head)].isalnum(), shown  # cut between words, never "in th…"


def test_annotations_are_batched(ft: FaithtraceCapture, fake_judge: Any, receiver: Receiver) -> None:
    ft.configure(judge=fake_judge.settings(), annotations="phoenix", phoenix_endpoint=receiver.url)
    sink = annotations.PhoenixAnnotations(receiver.url)
    for i in range(5):
        sink.add({"span_id": f"{i:016x}", "name": "faithfulness"})
    assert sink.flush(10)
    assert [len(b["data"]) for b in receiver.bodies] == [5]  # the first waited for the others
    receiver.bodies.clear()
    for i in range(250):
        sink.add({"span_id": f"{i:016x}", "name": "faithfulness"})
    assert sink.flush(10)
    assert len(receiver.items) == 250
    assert len(receiver.bodies) < 10  # batches of up to 100, not one request per annotation
    assert max(len(b["data"]) for b in receiver.bodies) == annotations.BATCH_SIZE
    sink.close(1)


def test_server_errors_are_retried_then_counted_as_failed(
    receiver: Receiver, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(annotations.safety, "_last_warned", {})
    sink = annotations.PhoenixAnnotations(receiver.url)
    receiver.statuses = [503, 200]
    sink.add({"span_id": "1"})
    assert sink.flush(10)
    assert receiver.requests == 2
    assert len(receiver.items) == 1
    assert annotations.counts == {"sent": 1, "failed": 0, "dropped": 0, "config_failed": 0}

    receiver.statuses = [500] * annotations.ATTEMPTS
    sink.add({"span_id": "2"})
    assert sink.flush(20)
    assert receiver.requests == 2 + annotations.ATTEMPTS  # bounded retries
    receiver.statuses = [422, 422]
    sink.add({"span_id": "3"})
    sink.add({"span_id": "4"})  # may share the 422's batch or get the second one: failed either way
    assert sink.flush(10)
    assert annotations.counts["failed"] == 3
    assert annotations.counts["sent"] == 1
    assert receiver.requests <= 2 + annotations.ATTEMPTS + 2  # a 4xx is final: not retried
    warnings = [r for r in caplog.records if "could not write" in r.getMessage()]
    assert len(warnings) == 1  # rate-limited: once a minute, not once per failure
    assert "HTTP 500" in warnings[0].getMessage()
    sink.close(1)


def _wait_for(condition: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_the_annotation_config_is_registered_once_in_the_apps_project(
    receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(annotations, "CONFIG_RETRY_S", (0.05, 0.05))
    # The config is created, then the project is not there yet (its first span is still on its way): the
    # assignment is tried again a little later.
    receiver.config_statuses = [200, 404, 200]
    sink = annotations.PhoenixAnnotations(receiver.url, project=lambda: "shop bot/eu", threshold=0.8)
    sink.add({"span_id": "1"})
    assert sink.flush(10)
    _wait_for(lambda: len(receiver.configs) == 3)
    (post, path, body), *assign = receiver.configs
    assert (post, path) == ("POST", "/v1/annotation_configs")
    # Phoenix colours a score by its project's config of that name: favourable from the threshold up.
    assert body == {
        "name": "faithfulness",
        "type": "FREEFORM",
        "description": body["description"],
        "optimization_direction": "MAXIMIZE",
        "threshold": 0.8,
        "lower_bound": 0.0,
        "upper_bound": 1.0,
    }
    assert "pass or fail" in body["description"]
    project_path = "/v1/projects/shop%20bot%2Feu/annotation_configs/faithfulness"
    assert assign == [("PUT", project_path, None)] * 2
    sink.add({"span_id": "2"})  # once per sink: later batches do not register again
    assert sink.flush(10)
    time.sleep(0.2)
    assert len(receiver.configs) == 3
    assert len(receiver.items) == 2
    assert annotations.counts["config_failed"] == 0
    sink.close(1)


def test_an_existing_config_is_left_alone_and_a_failing_one_is_counted_not_raised(
    receiver: Receiver, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(annotations.safety, "_last_warned", {})
    monkeypatch.setattr(annotations, "CONFIG_RETRY_S", (0.05, 0.05))
    receiver.config_statuses = [409, 200]  # the name is taken (the user's own config, or an earlier run's)
    sink = annotations.PhoenixAnnotations(receiver.url)
    sink.add({"span_id": "1"})
    _wait_for(lambda: len(receiver.configs) == 2)
    assert [(m, p) for m, p, _ in receiver.configs] == [
        ("POST", "/v1/annotation_configs"),  # never a PUT over the existing config
        ("PUT", "/v1/projects/default/annotation_configs/faithfulness"),
    ]
    sink.close(1)

    # Phoenix keeps failing: a bounded number of tries (one more than the delays), counted, warned once,
    # and the annotations are written all the same.
    receiver.configs.clear()
    receiver.config_statuses = [500] * 10
    sink = annotations.PhoenixAnnotations(receiver.url)
    sink.add({"span_id": "2"})
    _wait_for(lambda: annotations.counts["config_failed"] == 1)
    time.sleep(0.2)
    assert len(receiver.configs) == len(annotations.CONFIG_RETRY_S) + 1
    assert [i["span_id"] for i in receiver.items] == ["1", "2"]
    sink.close(1)
    # A 4xx is final: this Phoenix does not take the config (an older one without the route, say).
    receiver.configs.clear()
    receiver.config_statuses = [422]
    sink = annotations.PhoenixAnnotations(receiver.url)
    sink.add({"span_id": "3"})
    _wait_for(lambda: annotations.counts["config_failed"] == 2)
    time.sleep(0.2)
    assert len(receiver.configs) == 1
    warnings = [r.getMessage() for r in caplog.records if "annotation config" in r.getMessage()]
    assert len(warnings) == 1  # rate-limited
    assert "HTTP 500" in warnings[0]
    sink.close(1)


def test_the_project_is_the_one_phoenix_files_the_spans_under() -> None:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider

    named = TracerProvider(resource=Resource.create({"openinference.project.name": "support"}))
    assert annotations.phoenix_project(named) == "support"
    assert annotations.phoenix_project(TracerProvider()) == "default"
    assert annotations.phoenix_project(None) == "default"


def test_an_unreachable_phoenix_costs_the_flush_deadline_at_most(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(annotations.safety, "_last_warned", {})
    receiver = Receiver()
    receiver.delay_s = 5.0  # a hung server
    sink = annotations.PhoenixAnnotations(receiver.url)
    sink.add({"span_id": "1"})
    started = time.monotonic()
    assert sink.flush(0.5) is False
    sink.add({"span_id": "2"})  # queued behind the hung request
    sink.close(0.5)
    assert time.monotonic() - started < 2.0
    assert annotations.counts["dropped"] == 1  # the queued one; the one in flight is the sender's to count
    receiver.server.shutdown()


def test_the_queue_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(annotations, "QUEUE_SIZE", 3)
    sink = annotations.PhoenixAnnotations("http://127.0.0.1:9")  # nothing listens on the discard port
    sink._thread = threading.Thread()  # no sender: the queue only fills
    for i in range(5):
        sink.add({"span_id": str(i)})
    assert len(sink._queue) == 3
    assert annotations.counts["dropped"] == 2


def test_settings_for_annotations_and_placement() -> None:
    s = build_settings(environ={})
    assert (s.annotations, s.evaluation_placement) == (None, "rag_span")
    assert s.phoenix_endpoint == "http://127.0.0.1:6006"
    env = {
        "FAITHTRACE_ANNOTATIONS": "phoenix",
        "FAITHTRACE_EVALUATION_PLACEMENT": "linked",
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://phoenix.internal:6006",
    }
    s = build_settings(environ=env)
    assert (s.annotations, s.evaluation_placement) == ("phoenix", "linked")
    assert (
        s.phoenix_endpoint == "http://phoenix.internal:6006"
    )  # Phoenix serves OTLP/HTTP and REST on one port
    assert s.otlp_endpoint == "http://phoenix.internal:6006"
    assert not s.pushes_metrics  # Phoenix rejects metrics (405): none are pushed there
    s = build_settings(
        environ={**env, "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://otelcol:4318/v1/metrics"}
    )
    assert s.pushes_metrics
    assert s.otlp_metrics_endpoint == "http://otelcol:4318/v1/metrics"
    s = build_settings(environ={**env, "PHOENIX_COLLECTOR_ENDPOINT": "https://app.phoenix.arize.com/s/me"})
    assert s.phoenix_endpoint == "https://app.phoenix.arize.com/s/me"
    s = build_settings(environ={**env, "FAITHTRACE_PHOENIX_ENDPOINT": "http://px:6006/v1/traces"})
    assert s.phoenix_endpoint == "http://px:6006"
    s = build_settings(
        environ={"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_METRICS_EXPORTER": "none"}
    )
    assert not s.pushes_metrics
    s = build_settings(environ={"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"})
    assert s.pushes_metrics  # not Phoenix: metrics go with the traces, as before
    # A typo in the environment warns and falls back; one in code raises.
    assert build_settings(environ={"FAITHTRACE_ANNOTATIONS": "phenix"}).annotations is None
    from faithtrace import ConfigError

    with pytest.raises(ConfigError):
        build_settings(annotations="jaeger", environ={})
    with pytest.raises(ConfigError):
        build_settings(evaluation_placement="sibling", environ={})
